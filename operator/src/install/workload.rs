//! The shapes every operand shares: its Deployment, the Service in front of it, the
//! PodDisruptionBudget that keeps one replica up through node drains, and the
//! NetworkPolicy that admits only its own ports.

use std::net::SocketAddr;

use multiarch_flags::{FlagsError, RoleFlags};
use multiarch_runtime::logging::LogFormat;
use serde_json::{Value, json};

use super::{Settings, labels};

/// The operations port (`/metrics`, `/healthz`, `/readyz`) of every operand but the
/// scheduler, which keeps kube-scheduler's.
pub(crate) const OPS_PORT: u16 = 8080;

/// `0.0.0.0:port`: a pod's listeners take every interface.
pub(crate) fn all_interfaces(port: u16) -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], port))
}

/// A role's container args: `flags` (its defaults, or what a role without a default for
/// some flag starts from) as `fill` leaves them, logging JSON like every operand, written
/// as the role parses them; `pinned` (field names) are written even at their defaults:
/// the values the operator's other objects name (ports, the scheduler's name).
pub(crate) fn role_args<T: RoleFlags>(
    mut flags: T,
    pinned: &[&str],
    fill: impl FnOnce(&mut T),
) -> Result<Value, FlagsError> {
    fill(&mut flags);
    flags.log_mut().log_format = LogFormat::Json;
    Ok(json!(multiarch_flags::to_argv(&flags, pinned)?))
}

/// The container's user: not root, not a system account.
pub(crate) fn security_context() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "runAsNonRoot": true,
        "runAsUser": 65532,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

/// The pod's name and namespace, for the Lease identity, events and the own namespace.
pub(crate) fn downward_env() -> Value {
    json!([
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ])
}

/// One operand's Deployment.
pub(crate) struct Workload<'a> {
    pub name: &'a str,
    pub component: &'a str,
    pub args: Value,
    pub ports: Value,
    /// The named port of `/healthz` and `/readyz`.
    pub probe_port: &'a str,
    pub env: Value,
}

/// `/healthz` on `port`. Liveness restarts a process that stopped answering, not one
/// that is slow: a component busy under load (a tenant's flood of 8 MiB reviews on a
/// 2-core node answered its probe in more than the default 1 s, three times running, and
/// was restarted, which only adds to the load) gets 5 s an answer and a minute of
/// failures in a row.
pub(crate) fn liveness_probe(port: &str) -> Value {
    json!({
        "httpGet": {"path": "/healthz", "port": port},
        "initialDelaySeconds": 5,
        "periodSeconds": 10,
        "timeoutSeconds": 5,
        "failureThreshold": 6,
    })
}

/// `/readyz` on `port`: 503 while the component cannot serve yet (or drains after
/// SIGTERM). A slow answer under load is still an answer: 5 s for it, as for liveness.
pub(crate) fn readiness_probe(port: &str) -> Value {
    json!({
        "httpGet": {"path": "/readyz", "port": port},
        "periodSeconds": 5,
        "timeoutSeconds": 5,
    })
}

/// The pod spec every operand's Deployment shares (settings applied).
pub(crate) fn pod_spec(settings: &Settings, workload: &Workload<'_>) -> Value {
    let mut container = json!({
        "name": workload.component,
        "image": settings.image,
        "args": workload.args,
        "ports": workload.ports,
        "livenessProbe": liveness_probe(workload.probe_port),
        "readinessProbe": readiness_probe(workload.probe_port),
        "resources": settings.resources(),
        "securityContext": security_context(),
    });
    // An empty list is not stored: leaving it out keeps the desired object a subset of
    // the stored one.
    if workload.env.as_array().is_some_and(|e| !e.is_empty()) {
        container["env"] = workload.env.clone();
    }
    if let Some(policy) = &settings.image_pull_policy {
        container["imagePullPolicy"] = json!(policy);
    }
    let mut spec = json!({
        "serviceAccountName": workload.name,
        // Scheduled by the default scheduler: the scheduler must not depend on itself.
        "schedulerName": "default-scheduler",
        "priorityClassName": "system-cluster-critical",
        "affinity": {"nodeAffinity": settings.node_affinity()},
        // Replicas on different nodes where possible.
        "topologySpreadConstraints": [{
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": labels(workload.component)},
            "matchLabelKeys": ["pod-template-hash"],
        }],
        "containers": [container],
    });
    if !settings.tolerations.is_empty() {
        spec["tolerations"] = json!(settings.tolerations);
    }
    if !settings.image_pull_secrets.is_empty() {
        spec["imagePullSecrets"] = settings
            .image_pull_secrets
            .iter()
            .map(|name| json!({"name": name}))
            .collect();
    }
    spec
}

pub(crate) fn deployment(settings: &Settings, workload: &Workload<'_>) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": workload.name, "namespace": settings.namespace, "labels": labels(workload.component)},
        "spec": {
            "replicas": settings.replicas,
            "selector": {"matchLabels": labels(workload.component)},
            "template": {
                "metadata": {"labels": labels(workload.component)},
                "spec": pod_spec(settings, workload),
            },
        },
    })
}

/// A Service in front of `component`'s pods; `ports` as in a Service spec.
pub(crate) fn service(settings: &Settings, name: &str, component: &str, ports: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": settings.namespace, "labels": labels(component)},
        "spec": {"selector": labels(component), "ports": ports},
    })
}

/// At most one replica down at a time, through voluntary disruptions (node drains).
pub(crate) fn disruption_budget(settings: &Settings, name: &str, component: &str) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": settings.namespace, "labels": labels(component)},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels(component)}},
    })
}

/// Ingress to `component`'s pods on the listed rules only (egress is left open: the API
/// server and the registries).
pub(crate) fn network_policy(
    settings: &Settings,
    name: &str,
    component: &str,
    ingress: Value,
) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": settings.namespace, "labels": labels(component)},
        "spec": {
            "podSelector": {"matchLabels": labels(component)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    })
}

/// Appends `item` to the JSON array `list` (made one when absent).
pub(crate) fn push(list: &mut Value, item: Value) {
    match list {
        Value::Array(items) => items.push(item),
        other => *other = json!([item]),
    }
}

/// An ingress rule for `port` from anywhere (metrics scrapers).
pub(crate) fn open_port(port: u16) -> Value {
    json!({"ports": [{"protocol": "TCP", "port": port}]})
}

/// An ingress rule for a webhook port: from the API server's addresses when known.
pub(crate) fn api_server_port(settings: &Settings, port: u16) -> Value {
    let mut rule = open_port(port);
    if !settings.api_server_cidrs.is_empty() {
        rule["from"] = settings
            .api_server_cidrs
            .iter()
            .map(|cidr| json!({"ipBlock": {"cidr": cidr}}))
            .collect();
    }
    rule
}
