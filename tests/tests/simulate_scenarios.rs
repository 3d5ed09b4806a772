//! `simulate` scenarios with asserted placements: the real core on known clusters.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::HashMap;

use multiarch_scheduler::simulate::{
    RunOptions,
    run::{Prepared, RunResult, profiles, run, run_with},
    scenario::Scenario,
    simulate,
};
use multiarch_tests::fixture;

fn load(name: &str) -> Scenario {
    let text = std::fs::read_to_string(fixture(&format!("scenarios/{name}"))).unwrap();
    Scenario::from_yaml(&text).unwrap()
}

/// pod name → node name.
fn placements(prepared: &Prepared, seed: u64) -> (HashMap<String, String>, Vec<(String, usize)>) {
    let result = run_keeping_placements(prepared, seed);
    let by_name = prepared
        .pods
        .iter()
        .filter_map(|p| {
            result
                .placements
                .get(&p.uid)
                .map(|n| (p.name.clone(), n.clone()))
        })
        .collect();
    (by_name, result.unschedulable.into_iter().collect())
}

/// The architecture-aware profile's run, its placements kept.
fn run_keeping_placements(prepared: &Prepared, seed: u64) -> RunResult {
    let (profile, _) = profiles(prepared);
    let options = RunOptions {
        keep_placements: true,
        ..RunOptions::default()
    };
    let result = run_with(prepared.clone(), profile, seed, options);
    assert_eq!(result.placements.len(), result.bound);
    result
}

#[test]
fn no_pod_ever_lands_on_an_incompatible_node() {
    let prepared = Prepared::new(&load("mixed-small.yaml")).unwrap();
    for seed in 0..20 {
        let (placed, _) = placements(&prepared, seed);
        for (pod, node) in &placed {
            let ok = match pod.split('-').next().unwrap() {
                "legacy" => node.starts_with("amd"),
                "edge" | "too" => node.starts_with("arm"),
                "meshed" => node.starts_with("amd") || node.starts_with("arm"),
                other => panic!("{other} should not be placed ({pod} on {node})"),
            };
            assert!(ok, "seed {seed}: {pod} on {node}");
        }
        assert_eq!(placed.len(), 4 + 3 + 4, "seed {seed}: {placed:?}");
    }
}

#[test]
fn every_unplaced_pod_has_the_right_reason() {
    let prepared = Prepared::new(&load("mixed-small.yaml")).unwrap();
    let (_, unschedulable) = placements(&prepared, 1);
    let reasons: Vec<&str> = unschedulable.iter().map(|(r, _)| r.as_str()).collect();
    assert!(
        reasons.contains(
            &"0/6 nodes are available: the pod's images have no architecture in common: \
          job (z-only:1) supports s390x; proxy (sidecar:1) supports amd64, arm64. not found"
        ),
        "{reasons:#?}"
    );
    assert!(
        reasons.contains(
            &"0/6 nodes are available: 2 Insufficient cpu, 4 node(s) didn't match the pod's image \
          architectures (images support arm64). no new claims to deallocate, preemption: 0/6 \
          nodes are available: 6 Preemption is not helpful for scheduling."
        ),
        "{reasons:#?}"
    );
    // An arm/v7 image does not run on the arm/v6 node, which is told apart.
    assert!(
        reasons.contains(
            &"0/6 nodes are available: 1 node(s) are below arm/v7 needed by image arm32:1, \
          5 node(s) didn't match the pod's image architectures (images support arm/v7). no \
          new claims to deallocate, preemption: 0/6 nodes are available: 6 Preemption is \
          not helpful for scheduling."
        ),
        "{reasons:#?}"
    );
    assert!(
        reasons.iter().any(|r| r.starts_with("0/6 nodes are available: cannot read the platforms of the pod's images (image not-in-catalog:1:")),
        "{reasons:#?}"
    );
    assert_eq!(unschedulable.iter().map(|(_, n)| n).sum::<usize>(), 4);
}

#[test]
fn the_blind_counterfactual_counts_what_would_break() {
    let prepared = Prepared::new(&load("mixed-small.yaml")).unwrap();
    let (_, blind_profile) = profiles(&prepared);
    let (profile, _) = profiles(&prepared);
    let blind = run(prepared.clone(), blind_profile, 3);
    // Blind, the no-common-architecture and arm/v7 pods get placed too.
    assert!(blind.bound > 11, "{}", blind.bound);
    assert!(blind.incompatible > 0);
    let aware = run(prepared, profile, 3);
    assert_eq!(aware.incompatible, 0);
}

#[test]
fn x86_64_levels_place_each_image_on_a_cpu_that_runs_it() {
    let prepared = Prepared::new(&load("x86-64-levels.yaml")).unwrap();
    for seed in 0..10 {
        let (placed, unschedulable) = placements(&prepared, seed);
        for (pod, node) in &placed {
            let ok = match pod.split('-').next().unwrap() {
                "rhel10" => node.starts_with("v3") || node.starts_with("arm"),
                "rhel9" => !node.starts_with("old"),
                "plain" => !node.starts_with("arm"),
                other => panic!("{other} should not be placed ({pod} on {node})"),
            };
            assert!(ok, "seed {seed}: {pod} on {node}");
        }
        assert_eq!(placed.len(), 18, "seed {seed}: {placed:?}");
        // No node of x86-64-v4: the AVX-512 build waits, saying why for each node.
        assert_eq!(
            unschedulable,
            vec![(
                "0/7 nodes are available: 1 node(s) didn't match the pod's image architectures \
                 (images support amd64/v4), 6 node(s) are below x86-64-v4 needed by image \
                 v4-only:1. no new claims to deallocate, preemption: 0/7 nodes are available: \
                 7 Preemption is not helpful for scheduling."
                    .to_owned(),
                1
            )],
            "seed {seed}"
        );
    }
    // Blind to levels (and architectures), pods land on CPUs that cannot run them.
    let (_, blind_profile) = profiles(&prepared);
    let blind = run(prepared.clone(), blind_profile, 3);
    assert!(blind.incompatible > 0, "{}", blind.incompatible);
    let (profile, _) = profiles(&prepared);
    assert_eq!(run(prepared, profile, 3).incompatible, 0);
}

#[test]
fn namespace_preferences_win_over_cluster_preferences() {
    let prepared = Prepared::new(&load("preferences.yaml")).unwrap();
    let (placed, unschedulable) = placements(&prepared, 5);
    assert!(unschedulable.is_empty(), "{unschedulable:?}");
    for (pod, node) in &placed {
        if pod.starts_with("web") {
            assert!(
                node.starts_with('z'),
                "{pod} on {node}: the PodPlacementConfig prefers s390x"
            );
        } else {
            assert!(
                node.starts_with("arm"),
                "{pod} on {node}: the cluster prefers arm64"
            );
        }
    }
}

#[test]
fn hard_spread_and_anti_affinity_are_honoured() {
    let prepared = Prepared::new(&load("spread-and-affinity.yaml")).unwrap();
    let (placed, unschedulable) = placements(&prepared, 11);
    let zone = |node: &str| node.chars().next().unwrap();
    let spread_a = placed
        .iter()
        .filter(|(p, n)| p.starts_with("spread") && zone(n) == 'a')
        .count();
    let spread_b = placed
        .iter()
        .filter(|(p, n)| p.starts_with("spread") && zone(n) == 'b')
        .count();
    assert_eq!((spread_a, spread_b), (3, 3));
    // Four hosts: the fifth "solo" pod has nowhere to go.
    let mut solo_hosts: Vec<&String> = placed
        .iter()
        .filter(|(p, _)| p.starts_with("solo"))
        .map(|(_, n)| n)
        .collect();
    solo_hosts.sort();
    solo_hosts.dedup();
    assert_eq!(solo_hosts.len(), 4);
    assert_eq!(
        unschedulable,
        [(
            "0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules. no new \
           claims to deallocate, preemption: 0/4 nodes are available: 4 No preemption victims \
           found for incoming pod."
                .to_owned(),
            1
        )]
    );
}

#[test]
fn the_embedded_default_runs_and_reports() {
    // A seed whose 100 drawn groups include the critical wave that preempts.
    let scenario = multiarch_scheduler::simulate::default_cluster::scenario(200, 1000, 1).unwrap();
    let report = simulate(&scenario, 1).unwrap();
    assert_eq!(report.nodes, 200);
    assert_eq!(report.pods, 1000);
    let pending: usize = report.unschedulable.iter().map(|g| g.pods).sum();
    // Preemption victims are gone from the cluster (their controllers would recreate them).
    assert_eq!(report.bound + pending + report.evicted, 1000);
    assert_eq!(
        report.evicted, report.preemptions,
        "one low-priority victim each"
    );
    assert!(report.preemptions > 0, "the critical wave preempts");
    assert!(report.volumes_bound > 0 && report.volumes_provisioned > 0);
    assert!(report.bound > 900, "{}", report.bound);
    // The catalog's cobol-batch workload has no common architecture.
    assert!(
        report
            .unschedulable
            .iter()
            .any(|g| g.reason.contains("no architecture in common"))
    );
    assert!(report.architecture_blind.incompatible > 0);
    assert!(report.pods_per_second > 0.0);
    assert!(report.cycle_p99_micros >= report.cycle_p50_micros);
}

#[test]
fn volumes_pin_provision_and_priorities_preempt() {
    let prepared = Prepared::new(&load("volumes-and-priorities.yaml")).unwrap();
    let result = run_keeping_placements(&prepared, 9);
    let node_of = |name: &str| {
        let pod = prepared.pods.iter().find(|p| p.name == name).unwrap();
        result.placements.get(&pod.uid).cloned()
    };
    // One local volume on each of nvme-0 and nvme-1: two replicas get one each, the third
    // has no volume left (arm has no local disk).
    let mut db_nodes: Vec<String> = ["db-0", "db-1", "db-2"]
        .iter()
        .filter_map(|n| node_of(n))
        .collect();
    db_nodes.sort();
    assert_eq!(db_nodes, ["nvme-0", "nvme-1"]);
    assert_eq!(result.volumes_bound, 2);
    // The CSI class provisions one volume per cache pod, wherever it lands.
    assert!(node_of("cache-0").is_some() && node_of("cache-1").is_some());
    assert_eq!(result.volumes_provisioned, 2);
    // The critical pod of the second wave evicts one nightly job on the full ppc64le node;
    // the pod whose class says `preemptionPolicy: Never` waits.
    assert_eq!(node_of("settlement").as_deref(), Some("power"));
    assert_eq!((result.preemptions, result.victims), (1, 1));
    // The victim is a nightly job, gone from the placements (every other one stays).
    let nightly_gone = prepared
        .pods
        .iter()
        .filter(|p| p.name.starts_with("nightly") && !result.placements.contains_key(&p.uid))
        .count();
    assert_eq!(nightly_gone, 1);
    assert_eq!(node_of("report"), None);
    let reasons: Vec<(&str, usize)> = result
        .unschedulable
        .iter()
        .map(|(r, n)| (r.as_str(), *n))
        .collect();
    assert_eq!(
        reasons,
        [
            (
                "0/6 nodes are available: 1 Insufficient cpu, 5 node(s) didn't match the pod's \
                 image architectures (images support ppc64le). no new claims to deallocate, \
                 preemption: not eligible due to preemptionPolicy=Never.",
                1
            ),
            (
                "0/6 nodes are available: 3 node(s) didn't find available persistent volumes \
                 to bind, 3 node(s) didn't match the pod's image architectures (images support \
                 arm64). no new claims to deallocate, preemption: 0/6 nodes are available: 6 \
                 Preemption is not helpful for scheduling.",
                1
            ),
        ]
    );
}

/// docs/performance.md's SchedulingBasic figure comes from this file: it must stay valid.
#[test]
fn the_scheduling_basic_benchmark_scenario_loads() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../benches/scenarios/scheduling-basic.yaml");
    let scenario = Scenario::from_yaml(&std::fs::read_to_string(path).unwrap()).unwrap();
    let prepared = Prepared::new(&scenario).unwrap();
    assert_eq!((prepared.nodes.len(), prepared.pods.len()), (5000, 10000));
    assert!(prepared.pods.iter().all(|p| p.volumes.is_empty()));
    assert!(prepared.storage.is_empty());
}

/// The default mix's gateway has required anti-affinity over every namespace (an empty
/// namespace selector): no two gateways share a node. Its namespaces carry the labels its
/// preferred affinity selects (`team: storefront`; how namespace selectors read them is
/// asserted by `namespace_selectors_select_by_the_namespaces_labels`).
#[test]
fn the_default_mix_holds_its_cross_namespace_anti_affinity() {
    let scenario = multiarch_scheduler::simulate::default_cluster::scenario(200, 3000, 1).unwrap();
    assert!(scenario.namespaces.iter().any(
        |n| n.name == "cache" && n.labels.get("team").map(String::as_str) == Some("storefront")
    ));
    let prepared = Prepared::new(&scenario).unwrap();
    let (placed, _) = placements(&prepared, 1);
    let mut gateway_nodes: Vec<&String> = placed
        .iter()
        .filter(|(pod, _)| pod.starts_with("storefront-gateway"))
        .map(|(_, node)| node)
        .collect();
    let gateways = gateway_nodes.len();
    assert!(gateways >= 10, "{gateways} gateways placed");
    gateway_nodes.sort();
    gateway_nodes.dedup();
    assert_eq!(gateway_nodes.len(), gateways, "two gateways share a node");
}

#[test]
fn namespace_selectors_select_by_the_namespaces_labels() {
    let prepared = Prepared::new(&load("namespace-selectors.yaml")).unwrap();
    for seed in 0..5 {
        let (placed, unschedulable) = placements(&prepared, seed);
        let zone_of = |pod: &str| placed[pod].chars().next().unwrap();
        assert_eq!((zone_of("db"), zone_of("decoy")), ('b', 'a'), "seed {seed}");
        for client in ["client-0", "client-1", "client-2"] {
            assert_eq!(zone_of(client), 'b', "seed {seed}: {client} on {placed:?}");
        }
        for auditor in ["auditor-0", "auditor-1"] {
            assert_eq!(
                zone_of(auditor),
                'a',
                "seed {seed}: {auditor} on {placed:?}"
            );
        }
        assert!(!placed.contains_key("hermit"), "seed {seed}: {placed:?}");
        assert_eq!(
            unschedulable,
            [(
                "0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules. no \
                 new claims to deallocate, preemption: 0/4 nodes are available: 4 No \
                 preemption victims found for incoming pod."
                    .to_owned(),
                1
            )],
            "seed {seed}"
        );
    }
}
