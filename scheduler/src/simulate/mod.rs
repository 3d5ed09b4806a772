//! `multiarch simulate`: the real scheduler core on an in-memory mixed-architecture
//! cluster (embedded default or a scenario file).

mod controllers;
pub mod default_cluster;
pub mod report;
pub mod run;
pub mod scenario;

use std::collections::BTreeMap;

use report::{Counterfactual, SimulationReport, UnschedulableGroup};
use run::{Prepared, incompatible_placements, profiles};
use scenario::{Scenario, ScenarioError};

/// Runs the scenario (and its architecture-blind counterfactual) and reports.
pub fn simulate(scenario: &Scenario, seed: u64) -> Result<SimulationReport, ScenarioError> {
    let prepared = Prepared::new(scenario)?;
    let (profile, blind_profile) = profiles(&prepared);
    let result = run::run(&prepared, profile, seed);
    let peak_memory_bytes = report::peak_memory_bytes();
    let blind = run::run(&prepared, blind_profile, seed);

    let mut nodes_by_arch: BTreeMap<String, usize> = BTreeMap::new();
    for node in &prepared.nodes {
        *nodes_by_arch.entry(node.platform.to_string()).or_default() += 1;
    }
    let mut unschedulable: Vec<UnschedulableGroup> = result
        .unschedulable
        .iter()
        .map(|(reason, pods)| UnschedulableGroup {
            pods: *pods,
            reason: reason.clone(),
        })
        .collect();
    unschedulable.sort_by(|a, b| b.pods.cmp(&a.pods).then_with(|| a.reason.cmp(&b.reason)));

    Ok(SimulationReport {
        seed,
        nodes: prepared.nodes.len(),
        nodes_by_arch,
        pods: prepared.pods.len(),
        bound: result.bound(),
        bound_by_arch: result.bound_by_arch.clone(),
        unschedulable,
        cycles: result.cycle_times.len(),
        elapsed_seconds: result.elapsed.as_secs_f64(),
        pods_per_second: result.pods_per_second(),
        cycle_p50_micros: result.percentile(0.50).as_secs_f64() * 1e6,
        cycle_p99_micros: result.percentile(0.99).as_secs_f64() * 1e6,
        peak_memory_bytes,
        architecture_blind: Counterfactual {
            bound: blind.bound(),
            incompatible: incompatible_placements(&prepared, &blind),
        },
    })
}
