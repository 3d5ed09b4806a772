//! `TaintToleration`: NoSchedule/NoExecute taints filter, PreferNoSchedule taints score.

use crate::{
    events::{ClusterChange, EventKind, QueueingHint, node_now_passes},
    framework::{
        CycleContext, CycleState, FilterPlugin, Plugin, ScorePlugin, Status, default_normalize,
    },
    model::{
        cluster::ClusterState,
        node::{NodeInfo, Taint},
        pod::{PodInfo, Toleration},
    },
};

pub const NAME: &str = "TaintToleration";
pub const REASON: &str = "node(s) had untolerated taint(s)";

pub struct TaintToleration;

/// `v1.Toleration.ToleratesTaint`.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    tolerates_parts(toleration, &taint.key, &taint.value, &taint.effect)
}

/// [`tolerates`] for a taint given by its parts (a taint the scheduler implies, such as
/// a cordon, needs no `Taint` built).
pub fn tolerates_parts(toleration: &Toleration, key: &str, value: &str, effect: &str) -> bool {
    if !toleration.effect.is_empty() && toleration.effect != effect {
        return false;
    }
    if !toleration.key.is_empty() && toleration.key != key {
        return false;
    }
    // An empty key with Exists tolerates every taint; an empty key with Equal is invalid.
    if toleration.exists {
        return true;
    }
    !toleration.key.is_empty() && toleration.value == value
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventKind] {
        &[EventKind::NodeAdd, EventKind::NodeUpdate]
    }

    /// Retry when a node appears or loses a taint the pod does not tolerate.
    fn queueing_hint(
        &self,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        _: &ClusterState,
    ) -> QueueingHint {
        node_now_passes(change, |node| tolerates_node(pod, node))
    }
}

/// Whether the pod tolerates every NoSchedule and NoExecute taint of the node.
pub fn tolerates_node(pod: &PodInfo, node: &NodeInfo) -> bool {
    node.taints.iter().all(|taint| {
        !(taint.effect == "NoSchedule" || taint.effect == "NoExecute")
            || pod.tolerations.iter().any(|t| tolerates(t, taint))
    })
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, ctx: &CycleContext<'_>, _: &CycleState, node: &NodeInfo) -> Status {
        if tolerates_node(ctx.pod, node) {
            Status::success()
        } else {
            Status::unresolvable(REASON)
        }
    }
}

impl ScorePlugin for TaintToleration {
    fn pre_score(&self, _: &CycleContext<'_>, _: &mut CycleState, nodes: &[&NodeInfo]) -> Status {
        if nodes
            .iter()
            .all(|n| n.taints.iter().all(|t| t.effect != "PreferNoSchedule"))
        {
            Status::skip()
        } else {
            Status::success()
        }
    }

    /// The number of PreferNoSchedule taints not tolerated (by tolerations for that effect
    /// or for every effect).
    fn score(&self, ctx: &CycleContext<'_>, _: &CycleState, node: &NodeInfo) -> i64 {
        let count = node
            .taints
            .iter()
            .filter(|taint| taint.effect == "PreferNoSchedule")
            .filter(|taint| {
                !ctx.pod
                    .tolerations
                    .iter()
                    .filter(|t| t.effect.is_empty() || t.effect == "PreferNoSchedule")
                    .any(|t| tolerates(t, taint))
            })
            .count();
        i64::try_from(count).unwrap_or(i64::MAX)
    }

    fn normalize(&self, _: &CycleContext<'_>, _: &CycleState, scores: &mut [i64]) {
        default_normalize(scores, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        framework::Code,
        model::{node::NodeBuilder, pod::PodBuilder},
        testing::Fixture,
    };

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
        }
    }

    fn tol(key: &str, exists: bool, value: &str, effect: &str) -> Toleration {
        Toleration {
            key: key.into(),
            exists,
            value: value.into(),
            effect: effect.into(),
        }
    }

    /// `ToleratesTaint` cases from k8s.io/api core/v1 toleration_test.go.
    #[test]
    fn toleration_matching() {
        let t = taint("foo", "bar", "NoSchedule");
        let cases = [
            (tol("foo", false, "bar", "NoSchedule"), true),
            (tol("foo", false, "baz", "NoSchedule"), false),
            (tol("foo", true, "", "NoSchedule"), true),
            (tol("foo", true, "", ""), true),
            (tol("foo", true, "", "NoExecute"), false),
            (tol("", true, "", ""), true),
            (tol("", false, "bar", ""), false),
            (tol("other", true, "", ""), false),
            (tol("foo", false, "bar", ""), true),
        ];
        for (toleration, want) in cases {
            assert_eq!(tolerates(&toleration, &t), want, "{toleration:?}");
        }
    }

    #[test]
    fn filter_honours_no_schedule_and_no_execute_only() {
        let plain = Fixture::new(PodBuilder::new("ns", "p").info());
        let ctx = plain.ctx();
        let state = CycleState::new();
        for (effect, want) in [
            ("NoSchedule", Code::UnschedulableAndUnresolvable),
            ("NoExecute", Code::UnschedulableAndUnresolvable),
            ("PreferNoSchedule", Code::Success),
        ] {
            let node = NodeBuilder::new("n", "amd64")
                .taint("k", "v", effect)
                .info();
            assert_eq!(
                TaintToleration.filter(&ctx, &state, &node).code,
                want,
                "{effect}"
            );
        }
        let tolerant = Fixture::new(
            PodBuilder::new("ns", "p")
                .toleration("k", "Equal", "v", "")
                .info(),
        );
        let node = NodeBuilder::new("n", "amd64")
            .taint("k", "v", "NoExecute")
            .info();
        assert!(
            TaintToleration
                .filter(&tolerant.ctx(), &state, &node)
                .is_success()
        );
    }

    #[test]
    fn score_prefers_fewer_intolerable_prefer_no_schedule_taints() {
        let fixture = Fixture::new(
            PodBuilder::new("ns", "p")
                .toleration("ok", "Exists", "", "PreferNoSchedule")
                .info(),
        );
        let ctx = fixture.ctx();
        let state = CycleState::new();
        let nodes = [
            NodeBuilder::new("clean", "amd64").info(),
            NodeBuilder::new("one", "amd64")
                .taint("a", "", "PreferNoSchedule")
                .info(),
            NodeBuilder::new("two", "amd64")
                .taint("a", "", "PreferNoSchedule")
                .taint("b", "", "PreferNoSchedule")
                .taint("ok", "", "PreferNoSchedule")
                .info(),
        ];
        let mut scores: Vec<i64> = nodes
            .iter()
            .map(|n| TaintToleration.score(&ctx, &state, n))
            .collect();
        assert_eq!(scores, [0, 1, 2]);
        TaintToleration.normalize(&ctx, &state, &mut scores);
        assert_eq!(scores, [100, 50, 0]);
    }
}
