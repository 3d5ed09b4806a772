//! `NodeName`: a pod that names a node fits only that node.

use crate::{
    framework::{CycleContext, CycleState, FilterPlugin, Plugin, Status},
    model::{cluster::ClusterEvent, node::NodeInfo},
};

pub const NAME: &str = "NodeName";
pub const REASON: &str = "node(s) didn't match the requested node name";

pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [ClusterEvent] {
        &[ClusterEvent::NodeAdded]
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, ctx: &CycleContext<'_>, _: &CycleState, node: &NodeInfo) -> Status {
        match &ctx.pod.node_name {
            Some(wanted) if *wanted != node.name => Status::unresolvable(REASON),
            _ => Status::success(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{framework::Code, testing::Fixture};

    #[test]
    fn only_the_named_node_fits() {
        let fixture = Fixture::new(
            crate::model::pod::PodBuilder::new("ns", "p")
                .node("a")
                .info(),
        );
        let ctx = fixture.ctx();
        let a = crate::model::node::NodeBuilder::new("a", "amd64").info();
        let b = crate::model::node::NodeBuilder::new("b", "amd64").info();
        assert!(NodeName.filter(&ctx, &CycleState::new(), &a).is_success());
        let status = NodeName.filter(&ctx, &CycleState::new(), &b);
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(status.message(), REASON);
    }
}
