//! Node status churn while pods wait: the embedded default cluster (5,000 nodes, 10,000 pods)
//! scheduled quietly, then with every node updating its status 10 times a minute, with the
//! plugins' queueing hints and without them (every update moves every waiting pod back to
//! the queue, as a scheduler without hints does). Prints the median pods/s of each, the
//! retries the hints saved, and the slowdown against the quiet run.
//! Run: `cargo bench -p multiarch-benches --bench node_heartbeats` (about a minute).
//!
//! Updates arrive at a rate per second of the run's own wall-clock time, so a faster
//! scheduler sees fewer of them per pod: the churn is what a real cluster of that size
//! produces while this run lasts.

use multiarch_scheduler::simulate::{
    default_cluster,
    run::{Prepared, RunOptions, RunResult, profiles, run_with},
};

const SEED: u64 = 42;

struct Case {
    name: &'static str,
    options: RunOptions,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: keep it short then.
    let quick = !std::env::args().any(|a| a == "--bench");
    let (nodes, pods, rounds) = if quick {
        (200, 400, 1)
    } else {
        (5_000, 10_000, 5)
    };
    let scenario = default_cluster::scenario(nodes, pods, SEED).expect("the embedded catalog");
    let prepared = Prepared::new(&scenario).expect("the embedded scenario");
    let cases = [
        Case {
            name: "quiet",
            options: RunOptions::default(),
        },
        Case {
            name: "10 updates/node/min, queueing hints",
            options: RunOptions {
                node_updates_per_minute: 10,
                no_queueing_hints: false,
                quality_sample: 0,
                keep_placements: false,
            },
        },
        Case {
            name: "10 updates/node/min, no hints",
            options: RunOptions {
                node_updates_per_minute: 10,
                no_queueing_hints: true,
                quality_sample: 0,
                keep_placements: false,
            },
        },
    ];
    println!("node_heartbeats: {nodes} nodes, {pods} pods, median of {rounds} runs");
    let mut medians = Vec::new();
    for case in &cases {
        let runs: Vec<RunResult> = (0..rounds)
            .map(|_| run_with(prepared.clone(), profiles(&prepared).0, SEED, case.options))
            .collect();
        let bound = median(runs.iter().map(|r| r.bound as f64).collect());
        let pods_per_second = median(runs.iter().map(RunResult::pods_per_second).collect());
        let attempts = median(runs.iter().map(|r| r.attempts as f64).collect());
        let updates = median(runs.iter().map(|r| r.node_updates as f64).collect());
        let requeued = median(runs.iter().map(|r| r.requeued as f64).collect());
        let left_waiting = median(runs.iter().map(|r| r.left_waiting as f64).collect());
        println!(
            "  {:<38} {pods_per_second:>9.0} pods/s  {bound:.0} bound  {attempts:.0} attempts  \
             {updates:.0} node updates  {requeued:.0} requeued  {left_waiting:.0} left waiting",
            case.name
        );
        medians.push(pods_per_second);
    }
    println!(
        "  with hints: {:.1}% of the quiet rate; without: {:.1}%",
        100.0 * medians[1] / medians[0],
        100.0 * medians[2] / medians[0]
    );
}
