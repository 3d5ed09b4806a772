//! ServiceMonitors (prometheus-operator) for every operand with metrics, installed by the
//! operator when the cluster has that CRD.

use serde_json::{Value, json};

use super::{Settings, WEBHOOK, labels, webhook::WEBHOOK_TLS_SECRET};

/// The group/version whose discovery turns ServiceMonitors on, and their resource.
pub const SERVICE_MONITOR_API_VERSION: &str = "monitoring.coreos.com/v1";
pub const SERVICE_MONITOR_RESOURCE: &str = "servicemonitors";
/// Their CRD: the operator watches it only to look again when it comes or goes.
pub const SERVICE_MONITOR_CRD: &str = "servicemonitors.monitoring.coreos.com";

/// A ServiceMonitor scraping `port` of the Service `name` (plain HTTP).
pub fn service_monitor(settings: &Settings, name: &str, component: &str) -> Value {
    monitor(
        settings,
        name,
        component,
        json!({"port": "metrics", "path": "/metrics", "interval": "30s"}),
    )
}

/// The webhook serves its metrics on its HTTPS port, with the certificate multiarch's CA
/// signed.
pub fn webhook_service_monitor(settings: &Settings) -> Value {
    monitor(
        settings,
        WEBHOOK,
        "webhook",
        json!({
            "port": "https", "path": "/metrics", "interval": "30s", "scheme": "https",
            "tlsConfig": {
                "ca": {"secret": {"name": WEBHOOK_TLS_SECRET, "key": "ca.crt"}},
                "serverName": format!("{WEBHOOK}.{}.svc", settings.namespace),
            },
        }),
    )
}

fn monitor(settings: &Settings, name: &str, component: &str, endpoint: Value) -> Value {
    json!({
        "apiVersion": SERVICE_MONITOR_API_VERSION, "kind": "ServiceMonitor",
        "metadata": {"name": name, "namespace": settings.namespace, "labels": labels(component)},
        "spec": {
            "selector": {"matchLabels": labels(component)},
            "endpoints": [endpoint],
        },
    })
}
