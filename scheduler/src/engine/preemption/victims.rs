//! `SelectVictimsOnNode`: remove every lower-priority pod; if the pod fits then, put back
//! (reprieve) as many as possible, most important first, those a budget protects before
//! the others.

use std::{cmp::Reverse, sync::Arc};

use multiarch_plugins::{
    framework::Status,
    model::{
        disruption_budget::{DisruptionBudget, split_by_violation},
        pod::PodInfo,
    },
};

use super::{super::cycle::Cycle, NO_VICTIMS};

/// The pods evicting which makes room on one node.
#[derive(Clone, Debug)]
pub struct NodeVictims {
    pub node: usize,
    /// Most important first.
    pub victims: Vec<Arc<PodInfo>>,
    pub pdb_violations: usize,
}

impl NodeVictims {
    /// `GetEarliestPodStartTime` over the highest-priority victims (a pod that has not
    /// started counts as starting now).
    pub fn earliest_start_of_most_important(&self) -> i64 {
        let top = self.victims.first().map_or(i32::MIN, |v| v.priority);
        self.victims
            .iter()
            .filter(|v| v.priority == top)
            .map(|v| v.start_time.unwrap_or(i64::MAX))
            .min()
            .unwrap_or(i64::MIN)
    }
}

/// `MoreImportantPod`: higher priority, then the earlier start.
fn importance(pod: &PodInfo) -> (Reverse<i32>, i64) {
    (Reverse(pod.priority), pod.start_time.unwrap_or(i64::MAX))
}

pub fn select_victims(
    cycle: &Cycle<'_>,
    node_index: usize,
    budgets: &[&DisruptionBudget],
) -> Result<NodeVictims, Status> {
    let pod = cycle.ctx.pod;
    let original = &cycle.ctx.cluster.nodes()[node_index];
    let mut node = original.clone();
    let mut state = cycle.state.clone();
    let mut potential: Vec<Arc<PodInfo>> = original
        .pods
        .iter()
        .filter(|p| p.priority < pod.priority)
        .cloned()
        .collect();
    if potential.is_empty() {
        return Err(Status::unresolvable(NO_VICTIMS));
    }
    for victim in &potential {
        cycle.remove_pod(&mut state, &mut node, victim);
    }
    if let Some(status) = cycle.filter_with_nominated(&state, &node) {
        return Err(status);
    }
    potential.sort_by_key(|p| importance(p));
    let (violating, not_violating) = split_by_violation(&potential, budgets);
    let mut victims: Vec<Arc<PodInfo>> = Vec::new();
    let mut pdb_violations = 0;
    let mut reprieve = |candidate: &Arc<PodInfo>| -> bool {
        cycle.add_pod(&mut state, &mut node, candidate);
        if cycle.filter_with_nominated(&state, &node).is_some() {
            cycle.remove_pod(&mut state, &mut node, candidate);
            victims.push(candidate.clone());
            return false;
        }
        true
    };
    for candidate in &violating {
        if !reprieve(candidate) {
            pdb_violations += 1;
        }
    }
    for candidate in &not_violating {
        reprieve(candidate);
    }
    if !violating.is_empty() && !not_violating.is_empty() {
        victims.sort_by_key(|p| importance(p));
    }
    if victims.is_empty() {
        return Err(Status::error(format!(
            "expected at least one victim pod on node {}",
            original.name
        )));
    }
    Ok(NodeVictims {
        node: node_index,
        victims,
        pdb_violations,
    })
}
