//! Node declared features (KEP-5328, `NodeDeclaredFeatures`, beta and on by default in
//! Kubernetes 1.36): a kubelet lists in `status.declaredFeatures` the features it has
//! that a pod may need; a pod that needs one is placed only on a node that declares it.
//! As component-helpers' `nodedeclaredfeatures` registry of 1.36: a node's list is read
//! against the features the registry knows (others mean nothing to this version), and a
//! pod's needs are inferred from its spec. Each feature is one bit.

use k8s_openapi::api::core::v1 as core;

/// The registry of 1.36 (`features.AllFeatures`), sorted by name as its framework sorts
/// it; a feature's bit is its position.
const REGISTRY: [&str; 5] = [
    "ExtendWebSocketsToKubelet",
    "InPlacePodLevelResourcesVerticalScaling",
    "InPlacePodVerticalScalingInitContainers",
    "RestartAllContainersOnContainerExits",
    "UserNamespacesHostNetworkSupport",
];

const RESTART_ALL_CONTAINERS: FeatureSet = FeatureSet(1 << 3);
const USER_NAMESPACES_HOST_NETWORK: FeatureSet = FeatureSet(1 << 4);

/// A set of the registry's features.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureSet(u8);

impl FeatureSet {
    /// What a node declares, of the features the registry knows (`TryMap`: a name this
    /// version does not know is nothing a pod it schedules can need).
    pub fn declared_by(node: &core::NodeStatus) -> FeatureSet {
        let mut set = FeatureSet::default();
        for name in node.declared_features.iter().flatten() {
            if let Some(bit) = REGISTRY.iter().position(|known| known == name) {
                set.0 |= 1 << bit;
            }
        }
        set
    }

    /// What a pod needs of a node to be scheduled there (`InferForPodScheduling`; the
    /// other features of the registry matter only to updates of a running pod):
    /// - `RestartAllContainersOnContainerExits`: a container or init container with a
    ///   restart rule whose action is `RestartAllContainers`;
    /// - `UserNamespacesHostNetworkSupport`: the host's network with a user namespace
    ///   (`hostNetwork: true`, `hostUsers: false`).
    pub fn needed_by(spec: &core::PodSpec) -> FeatureSet {
        let mut set = FeatureSet::default();
        let restarts_all = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .flat_map(|c| c.restart_policy_rules.iter().flatten())
            .any(|rule| rule.action == "RestartAllContainers");
        if restarts_all {
            set.0 |= RESTART_ALL_CONTAINERS.0;
        }
        if spec.host_network == Some(true) && spec.host_users == Some(false) {
            set.0 |= USER_NAMESPACES_HOST_NETWORK.0;
        }
        set
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Every feature of `self` is in `other`.
    pub fn is_subset_of(self, other: FeatureSet) -> bool {
        self.0 & !other.0 == 0
    }

    /// The features' names, in the registry's order.
    pub fn names(self) -> Vec<&'static str> {
        REGISTRY
            .iter()
            .enumerate()
            .filter(|(bit, _)| self.0 & (1 << bit) != 0)
            .map(|(_, name)| *name)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod_spec(spec: serde_json::Value) -> core::PodSpec {
        serde_json::from_value(spec).unwrap()
    }

    fn restart_rule(action: &str) -> serde_json::Value {
        json!([{"action": action, "exitCodes": {"operator": "In", "values": [42]}}])
    }

    /// component-helpers' inference cases (`restart_all_containers_test.go`: init
    /// container, regular container, no rules), and the spec's other combinations.
    #[test]
    fn a_pod_needs_what_its_spec_uses() {
        let cases = [
            ("plain", json!({"containers": [{"name": "c"}]}), vec![]),
            (
                "a container restarting all",
                json!({"containers": [{"name": "c", "restartPolicyRules": restart_rule("RestartAllContainers")}]}),
                vec!["RestartAllContainersOnContainerExits"],
            ),
            (
                "an init container restarting all",
                json!({"containers": [{"name": "c"}], "initContainers": [{"name": "i", "restartPolicyRules": restart_rule("RestartAllContainers")}]}),
                vec!["RestartAllContainersOnContainerExits"],
            ),
            (
                "a rule that restarts only its container",
                json!({"containers": [{"name": "c", "restartPolicyRules": restart_rule("Restart")}]}),
                vec![],
            ),
            (
                "host network in a user namespace",
                json!({"containers": [{"name": "c"}], "hostNetwork": true, "hostUsers": false}),
                vec!["UserNamespacesHostNetworkSupport"],
            ),
            (
                "host network with the host's users",
                json!({"containers": [{"name": "c"}], "hostNetwork": true, "hostUsers": true}),
                vec![],
            ),
            (
                "host network, hostUsers unset",
                json!({"containers": [{"name": "c"}], "hostNetwork": true}),
                vec![],
            ),
            (
                "a user namespace without host network",
                json!({"containers": [{"name": "c"}], "hostUsers": false}),
                vec![],
            ),
            (
                "both",
                json!({"containers": [{"name": "c", "restartPolicyRules": restart_rule("RestartAllContainers")}], "hostNetwork": true, "hostUsers": false}),
                vec![
                    "RestartAllContainersOnContainerExits",
                    "UserNamespacesHostNetworkSupport",
                ],
            ),
        ];
        for (name, spec, want) in cases {
            assert_eq!(
                FeatureSet::needed_by(&pod_spec(spec)).names(),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn a_node_declares_what_the_registry_knows() {
        let status: core::NodeStatus = serde_json::from_value(json!({"declaredFeatures": [
            "UserNamespacesHostNetworkSupport", "SomethingFrom1_40", "RestartAllContainersOnContainerExits",
        ]}))
        .unwrap();
        let declared = FeatureSet::declared_by(&status);
        assert_eq!(
            declared.names(),
            [
                "RestartAllContainersOnContainerExits",
                "UserNamespacesHostNetworkSupport"
            ]
        );
        assert!(FeatureSet::declared_by(&core::NodeStatus::default()).is_empty());
    }

    #[test]
    fn needs_are_met_by_a_superset() {
        let both = FeatureSet(RESTART_ALL_CONTAINERS.0 | USER_NAMESPACES_HOST_NETWORK.0);
        assert!(FeatureSet::default().is_subset_of(FeatureSet::default()));
        assert!(RESTART_ALL_CONTAINERS.is_subset_of(both));
        assert!(!both.is_subset_of(RESTART_ALL_CONTAINERS));
        assert!(!USER_NAMESPACES_HOST_NETWORK.is_subset_of(RESTART_ALL_CONTAINERS));
    }
}
