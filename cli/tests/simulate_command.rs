//! `multiarch simulate` as a user runs it.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{path::PathBuf, process::Command};

fn fixture(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(relative)
}

fn multiarch(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn json_output_is_machine_readable() {
    let out = multiarch(&[
        "simulate", "--nodes", "120", "--pods", "300", "--seed", "7", "-o", "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["nodes"], 120);
    assert_eq!(report["pods"], 300);
    // The amd64 nodes at three x86-64 levels.
    let amd64: Vec<u64> = ["amd64/v2", "amd64/v3", "amd64/v4"]
        .iter()
        .map(|level| report["nodesByArch"][level].as_u64().unwrap())
        .collect();
    assert_eq!(amd64.iter().sum::<u64>(), 72, "{}", report["nodesByArch"]);
    assert!(amd64.iter().all(|n| *n > 0));
    assert!(report["boundByArch"].as_object().unwrap().len() >= 2);
    let blind = &report["architectureBlind"];
    assert!(blind["incompatible"].as_u64().unwrap() > 0);
    // RHEL 10's v3 builds on v2 nodes, among them (this seed draws that workload).
    let below = blind["belowLevel"].as_u64().unwrap();
    assert!(
        below > 0 && below < blind["incompatible"].as_u64().unwrap(),
        "{blind}"
    );
}

#[test]
fn text_output_names_every_section() {
    let scenario = fixture("scenarios/mixed-small.yaml");
    let out = multiarch(&["simulate", "--scenario", scenario.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for section in [
        "Bound pods by node architecture (11 of 15)",
        "Unschedulable pods (4), by reason:",
        "Throughput:",
        "Cycle time: p50",
        "Peak memory:",
        "Placement digest:",
        "Architecture-blind scheduler",
    ] {
        assert!(text.contains(section), "missing {section:?} in\n{text}");
    }
}

#[test]
fn a_bad_scenario_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("multiarch-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "nodes:\n  - {name: n, arch: amd64, cpu: lots, memory: 1Gi}\n",
    )
    .unwrap();
    let out = multiarch(&["simulate", "--scenario", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("node group \"n\": invalid quantity \"lots\""),
        "{stderr}"
    );

    let out = multiarch(&["simulate", "--scenario", "/nonexistent/scenario.yaml"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .starts_with("error: cannot read scenario /nonexistent/scenario.yaml")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_placement_digest_identifies_the_placements_of_a_seed() {
    let digest = |seed: &str| {
        let out = multiarch(&[
            "simulate", "--nodes", "120", "--pods", "300", "--seed", seed, "-o", "json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        report["placementDigest"].as_str().unwrap().to_owned()
    };
    let first = digest("7");
    assert_eq!(first.len(), 16, "{first}");
    assert!(first.bytes().all(|b| b.is_ascii_hexdigit()), "{first}");
    assert_eq!(digest("7"), first, "the same seed places every pod alike");
    assert_ne!(digest("8"), first, "another seed generates another cluster");
}

fn report(args: &[&str]) -> serde_json::Value {
    let out = multiarch(&[&["simulate", "-o", "json"], args].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_quality_audit_compares_each_sampled_choice_with_every_feasible_node() {
    let base = ["--nodes", "300", "--pods", "600", "--seed", "3"];
    // Scoring every node, each choice is a best one; the audit moves no pod.
    let full = report(
        &[
            &base[..],
            &[
                "--percentage-of-nodes-to-score",
                "100",
                "--quality-sample",
                "1",
            ],
        ]
        .concat(),
    );
    let quality = &full["placementQuality"];
    assert!(quality["sampled"].as_u64().unwrap() > 100, "{quality}");
    assert_eq!(quality["bestShare"], 1.0, "{quality}");
    assert_eq!(quality["ratioP1"], 1.0, "{quality}");
    let unaudited = report(&[&base[..], &["--percentage-of-nodes-to-score", "100"]].concat());
    assert_eq!(unaudited["placementDigest"], full["placementDigest"]);
    assert!(unaudited.get("placementQuality").is_none());

    // One node in three scored (kube-scheduler's minimum of 100 nodes): the audit sees
    // choices a full scoring would have made otherwise, and the placements differ.
    let third = report(
        &[
            &base[..],
            &[
                "--percentage-of-nodes-to-score",
                "1",
                "--quality-sample",
                "1",
            ],
        ]
        .concat(),
    );
    let quality = &third["placementQuality"];
    let best_share = quality["bestShare"].as_f64().unwrap();
    assert!(best_share > 0.0 && best_share < 1.0, "{quality}");
    let p1 = quality["ratioP1"].as_f64().unwrap();
    assert!(p1 > 0.0 && p1 < 1.0, "{quality}");
    assert_ne!(third["placementDigest"], full["placementDigest"]);
}

#[test]
fn out_of_range_percentages_and_samples_are_refused() {
    for (args, says) in [
        (
            ["--percentage-of-nodes-to-score", "101"],
            "101 is not in 0..=100",
        ),
        (["--quality-sample", "0"], "0 is not in 1.."),
    ] {
        let out = multiarch(&[&["simulate"][..], &args].concat());
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// `simulate` executes itself again with glibc's huge-page tunable where the kernel gives
/// huge pages only to memory that asks, and keeps tunables the user set (even empty).
#[test]
fn the_heap_asks_for_huge_pages_unless_told_otherwise() {
    let run = |tunables: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_multiarch"));
        command
            .args(["simulate", "--nodes", "50", "--pods", "50", "-o", "json"])
            .env_remove("GLIBC_TUNABLES")
            .env_remove("MULTIARCH_HUGE_PAGES_ASKED");
        if let Some(tunables) = tunables {
            command.env("GLIBC_TUNABLES", tunables);
        }
        let out = command.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if cfg!(target_os = "linux") {
            assert!(report["hugePagesBytes"].is_u64(), "{report}");
        }
        report["glibcTunables"].clone()
    };
    let mode =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let asks = cfg!(all(target_os = "linux", target_env = "gnu")) && mode.contains("[madvise]");
    let expected = if asks {
        serde_json::json!("glibc.malloc.hugetlb=1")
    } else {
        serde_json::Value::Null
    };
    assert_eq!(run(None), expected, "transparent huge pages: {mode:?}");
    assert_eq!(run(Some("")), serde_json::json!(""));
    assert_eq!(
        run(Some("glibc.malloc.arena_max=2")),
        serde_json::json!("glibc.malloc.arena_max=2")
    );
}
