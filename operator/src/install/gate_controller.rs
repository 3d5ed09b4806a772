//! `manifests/gate-controller/`: the gate-mode controller.

use serde_json::json;

use super::{Files, INSPECTOR, NAMESPACE, deployment, downward_env, kustomization};

const GATE: &str = "multiarch-gate-controller";

/// `(file name, documents)` of `manifests/gate-controller/` (gate mode only).
pub fn gate_controller() -> Files {
    let rules = json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "update"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["clusterpodplacementconfigs", "podplacementconfigs"], "verbs": ["get", "list", "watch"]},
    ]);
    vec![
        (
            "rbac.yaml",
            vec![
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": GATE, "namespace": NAMESPACE}}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": GATE}, "rules": rules}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": GATE},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": GATE},
                   "subjects": [{"kind": "ServiceAccount", "name": GATE, "namespace": NAMESPACE}]}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": format!("{GATE}-lease"), "namespace": NAMESPACE},
                "rules": [
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [GATE], "verbs": ["get", "update"]},
                ]}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": format!("{GATE}-lease"), "namespace": NAMESPACE},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("{GATE}-lease")},
                   "subjects": [{"kind": "ServiceAccount", "name": GATE, "namespace": NAMESPACE}]}),
            ],
        ),
        (
            "gate-controller.yaml",
            vec![deployment(
                GATE,
                "gate-controller",
                json!([
                    "gate-controller",
                    format!("--inspector-endpoint=http://{INSPECTOR}.{NAMESPACE}.svc:9443"),
                    "--metrics-addr=0.0.0.0:8080",
                    "--log-format=json"
                ]),
                json!([{"name": "metrics", "containerPort": 8080}]),
                "metrics",
                downward_env(),
            )],
        ),
        (
            "kustomization.yaml",
            vec![kustomization(&["rbac.yaml", "gate-controller.yaml"])],
        ),
    ]
}
