//! A `celArchitecturePlacement` decision in the core: it replaces the images' platforms,
//! never waits for them, is named in the messages, and is flagged when it sends the pod
//! where its images have no build.

use std::{collections::HashMap, time::Instant};

use multiarch_crd::{
    Architecture, ArchitectureRule, CelArchitecturePlacement, LocalPlugins, PodPlacementConfig,
    PodPlacementConfigSpec,
};
use multiarch_plugins::model::{node::NodeBuilder, pod::PodBuilder};
use multiarch_policy::platform::Platform;

use super::*;
use multiarch_policy::pod_images::ContainerImage;

use crate::engine::image_source::{CatalogImages, ImageLookup, ImageSource};

const SCHED: &str = "multiarch-scheduler";

fn rules_config() -> PodPlacementConfig {
    let rule = |name: &str, expression: &str, arch: Architecture| ArchitectureRule {
        name: name.into(),
        expression: expression.into(),
        architectures: vec![arch],
    };
    let mut config = PodPlacementConfig::new(
        "tiers",
        PodPlacementConfigSpec {
            label_selector: None,
            plugins: LocalPlugins {
                node_affinity_scoring: None,
                cel_architecture_placement: Some(CelArchitecturePlacement {
                    enabled: true,
                    fallback_architectures: vec![Architecture::Amd64],
                    rules: vec![
                        rule(
                            "arm",
                            "self.metadata.labels['tier'] == 'arm'",
                            Architecture::Arm64,
                        ),
                        rule(
                            "mainframe",
                            "self.metadata.annotations['licence'] == 'z'",
                            Architecture::S390x,
                        ),
                    ],
                }),
            },
            priority: 1,
        },
    );
    config.metadata.namespace = Some("ns".into());
    config
}

fn core() -> SchedulerCore {
    let configs = multiarch_policy::pod_configs::NamespacedConfigs::owned([rules_config()]);
    let inputs = PlacementInputs::new(None, configs, None, &Default::default());
    let mut core = SchedulerCore::new(Profile::default(), inputs, 1);
    let now = Instant::now();
    for (name, arch) in [("amd", "amd64"), ("arm", "arm64")] {
        core.apply_node(
            NodeBuilder::new(name, arch)
                .capacity("2", "4Gi", 110)
                .info(),
            now,
        );
    }
    core
}

/// Images nobody has inspected yet: a pod the rules do not decide would wait.
struct NothingKnownYet;

impl ImageSource for NothingKnownYet {
    fn lookup(&self, _: &PodInfo, _: &ContainerImage) -> ImageLookup {
        ImageLookup::Pending
    }
}

fn amd_only_images() -> CatalogImages {
    CatalogImages {
        images: HashMap::from([("amd:1".to_owned(), vec![Platform::linux("amd64")].into())]),
    }
}

#[test]
fn a_rule_places_the_pod_without_waiting_for_its_images() {
    let mut core = core();
    let now = Instant::now();
    let pod = PodBuilder::new("ns", "web")
        .scheduler(SCHED)
        .label("tier", "arm")
        .container("c", "unknown:1", "1", "100Mi")
        .info();
    core.apply_pod(pod, now);
    match core.schedule_next(&NothingKnownYet, now) {
        Some(Outcome::Scheduled {
            node,
            message,
            architecture_rule,
            rule_override,
            ..
        }) => {
            assert_eq!(node, "arm");
            assert_eq!(
                message,
                "Successfully assigned ns/web to arm (arm64); architectures arm64 from rule \"arm\" of PodPlacementConfig tiers"
            );
            assert_eq!(
                architecture_rule.map(|r| r.source()).as_deref(),
                Some("PodPlacementConfig-tiers/arm")
            );
            // Nothing known about the images: nothing to warn about.
            assert_eq!(rule_override, None);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_rule_against_the_images_is_obeyed_and_flagged() {
    let mut core = core();
    let now = Instant::now();
    core.apply_pod(
        PodBuilder::new("ns", "web")
            .scheduler(SCHED)
            .label("tier", "arm")
            .container("c", "amd:1", "1", "100Mi")
            .info(),
        now,
    );
    match core.schedule_next(&amd_only_images(), now) {
        Some(Outcome::Scheduled {
            node,
            rule_override,
            ..
        }) => {
            assert_eq!(node, "arm");
            assert_eq!(
                rule_override.map(|o| o.message).as_deref(),
                Some(
                    "rule \"arm\" of PodPlacementConfig tiers places the pod on arm64, where its images have no build (images support amd64); the rule is obeyed"
                )
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn no_node_of_the_rules_architecture_names_the_rule() {
    let mut core = core();
    let now = Instant::now();
    core.apply_pod(
        PodBuilder::new("ns", "ibm")
            .scheduler(SCHED)
            .annotation("licence", "z")
            .container("c", "amd:1", "1", "100Mi")
            .info(),
        now,
    );
    match core.schedule_next(&amd_only_images(), now) {
        Some(Outcome::Failed {
            message,
            architecture_rule,
            ..
        }) => {
            assert!(
                message.starts_with(
                    "0/2 nodes are available: 2 node(s) didn't match the architectures of rule \"mainframe\" of PodPlacementConfig tiers (s390x)."
                ),
                "{message}"
            );
            assert_eq!(
                architecture_rule.and_then(|r| r.rule).as_deref(),
                Some("mainframe")
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn no_matching_rule_means_the_fallback_and_other_namespaces_keep_their_images() {
    let mut core = core();
    let now = Instant::now();
    core.apply_pod(
        PodBuilder::new("ns", "plain")
            .scheduler(SCHED)
            .container("c", "unknown:1", "1", "100Mi")
            .info(),
        now,
    );
    match core.schedule_next(&NothingKnownYet, now) {
        Some(Outcome::Scheduled {
            node,
            architecture_rule,
            ..
        }) => {
            assert_eq!(node, "amd");
            let rule = architecture_rule.expect("the fallback decided");
            assert_eq!(rule.rule, None);
            // Both rules index a key the pod does not have: errors, not matches.
            let failed: Vec<&str> = rule.errors.iter().map(|(r, _)| r.as_str()).collect();
            assert_eq!(failed, ["arm", "mainframe"]);
        }
        other => panic!("{other:?}"),
    }
    core.apply_pod(
        PodBuilder::new("elsewhere", "p")
            .scheduler(SCHED)
            .label("tier", "arm")
            .container("c", "unknown:1", "1", "100Mi")
            .info(),
        now,
    );
    assert!(matches!(
        core.schedule_next(&NothingKnownYet, now),
        Some(Outcome::WaitingForImages { .. })
    ));
}
