//! `NodeResourcesFit`: the pod's requests must fit the node's free allocatable resources;
//! scores by LeastAllocated (cpu and memory, weight 1 each).

use crate::{
    events::{ClusterChange, EventKind, QueueingHint},
    framework::{
        Code, CycleContext, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, Reason, Reasons,
        ScorePlugin, Status,
    },
    model::{cluster::ClusterState, node::NodeInfo, pod::PodInfo, resources::Resources},
};

pub const NAME: &str = "NodeResourcesFit";
pub const TOO_MANY_PODS: &str = "Too many pods";

pub struct NodeResourcesFit;

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventKind] {
        &[
            EventKind::NodeAdd,
            EventKind::NodeUpdate,
            EventKind::AssignedPodDelete,
            EventKind::AssignedPodUpdate,
        ]
    }

    /// kube-scheduler's hints: any deleted pod frees room; an updated pod only if it
    /// requests less of something the pod wants; a node only if its allocatable can hold
    /// the pod at all and (for an update) grew in something the pod wants.
    fn queueing_hint(
        &self,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        _: &ClusterState,
    ) -> QueueingHint {
        match change {
            ClusterChange::AssignedPodDeleted(_) => QueueingHint::Queue,
            ClusterChange::AssignedPodUpdated { old, new } => {
                QueueingHint::from_bool(any_wanted(&pod.requests, |want| {
                    want(&new.requests) < want(&old.requests)
                }))
            }
            ClusterChange::NodeAdded(node) => QueueingHint::from_bool(fits_empty(pod, node)),
            ClusterChange::NodeUpdated { old, new, .. } => QueueingHint::from_bool(
                fits_empty(pod, new)
                    && (new.allowed_pods > old.allowed_pods
                        || any_wanted(&pod.requests, |want| {
                            want(&new.allocatable) > want(&old.allocatable)
                        })),
            ),
            _ => QueueingHint::QueueSkip,
        }
    }
}

type Amount<'a> = &'a dyn Fn(&Resources) -> i64;

/// Whether `test` holds for one of the resources `wanted` requests.
fn any_wanted(wanted: &Resources, test: impl Fn(Amount<'_>) -> bool) -> bool {
    (wanted.milli_cpu > 0 && test(&|r: &Resources| r.milli_cpu))
        || (wanted.memory > 0 && test(&|r: &Resources| r.memory))
        || (wanted.ephemeral_storage > 0 && test(&|r: &Resources| r.ephemeral_storage))
        || wanted
            .scalar
            .iter()
            .any(|(name, amount)| *amount > 0 && test(&|r: &Resources| r.scalar(name)))
}

/// Whether the pod would fit the node if nothing ran on it.
fn fits_empty(pod: &PodInfo, node: &NodeInfo) -> bool {
    let want = &pod.requests;
    node.allowed_pods >= 1
        && want.milli_cpu <= node.allocatable.milli_cpu
        && want.memory <= node.allocatable.memory
        && want.ephemeral_storage <= node.allocatable.ephemeral_storage
        && want
            .scalar
            .iter()
            .all(|(name, amount)| *amount <= node.allocatable.scalar(name))
}

fn insufficient(name: &str) -> Reason {
    match name {
        "cpu" => Reason::Static("Insufficient cpu"),
        "memory" => Reason::Static("Insufficient memory"),
        "ephemeral-storage" => Reason::Static("Insufficient ephemeral-storage"),
        other => Reason::Shared(format!("Insufficient {other}").into()),
    }
}

impl FilterPlugin for NodeResourcesFit {
    fn filter(&self, ctx: &CycleContext<'_>, _: &CycleState, node: &NodeInfo) -> Status {
        let pod = &ctx.pod.requests;
        let mut reasons = Reasons::new();
        // Requests larger than the whole node can never fit: preemption cannot help.
        let mut unresolvable = false;
        let pod_count = i64::try_from(node.pods.len()).unwrap_or(i64::MAX);
        if pod_count + 1 > node.allowed_pods {
            reasons.push(Reason::Static(TOO_MANY_PODS));
        }
        if !pod.is_zero() {
            let mut check = |name: &str, want: i64, allocatable: i64, requested: i64| {
                if want > 0 && want > allocatable - requested {
                    reasons.push(insufficient(name));
                    unresolvable |= want > allocatable;
                }
            };
            check(
                "cpu",
                pod.milli_cpu,
                node.allocatable.milli_cpu,
                node.requested.milli_cpu,
            );
            check(
                "memory",
                pod.memory,
                node.allocatable.memory,
                node.requested.memory,
            );
            check(
                "ephemeral-storage",
                pod.ephemeral_storage,
                node.allocatable.ephemeral_storage,
                node.requested.ephemeral_storage,
            );
            for (name, want) in &pod.scalar {
                check(
                    name,
                    *want,
                    node.allocatable.scalar(name),
                    node.requested.scalar(name),
                );
            }
        }
        if reasons.is_empty() {
            return Status::success();
        }
        Status {
            code: if unresolvable {
                Code::UnschedulableAndUnresolvable
            } else {
                Code::Unschedulable
            },
            reasons,
            plugin: NAME,
            retry_with_backoff: false,
        }
    }
}

/// LeastAllocated: the share of cpu and memory left free after placing the pod, 0..=100.
pub fn least_allocated(allocatable: i64, requested: i64) -> i64 {
    if allocatable <= 0 || requested > allocatable {
        return 0;
    }
    (allocatable - requested) * MAX_NODE_SCORE / allocatable
}

impl ScorePlugin for NodeResourcesFit {
    fn score(&self, ctx: &CycleContext<'_>, _: &CycleState, node: &NodeInfo) -> i64 {
        let cpu = least_allocated(
            node.allocatable.milli_cpu,
            node.non_zero_requested.milli_cpu + ctx.pod.non_zero.milli_cpu,
        );
        let memory = least_allocated(
            node.allocatable.memory,
            node.non_zero_requested.memory + ctx.pod.non_zero.memory,
        );
        (cpu + memory) / 2
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

    fn node_with(used_cpu: &str, used_mem: &str) -> NodeInfo {
        let mut node = NodeBuilder::new("n", "amd64")
            .capacity("4", "8Gi", 3)
            .info();
        if !used_cpu.is_empty() || !used_mem.is_empty() {
            node.add_pod(Arc::new(
                PodBuilder::new("ns", "existing")
                    .node("n")
                    .container("c", "i", used_cpu, used_mem)
                    .info(),
            ));
        }
        node
    }

    /// The fit table of noderesources/fit_test.go, in its essentials.
    #[test]
    fn filter_reports_every_insufficient_resource() {
        let cases = [
            (
                "fits",
                PodBuilder::new("ns", "p").container("c", "i", "1", "1Gi"),
                node_with("1", "1Gi"),
                Code::Success,
                "",
            ),
            (
                "cpu",
                PodBuilder::new("ns", "p").container("c", "i", "3500m", "1Gi"),
                node_with("1", "1Gi"),
                Code::Unschedulable,
                "Insufficient cpu",
            ),
            (
                "both",
                PodBuilder::new("ns", "p").container("c", "i", "3500m", "7.5Gi"),
                node_with("1", "1Gi"),
                Code::Unschedulable,
                "Insufficient cpu, Insufficient memory",
            ),
            (
                "larger than the node",
                PodBuilder::new("ns", "p").container("c", "i", "5", ""),
                node_with("", ""),
                Code::UnschedulableAndUnresolvable,
                "Insufficient cpu",
            ),
            (
                "init container max",
                PodBuilder::new("ns", "p")
                    .init_container("i", "i", "3500m", "")
                    .container("c", "i", "100m", ""),
                node_with("1", ""),
                Code::Unschedulable,
                "Insufficient cpu",
            ),
            (
                "zero requests still count pods",
                PodBuilder::new("ns", "p").container("c", "i", "", ""),
                node_with("", ""),
                Code::Success,
                "",
            ),
        ];
        for (name, pod, node, code, message) in cases {
            let fixture = Fixture::new(pod.info());
            let status = NodeResourcesFit.filter(&fixture.ctx(), &CycleState::new(), &node);
            assert_eq!(status.code, code, "{name}");
            assert_eq!(status.message(), message, "{name}");
        }
    }

    #[test]
    fn pod_count_and_extended_resources() {
        let mut full = NodeBuilder::new("n", "amd64")
            .capacity("4", "8Gi", 1)
            .info();
        full.add_pod(Arc::new(PodBuilder::new("ns", "x").node("n").info()));
        let fixture = Fixture::new(
            PodBuilder::new("ns", "p")
                .container("c", "i", "", "")
                .info(),
        );
        assert_eq!(
            NodeResourcesFit
                .filter(&fixture.ctx(), &CycleState::new(), &full)
                .message(),
            TOO_MANY_PODS
        );
        let gpu_pod = Fixture::new(
            PodBuilder::new("ns", "p")
                .container("c", "i", "", "")
                .extended("nvidia.com/gpu", "1")
                .info(),
        );
        let no_gpu = NodeBuilder::new("n", "amd64").info();
        let status = NodeResourcesFit.filter(&gpu_pod.ctx(), &CycleState::new(), &no_gpu);
        assert_eq!(status.message(), "Insufficient nvidia.com/gpu");
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
        let gpu_node = NodeBuilder::new("n", "amd64")
            .extended("nvidia.com/gpu", "2")
            .info();
        assert!(
            NodeResourcesFit
                .filter(&gpu_pod.ctx(), &CycleState::new(), &gpu_node)
                .is_success()
        );
    }

    #[test]
    fn queueing_hints_follow_kube_scheduler() {
        let pod = PodBuilder::new("ns", "p")
            .container("c", "i", "2", "1Gi")
            .info();
        let cluster = ClusterState::new();
        let hint = |change| NodeResourcesFit.queueing_hint(&pod, &change, &cluster);
        let small = NodeBuilder::new("n", "amd64")
            .capacity("1", "8Gi", 110)
            .info();
        let big = NodeBuilder::new("n", "amd64")
            .capacity("4", "8Gi", 110)
            .info();
        let bigger = NodeBuilder::new("n", "amd64")
            .capacity("8", "8Gi", 110)
            .info();
        let more_memory = NodeBuilder::new("n", "amd64")
            .capacity("4", "16Gi", 110)
            .info();
        assert_eq!(
            hint(ClusterChange::NodeAdded(&small)),
            QueueingHint::QueueSkip
        );
        assert_eq!(hint(ClusterChange::NodeAdded(&big)), QueueingHint::Queue);
        let update = |old, new| ClusterChange::NodeUpdated {
            old,
            new,
            changes: crate::events::NodeChanges::between(old, new),
        };
        assert_eq!(hint(update(&small, &big)), QueueingHint::Queue);
        assert_eq!(hint(update(&big, &bigger)), QueueingHint::Queue);
        assert_eq!(hint(update(&big, &more_memory)), QueueingHint::Queue);
        assert_eq!(hint(update(&bigger, &big)), QueueingHint::QueueSkip);
        let running = PodBuilder::new("ns", "r")
            .node("n")
            .container("c", "i", "1", "1Gi")
            .info();
        let shrunk = PodBuilder::new("ns", "r")
            .node("n")
            .container("c", "i", "500m", "1Gi")
            .info();
        let relabelled = PodBuilder::new("ns", "r")
            .label("a", "b")
            .node("n")
            .container("c", "i", "1", "1Gi")
            .info();
        assert_eq!(
            hint(ClusterChange::AssignedPodDeleted(&running)),
            QueueingHint::Queue
        );
        assert_eq!(
            hint(ClusterChange::AssignedPodUpdated {
                old: &running,
                new: &shrunk
            }),
            QueueingHint::Queue
        );
        assert_eq!(
            hint(ClusterChange::AssignedPodUpdated {
                old: &running,
                new: &relabelled
            }),
            QueueingHint::QueueSkip
        );
        assert_eq!(
            hint(ClusterChange::AssignedPodAdded(&running)),
            QueueingHint::QueueSkip
        );
    }

    #[test]
    fn least_allocated_prefers_emptier_nodes() {
        let fixture = Fixture::new(
            PodBuilder::new("ns", "p")
                .container("c", "i", "1", "2Gi")
                .info(),
        );
        let ctx = fixture.ctx();
        let empty = node_with("", "");
        let busy = node_with("2", "4Gi");
        // empty: cpu (4-1)/4 = 75, memory (8-2)/8 = 75; busy: cpu 25, memory 25.
        assert_eq!(NodeResourcesFit.score(&ctx, &CycleState::new(), &empty), 75);
        assert_eq!(NodeResourcesFit.score(&ctx, &CycleState::new(), &busy), 25);
        assert_eq!(least_allocated(0, 0), 0);
        assert_eq!(least_allocated(10, 20), 0);
    }
}
