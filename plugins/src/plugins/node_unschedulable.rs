//! `NodeUnschedulable`: cordoned nodes take only pods that tolerate the cordon taint.

use super::taint_toleration::tolerates;
use crate::{
    framework::{CycleContext, CycleState, FilterPlugin, Plugin, Status},
    model::{
        cluster::ClusterEvent,
        node::{NodeInfo, Taint},
    },
};

pub const NAME: &str = "NodeUnschedulable";
pub const REASON: &str = "node(s) were unschedulable";

pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [ClusterEvent] {
        &[ClusterEvent::NodeAdded, ClusterEvent::NodeChanged]
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, ctx: &CycleContext<'_>, _: &CycleState, node: &NodeInfo) -> Status {
        if !node.unschedulable {
            return Status::success();
        }
        let cordon = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            value: String::new(),
            effect: "NoSchedule".into(),
        };
        if ctx.pod.tolerations.iter().any(|t| tolerates(t, &cordon)) {
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
}
