//! What gets installed: the objects of every operand, as code, so that RBAC follows the
//! code. The operator applies them from the ClusterPodPlacementConfig with its
//! [`Settings`]; `multiarch manifests --dir manifests` writes them with the defaults under
//! `manifests/` for installs without the operator (a test fails when the checked-in
//! files drift).
//!
//! The scheduler reads no Secrets: image inspection runs in `multiarch inspector`, the
//! only operand with `get` on Secrets and ServiceAccounts.

mod alerts;
mod audit;
mod dashboard;
mod enoexec;
mod gate_controller;
mod inspector;
mod monitoring;
mod operator;
pub mod rbac_table;
mod scheduler;
mod settings;
mod webhook;
mod workload;

pub use self::{
    alerts::{
        ALERTS, Alert, AlertSeverity, PROMETHEUS_RULE, PROMETHEUS_RULE_API_VERSION,
        PROMETHEUS_RULE_CRD, PROMETHEUS_RULE_RESOURCE, RUNBOOKS_URL, prometheus_rule, rule_groups,
        runbooks,
    },
    audit::{AUDIT_CLUSTER_ROLE, audit, audit_rules},
    dashboard::{DASHBOARD, PANELS, dashboard, dashboard_config_map},
    enoexec::{
        HOST_CGROUP, HOST_RUN, enoexec_daemon_access, enoexec_daemon_cluster_rules,
        enoexec_daemon_rules, enoexec_daemon_workload, enoexec_handler_access,
        enoexec_handler_cluster_rules, enoexec_handler_namespace_rules, enoexec_handler_workload,
    },
    gate_controller::{gate_controller_access, gate_controller_rules, gate_controller_workload},
    inspector::{
        INSPECTOR_CLIENT_SECRET, INSPECTOR_TLS_SECRET, inspector_access, inspector_dns_names,
        inspector_endpoint, inspector_rules, inspector_workload,
    },
    monitoring::{
        SERVICE_MONITOR_API_VERSION, SERVICE_MONITOR_CRD, SERVICE_MONITOR_RESOURCE,
        service_monitor, webhook_service_monitor,
    },
    operator::{
        CA_SECRET, OPERATOR, OPERATOR_TLS_SECRET, PPC_NEEDS_CPPC_BINDING, PPC_NEEDS_CPPC_POLICY,
        VALIDATE_CPPC_PATH, VALIDATE_PPC_PATH, VALIDATING_WEBHOOK, operator_cluster_rules,
        operator_dns_names, operator_namespace_rules, validating_webhook_configuration,
        webhook_dns_names,
    },
    scheduler::{
        MAX_PREVIOUS_SCHEDULER_NAMES, scheduler_access, scheduler_rules, scheduler_workload,
    },
    settings::{IMAGE_ARCHITECTURES, OperatorFlagsError, Settings},
    webhook::{
        WEBHOOK_NAME, WEBHOOK_TLS_SECRET, WebhookRoute, mutating_webhook_configuration,
        review_path, webhook_access, webhook_rules, webhook_workload,
    },
};

use multiarch_crd::names::DEFAULT_SCHEDULER_NAME;
use multiarch_flags::FlagsError;
use serde_json::{Value, json};

pub const NAMESPACE: &str = multiarch_crd::names::DEFAULT_NAMESPACE;
pub const IMAGE: &str = "multiarch:0.1.0";
pub const SCHEDULER: &str = "multiarch-scheduler";
pub const INSPECTOR: &str = "multiarch-inspector";
pub const WEBHOOK: &str = "multiarch-webhook";
pub const GATE_CONTROLLER: &str = "multiarch-gate-controller";
pub const ENOEXEC_DAEMON: &str = "multiarch-enoexec-daemon";
pub const ENOEXEC_HANDLER: &str = "multiarch-enoexec-handler";

/// Every object's labels (and its pods' selector).
pub fn labels(component: &str) -> Value {
    json!({"app.kubernetes.io/name": "multiarch", "app.kubernetes.io/component": component})
}

pub(crate) fn service_account(settings: &Settings, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": settings.namespace}})
}

/// A Role (in the settings' namespace) or ClusterRole, and its binding to the
/// ServiceAccount `account`.
pub(crate) fn rbac_pair(
    settings: &Settings,
    name: &str,
    kind: &str,
    account: &str,
    rules: Value,
) -> [Value; 2] {
    let mut metadata = json!({"name": name});
    let binding_kind = if kind == "Role" {
        metadata["namespace"] = json!(settings.namespace);
        "RoleBinding"
    } else {
        "ClusterRoleBinding"
    };
    [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata, "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": binding_kind, "metadata": metadata,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": settings.namespace}]}),
    ]
}

/// Leader election on the Lease `lease` only.
pub(crate) fn lease_rules(lease: &str) -> Vec<Value> {
    vec![
        json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}),
        json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease], "verbs": ["get", "update"]}),
    ]
}

/// The Role `<account>-lease` for the Lease `lease` in multiarch's namespace, bound to
/// `account`.
pub(crate) fn lease_role(settings: &Settings, account: &str, lease: &str) -> [Value; 2] {
    rbac_pair(
        settings,
        &format!("{account}-lease"),
        "Role",
        account,
        Value::Array(lease_rules(lease)),
    )
}

/// The folder's kustomization: its files, and the image every role runs.
pub(crate) fn kustomization(resources: &[&str]) -> Value {
    json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": resources,
        "images": [{"name": "multiarch", "newName": "multiarch", "newTag": "0.1.0"}],
    })
}

/// `(file name, documents)` of one folder under `manifests/`, in apply order.
pub type Files = Vec<(&'static str, Vec<Value>)>;

fn is_access(object: &Value) -> bool {
    matches!(
        object["kind"].as_str(),
        Some("ServiceAccount" | "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding")
    )
}

/// The role folders without the operator: `rbac.yaml` and the workload file.
fn role_folder(access: Vec<Value>, workload_file: &'static str, workload: Vec<Value>) -> Files {
    debug_assert!(access.iter().all(is_access) && !workload.iter().any(is_access));
    vec![("rbac.yaml", access), (workload_file, workload)]
}

fn scheduler_folder(settings: &Settings) -> Result<Files, FlagsError> {
    let namespace = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": settings.namespace, "labels": {"multiarch.openshift.io/exclude-pod-placement": "true"}},
    });
    let mut access = scheduler_access(settings, DEFAULT_SCHEDULER_NAME);
    access.extend(inspector_access(settings));
    let mut files = vec![("namespace.yaml", vec![namespace])];
    files.extend(role_folder(
        access,
        "scheduler.yaml",
        scheduler_workload(settings, DEFAULT_SCHEDULER_NAME, &[])?,
    ));
    files.push(("inspector.yaml", inspector_workload(settings, false)?));
    files.push((
        "kustomization.yaml",
        vec![kustomization(&[
            "../crds",
            "namespace.yaml",
            "rbac.yaml",
            "inspector.yaml",
            "scheduler.yaml",
        ])],
    ));
    Ok(files)
}

fn webhook_folder(settings: &Settings) -> Result<Files, FlagsError> {
    // Without the operator the webhook follows the ClusterPodPlacementConfig's mode and
    // sees the namespaces its default selector selects; the installer fills the CA bundle.
    let routing = WebhookRoute {
        mode: None,
        namespace_selector: Some(json!({"matchExpressions": [
            {"key": "multiarch.openshift.io/exclude-pod-placement", "operator": "DoesNotExist"},
        ]})),
        ca_bundle: Some("REPLACE_WITH_BASE64_CA".into()),
    };
    let mut files = role_folder(
        webhook_access(settings),
        "webhook.yaml",
        webhook_workload(settings)?,
    );
    files.push((
        "mutatingwebhookconfiguration.yaml",
        vec![mutating_webhook_configuration(settings, &routing)],
    ));
    // The gate controller is the webhook's path for pods the scheduler does not place
    // (and gate mode's only path): installing one installs the other.
    files.push((
        "kustomization.yaml",
        vec![kustomization(&[
            "../gate-controller",
            "rbac.yaml",
            "webhook.yaml",
            "mutatingwebhookconfiguration.yaml",
        ])],
    ));
    Ok(files)
}

fn gate_controller_folder(settings: &Settings) -> Result<Files, FlagsError> {
    let mut files = role_folder(
        gate_controller_access(settings),
        "gate-controller.yaml",
        gate_controller_workload(settings)?,
    );
    files.push((
        "kustomization.yaml",
        vec![kustomization(&["rbac.yaml", "gate-controller.yaml"])],
    ));
    Ok(files)
}

fn enoexec_folder(settings: &Settings) -> Result<Files, FlagsError> {
    let access = [
        enoexec_daemon_access(settings),
        enoexec_handler_access(settings),
    ]
    .concat();
    let mut files = vec![
        ("rbac.yaml", access),
        ("daemon.yaml", enoexec_daemon_workload(settings)?),
        ("handler.yaml", enoexec_handler_workload(settings)?),
    ];
    files.push((
        "kustomization.yaml",
        vec![kustomization(&["rbac.yaml", "daemon.yaml", "handler.yaml"])],
    ));
    Ok(files)
}

/// Alerts and the dashboard, for installs without the operator (the operator installs
/// the PrometheusRule itself when the cluster serves its CRD).
fn monitoring_folder(settings: &Settings) -> Files {
    vec![
        ("prometheus-rule.yaml", vec![prometheus_rule(settings)]),
        ("dashboard.yaml", vec![dashboard_config_map(settings)]),
        (
            "kustomization.yaml",
            vec![json!({
                "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "resources": ["prometheus-rule.yaml", "dashboard.yaml"],
            })],
        ),
    ]
}

/// `(folder under manifests/, its files)` of every role, in the order `multiarch manifests`
/// writes them. `manifests/kustomization.yaml` ([`root`]) installs the operator and the
/// CRDs; the other folders are for installs without the operator.
pub fn folders() -> Result<Vec<(&'static str, Files)>, FlagsError> {
    let settings = Settings::default();
    Ok(vec![
        ("operator", operator::operator(&settings)?),
        ("scheduler", scheduler_folder(&settings)?),
        ("webhook", webhook_folder(&settings)?),
        ("gate-controller", gate_controller_folder(&settings)?),
        ("enoexec", enoexec_folder(&settings)?),
        ("audit", audit()),
        ("monitoring", monitoring_folder(&settings)),
    ])
}

/// `manifests/kustomization.yaml`: `kubectl apply -k manifests/` installs the CRDs and
/// the operator, nothing else.
pub fn root() -> Files {
    vec![(
        "kustomization.yaml",
        vec![json!({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": ["operator"],
        })],
    )]
}

/// A file's YAML: documents separated by `---`.
pub fn to_yaml(documents: &[Value]) -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for (i, doc) in documents.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_yaml_ng::to_string(doc)?);
    }
    Ok(out)
}
