//! `multiarch audit --cluster`: a ClusterRole for whoever runs it (a person, a CI job's
//! ServiceAccount), with no binding: read-only access to the workload kinds, pods, nodes,
//! namespaces and the placement configuration (the PodPlacementConfigs included), and `get` on Secrets and ServiceAccounts
//! for private images' pull secrets (drop that rule to audit public images only).

use serde_json::{Value, json};

use super::{Files, labels};

pub const AUDIT_CLUSTER_ROLE: &str = "multiarch-audit";

/// What `audit --cluster --routed-only` calls; the tests check every request against it.
pub fn audit_rules() -> Value {
    json!([
        {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"], "verbs": ["list"]},
        {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods", "replicationcontrollers", "nodes", "namespaces"], "verbs": ["list"]},
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["clusterpodplacementconfigs"], "verbs": ["get"]},
        // Their architecture rules decide for the workloads of their namespaces.
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["podplacementconfigs"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["secrets", "serviceaccounts"], "verbs": ["get"]},
    ])
}

pub fn audit() -> Files {
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": AUDIT_CLUSTER_ROLE, "labels": labels("audit")},
        "rules": audit_rules(),
    });
    vec![("clusterrole.yaml", vec![role])]
}
