//! multiarch's alerts: Prometheus's own `promtool` checks the generated rules and runs
//! `tests/alerts/tests.yaml` (series that must and must not fire each alert); every
//! alert has such a test; `docs/alerts.md` is the generated runbook page.
//!
//! Without promtool (Debian's `prometheus` package, which scripts/test installs) the
//! promtool parts print `SKIPPED: ...`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{path::Path, process::Command};

use multiarch_operator::install::{ALERTS, rule_groups, runbooks};
use multiarch_test_support::generated::assert_generated;

const TESTS: &str = include_str!("alerts/tests.yaml");

fn promtool() -> Option<&'static str> {
    Command::new("promtool")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| "promtool")
}

#[test]
fn promtool_accepts_the_rules_and_every_alert_fires_and_stays_silent_as_tested() {
    let Some(promtool) = promtool() else {
        println!("SKIPPED: alerts: promtool is not installed (Debian package prometheus)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, serde_yaml_ng::to_string(&rule_groups()).unwrap()).unwrap();
    std::fs::write(dir.path().join("tests.yaml"), TESTS).unwrap();

    for (verb, file) in [("check", rules), ("test", dir.path().join("tests.yaml"))] {
        let out = Command::new(promtool)
            .args([verb, "rules"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {verb} rules: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Each alert is tested firing (with its labels and annotations) and not firing.
#[test]
fn every_alert_has_a_firing_and_a_silent_case() {
    let tests: serde_json::Value = serde_yaml_ng::from_str(TESTS).unwrap();
    for alert in ALERTS {
        let cases: Vec<&serde_json::Value> = tests["tests"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|group| group["alert_rule_test"].as_array().unwrap())
            .filter(|case| case["alertname"] == alert.name)
            .collect();
        let fires = cases
            .iter()
            .any(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()));
        let silent = cases
            .iter()
            .any(|c| c["exp_alerts"].as_array().is_none_or(Vec::is_empty));
        assert!(
            fires && silent,
            "{} needs a case that fires and one that does not",
            alert.name
        );
    }
}

#[test]
fn the_runbooks_page_is_generated_from_the_alerts() {
    assert_generated(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/alerts.md"),
        &runbooks(),
        "operator/src/install/alerts.rs",
        "cargo test -p multiarch-operator --test alerts",
    );
}
