//! The admission webhook and the MutatingWebhookConfiguration that sends it new pods.

use std::path::Path;

use multiarch_crd::{
    PlacementMode,
    names::{OPT_OUT_LABEL, OPT_OUT_VALUE},
};
use multiarch_flags::{FlagsError, RoleFlags, WebhookArgs, defaults};
use serde_json::{Value, json};

use super::{
    Settings, WEBHOOK,
    inspector::{CLIENT_DIR, inspector_endpoint, mount_inspector_client},
    labels, rbac_pair, service_account,
    workload::{
        Workload, all_interfaces, api_server_port, deployment, disruption_budget, downward_env,
        network_policy, push, role_args, service,
    },
};

/// The Secret holding the webhook's serving certificate (`tls.crt`, `tls.key`, `ca.crt`):
/// the operator's, or the installer's without the operator.
pub const WEBHOOK_TLS_SECRET: &str = "multiarch-webhook-tls";
/// The one webhook of the configuration.
pub const WEBHOOK_NAME: &str = "pods.multiarch.openshift.io";
const PORT: u16 = 9443;
/// Where the webhook's pods see [`WEBHOOK_TLS_SECRET`].
const TLS_DIR: &str = "/etc/multiarch/tls";
/// Where the webhook's pods see the API server's client CA, when the operator is given one.
const API_SERVER_CA_DIR: &str = "/etc/multiarch/api-server-ca";

/// The review path that pins the mode: the operator switches modes by switching the
/// configuration's path, so the switch is atomic for the API server. `/mutate-pods`
/// follows the ClusterPodPlacementConfig (installs without the operator).
pub fn review_path(mode: Option<PlacementMode>) -> &'static str {
    match mode {
        None => "/mutate-pods",
        Some(PlacementMode::Scheduler) => "/mutate-pods/scheduler",
        Some(PlacementMode::SchedulingGate) => "/mutate-pods/gate",
    }
}

pub fn webhook_rules() -> Value {
    json!([
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["clusterpodplacementconfigs", "podplacementconfigs"], "verbs": ["get", "list", "watch"]},
        // The extended resources DeviceClasses map: such pods are not routed.
        {"apiGroups": ["resource.k8s.io"], "resources": ["deviceclasses"], "verbs": ["get", "list", "watch"]},
    ])
}

pub fn webhook_access(settings: &Settings) -> Vec<Value> {
    let mut objects = vec![service_account(settings, WEBHOOK)];
    objects.extend(rbac_pair(
        settings,
        WEBHOOK,
        "ClusterRole",
        WEBHOOK,
        webhook_rules(),
    ));
    objects
}

/// The Deployment (the certificate mounted from [`WEBHOOK_TLS_SECRET`] and reloaded when
/// it changes), its Service, disruption budget and network policy.
pub fn webhook_workload(settings: &Settings) -> Result<Vec<Value>, FlagsError> {
    let component = WebhookArgs::SUBCOMMAND;
    let args = role_args(
        defaults::<WebhookArgs>()?,
        &["listen", "cert", "key"],
        |flags| {
            flags.listen = all_interfaces(PORT);
            flags.cert = Path::new(TLS_DIR).join("tls.crt");
            flags.key = Path::new(TLS_DIR).join("tls.key");
            flags.inspector_endpoint = Some(inspector_endpoint(settings));
            flags.inspector_tls.inspector_tls_dir = Some(CLIENT_DIR.into());
            // The NetworkPolicy below admits only the API server's addresses.
            flags.callers_limited_to_api_server = !settings.api_server_cidrs.is_empty();
            // Only the API server's client certificate gets past the handshake.
            if settings.api_server_client_ca_config_map.is_some() {
                flags.client_ca = Some(Path::new(API_SERVER_CA_DIR).join("ca.crt"));
            }
        },
    )?;
    let workload = Workload {
        name: WEBHOOK,
        component,
        args,
        ports: json!([{"name": "https", "containerPort": PORT}]),
        probe_port: "https",
        env: downward_env(),
    };
    let mut deployment = deployment(settings, &workload);
    let pod = &mut deployment["spec"]["template"]["spec"];
    pod["volumes"] = json!([{"name": "tls", "secret": {"secretName": WEBHOOK_TLS_SECRET}}]);
    pod["containers"][0]["volumeMounts"] =
        json!([{"name": "tls", "mountPath": TLS_DIR, "readOnly": true}]);
    if let Some(config_map) = &settings.api_server_client_ca_config_map {
        let container = &mut pod["containers"][0];
        push(
            &mut container["volumeMounts"],
            json!({"name": "api-server-ca", "mountPath": API_SERVER_CA_DIR, "readOnly": true}),
        );
        push(
            &mut pod["volumes"],
            json!({"name": "api-server-ca", "configMap": {"name": config_map}}),
        );
    }
    // The probes speak HTTPS on the same port.
    for probe in ["livenessProbe", "readinessProbe"] {
        pod["containers"][0][probe]["httpGet"]["scheme"] = json!("HTTPS");
    }
    mount_inspector_client(&mut deployment);
    Ok(vec![
        deployment,
        service(
            settings,
            WEBHOOK,
            component,
            json!([{"name": "https", "port": 443, "targetPort": "https"}]),
        ),
        disruption_budget(settings, WEBHOOK, component),
        network_policy(
            settings,
            WEBHOOK,
            component,
            json!([api_server_port(settings, PORT)]),
        ),
    ])
}

/// Which pods the API server sends, and where.
#[derive(Clone, Debug, Default)]
pub struct WebhookRoute {
    /// Pinned by the path; `None` follows the ClusterPodPlacementConfig.
    pub mode: Option<PlacementMode>,
    /// The ClusterPodPlacementConfig's `namespaceSelector`.
    pub namespace_selector: Option<Value>,
    /// The CA bundle (base64 of PEM) the API server verifies the webhook with.
    pub ca_bundle: Option<String>,
}

/// The namespaces the webhook sees: the configured ones; in scheduler mode never the
/// system namespaces nor multiarch's own. Gate mode keeps MTO's scope (its webhook sees
/// the pods there and labels them `not-set`, which its users' tooling reads; it gates
/// none of them).
fn namespace_selector(settings: &Settings, routing: &WebhookRoute) -> Value {
    let mut selector = routing
        .namespace_selector
        .clone()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    if routing.mode != Some(PlacementMode::SchedulingGate) {
        let exclusion = json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn",
            "values": ["kube-system", "kube-public", "kube-node-lease", settings.namespace]});
        match selector["matchExpressions"].as_array_mut() {
            Some(list) => list.push(exclusion),
            None => selector["matchExpressions"] = json!([exclusion]),
        }
    }
    selector
}

/// The MutatingWebhookConfiguration: pod CREATE only, failing open (a pod is never
/// blocked because the webhook is down), 5 s, and pods opted out never sent.
pub fn mutating_webhook_configuration(settings: &Settings, routing: &WebhookRoute) -> Value {
    let mut client = json!({"service": {"name": WEBHOOK, "namespace": settings.namespace, "path": review_path(routing.mode), "port": 443}});
    if let Some(bundle) = &routing.ca_bundle {
        client["caBundle"] = json!(bundle);
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK, "labels": labels("webhook")},
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "admissionReviewVersions": ["v1"],
            "clientConfig": client,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "Namespaced"}],
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "timeoutSeconds": 5,
            "reinvocationPolicy": "Never",
            "matchPolicy": "Equivalent",
            "namespaceSelector": namespace_selector(settings, routing),
            "objectSelector": {"matchExpressions": [
                {"key": OPT_OUT_LABEL, "operator": "NotIn", "values": [OPT_OUT_VALUE]},
            ]},
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pull secrets at admission only where the NetworkPolicy keeps every caller but the
    /// API server out; the inspector only over mutual TLS.
    #[test]
    fn credentialed_lookups_follow_the_api_server_only_network_policy() {
        let args = |settings: &Settings| -> (Vec<String>, Value) {
            let objects = webhook_workload(settings).unwrap();
            let args = objects[0]["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_owned())
                .collect();
            let policy = objects
                .iter()
                .find(|o| o["kind"] == "NetworkPolicy")
                .unwrap();
            (args, policy["spec"]["ingress"][0].clone())
        };
        let (open, rule) = args(&Settings::default());
        assert!(!open.contains(&"--callers-limited-to-api-server".to_owned()));
        assert!(rule.get("from").is_none(), "{rule}");
        assert!(open.contains(
            &"--inspector-endpoint=https://multiarch-inspector.multiarch.svc:9443".to_owned()
        ));
        assert!(open.contains(&"--inspector-tls-dir=/etc/multiarch/inspector-client".to_owned()));

        let narrowed = Settings {
            api_server_cidrs: vec!["10.0.0.1/32".into()],
            ..Settings::default()
        };
        let (limited, rule) = args(&narrowed);
        assert!(limited.contains(&"--callers-limited-to-api-server".to_owned()));
        assert_eq!(rule["from"], json!([{"ipBlock": {"cidr": "10.0.0.1/32"}}]));

        // The API server's client CA: required of every caller, from the admin's ConfigMap.
        let verified = Settings {
            api_server_client_ca_config_map: Some("front-proxy-ca".into()),
            ..Settings::default()
        };
        let (verifying, _) = args(&verified);
        assert!(verifying.contains(&"--client-ca=/etc/multiarch/api-server-ca/ca.crt".to_owned()));
        let objects = webhook_workload(&verified).unwrap();
        let pod = &objects[0]["spec"]["template"]["spec"];
        assert!(
            pod["volumes"].as_array().unwrap().contains(
                &json!({"name": "api-server-ca", "configMap": {"name": "front-proxy-ca"}})
            )
        );
        assert!(
            pod["containers"][0]["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["mountPath"] == "/etc/multiarch/api-server-ca")
        );
    }

    #[test]
    fn the_mode_is_in_the_path_and_gate_mode_keeps_mto_s_scope() {
        let settings = Settings::default();
        let selector = json!({"matchLabels": {"team": "shop"}});
        let scheduler = mutating_webhook_configuration(
            &settings,
            &WebhookRoute {
                mode: Some(PlacementMode::Scheduler),
                namespace_selector: Some(selector.clone()),
                ca_bundle: Some("Q0E=".into()),
            },
        );
        let hook = &scheduler["webhooks"][0];
        assert_eq!(
            hook["clientConfig"]["service"]["path"],
            "/mutate-pods/scheduler"
        );
        assert_eq!(hook["clientConfig"]["caBundle"], "Q0E=");
        assert_eq!(
            hook["namespaceSelector"]["matchLabels"],
            json!({"team": "shop"})
        );
        assert_eq!(
            hook["namespaceSelector"]["matchExpressions"][0]["values"],
            json!(["kube-system", "kube-public", "kube-node-lease", "multiarch"])
        );
        let gate = mutating_webhook_configuration(
            &settings,
            &WebhookRoute {
                mode: Some(PlacementMode::SchedulingGate),
                namespace_selector: Some(selector.clone()),
                ca_bundle: None,
            },
        );
        let hook = &gate["webhooks"][0];
        assert_eq!(hook["clientConfig"]["service"]["path"], "/mutate-pods/gate");
        assert_eq!(hook["namespaceSelector"], selector);
        let unset = mutating_webhook_configuration(&settings, &WebhookRoute::default());
        assert_eq!(
            unset["webhooks"][0]["clientConfig"]["service"]["path"],
            "/mutate-pods"
        );
    }
}
