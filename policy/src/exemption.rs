//! Which pods multiarch leaves alone, defined once for every path: the webhook neither
//! routes nor gates them, the gate controller removes its gate from them without writing
//! an affinity, and the scheduler places a pod only when the pod names it and is not
//! placed already (a pod that names the scheduler itself opted in, whatever its namespace).

use k8s_openapi::api::core::v1::Pod;
use multiarch_crd::names::{KUBE_SCHEDULER_NAME, OPT_OUT_LABEL, OPT_OUT_VALUE};

use crate::affinity_writer::{architecture_required, preferred_architectures};

/// Node selectors that pin a pod to control-plane nodes.
pub const CONTROL_PLANE_LABELS: [&str; 2] = [
    "node-role.kubernetes.io/master",
    "node-role.kubernetes.io/control-plane",
];

/// Why a pod is left as it is (for metrics, logs and tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exemption {
    /// `kube-*` namespaces.
    SystemNamespace,
    /// multiarch's own namespace.
    OwnNamespace,
    /// `spec.nodeName` is set: the pod is placed already.
    NodeName,
    /// Created by a DaemonSet, which pins it to its node.
    DaemonSet,
    /// Pinned to control-plane nodes.
    ControlPlane,
    /// Labelled `multiarch.openshift.io/scheduler=default`.
    OptOut,
    /// Routing: the pod names a scheduler other than the default one.
    OtherScheduler,
    /// Gate mode (MTO's rule): required and preferred architecture constraints are all
    /// the pod's own already.
    ArchitectureSet,
}

impl Exemption {
    pub fn as_str(self) -> &'static str {
        match self {
            Exemption::SystemNamespace => "system_namespace",
            Exemption::OwnNamespace => "own_namespace",
            Exemption::NodeName => "node_name",
            Exemption::DaemonSet => "daemonset",
            Exemption::ControlPlane => "control_plane",
            Exemption::OptOut => "opt_out",
            Exemption::OtherScheduler => "other_scheduler",
            Exemption::ArchitectureSet => "architecture_set",
        }
    }
}

/// The exemptions every path applies, in the order they are checked. `namespace` is the
/// pod's (an admission request names it before the pod does).
pub fn exemption(pod: &Pod, namespace: &str, own_namespace: &str) -> Option<Exemption> {
    let spec = pod.spec.as_ref();
    if namespace.starts_with("kube-") {
        return Some(Exemption::SystemNamespace);
    }
    if namespace == own_namespace {
        return Some(Exemption::OwnNamespace);
    }
    if assigned(spec.and_then(|s| s.node_name.as_deref())) {
        return Some(Exemption::NodeName);
    }
    let daemonset = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true));
    if daemonset {
        return Some(Exemption::DaemonSet);
    }
    let control_plane = spec
        .and_then(|s| s.node_selector.as_ref())
        .is_some_and(|selector| {
            CONTROL_PLANE_LABELS
                .iter()
                .any(|l| selector.contains_key(*l))
        });
    if control_plane {
        return Some(Exemption::ControlPlane);
    }
    let opted_out = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(OPT_OUT_LABEL))
        .is_some_and(|v| v == OPT_OUT_VALUE);
    if opted_out {
        return Some(Exemption::OptOut);
    }
    None
}

/// Whether the pod is bound to a node already: nobody places it again.
pub fn assigned(node_name: Option<&str>) -> bool {
    node_name.is_some_and(|n| !n.is_empty())
}

/// Routing: whether the pod names a scheduler other than the default one (an unset name
/// is the default's; a pod that names multiarch's scheduler is routed already).
pub fn names_other_scheduler(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .is_some_and(|name| name != KUBE_SCHEDULER_NAME)
}

/// Gate mode, MTO's rule: the architecture is already required (nodeSelector, or every
/// required term names it) and either preferred too or no preference would be added.
pub fn architecture_set(pod: &Pod, preferences_apply: bool) -> bool {
    architecture_required(pod) && (!preferred_architectures(pod).is_empty() || !preferences_apply)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodSpec;
    use serde_json::json;

    use super::*;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn checks_in_order_and_names_the_first_rule() {
        let cases = [
            (json!({}), "kube-system", Some(Exemption::SystemNamespace)),
            (json!({}), "multiarch", Some(Exemption::OwnNamespace)),
            (
                json!({"spec": {"containers": [], "nodeName": "n1"}}),
                "shop",
                Some(Exemption::NodeName),
            ),
            (
                json!({"spec": {"containers": [], "nodeName": ""}}),
                "shop",
                None,
            ),
            (
                json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u", "controller": true}]}}),
                "shop",
                Some(Exemption::DaemonSet),
            ),
            (
                json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u", "controller": true}]}}),
                "shop",
                None,
            ),
            (
                json!({"spec": {"containers": [], "nodeSelector": {"node-role.kubernetes.io/master": ""}}}),
                "shop",
                Some(Exemption::ControlPlane),
            ),
            (
                json!({"metadata": {"labels": {"multiarch.openshift.io/scheduler": "default"}}}),
                "shop",
                Some(Exemption::OptOut),
            ),
            (
                json!({"metadata": {"labels": {"multiarch.openshift.io/scheduler": "other"}}}),
                "shop",
                None,
            ),
            // The namespace wins over the node name.
            (
                json!({"spec": {"containers": [], "nodeName": "n1"}}),
                "kube-public",
                Some(Exemption::SystemNamespace),
            ),
        ];
        for (object, namespace, want) in cases {
            assert_eq!(
                exemption(&pod(object.clone()), namespace, "multiarch"),
                want,
                "{object} in {namespace}"
            );
        }
    }

    #[test]
    fn other_schedulers_are_named_ones_but_the_default() {
        let named = |name: Option<&str>| Pod {
            spec: Some(PodSpec {
                scheduler_name: name.map(str::to_owned),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        assert!(!names_other_scheduler(&named(None)));
        assert!(!names_other_scheduler(&named(Some("default-scheduler"))));
        assert!(names_other_scheduler(&named(Some("volcano"))));
        assert!(names_other_scheduler(&named(Some("multiarch-scheduler"))));
    }
}
