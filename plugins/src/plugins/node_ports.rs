//! `NodePorts`: a pod's host ports must be free on the node.

use crate::{
    events::{ClusterChange, EventKind, QueueingHint},
    framework::{CycleContext, CycleState, FilterPlugin, Plugin, PreFilterPlugin, Status},
    model::{cluster::ClusterState, node::NodeInfo, pod::PodInfo},
};

pub const NAME: &str = "NodePorts";
pub const REASON: &str = "node(s) didn't have free ports for the requested pod ports";

pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventKind] {
        &[EventKind::NodeAdd, EventKind::AssignedPodDelete]
    }

    /// A new node may have the ports free; a deleted pod frees only its own ports.
    fn queueing_hint(
        &self,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        _: &ClusterState,
    ) -> QueueingHint {
        match change {
            ClusterChange::NodeAdded(_) => QueueingHint::Queue,
            ClusterChange::AssignedPodDeleted(deleted) => QueueingHint::from_bool(
                deleted
                    .host_ports
                    .iter()
                    .any(|freed| pod.host_ports.iter().any(|want| want.conflicts_with(freed))),
            ),
            _ => QueueingHint::QueueSkip,
        }
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

    #[test]
    fn only_deleted_pods_holding_a_wanted_port_requeue() {
        let pod = PodBuilder::new("ns", "p")
            .container("c", "i", "", "")
            .host_port(8080, "TCP", "")
            .info();
        let holder = PodBuilder::new("ns", "h")
            .node("n")
            .container("c", "i", "", "")
            .host_port(8080, "TCP", "")
            .info();
        let other = PodBuilder::new("ns", "o")
            .node("n")
            .container("c", "i", "", "")
            .host_port(9090, "TCP", "")
            .info();
        let cluster = ClusterState::new();
        let node = NodeBuilder::new("n", "amd64").info();
        let hint = |change| NodePorts.queueing_hint(&pod, &change, &cluster);
        assert_eq!(
            hint(ClusterChange::AssignedPodDeleted(&holder)),
            QueueingHint::Queue
        );
        assert_eq!(
            hint(ClusterChange::AssignedPodDeleted(&other)),
            QueueingHint::QueueSkip
        );
        assert_eq!(hint(ClusterChange::NodeAdded(&node)), QueueingHint::Queue);
    }
}
