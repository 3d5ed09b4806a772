//! `NodeResourcesBalancedAllocation`: prefers nodes whose cpu and memory use stay close
//! after placing the pod.

use crate::{
    events::EventKind,
    framework::{CycleContext, CycleState, MAX_NODE_SCORE, Plugin, ScorePlugin},
    model::node::NodeInfo,
};

pub const NAME: &str = "NodeResourcesBalancedAllocation";

pub struct BalancedAllocation;

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Scores only: it never rejects a pod.
    fn events(&self) -> &'static [EventKind] {
        &[]
    }
}

fn fraction(requested: i64, allocatable: i64) -> f64 {
    if allocatable <= 0 {
        return 1.0;
    }
    #[allow(clippy::cast_precision_loss)] // resource amounts are far below 2^52
    let f = requested as f64 / allocatable as f64;
    f.min(1.0)
}

impl ScorePlugin for BalancedAllocation {
    /// `(1 - std) * 100` of the cpu and memory fractions; with two resources the standard
    /// deviation is half their difference.
    fn score(&self, ctx: &CycleContext<'_>, _: &CycleState, node: &NodeInfo) -> i64 {
        let cpu = fraction(
            node.non_zero_requested.milli_cpu + ctx.pod.non_zero.milli_cpu,
            node.allocatable.milli_cpu,
        );
        let memory = fraction(
            node.non_zero_requested.memory + ctx.pod.non_zero.memory,
            node.allocatable.memory,
        );
        let std = (cpu - memory).abs() / 2.0;
        #[allow(clippy::cast_possible_truncation)] // 0..=100
        let score = ((1.0 - std) * MAX_NODE_SCORE as f64) as i64;
        score
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
    fn balanced_nodes_score_higher() {
        let fixture = Fixture::new(
            PodBuilder::new("ns", "p")
                .container("c", "i", "1", "1Gi")
                .info(),
        );
        let ctx = fixture.ctx();
        let state = CycleState::new();
        // 4 cpu / 4Gi: the pod alone uses 25% of each.
        let even = NodeBuilder::new("even", "amd64")
            .capacity("4", "4Gi", 110)
            .info();
        assert_eq!(BalancedAllocation.score(&ctx, &state, &even), 100);
        // Already 75% cpu used, memory free: cpu 100% vs memory 25%.
        let mut skewed = NodeBuilder::new("skewed", "amd64")
            .capacity("4", "4Gi", 110)
            .info();
        skewed.add_pod(Arc::new(
            PodBuilder::new("ns", "x")
                .node("skewed")
                .container("c", "i", "3", "0")
                .info(),
        ));
        assert_eq!(BalancedAllocation.score(&ctx, &state, &skewed), 62);
    }
}
