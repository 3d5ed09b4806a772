use std::collections::BTreeSet;

use multiarch_crd::cel::pod_rule::MapReads;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use multiarch_crd::{
    Architecture, ArchitectureRule, CelArchitecturePlacement, LocalPlugins, NodeAffinityScoring,
    PlatformWeight, PodPlacementConfigSpec,
};

use super::*;

fn rule(name: &str, expression: &str, architectures: &[Architecture]) -> ArchitectureRule {
    ArchitectureRule {
        name: name.into(),
        expression: expression.into(),
        architectures: architectures.to_vec(),
    }
}

fn placement(rules: Vec<ArchitectureRule>, fallback: &[Architecture]) -> CelArchitecturePlacement {
    CelArchitecturePlacement {
        enabled: true,
        fallback_architectures: fallback.to_vec(),
        rules,
    }
}

fn config(
    name: &str,
    priority: u8,
    app: Option<&str>,
    rules: Option<CelArchitecturePlacement>,
) -> PodPlacementConfig {
    let mut config = PodPlacementConfig::new(
        name,
        PodPlacementConfigSpec {
            label_selector: app.map(|a| meta::LabelSelector {
                match_labels: Some([("app".to_owned(), a.to_owned())].into()),
                match_expressions: None,
            }),
            plugins: LocalPlugins {
                node_affinity_scoring: Some(NodeAffinityScoring {
                    enabled: true,
                    platforms: vec![PlatformWeight {
                        architecture: Architecture::Arm64,
                        weight: 10,
                    }],
                }),
                cel_architecture_placement: rules,
            },
            priority,
        },
    );
    config.metadata.namespace = Some("shop".into());
    config.metadata.uid = Some(format!("uid-{name}"));
    config
}

struct Pod {
    name: &'static str,
    namespace: &'static str,
    labels: Labels,
    annotations: Labels,
}

fn pod(name: &'static str, labels: &[(&str, &str)]) -> Pod {
    Pod {
        name,
        namespace: "shop",
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        annotations: Labels::new(),
    }
}

impl Pod {
    fn subject(&self) -> RuleSubject<'_> {
        RuleSubject {
            name: self.name,
            namespace: self.namespace,
            labels: &self.labels,
            annotations: &self.annotations,
        }
    }
}

fn decide(configs: &[PodPlacementConfig], pod: &Pod) -> Option<ArchitectureDecision> {
    ArchitectureRules::compile(configs, &ArchitectureRules::default()).decide(pod.subject())
}

use Architecture::{Amd64, Arm64, Ppc64le, S390x};

fn tiers() -> CelArchitecturePlacement {
    placement(
        vec![
            rule(
                "db",
                "'tier' in self.metadata.labels && self.metadata.labels['tier'] == 'db'",
                &[Ppc64le],
            ),
            rule(
                "redis",
                "self.metadata.name.startsWith('redis-')",
                &[Amd64, Arm64],
            ),
            rule(
                "operands",
                "self.metadata.annotations['operator'] == 'x'",
                &[S390x],
            ),
        ],
        &[Amd64],
    )
}

#[test]
fn the_first_matching_rule_decides_and_none_means_the_fallback() {
    let configs = [config("tiers", 1, None, Some(tiers()))];
    let cases: [(Pod, Option<&str>, &[&str]); 4] = [
        (pod("pg-0", &[("tier", "db")]), Some("db"), &["ppc64le"]),
        // Both `db` and `redis` match: the first in order decides.
        (pod("redis-0", &[("tier", "db")]), Some("db"), &["ppc64le"]),
        (pod("redis-0", &[]), Some("redis"), &["amd64", "arm64"]),
        (pod("web-0", &[("tier", "web")]), None, &["amd64"]),
    ];
    for (pod, rule, architectures) in cases {
        let decision = decide(&configs, &pod).expect("the config decides");
        assert_eq!(decision.config, "tiers");
        assert_eq!(decision.rule.as_deref(), rule, "{}", pod.name);
        assert_eq!(decision.architectures, architectures, "{}", pod.name);
    }
}

#[test]
fn a_rule_that_cannot_be_evaluated_does_not_match_and_is_reported() {
    // No `operator` annotation: indexing it is an error, not a match.
    let configs = [config("tiers", 1, None, Some(tiers()))];
    let decision = decide(&configs, &pod("web-0", &[])).expect("decides");
    assert_eq!(decision.rule, None);
    assert_eq!(decision.errors.len(), 1, "{:?}", decision.errors);
    assert_eq!(decision.errors[0].0, "operands");
    let mut annotated = pod("web-0", &[]);
    annotated.annotations.insert("operator".into(), "x".into());
    let decision = decide(&configs, &annotated).expect("decides");
    assert_eq!(decision.rule.as_deref(), Some("operands"));
    assert!(decision.errors.is_empty());
}

#[test]
fn one_winner_by_priority_then_name_and_rules_are_never_merged() {
    let arm = placement(vec![rule("all", "true", &[Arm64])], &[Arm64]);
    let s390 = placement(vec![rule("none", "false", &[S390x])], &[S390x]);
    // (configs, the winner and its first architecture)
    type Case = (
        Vec<PodPlacementConfig>,
        Option<(&'static str, &'static str)>,
    );
    let cases: [Case; 5] = [
        // Higher priority wins, even with no rule matching (its fallback decides).
        (
            vec![
                config("low", 1, None, Some(arm.clone())),
                config("high", 9, None, Some(s390.clone())),
            ],
            Some(("high", "s390x")),
        ),
        // Equal priorities: the name first in byte order.
        (
            vec![
                config("b", 5, None, Some(s390.clone())),
                config("a", 5, None, Some(arm.clone())),
            ],
            Some(("a", "arm64")),
        ),
        // The winner does not enable the plugin: images decide, never the lower config.
        (
            vec![
                config("low", 1, None, Some(arm.clone())),
                config("high", 9, None, None),
            ],
            None,
        ),
        // The winner disables it: the same.
        (
            vec![
                config("low", 1, None, Some(arm.clone())),
                config(
                    "high",
                    9,
                    None,
                    Some(CelArchitecturePlacement {
                        enabled: false,
                        ..s390.clone()
                    }),
                ),
            ],
            None,
        ),
        // A config that does not select the pod takes no part.
        (
            vec![
                config("low", 1, None, Some(arm.clone())),
                config("high", 9, Some("db"), Some(s390.clone())),
            ],
            Some(("low", "arm64")),
        ),
    ];
    for (configs, want) in cases {
        let got = decide(&configs, &pod("web-0", &[("app", "web")]));
        assert_eq!(
            got.as_ref()
                .map(|d| (d.config.as_str(), d.architectures[0].as_str())),
            want,
            "{:?}",
            configs
                .iter()
                .map(|c| c.metadata.name.clone())
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn other_namespaces_are_not_governed() {
    let configs = [config("tiers", 1, None, Some(tiers()))];
    let mut elsewhere = pod("pg-0", &[("tier", "db")]);
    elsewhere.namespace = "other";
    let rules = ArchitectureRules::compile(&configs, &ArchitectureRules::default());
    assert!(rules.decide(elsewhere.subject()).is_none());
    assert!(!rules.governs_namespace("other"));
    assert!(rules.governs_namespace("shop"));
    let none = ArchitectureRules::compile(
        &[config("plain", 1, None, None)],
        &ArchitectureRules::default(),
    );
    assert!(none.is_empty());
}

#[test]
fn a_thousand_rules_are_evaluated_in_order() {
    let rules: Vec<ArchitectureRule> = (0..1000)
        .map(|i| {
            rule(
                &format!("r{i}"),
                &format!("self.metadata.labels['n'] == '{i}'"),
                &[if i % 2 == 0 { Amd64 } else { Arm64 }],
            )
        })
        .collect();
    let configs = [config("many", 1, None, Some(placement(rules, &[S390x])))];
    let decision = decide(&configs, &pod("p", &[("n", "999")])).expect("decides");
    assert_eq!(decision.rule.as_deref(), Some("r999"));
    assert_eq!(decision.architectures, ["arm64"]);
    let decision = decide(&configs, &pod("p", &[("n", "x")])).expect("decides");
    assert_eq!(decision.rule, None);
    assert_eq!(decision.architectures, ["s390x"]);
}

#[test]
fn programs_are_compiled_once_per_spec() {
    let configs = vec![config("tiers", 1, None, Some(tiers()))];
    let first = ArchitectureRules::compile(&configs, &ArchitectureRules::default());
    let same = ArchitectureRules::compile(&configs, &first);
    assert!(Arc::ptr_eq(
        &first.namespaces["shop"][0],
        &same.namespaces["shop"][0]
    ));
    let mut changed = configs.clone();
    if let Some(p) = changed[0].spec.plugins.cel_architecture_placement.as_mut() {
        p.rules[0].architectures = vec![S390x];
    }
    let recompiled = ArchitectureRules::compile(&changed, &same);
    assert!(!Arc::ptr_eq(
        &same.namespaces["shop"][0],
        &recompiled.namespaces["shop"][0]
    ));
    let decision = recompiled
        .decide(pod("pg-0", &[("tier", "db")]).subject())
        .expect("decides");
    assert_eq!(decision.architectures, ["s390x"]);
}

#[test]
fn a_stored_rule_that_fails_the_checks_never_matches() {
    // Stored without the operator's webhook: does not parse, reads the spec, returns a
    // string, costs more than one evaluation may.
    let broken = placement(
        vec![
            rule("syntax", "self.metadata.name ==", &[S390x]),
            rule("spec", "self.spec.nodeName == ''", &[S390x]),
            rule("string", "self.metadata.name", &[S390x]),
            rule(
                "costly",
                "self.metadata.annotations.exists(k, self.metadata.annotations[k].matches('x.*y'))",
                &[S390x],
            ),
            rule("rest", "true", &[Arm64]),
        ],
        &[Amd64],
    );
    let decision = decide(&[config("c", 1, None, Some(broken))], &pod("p", &[])).expect("decides");
    assert_eq!(decision.rule.as_deref(), Some("rest"));
    let failed: Vec<&str> = decision.errors.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(failed, ["syntax", "spec", "string", "costly"]);
    assert!(decision.errors[1].1.contains("may read only self.metadata"));
}

#[test]
fn the_decision_names_its_source() {
    let configs = [config("tiers", 1, None, Some(tiers()))];
    let by_rule = decide(&configs, &pod("pg-0", &[("tier", "db")])).expect("decides");
    assert_eq!(by_rule.source(), "PodPlacementConfig-tiers/db");
    assert_eq!(
        by_rule.describe(),
        "rule \"db\" of PodPlacementConfig tiers"
    );
    let fallback = decide(&configs, &pod("web-0", &[])).expect("decides");
    assert_eq!(fallback.source(), "PodPlacementConfig-tiers/fallback");
    assert_eq!(
        fallback.describe(),
        "the fallback of PodPlacementConfig tiers"
    );
}

#[test]
fn a_namespace_refreshed_alone_keeps_the_others_and_its_programs() {
    let mut other = config("other", 1, None, Some(tiers()));
    other.metadata.namespace = Some("bank".into());
    let shop = config("tiers", 1, None, Some(tiers()));
    let mut cache = ArchitectureRules::default();
    cache.refresh_namespace("bank", std::slice::from_ref(&other));
    let first = cache.refresh_namespace("shop", std::slice::from_ref(&shop));
    assert!(cache.governs_namespace("bank") && cache.governs_namespace("shop"));
    assert!(!first.governs_namespace("bank"));
    let again = cache.refresh_namespace("shop", std::slice::from_ref(&shop));
    assert!(Arc::ptr_eq(
        &first.namespaces["shop"][0],
        &again.namespaces["shop"][0]
    ));
    // The config went: the namespace leaves the cache.
    assert!(cache.refresh_namespace("shop", &[]).is_empty());
    assert!(!cache.governs_namespace("shop") && cache.governs_namespace("bank"));
}

#[test]
fn cached_decisions_are_keyed_by_every_field_the_rules_read() {
    let rules = ArchitectureRules::compile(
        &[config("tiers", 1, None, Some(tiers()))],
        &ArchitectureRules::default(),
    );
    let placement = rules.namespaces["shop"][0].placement.as_ref().unwrap();
    let reads = placement
        .reads
        .as_ref()
        .expect("every rule reads the metadata only");
    assert!(reads.name);
    assert_eq!(
        reads.labels,
        Some(MapReads::Keys(BTreeSet::from(["tier".to_owned()])))
    );
    assert_eq!(
        reads.annotations,
        Some(MapReads::Keys(BTreeSet::from(["operator".to_owned()])))
    );
    // The same pods again and again, in an order that would expose a key missing a field.
    let mut annotated = pod("web-1", &[]);
    annotated.annotations.insert("operator".into(), "x".into());
    let cases = [
        (pod("redis-0", &[]), Some("redis")),
        (pod("web-0", &[]), None),
        (pod("redis-1", &[("tier", "db")]), Some("db")),
        (annotated, Some("operands")),
        (pod("web-1", &[]), None),
    ];
    for _ in 0..3 {
        for (pod, want) in &cases {
            let decision = rules.decide(pod.subject()).expect("decides");
            assert_eq!(decision.rule.as_deref(), *want, "{}", pod.name);
        }
    }
    assert_eq!(placement.cache().len(), cases.len());
    // A rule that reads only labels: one evaluation for every pod of a workload.
    let by_label = ArchitectureRules::compile(
        &[config("labels", 1, None, Some(placement_of_labels()))],
        &ArchitectureRules::default(),
    );
    for i in 0..50 {
        let name = format!("web-{i}");
        // A label of its own (a StatefulSet pod's name) the rule does not look up.
        let labels = Labels::from([
            ("app".to_owned(), "web".to_owned()),
            (
                "statefulset.kubernetes.io/pod-name".to_owned(),
                name.clone(),
            ),
        ]);
        let decision = by_label
            .decide(RuleSubject {
                name: &name,
                namespace: "shop",
                labels: &labels,
                annotations: &Labels::new(),
            })
            .expect("decides");
        assert_eq!(decision.rule.as_deref(), Some("web"));
    }
    let cache = by_label.namespaces["shop"][0]
        .placement
        .as_ref()
        .unwrap()
        .cache()
        .len();
    assert_eq!(cache, 1);
}

fn placement_of_labels() -> CelArchitecturePlacement {
    placement(
        vec![rule(
            "web",
            "self.metadata.labels['app'] == 'web'",
            &[Arm64],
        )],
        &[Amd64],
    )
}
