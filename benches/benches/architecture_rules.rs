//! `celArchitecturePlacement`: one pod's evaluation against 1,000 rules (matching the
//! last one, and matching none: the fallback), and the scheduler's pods per second at
//! 5,000 nodes with the pods' namespace governed by ten rules (none matching, so every
//! rule runs and the fallback decides the same architectures the images have) against
//! the same pods without rules: pods of one workload and pods with a label of their own
//! the rules do not read (their decision cached after the first), and pods that differ
//! in the label the rules read (evaluated each time).
//! Run: `cargo bench -p multiarch-benches --bench architecture_rules`.

use std::{collections::HashMap, hint::black_box, time::Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use multiarch_benches::{basic_pod, cluster};
use multiarch_crd::PodPlacementConfig;
use multiarch_plugins::profile::Profile;
use multiarch_policy::architecture_rules::{ArchitectureRules, RuleSubject};
use multiarch_policy::platform::Platform;
use multiarch_policy::pod_configs::NamespacedConfigs;
use multiarch_policy::selectors::Labels;
use multiarch_scheduler::engine::outcome::Outcome;
use multiarch_scheduler::engine::placement_inputs::PlacementInputs;
use multiarch_scheduler::engine::{image_source::CatalogImages, scheduler::SchedulerCore};
use serde_json::json;

/// A config of `count` rules on the `n` label, the last matching an `n` that starts
/// with `last`.
fn config(count: usize) -> PodPlacementConfig {
    let rules: Vec<_> = (0..count)
        .map(|i| {
            let test = if i + 1 == count {
                "self.metadata.labels['n'].startsWith('last')".to_owned()
            } else {
                format!("self.metadata.labels['n'] == '{i}'")
            };
            let architecture = ["amd64", "arm64"][i % 2];
            json!({"name": format!("r{i}"),
                "expression": format!("'n' in self.metadata.labels && {test}"),
                "architectures": [architecture]})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig",
        "metadata": {"name": "tiers", "namespace": "bench"},
        "spec": {"plugins": {"celArchitecturePlacement": {"enabled": true,
            "fallbackArchitectures": ["amd64", "arm64"], "rules": rules}}}
    }))
    .unwrap_or_else(|e| panic!("the bench's config: {e}"))
}

fn evaluation(c: &mut Criterion) {
    let rules = ArchitectureRules::compile(
        &NamespacedConfigs::owned([config(1000)]),
        ArchitectureRules::none(),
    );
    let annotations = Labels::from([("team".to_owned(), "payments".to_owned())]);
    let mut group = c.benchmark_group("rules_1000");
    for (case, n) in [("last_matches", "last"), ("none_match", "other")] {
        let mut labels = Labels::from([("app".to_owned(), "web".to_owned())]);
        let mut pod = 0u64;
        group.bench_function(case, |b| {
            b.iter(|| {
                // A value of the label the rules read that no other pod has: evaluated,
                // never a cached decision.
                pod += 1;
                labels.insert("n".to_owned(), format!("{n}-{pod}"));
                black_box(rules.decide(RuleSubject {
                    name: "web-7d9f-x2x",
                    namespace: "bench",
                    labels: &labels,
                    annotations: &annotations,
                }))
            });
        });
    }
    group.finish();
}

fn scheduler(c: &mut Criterion) {
    let nodes = 5000;
    let state = cluster(nodes, 1000);
    let images = CatalogImages {
        images: HashMap::from([(
            "registry.k8s.io/pause:3.10".to_owned(),
            vec![Platform::linux("amd64"), Platform::linux("arm64")].into(),
        )]),
    };
    let mut group = c.benchmark_group("scheduler_5000_nodes");
    group.throughput(Throughput::Elements(1));
    // Pods of one workload (the same labels: the rules run once), pods with a label of
    // their own the rules do not look up (a StatefulSet's: still once), and pods that
    // differ in the label the rules look up (the rules run for each).
    for (case, configs, own) in [
        ("without_rules", vec![], None),
        ("ten_rules", vec![config(10)], None),
        (
            "ten_rules_own_label_not_read",
            vec![config(10)],
            Some("pod"),
        ),
        ("ten_rules_read_label_differs", vec![config(10)], Some("n")),
    ] {
        let configs = NamespacedConfigs::owned(configs);
        let inputs = PlacementInputs::new(None, configs, None, ArchitectureRules::none());
        let mut core = SchedulerCore::new(Profile::default(), inputs, 1);
        core.cluster = state.clone();
        let mut next = 0u64;
        group.bench_with_input(BenchmarkId::new(case, nodes), &nodes, |b, _| {
            b.iter(|| {
                next += 1;
                let now = Instant::now();
                let mut pod = basic_pod(&format!("p{next}")).scheduler("multiarch-scheduler");
                if let Some(label) = own {
                    pod = pod.label(label, &format!("x{next}"));
                }
                let pod = pod.info();
                core.apply_pod(pod, now);
                let outcome = core.schedule_next(&images, now);
                let Some(Outcome::Scheduled { pod, .. }) = outcome else {
                    panic!("not scheduled: {outcome:?}");
                };
                // Gone again, so every iteration sees the same cluster.
                core.delete_pod(&pod.uid, now);
            });
        });
    }
    group.finish();
}

criterion_group!(benches, evaluation, scheduler);
criterion_main!(benches);
