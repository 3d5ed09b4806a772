//! `NodePorts`: a pod's host ports must be free on the node.

use crate::{
    framework::{CycleContext, CycleState, FilterPlugin, Plugin, PreFilterPlugin, Status},
    model::{cluster::ClusterEvent, node::NodeInfo},
};

pub const NAME: &str = "NodePorts";
pub const REASON: &str = "node(s) didn't have free ports for the requested pod ports";

pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [ClusterEvent] {
        &[ClusterEvent::NodeAdded, ClusterEvent::AssignedPodDeleted]
    }
}

impl PreFilterPlugin for NodePorts {
    fn pre_filter(&self, ctx: &CycleContext<'_>, _: &mut CycleState) -> Status {
        if ctx.pod.host_ports.is_empty() {
            Status::skip()
        } else {
            Status::success()
        }
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, ctx: &CycleContext<'_>, _: &CycleState, node: &NodeInfo) -> Status {
        let clash = ctx
            .pod
            .host_ports
            .iter()
            .any(|want| node.used_ports.iter().any(|used| used.conflicts_with(want)));
        if clash {
            Status::unschedulable(REASON)
        } else {
            Status::success()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{
        model::{node::NodeBuilder, pod::PodBuilder},
        testing::Fixture,
    };

    #[test]
    fn host_port_conflicts() {
        let mut node = NodeBuilder::new("n", "amd64").info();
        node.add_pod(Arc::new(
            PodBuilder::new("ns", "x")
                .node("n")
                .container("c", "i", "", "")
                .host_port(8080, "TCP", "127.0.0.1")
                .info(),
        ));
        let cases = [
            (8080, "TCP", "", false), // wildcard clashes with a specific address
            (8080, "TCP", "127.0.0.1", false), // same address
            (8080, "TCP", "127.0.0.2", true), // other address
            (8080, "UDP", "", true),  // other protocol
            (8081, "TCP", "", true),
        ];
        for (port, protocol, ip, fits) in cases {
            let fixture = Fixture::new(
                PodBuilder::new("ns", "p")
                    .container("c", "i", "", "")
                    .host_port(port, protocol, ip)
                    .info(),
            );
            let mut state = CycleState::new();
            assert!(
                NodePorts
                    .pre_filter(&fixture.ctx(), &mut state)
                    .is_success()
            );
            assert_eq!(
                NodePorts.filter(&fixture.ctx(), &state, &node).is_success(),
                fits,
                "{port} {protocol} {ip}"
            );
        }
        let no_ports = Fixture::new(PodBuilder::new("ns", "p").info());
        assert_eq!(
            NodePorts
                .pre_filter(&no_ports.ctx(), &mut CycleState::new())
                .code,
            crate::framework::Code::Skip
        );
    }
}
