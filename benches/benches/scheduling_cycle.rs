//! One scheduling cycle (PreFilter → Filter → Score → pick) at 500 and 5,000 nodes, on a
//! SchedulingBasic pod and on a pod with topology spread and anti-affinity (also among
//! 20 pods of other workloads per node).
//! Run: `cargo bench -p multiarch-benches --bench scheduling_cycle`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use multiarch_benches::{basic, cluster, spread_and_anti_affinity, with_other_pods};
use multiarch_plugins::profile::Profile;
use multiarch_scheduler::engine::cycle::{Rotation, run};
use rand::{SeedableRng, rngs::SmallRng};

fn cycles(c: &mut Criterion) {
    let profile = Profile::default();
    let mut group = c.benchmark_group("cycle");
    for nodes in [500usize, 5000] {
        // As scheduler_perf: 1,000 pods already bound before measuring.
        let state = cluster(nodes, 1000);
        let busy = with_other_pods(state.clone(), 20);
        let workloads = [
            ("SchedulingBasic", basic(state.clone())),
            ("SpreadAndAntiAffinity", spread_and_anti_affinity(state)),
            // The same among 20 pods of other workloads per node: what the constraints'
            // selectors do not select should cost nothing.
            ("SpreadAndAntiAffinityBusy", spread_and_anti_affinity(busy)),
        ];
        for (name, fixture) in workloads {
            let ctx = fixture.ctx();
            let mut rotation = Rotation::default();
            let mut rng = SmallRng::seed_from_u64(1);
            group.bench_with_input(BenchmarkId::new(name, nodes), &nodes, |b, _| {
                b.iter(|| black_box(run(&profile, &ctx, &mut rotation, &mut rng).is_ok()));
            });
        }
    }
    group.finish();
}

criterion_group!(benches, cycles);
criterion_main!(benches);
