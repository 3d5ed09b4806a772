//! `NodeName`: a pod that names a node fits only that node.

use crate::{
    events::{ClusterChange, EventKind, QueueingHint, node_now_passes},
    framework::{CycleContext, CycleState, FilterPlugin, Plugin, PreFilterPlugin, Status},
    model::{cluster::ClusterState, node::NodeInfo, pod::PodInfo},
};

pub const NAME: &str = "NodeName";
pub const REASON: &str = "node(s) didn't match the requested node name";

pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventKind] {
        &[EventKind::NodeAdd]
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

fn fits(pod: &PodInfo, node: &NodeInfo) -> bool {
    pod.node_name
        .as_ref()
        .is_none_or(|wanted| *wanted == node.name)
}

/// Nothing to check for a pod that names no node (every pod the scheduler sees, in
/// practice): the filter is skipped rather than run per node.
impl PreFilterPlugin for NodeName {
    fn pre_filter(&self, ctx: &CycleContext<'_>, _: &mut CycleState) -> Status {
        if ctx.pod.node_name.is_none() {
            Status::skip()
        } else {
            Status::success()
        }
    }
}

impl FilterPlugin for NodeName {
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
    use crate::{framework::Code, testing::Fixture};

    #[test]
    fn pre_filter_skips_the_filter_for_a_pod_that_names_no_node() {
        let code = |pod: crate::model::pod::PodBuilder| {
            NodeName
                .pre_filter(&Fixture::new(pod.info()).ctx(), &mut CycleState::new())
                .code
        };
        assert_eq!(
            code(crate::model::pod::PodBuilder::new("ns", "p")),
            Code::Skip
        );
        assert_eq!(
            code(crate::model::pod::PodBuilder::new("ns", "p").node("a")),
            Code::Success
        );
    }

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
