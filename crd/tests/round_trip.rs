//! MTO's objects (and ours) deserialize into the typed API and serialize back unchanged.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::path::Path;

use common::{fixtures, read_yaml};
use multiarch_crd::{
    Architecture, ClusterPodPlacementConfig, ENoExecEvent, LogVerbosity, PlacementMode,
    PodPlacementConfig, cluster_pod_placement_config::v1alpha1,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    path: &Path,
    object: &Value,
) -> T {
    let typed: T = serde_json::from_value(object.clone())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json = serde_json::to_value(&typed).unwrap();
    let again: T = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(typed, again, "{}", path.display());
    // Nothing the user wrote is lost, except MTO's `""` for "no fallback".
    let mut expected = object.clone();
    if expected["spec"]["fallbackArchitecture"] == "" {
        expected["spec"]
            .as_object_mut()
            .unwrap()
            .remove("fallbackArchitecture");
    }
    assert_subset(&expected, &json, path);
    typed
}

/// Every field of `expected` is in `actual` with the same value (`actual` may add defaults).
fn assert_subset(expected: &Value, actual: &Value, path: &Path) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (key, value) in e {
                let got = a
                    .get(key)
                    .unwrap_or_else(|| panic!("{}: field {key} lost", path.display()));
                assert_subset(value, got, path);
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            assert_eq!(e.len(), a.len(), "{}", path.display());
            e.iter().zip(a).for_each(|(e, a)| assert_subset(e, a, path));
        }
        _ => assert_eq!(expected, actual, "{}", path.display()),
    }
}

#[test]
fn every_valid_fixture_round_trips() {
    let mut seen = 0;
    for path in fixtures("valid") {
        let object = read_yaml(&path);
        match (
            object["apiVersion"].as_str().unwrap(),
            object["kind"].as_str().unwrap(),
        ) {
            ("multiarch.openshift.io/v1beta1", "ClusterPodPlacementConfig") => {
                round_trip::<ClusterPodPlacementConfig>(&path, &object);
            }
            ("multiarch.openshift.io/v1alpha1", "ClusterPodPlacementConfig") => {
                round_trip::<v1alpha1::ClusterPodPlacementConfig>(&path, &object);
            }
            ("multiarch.openshift.io/v1beta1", "PodPlacementConfig") => {
                round_trip::<PodPlacementConfig>(&path, &object);
            }
            ("multiarch.openshift.io/v1beta1", "ENoExecEvent") => {
                round_trip::<ENoExecEvent>(&path, &object);
            }
            (api, kind) => panic!("{}: unexpected {api} {kind}", path.display()),
        }
        seen += 1;
    }
    assert!(seen >= 8);
}

fn fixture(name: &str) -> (std::path::PathBuf, Value) {
    let path = fixtures("valid")
        .into_iter()
        .find(|p| p.ends_with(name))
        .unwrap();
    let object = read_yaml(&path);
    (path, object)
}

#[test]
fn mto_v1beta1_sample_reads_plugins_in_order() {
    let (path, object) = fixture("mto-v1beta1-plugins.yaml");
    let cppc: ClusterPodPlacementConfig = round_trip(&path, &object);
    let plugins = cppc.spec.plugins.unwrap();
    let scoring = plugins.enabled_node_affinity_scoring().unwrap();
    let weights: Vec<(Architecture, i32)> = scoring
        .platforms
        .iter()
        .map(|p| (p.architecture, p.weight))
        .collect();
    assert_eq!(
        weights,
        [
            (Architecture::Ppc64le, 100),
            (Architecture::Amd64, 50),
            (Architecture::S390x, 1)
        ]
    );
    assert!(!plugins.exec_format_error_monitor_enabled());
    assert_eq!(cppc.spec.fallback_architecture, None);
}

#[test]
fn empty_plugins_enable_nothing() {
    let (path, object) = fixture("mto-v1beta1-empty-plugins.yaml");
    let cppc: ClusterPodPlacementConfig = round_trip(&path, &object);
    let plugins = cppc.spec.plugins.unwrap();
    assert!(plugins.enabled_node_affinity_scoring().is_none());
    assert!(!plugins.exec_format_error_monitor_enabled());
}

#[test]
fn a_disabled_plugin_is_off_even_with_platforms() {
    let (path, object) = fixture("mto-v1beta1-fallback.yaml");
    let cppc: ClusterPodPlacementConfig = round_trip(&path, &object);
    assert!(
        cppc.spec
            .plugins
            .unwrap()
            .enabled_node_affinity_scoring()
            .is_none()
    );
    assert_eq!(cppc.spec.fallback_architecture, Some(Architecture::Amd64));
    assert_eq!(cppc.spec.log_verbosity, LogVerbosity::TraceAll);
}

#[test]
fn empty_fallback_means_none() {
    let (path, object) = fixture("mto-v1beta1-fallback-empty.yaml");
    let cppc: ClusterPodPlacementConfig = round_trip(&path, &object);
    assert_eq!(cppc.spec.fallback_architecture, None);
}

#[test]
fn placement_defaults_to_the_scheduler_path() {
    let (path, object) = fixture("mto-v1beta1-minimal.yaml");
    let cppc: ClusterPodPlacementConfig = round_trip(&path, &object);
    let placement = cppc.spec.placement_or_default();
    assert_eq!(placement.mode, PlacementMode::Scheduler);
    assert_eq!(placement.scheduler_name, "multiarch-scheduler");
    assert_eq!(placement.percentage_of_nodes_to_score, 0);
    assert_eq!(cppc.spec.log_verbosity, LogVerbosity::Normal);

    let (path, object) = fixture("v1beta1-gate-mode.yaml");
    let cppc: ClusterPodPlacementConfig = round_trip(&path, &object);
    let placement = cppc.spec.placement_or_default();
    assert_eq!(placement.mode, PlacementMode::SchedulingGate);
    assert_eq!(placement.scheduler_name, "multiarch-scheduler");
}

#[test]
fn mto_v1alpha1_sample_reads() {
    let (path, object) = fixture("mto-v1alpha1.yaml");
    let cppc: v1alpha1::ClusterPodPlacementConfig = round_trip(&path, &object);
    assert_eq!(cppc.spec.log_verbosity, LogVerbosity::Debug);
    assert!(cppc.spec.namespace_selector.is_some());
}

#[test]
fn pod_placement_config_reads_priority_and_selector() {
    let (path, object) = fixture("mto-podplacementconfig.yaml");
    let ppc: PodPlacementConfig = round_trip(&path, &object);
    assert_eq!(ppc.spec.priority, 255);
    assert!(ppc.spec.label_selector.is_some());
    assert!(ppc.spec.plugins.enabled_node_affinity_scoring().is_some());
}

#[test]
fn enoexec_event_reads_its_status() {
    let (path, object) = fixture("enoexecevent.yaml");
    let event: ENoExecEvent = round_trip(&path, &object);
    let status = event.status.unwrap();
    assert_eq!(status.pod_namespace.as_deref(), Some("shop"));
    assert!(status.container_id.unwrap().starts_with("cri-o://"));
}

#[test]
fn an_unknown_architecture_does_not_deserialize() {
    let (_, mut object) = fixture("mto-v1beta1-plugins.yaml");
    object["spec"]["plugins"]["nodeAffinityScoring"]["platforms"][0]["architecture"] =
        Value::from("riscv64");
    let err = serde_json::from_value::<ClusterPodPlacementConfig>(object).unwrap_err();
    assert!(err.to_string().contains("riscv64"), "{err}");
}
