//! `NodeDeclaredFeatures` (kube-scheduler 1.36, beta and in the default profile): a pod
//! that needs a node feature (see `model::declared_features`) is placed only on nodes
//! that declare it in `status.declaredFeatures`; the others are rejected as unresolvable
//! (preemption cannot add a feature). Pods that need none skip it.

use crate::{
    events::{ClusterChange, EventKind, QueueingHint, node_now_passes},
    framework::{CycleContext, CycleState, FilterPlugin, Plugin, PreFilterPlugin, Status},
    model::{cluster::ClusterState, node::NodeInfo, pod::PodInfo},
};

pub const NAME: &str = "NodeDeclaredFeatures";
/// kube-scheduler's `errReasonUnsatisfiedRequirements`, word for word.
pub const REASON: &str = "node(s) didn't match Pod's required features";

pub struct NodeDeclaredFeatures;

fn fits(pod: &PodInfo, node: &NodeInfo) -> bool {
    pod.needed_features.is_subset_of(node.declared_features)
}

impl Plugin for NodeDeclaredFeatures {
    fn name(&self) -> &'static str {
        NAME
    }

    /// kube-scheduler registers Node Add and UpdateNodeDeclaredFeature (and an update of
    /// the pod itself, whose needs are in immutable fields).
    fn events(&self) -> &'static [EventKind] {
        &[EventKind::NodeAdd, EventKind::NodeUpdate]
    }

    /// `isSchedulableAfterNodeChange`: a node that now declares what the pod needs.
    fn queueing_hint(
        &self,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        _: &ClusterState,
    ) -> QueueingHint {
        node_now_passes(change, |node| fits(pod, node))
    }
}

impl PreFilterPlugin for NodeDeclaredFeatures {
    fn pre_filter(&self, ctx: &CycleContext<'_>, _: &mut CycleState) -> Status {
        if ctx.pod.needed_features.is_empty() {
            Status::skip()
        } else {
            Status::success()
        }
    }
}

impl FilterPlugin for NodeDeclaredFeatures {
    fn filter(&self, ctx: &CycleContext<'_>, _: &CycleState, node: &NodeInfo) -> Status {
        if fits(ctx.pod, node) {
            Status::success()
        } else {
            Status::unresolvable(REASON)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        events::NodeChanges,
        framework::Code,
        model::{node::NodeBuilder, pod::PodBuilder},
        testing::Fixture,
    };

    const RESTART_ALL: &str = "RestartAllContainersOnContainerExits";
    const USERNS_HOST_NETWORK: &str = "UserNamespacesHostNetworkSupport";

    /// A pod needing `RestartAllContainersOnContainerExits`, and with `both` the other
    /// feature a pod can need in 1.36.
    fn needing(both: bool) -> PodInfo {
        let mut pod = PodBuilder::new("ns", "p")
            .container("c", "i", "100m", "0")
            .obj();
        if let Some(spec) = pod.spec.as_mut() {
            spec.containers[0].restart_policy_rules = Some(vec![serde_json::from_value(
                serde_json::json!({"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}),
            )
            .unwrap()]);
            if both {
                spec.host_network = Some(true);
                spec.host_users = Some(false);
            }
        }
        PodInfo::from_pod(&pod).unwrap()
    }

    /// kube-scheduler's `TestPreFilter` (requirements or none) and `TestFilter` (match,
    /// no match, a subset, a node declaring nothing, some but not all), with 1.36's
    /// registry in place of its mock features.
    #[test]
    fn nodes_must_declare_what_the_pod_needs() {
        let node = |features: &[&str]| {
            NodeBuilder::new("n", "amd64")
                .declared_features(features)
                .info()
        };
        let cases = [
            (
                "matches",
                needing(false),
                node(&[RESTART_ALL, USERNS_HOST_NETWORK]),
                true,
            ),
            (
                "does not match",
                needing(false),
                node(&[USERNS_HOST_NETWORK]),
                false,
            ),
            (
                "a subset",
                needing(true),
                node(&[
                    "ExtendWebSocketsToKubelet",
                    RESTART_ALL,
                    USERNS_HOST_NETWORK,
                ]),
                true,
            ),
            ("declares nothing", needing(false), node(&[]), false),
            (
                "some but not all",
                needing(true),
                node(&[RESTART_ALL]),
                false,
            ),
        ];
        for (name, pod, node, fits) in cases {
            let fixture = Fixture::new(pod);
            let mut state = CycleState::new();
            assert_eq!(
                NodeDeclaredFeatures
                    .pre_filter(&fixture.ctx(), &mut state)
                    .code,
                Code::Success,
                "{name}"
            );
            let status = NodeDeclaredFeatures.filter(&fixture.ctx(), &state, &node);
            if fits {
                assert!(status.is_success(), "{name}: {}", status.message());
            } else {
                assert_eq!(status.code, Code::UnschedulableAndUnresolvable, "{name}");
                assert_eq!(status.message(), REASON, "{name}");
            }
        }
        let plain = Fixture::new(PodBuilder::new("ns", "p").info());
        assert_eq!(
            NodeDeclaredFeatures
                .pre_filter(&plain.ctx(), &mut CycleState::new())
                .code,
            Code::Skip
        );
    }

    /// `isSchedulableAfterNodeChange`: a node added or updated to declare the feature
    /// queues the pod; an update that leaves it without does not.
    #[test]
    fn queueing_hints() {
        let pod = needing(false);
        let cluster = ClusterState::new();
        let without = NodeBuilder::new("n", "amd64").info();
        let with = NodeBuilder::new("n", "amd64")
            .declared_features(&[RESTART_ALL])
            .info();
        let relabelled = NodeBuilder::new("n", "amd64").label("x", "y").info();
        let hint =
            |change: ClusterChange<'_>| NodeDeclaredFeatures.queueing_hint(&pod, &change, &cluster);
        let update = |old, new| ClusterChange::NodeUpdated {
            old,
            new,
            changes: NodeChanges::between(old, new),
        };
        assert_eq!(hint(ClusterChange::NodeAdded(&with)), QueueingHint::Queue);
        assert_eq!(
            hint(ClusterChange::NodeAdded(&without)),
            QueueingHint::QueueSkip
        );
        assert_eq!(hint(update(&without, &with)), QueueingHint::Queue);
        assert_eq!(hint(update(&without, &relabelled)), QueueingHint::QueueSkip);
        assert!(NodeChanges::between(&without, &with).contains(NodeChanges::DECLARED_FEATURES));
    }
}
