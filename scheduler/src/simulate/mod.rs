//! `multiarch simulate`: the real scheduler core on an in-memory mixed-architecture
//! cluster (embedded default or a scenario file).

mod controllers;
pub mod default_cluster;
pub mod report;
pub mod run;
pub mod scenario;

use std::collections::BTreeMap;

use report::{Counterfactual, SimulationReport, UnschedulableGroup};
pub use run::RunOptions;
use run::{Prepared, profiles};
use scenario::{Scenario, ScenarioError};

/// Runs the scenario (and its architecture-blind counterfactual) and reports.
pub fn simulate(scenario: &Scenario, seed: u64) -> Result<SimulationReport, ScenarioError> {
    simulate_with(&|| Ok(scenario.clone()), seed, RunOptions::default())
}

/// [`simulate`] with options, on the scenario `scenario` builds. It is built once per
/// run and dropped once the run's objects are prepared, so that it is not held while the
/// scheduler works (the default cluster's description of 130,000 nodes and 260,000 pods
/// is about 50 MB).
pub fn simulate_with(
    scenario: &dyn Fn() -> Result<Scenario, ScenarioError>,
    seed: u64,
    options: RunOptions,
) -> Result<SimulationReport, ScenarioError> {
    let prepared = Prepared::new(&scenario()?)?;
    let (profile, blind_profile) = profiles(&prepared);
    let mut nodes_by_arch: BTreeMap<String, usize> = BTreeMap::new();
    for node in &prepared.nodes {
        *nodes_by_arch.entry(node.platform.to_string()).or_default() += 1;
    }
    let (nodes, pods) = (prepared.nodes.len(), prepared.pods.len());
    // Each run takes its objects over; the blind run gets its own, prepared afresh once
    // the first run's are gone, so the peak is one run's.
    let result = run::run_with(prepared, profile, seed, options);
    let peak_memory_bytes = report::peak_memory_bytes();
    let blind = run::run(Prepared::new(&scenario()?)?, blind_profile, seed);

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
        nodes,
        nodes_by_arch,
        pods,
        bound: result.bound,
        bound_by_arch: result.bound_by_arch.clone(),
        unschedulable,
        cycles: result.cycle_times.len(),
        elapsed_seconds: result.elapsed.as_secs_f64(),
        pods_per_second: result.pods_per_second(),
        cycle_p50_micros: result.percentile(0.50).as_secs_f64() * 1e6,
        cycle_p99_micros: result.percentile(0.99).as_secs_f64() * 1e6,
        peak_memory_bytes,
        huge_pages_bytes: result.huge_pages_bytes,
        glibc_tunables: std::env::var("GLIBC_TUNABLES").ok(),
        preemptions: result.preemptions,
        evicted: result.victims,
        volumes_bound: result.volumes_bound,
        volumes_provisioned: result.volumes_provisioned,
        attempts: result.attempts,
        node_updates: result.node_updates,
        requeued: result.requeued,
        left_waiting: result.left_waiting,
        queueing_hints: !options.no_queueing_hints,
        placement_digest: result.placement_digest.clone(),
        placement_quality: result.quality.as_ref().map(report::PlacementQuality::of),
        architecture_blind: Counterfactual {
            bound: blind.bound,
            incompatible: blind.incompatible,
            below_level: blind.below_level,
        },
    })
}
