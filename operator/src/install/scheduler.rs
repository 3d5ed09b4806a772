//! `manifests/scheduler/`: the namespace, the scheduler and the image inspector.

use serde_json::{Value, json};

use super::{
    Files, INSPECTOR, NAMESPACE, SCHEDULER, deployment, downward_env, kustomization, labels,
};

/// What the scheduler may do cluster-wide: read what the plugins read; bind pods, write
/// their scheduling status and evict preemption victims; write volume decisions
/// (a volume's claim reference, a claim's selected node); publish events.
pub fn scheduler_rules() -> Value {
    json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["nodes", "namespaces"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["persistentvolumes", "persistentvolumeclaims"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses", "csinodes", "csidrivers", "csistoragecapacities", "volumeattachments"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["clusterpodplacementconfigs", "podplacementconfigs"], "verbs": ["get", "list", "watch"]},
    ])
}

/// `(file name, documents)` of `manifests/scheduler/`, in apply order.
pub fn scheduler() -> Files {
    let scheduler_rules = scheduler_rules();
    let inspector_rules = json!([
        // list and watch: metadata-only watches drop a cached keyring when one of its
        // Secrets or ServiceAccounts changes.
        {"apiGroups": [""], "resources": ["secrets", "serviceaccounts"], "verbs": ["get", "list", "watch"]},
    ]);
    let scheduler_args = json!([
        "scheduler",
        "--scheduler-name=multiarch-scheduler",
        format!("--inspector-endpoint=http://{INSPECTOR}.{NAMESPACE}.svc:9443"),
        "--metrics-addr=0.0.0.0:10259",
        "--log-format=json",
    ]);
    let inspector_args = json!([
        "inspector",
        "--listen=0.0.0.0:9443",
        "--metrics-addr=0.0.0.0:8080",
        "--log-format=json"
    ]);
    vec![
        (
            "namespace.yaml",
            vec![json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": NAMESPACE, "labels": {"multiarch.openshift.io/exclude-pod-placement": "true"}},
            })],
        ),
        (
            "rbac.yaml",
            vec![
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SCHEDULER, "namespace": NAMESPACE}}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": SCHEDULER}, "rules": scheduler_rules}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": SCHEDULER},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SCHEDULER},
                   "subjects": [{"kind": "ServiceAccount", "name": SCHEDULER, "namespace": NAMESPACE}]}),
                // The Lease lives in multiarch's namespace only, and only the scheduler's.
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": format!("{SCHEDULER}-lease"), "namespace": NAMESPACE},
                "rules": [
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [SCHEDULER], "verbs": ["get", "update"]},
                ]}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": format!("{SCHEDULER}-lease"), "namespace": NAMESPACE},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("{SCHEDULER}-lease")},
                   "subjects": [{"kind": "ServiceAccount", "name": SCHEDULER, "namespace": NAMESPACE}]}),
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": INSPECTOR, "namespace": NAMESPACE}}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": INSPECTOR}, "rules": inspector_rules}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": INSPECTOR},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": INSPECTOR},
                   "subjects": [{"kind": "ServiceAccount", "name": INSPECTOR, "namespace": NAMESPACE}]}),
            ],
        ),
        (
            "inspector.yaml",
            vec![
                deployment(
                    INSPECTOR,
                    "inspector",
                    inspector_args,
                    json!([{"name": "grpc", "containerPort": 9443}, {"name": "metrics", "containerPort": 8080}]),
                    "metrics",
                    json!([]),
                ),
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": INSPECTOR, "namespace": NAMESPACE, "labels": labels("inspector")},
                   "spec": {"selector": labels("inspector"), "ports": [{"name": "grpc", "port": 9443, "targetPort": "grpc", "appProtocol": "grpc"}, {"name": "metrics", "port": 8080, "targetPort": "metrics"}]}}),
            ],
        ),
        (
            "scheduler.yaml",
            vec![deployment(
                SCHEDULER,
                "scheduler",
                scheduler_args,
                json!([{"name": "metrics", "containerPort": 10259}]),
                "metrics",
                downward_env(),
            )],
        ),
        (
            "kustomization.yaml",
            vec![kustomization(&[
                "../crds",
                "namespace.yaml",
                "rbac.yaml",
                "inspector.yaml",
                "scheduler.yaml",
            ])],
        ),
    ]
}
