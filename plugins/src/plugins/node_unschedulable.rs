//! `NodeUnschedulable`: cordoned nodes take only pods that tolerate the cordon taint.

use super::taint_toleration::tolerates_parts;
use crate::{
    events::{ClusterChange, EventKind, QueueingHint, node_now_passes},
    framework::{CycleContext, CycleState, FilterPlugin, Plugin, Status},
    model::{cluster::ClusterState, node::NodeInfo, pod::PodInfo},
};

pub const NAME: &str = "NodeUnschedulable";
pub const REASON: &str = "node(s) were unschedulable";
/// The key of the taint a cordon implies.
const CORDON_TAINT: &str = "node.kubernetes.io/unschedulable";

pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventKind] {
        &[EventKind::NodeAdd, EventKind::NodeUpdate]
    }

    fn queueing_hint(
        &self,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        _: &ClusterState,
    ) -> QueueingHint {
        node_now_passes(change, |node| fits(pod, node))
    }
}

/// A node that is not cordoned, or a pod that tolerates the cordon (the taint a cordon
/// implies, `node.kubernetes.io/unschedulable:NoSchedule`). Runs for every candidate
/// node: no taint is built for the check.
fn fits(pod: &PodInfo, node: &NodeInfo) -> bool {
    !node.unschedulable
        || pod
            .tolerations
            .iter()
            .any(|t| tolerates_parts(t, CORDON_TAINT, "", "NoSchedule"))
}

impl FilterPlugin for NodeUnschedulable {
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
        model::{node::NodeBuilder, pod::PodBuilder},
        testing::Fixture,
    };

    #[test]
    fn cordoned_nodes_need_the_toleration() {
        let cordoned = NodeBuilder::new("n", "amd64").unschedulable().info();
        let plain = Fixture::new(PodBuilder::new("ns", "p").info());
        assert_eq!(
            NodeUnschedulable
                .filter(&plain.ctx(), &CycleState::new(), &cordoned)
                .message(),
            REASON
        );
        let tolerant = Fixture::new(
            PodBuilder::new("ns", "p")
                .toleration(
                    "node.kubernetes.io/unschedulable",
                    "Exists",
                    "",
                    "NoSchedule",
                )
                .info(),
        );
        assert!(
            NodeUnschedulable
                .filter(&tolerant.ctx(), &CycleState::new(), &cordoned)
                .is_success()
        );
        let open = NodeBuilder::new("n", "amd64").info();
        assert!(
            NodeUnschedulable
                .filter(&plain.ctx(), &CycleState::new(), &open)
                .is_success()
        );
    }

    /// kube-scheduler's `isSchedulableAfterNodeChange`: uncordoning helps, any other
    /// update of a still-cordoned node does not.
    #[test]
    fn queueing_hints() {
        let pod = PodBuilder::new("ns", "p").info();
        let cluster = ClusterState::new();
        let cordoned = NodeBuilder::new("n", "amd64").unschedulable().info();
        let open = NodeBuilder::new("n", "amd64").info();
        let relabelled = NodeBuilder::new("n", "amd64")
            .label("x", "y")
            .unschedulable()
            .info();
        let hint =
            |change: ClusterChange<'_>| NodeUnschedulable.queueing_hint(&pod, &change, &cluster);
        assert_eq!(hint(ClusterChange::NodeAdded(&open)), QueueingHint::Queue);
        assert_eq!(
            hint(ClusterChange::NodeAdded(&cordoned)),
            QueueingHint::QueueSkip
        );
        let update = |old, new| ClusterChange::NodeUpdated {
            old,
            new,
            changes: crate::events::NodeChanges::between(old, new),
        };
        assert_eq!(hint(update(&cordoned, &open)), QueueingHint::Queue);
        assert_eq!(
            hint(update(&cordoned, &relabelled)),
            QueueingHint::QueueSkip
        );
        assert_eq!(hint(ClusterChange::ConfigChanged), QueueingHint::QueueSkip);
    }
}
