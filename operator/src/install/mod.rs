//! What gets installed: the objects of every role, as code, so that RBAC follows the code.
//! `multiarch manifests --dir manifests` writes them under `manifests/` and a test fails
//! when the checked-in files drift; the operator will apply the same objects.
//!
//! The scheduler reads no Secrets: image inspection runs in `multiarch inspector`, the
//! only component with `get` on Secrets and ServiceAccounts.

mod audit;
mod enoexec;
mod gate_controller;
mod scheduler;
mod webhook;

pub use self::{
    audit::{AUDIT_CLUSTER_ROLE, audit, audit_rules},
    enoexec::{
        HOST_CGROUP, HOST_RUN, enoexec, enoexec_daemon_rules, enoexec_handler_cluster_rules,
        enoexec_handler_namespace_rules,
    },
    gate_controller::gate_controller,
    scheduler::{scheduler, scheduler_rules},
    webhook::webhook,
};

use serde_json::{Value, json};

pub const NAMESPACE: &str = "multiarch";
pub const IMAGE: &str = "multiarch:0.1.0";
const SCHEDULER: &str = "multiarch-scheduler";
const INSPECTOR: &str = "multiarch-inspector";

pub(crate) fn labels(component: &str) -> Value {
    json!({"app.kubernetes.io/name": "multiarch", "app.kubernetes.io/component": component})
}

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

pub(crate) fn deployment(
    name: &str,
    component: &str,
    args: Value,
    ports: Value,
    probe_port: &str,
    env: Value,
) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels(component)},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels(component)},
            "template": {
                "metadata": {"labels": labels(component)},
                "spec": {
                    "serviceAccountName": name,
                    // Scheduled by the default scheduler: the scheduler must not depend on itself.
                    "schedulerName": "default-scheduler",
                    "priorityClassName": "system-cluster-critical",
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "containers": [{
                        "name": component,
                        "image": IMAGE,
                        "args": args,
                        "env": env,
                        "ports": ports,
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": probe_port}, "initialDelaySeconds": 5, "periodSeconds": 10},
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": probe_port}, "periodSeconds": 5},
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
                        "securityContext": security_context(),
                    }],
                },
            },
        },
    })
}

/// The folder's kustomization: its files, and the image every role runs.
pub(crate) fn kustomization(resources: &[&str]) -> Value {
    json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": resources,
        "images": [{"name": "multiarch", "newName": "multiarch", "newTag": "0.1.0"}],
    })
}

pub(crate) fn downward_env() -> Value {
    json!([
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ])
}

/// A Role (or ClusterRole, without a namespace) and its binding to `account`.
pub(crate) fn rbac_pair(
    name: &str,
    kind: &str,
    namespace: Option<&str>,
    account: &str,
    rules: Value,
) -> [Value; 2] {
    let mut metadata = json!({"name": name});
    let mut binding_kind = format!("{kind}Binding");
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    } else {
        binding_kind = "ClusterRoleBinding".into();
    }
    [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata, "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": binding_kind, "metadata": metadata,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]}),
    ]
}

/// `(file name, documents)` of one folder under `manifests/`, in apply order.
pub type Files = Vec<(&'static str, Vec<Value>)>;

/// `(folder under manifests/, its files)` of every role, in the order `multiarch manifests`
/// writes them.
pub fn folders() -> Vec<(&'static str, Files)> {
    vec![
        ("scheduler", scheduler()),
        ("webhook", webhook()),
        ("gate-controller", gate_controller()),
        ("enoexec", enoexec()),
        ("audit", audit()),
    ]
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
