//! DefaultPreemption, kube-scheduler's PostFilter: when no node fits, find the node where
//! evicting the fewest, least important lower-priority pods makes room, honouring
//! PodDisruptionBudgets; nominate the pod there. Only nodes whose rejection removing pods
//! can fix (`Unschedulable`) are candidates: an architecture mismatch, a taint or a node
//! too small never is. Pure: the runtime evicts.

mod victims;

use std::sync::Arc;

use multiarch_plugins::model::{disruption_budget::DisruptionBudget, pod::PodInfo};
use rand::{Rng, rngs::SmallRng};

use super::{cycle::Cycle, diagnosis::Diagnosis};
use victims::{NodeVictims, select_victims};

/// kube-scheduler's `minCandidateNodesPercentage` and `minCandidateNodesAbsolute`.
const MIN_CANDIDATE_NODES_PERCENTAGE: usize = 10;
const MIN_CANDIDATE_NODES_ABSOLUTE: usize = 100;

pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";
pub const NEVER: &str = "not eligible due to preemptionPolicy=Never.";
pub const TERMINATING: &str = "not eligible due to a terminating pod on the nominated node.";

/// What preemption decided for a pod.
#[derive(Clone, Debug)]
pub enum PreemptionResult {
    /// Room is made on `node` once `victims` are gone; `displaced` are pods of lower
    /// priority that were nominated there and lose their nomination.
    Nominated {
        node: String,
        victims: Vec<Arc<PodInfo>>,
        displaced: Vec<Arc<PodInfo>>,
    },
    /// Preemption cannot help: what kube-scheduler says after "preemption: ". `clear`:
    /// the pod's earlier nomination no longer holds.
    NotPossible { message: String, clear: bool },
}

/// `(numCandidates, offset)`: how many candidates to look for and where to start.
fn candidate_window(potential: usize, rng: &mut SmallRng) -> (usize, usize) {
    let wanted = (potential * MIN_CANDIDATE_NODES_PERCENTAGE / 100)
        .max(MIN_CANDIDATE_NODES_ABSOLUTE)
        .min(potential);
    (wanted, rng.random_range(0..potential))
}

/// `PodEligibleToPreemptOthers`.
fn ineligible(
    cycle: &Cycle<'_>,
    diagnosis: &Diagnosis,
    nominated: Option<&str>,
) -> Option<&'static str> {
    let pod = cycle.ctx.pod;
    if pod.preemption_never {
        return Some(NEVER);
    }
    let cluster = cycle.ctx.cluster;
    let index = nominated.and_then(|n| cluster.node_index(n))?;
    // A nominated node the filters now reject for good: look for another.
    if !diagnosis.preemption_candidates.contains(&index) {
        return None;
    }
    let terminating = cluster.nodes()[index]
        .pods
        .iter()
        .any(|p| p.deleting && p.priority < pod.priority);
    terminating.then_some(TERMINATING)
}

/// Runs DefaultPreemption after `diagnosis` found no node for the cycle's pod.
pub fn preempt(
    cycle: &Cycle<'_>,
    diagnosis: &Diagnosis,
    nominated: Option<&str>,
    rng: &mut SmallRng,
) -> PreemptionResult {
    if let Some(why) = ineligible(cycle, diagnosis, nominated) {
        return PreemptionResult::NotPossible {
            message: why.to_owned(),
            clear: false,
        };
    }
    let cluster = cycle.ctx.cluster;
    let pod = cycle.ctx.pod;
    let potential = &diagnosis.preemption_candidates;
    let mut failures = Diagnosis {
        num_nodes: cluster.nodes().len(),
        ..Diagnosis::default()
    };
    let mut found: Vec<NodeVictims> = Vec::new();
    if !potential.is_empty() {
        let budgets: Vec<&DisruptionBudget> = cluster.disruption_budgets().collect();
        let (wanted, offset) = candidate_window(potential.len(), rng);
        let mut without_violations = 0;
        for i in 0..potential.len() {
            let node = potential[(offset + i) % potential.len()];
            match select_victims(cycle, node, &budgets) {
                Ok(victims) => {
                    if victims.pdb_violations == 0 {
                        without_violations += 1;
                    }
                    found.push(victims);
                    if without_violations > 0 && found.len() >= wanted {
                        break;
                    }
                }
                Err(status) => {
                    for reason in &status.reasons {
                        *failures
                            .reasons
                            .entry(reason.as_str().to_owned())
                            .or_default() += 1;
                    }
                }
            }
        }
    }
    if found.is_empty() {
        // Every candidate was tried and has its reason; the other nodes were never
        // candidates.
        let absent = failures.num_nodes.saturating_sub(potential.len());
        if absent > 0 {
            *failures.reasons.entry(NOT_HELPFUL.to_owned()).or_default() += absent;
        }
        return PreemptionResult::NotPossible {
            message: failures.fit_message(),
            clear: nominated.is_some(),
        };
    }
    let best = pick_one(found);
    let node = &cluster.nodes()[best.node];
    let displaced = cycle
        .ctx
        .nominated
        .on_node(&node.name)
        .iter()
        .filter(|p| p.uid != pod.uid && p.priority < pod.priority)
        .cloned()
        .collect();
    PreemptionResult::Nominated {
        node: node.name.clone(),
        victims: best.victims,
        displaced,
    }
}

/// `pickOneNodeForPreemption`: fewest budget violations, then the lowest highest victim
/// priority, the lowest priority sum, the fewest victims, the latest start among the most
/// important victims; the first of the remaining ties (candidates come in a random order).
fn pick_one(mut candidates: Vec<NodeVictims>) -> NodeVictims {
    let scores: [fn(&NodeVictims) -> i64; 5] = [
        |c| -i64::try_from(c.pdb_violations).unwrap_or(i64::MAX),
        |c| -i64::from(c.victims.first().map_or(i32::MIN, |v| v.priority)),
        |c| {
            -c.victims
                .iter()
                .map(|v| i64::from(v.priority) + i64::from(i32::MAX) + 1)
                .sum::<i64>()
        },
        |c| -i64::try_from(c.victims.len()).unwrap_or(i64::MAX),
        |c| c.earliest_start_of_most_important(),
    ];
    for score in scores {
        if candidates.len() == 1 {
            break;
        }
        let best = candidates.iter().map(score).max().unwrap_or(i64::MIN);
        candidates.retain(|c| score(c) == best);
    }
    candidates.swap_remove(0)
}

#[cfg(test)]
mod tests;
