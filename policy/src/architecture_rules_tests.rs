use std::collections::BTreeSet;

use multiarch_crd::cel::pod_rule::MapReads;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use multiarch_crd::{
    Architecture, ArchitectureRule, CelArchitecturePlacement, LocalPlugins, NodeAffinityScoring,
    PlatformWeight, PodPlacementConfigSpec,
};

use super::*;
use crate::pod_configs::NamespacedConfigs;

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

fn index(configs: &[PodPlacementConfig]) -> NamespacedConfigs {
    NamespacedConfigs::owned(configs.iter().cloned())
}

fn decide(configs: &[PodPlacementConfig], pod: &Pod) -> Option<ArchitectureDecision> {
    ArchitectureRules::compile(&index(configs), &ArchitectureRules::default()).decide(pod.subject())
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
    let rules = ArchitectureRules::compile(&index(&configs), &ArchitectureRules::default());
    assert!(rules.decide(elsewhere.subject()).is_none());
    assert!(!rules.governs_namespace("other"));
    assert!(rules.governs_namespace("shop"));
    let none = ArchitectureRules::compile(
        &index(&[config("plain", 1, None, None)]),
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
    let first = ArchitectureRules::compile(&index(&configs), &ArchitectureRules::default());
    let same = ArchitectureRules::compile(&index(&configs), &first);
    assert!(Arc::ptr_eq(
        &first.namespaces["shop"][0],
        &same.namespaces["shop"][0]
    ));
    let mut changed = configs.clone();
    if let Some(p) = changed[0].spec.plugins.cel_architecture_placement.as_mut() {
        p.rules[0].architectures = vec![S390x];
    }
    let recompiled = ArchitectureRules::compile(&index(&changed), &same);
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

/// `count` rules of `bytes` each (`self.metadata.name == 'nnnn...'`).
fn sized_rules(count: usize, bytes: usize) -> Vec<ArchitectureRule> {
    (0..count)
        .map(|i| {
            let name = format!("{i:0width$}", width = bytes - 24);
            rule(
                &format!("r{i}"),
                &format!("self.metadata.name == '{name}'"),
                &[Arm64],
            )
        })
        .collect()
}

#[test]
fn configs_beyond_the_rule_budgets_are_not_compiled_and_their_fallback_decides() {
    assert_eq!(sized_rules(1, 1024)[0].expression.len(), 1024);
    // One config at the schema's limits fits a namespace; a second, of lower priority,
    // does not; a third namespace's fits, up to the cluster's budget.
    let full = || placement(sized_rules(1000, 1024), &[S390x]);
    let mut configs = vec![
        config("first", 9, None, Some(full())),
        config("second", 1, Some("db"), Some(full())),
    ];
    let mut bank = config("bank", 1, None, Some(full()));
    bank.metadata.namespace = Some("bank".into());
    configs.push(bank);
    let rules = ArchitectureRules::compile(&index(&configs), &ArchitectureRules::default());
    let compiled = |namespace: &str, i: usize| {
        rules.namespaces[namespace][i]
            .placement
            .as_ref()
            .unwrap()
            .compiled
    };
    assert!(compiled("bank", 0), "namespaces in name order: bank first");
    assert!(compiled("shop", 0));
    assert!(!compiled("shop", 1), "over the namespace's budget");
    let db = pod("pg-0", &[("app", "db")]);
    let mut decision = ArchitectureRules::compile(&index(&configs[1..2]), &rules)
        .decide(db.subject())
        .expect("decides");
    assert!(decision.errors.is_empty(), "alone it fits: {decision:?}");
    // Beside the first (which wins for pods it selects) it is over the budget: its
    // rules never match, and say why.
    let mut first_off = configs.clone();
    first_off[0].spec.label_selector = Some(meta::LabelSelector {
        match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
        match_expressions: None,
    });
    decision = ArchitectureRules::compile(&index(&first_off), &rules)
        .decide(db.subject())
        .expect("decides");
    assert_eq!(decision.config, "second");
    assert_eq!(decision.rule, None);
    assert_eq!(decision.architectures, ["s390x"]);
    assert_eq!(decision.errors.len(), 1000);
    assert!(
        decision.errors[0]
            .1
            .contains("namespace shop's configs hold more than the 1000 rules"),
        "{:?}",
        decision.errors[0]
    );
    // The cluster's budget: three namespaces of 1 MiB of expressions each.
    let mut third = config("third", 1, None, Some(full()));
    third.metadata.namespace = Some("zoo".into());
    configs.push(third);
    let rules = ArchitectureRules::compile(&index(&configs), &rules);
    let zoo = rules.namespaces["zoo"][0].placement.as_ref().unwrap();
    assert!(!zoo.compiled);
    assert!(
        zoo.rules[0]
            .program
            .as_ref()
            .err()
            .is_some_and(|e| e.contains("the cluster's configs hold more than")),
        "over the cluster's budget"
    );
}

#[test]
fn an_unchanged_config_is_recognised_by_its_copy_or_generation() {
    let mut tiers = config("tiers", 1, None, Some(tiers()));
    tiers.metadata.generation = Some(3);
    let shared = Arc::new(tiers.clone());
    let first = ArchitectureRules::compile(
        &NamespacedConfigs::new([shared.clone()]),
        &ArchitectureRules::default(),
    );
    let again = ArchitectureRules::compile(&NamespacedConfigs::new([shared]), &first);
    assert!(Arc::ptr_eq(
        &first.namespaces["shop"][0],
        &again.namespaces["shop"][0]
    ));
    // A new copy (a relist) at the same generation is the same config.
    let relisted = ArchitectureRules::compile(&NamespacedConfigs::owned([tiers.clone()]), &again);
    assert!(Arc::ptr_eq(
        &again.namespaces["shop"][0],
        &relisted.namespaces["shop"][0]
    ));
    // Another object of the same name (deleted and created again) is compiled anew.
    tiers.metadata.uid = Some("uid-new".into());
    let recreated = ArchitectureRules::compile(&NamespacedConfigs::owned([tiers]), &relisted);
    assert!(!Arc::ptr_eq(
        &relisted.namespaces["shop"][0],
        &recreated.namespaces["shop"][0]
    ));
}

#[test]
fn cached_decisions_are_keyed_by_every_field_the_rules_read() {
    let rules = ArchitectureRules::compile(
        &index(&[config("tiers", 1, None, Some(tiers()))]),
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
        &index(&[config("labels", 1, None, Some(placement_of_labels()))]),
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

#[test]
fn patterns_are_constants_compiled_with_the_rules() {
    let rules = placement(
        vec![
            // Stored past the operator's check: the pattern is the pod's own label.
            rule(
                "computed",
                "self.metadata.name.matches(self.metadata.labels['p'])",
                &[S390x],
            ),
            rule(
                "databases",
                "self.metadata.name.matches('^pg-[0-9]+$')",
                &[Ppc64le],
            ),
        ],
        &[Amd64],
    );
    let configs = [config("c", 1, None, Some(rules))];
    let compiled = ArchitectureRules::compile(&index(&configs), &ArchitectureRules::default());
    let placement = compiled.namespaces["shop"][0].placement.as_ref().unwrap();
    assert_eq!(
        placement.patterns.len(),
        1,
        "one constant pattern, compiled once"
    );
    // A hostile pattern in the pod's label is never compiled: the rule never matches.
    let decision = compiled
        .decide(pod("pg-7", &[("p", "(a{1000}){1000}")]).subject())
        .expect("decides");
    assert_eq!(decision.rule.as_deref(), Some("databases"));
    assert_eq!(decision.errors.len(), 1);
    assert!(
        decision.errors[0].1.contains("must be a string constant"),
        "{:?}",
        decision.errors
    );
    let decision = compiled
        .decide(pod("web-1", &[("p", ".*")]).subject())
        .expect("decides");
    assert_eq!(decision.rule, None, "the fallback");
    // Evaluated with no compiled pattern at hand, `matches()` fails rather than compile.
    let programs = &compiled.namespaces["shop"][0]
        .placement
        .as_ref()
        .unwrap()
        .rules;
    let program = programs[1].program.as_ref().unwrap();
    let outcome = FUNCTIONS.with(|functions| {
        let mut scope = functions.new_inner_scope();
        let labels = Labels::new();
        let subject = RuleSubject {
            name: "pg-1",
            namespace: "shop",
            labels: &labels,
            annotations: &labels,
        };
        scope.add_variable_from_value("self", subject_value(subject));
        program.execute(&scope)
    });
    assert!(
        outcome
            .as_ref()
            .is_err_and(|e| e.to_string().contains("was not compiled with the rules")),
        "{outcome:?}"
    );
}
