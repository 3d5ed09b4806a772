//! Twenty PodPlacementConfigs at the schema's limits in one namespace (1,000 rules of
//! 1,024 characters each, as a tenant could store them before the operator's webhook
//! ran) cost a component one config's compiled rules, not twenty: the namespace's rule
//! budget leaves the others uncompiled. And a change to one config compiles that one
//! again, not the others. This file is its own test binary, so the process's peak RSS is
//! this test's alone.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use multiarch_crd::{
    Architecture, ArchitectureRule, CelArchitecturePlacement, LocalPlugins, PodPlacementConfig,
    PodPlacementConfigSpec,
};
use multiarch_policy::{
    architecture_rules::{ArchitectureRules, RuleSubject},
    pod_configs::NamespacedConfigs,
    selectors::Labels,
};

/// The bound for the whole test process. Measured: 54 MiB (39 before compiling: the
/// configs themselves), one config compiled; compiled, a config costs about 20 MB
/// (measured in release: four of them, 79 MiB), so twenty would be over 400 MiB.
const PEAK_RSS_BOUND: u64 = 128 * 1024 * 1024;

fn maximal(name: &str, priority: u8, generation: u64) -> Arc<PodPlacementConfig> {
    let rules = (0..1000)
        .map(|i| ArchitectureRule {
            name: format!("r{i}"),
            expression: format!("self.metadata.name == '{:01000}'", i + generation * 1000),
            architectures: vec![Architecture::Arm64],
        })
        .collect();
    let mut config = PodPlacementConfig::new(
        name,
        PodPlacementConfigSpec {
            label_selector: None,
            plugins: LocalPlugins {
                node_affinity_scoring: None,
                cel_architecture_placement: Some(CelArchitecturePlacement {
                    enabled: true,
                    fallback_architectures: vec![Architecture::Amd64],
                    rules,
                }),
            },
            priority,
        },
    );
    config.metadata.namespace = Some("tenant".into());
    config.metadata.uid = Some(format!("uid-{name}"));
    config.metadata.generation = Some(i64::try_from(generation).unwrap() + 1);
    Arc::new(config)
}

fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[test]
fn twenty_maximal_configs_in_one_namespace_compile_one_and_an_edit_compiles_it_alone() {
    let mut configs: Vec<Arc<PodPlacementConfig>> =
        (0..20).map(|i| maximal(&format!("c{i}"), i, 0)).collect();
    assert!(serde_json::to_vec(&*configs[0]).unwrap().len() > 1_000_000);
    let before = peak_rss();
    let first = ArchitectureRules::compile(
        &NamespacedConfigs::new(configs.iter().cloned()),
        ArchitectureRules::none(),
    );
    // The highest priority wins: c19, compiled; its rules decide.
    let labels = Labels::new();
    let name = format!("{:01000}", 999);
    let subject = RuleSubject {
        name: &name,
        namespace: "tenant",
        labels: &labels,
        annotations: &labels,
    };
    let decision = first.decide(subject).unwrap();
    assert_eq!(decision.config, "c19");
    assert_eq!(decision.rule.as_deref(), Some("r999"));
    // An edit of the compiled one, ten times over: it alone is compiled again, the
    // snapshot before it dropped each time.
    let mut rules = first;
    for generation in 1..=10 {
        configs[19] = maximal("c19", 19, generation);
        rules =
            ArchitectureRules::compile(&NamespacedConfigs::new(configs.iter().cloned()), &rules);
    }
    let name = format!("{:01000}", 10_999);
    let subject = RuleSubject {
        name: &name,
        namespace: "tenant",
        labels: &labels,
        annotations: &labels,
    };
    assert_eq!(rules.decide(subject).unwrap().rule.as_deref(), Some("r999"));
    let peak = peak_rss();
    println!(
        "twenty maximal configs in one namespace, one edited ten times: peak RSS {} MiB (before: {} MiB)",
        peak / 1024 / 1024,
        before / 1024 / 1024
    );
    assert!(
        peak < PEAK_RSS_BOUND,
        "peak RSS {} MiB over the {} MiB bound",
        peak / 1024 / 1024,
        PEAK_RSS_BOUND / 1024 / 1024
    );
}
