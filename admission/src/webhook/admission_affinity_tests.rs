//! The constraint patch on the AdmissionReviews recorded from a real API server: it
//! applies to the object as sent, together with the routing patch.

use multiarch_crd::{ClusterPlugins, PlacementMode};
use serde_json::json;

use super::*;
use crate::webhook::decision::decide;

fn recorded(n: usize) -> (Value, Pod, String) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../tests/fixtures/admission/admissionreview-request-{n}.json"
    ));
    let review: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let raw = review["request"]["object"].clone();
    let namespace = review["request"]["namespace"].as_str().unwrap().to_owned();
    (raw.clone(), serde_json::from_value(raw).unwrap(), namespace)
}

fn config() -> WebhookConfig {
    WebhookConfig::new(PlacementMode::Scheduler, "multiarch-scheduler", "multiarch")
}

/// The routing patch and the constraint patch, applied to the recorded object.
fn admitted(
    n: usize,
    config: &WebhookConfig,
    platforms: &[Platform],
) -> (Value, AdmissionAffinityResult) {
    let (raw, pod, namespace) = recorded(n);
    let decision = decide(&pod, &namespace, config);
    assert!(decision.routed());
    let (ops, result) =
        constraint_patch(&SentFields::of(&raw), &pod, &namespace, config, platforms);
    let mut all = decision.patch;
    all.extend(ops);
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(all)).unwrap();
    let mut object = raw;
    json_patch::patch(&mut object, &patch).unwrap();
    (object, result)
}

#[test]
fn the_user_term_gets_the_architecture_and_the_route_stays() {
    let (pod, result) = admitted(
        0,
        &config(),
        &[Platform::linux("amd64"), Platform::linux("arm64")],
    );
    assert_eq!(result, AdmissionAffinityResult::Set);
    assert_eq!(pod["spec"]["schedulerName"], "multiarch-scheduler");
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
        json!({"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "Exists"},
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]})
    );
    // Nothing else of the recorded object changed.
    let (mut raw, _, _) = recorded(0);
    raw["spec"]["schedulerName"] = json!("multiarch-scheduler");
    let mut compared = pod.clone();
    compared["spec"]["affinity"] = raw["spec"]["affinity"].clone();
    assert_eq!(compared, raw);
}

#[test]
fn no_common_platform_is_visibly_unschedulable() {
    let (pod, result) = admitted(1, &config(), &[]);
    assert_eq!(result, AdmissionAffinityResult::Unsatisfiable);
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        json!([{"matchExpressions": [
            {"key": "multiarch.openshift.io/no-supported-arch", "operator": "Exists"}]}])
    );
}

#[test]
fn preferences_add_preferred_terms_and_mtos_annotation() {
    let mut config = config();
    config.cluster_plugins = Some(
        serde_json::from_value::<ClusterPlugins>(json!({"nodeAffinityScoring": {
            "enabled": true, "platforms": [{"architecture": "arm64", "weight": 50}]}}))
        .unwrap(),
    );
    let (pod, result) = admitted(
        1,
        &config,
        &[Platform::linux("amd64"), Platform::linux("arm64")],
    );
    assert_eq!(result, AdmissionAffinityResult::Set);
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"],
        json!([{"weight": 50, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}}])
    );
    assert!(
        pod["metadata"]["annotations"]["multiarch.openshift.io/preferred-affinity-sources"]
            .as_str()
            .unwrap()
            .starts_with("arm64:50:")
    );
}

#[test]
fn a_compatible_user_pin_is_left_alone() {
    let (mut raw, _, namespace) = recorded(1);
    raw["spec"]["nodeSelector"] = json!({"kubernetes.io/arch": "arm64"});
    let pod: Pod = serde_json::from_value(raw.clone()).unwrap();
    let (ops, result) = constraint_patch(
        &SentFields::of(&raw),
        &pod,
        &namespace,
        &config(),
        &[Platform::linux("arm64")],
    );
    assert_eq!(result, AdmissionAffinityResult::UserPinned);
    assert!(ops.is_empty(), "{ops:?}");
}

/// `binaryInspection.unknownNodeLevel: Baseline`: a node whose level nothing says is not
/// among the amd64 nodes an x86-64-v3 build may go to; by default it is.
#[test]
fn a_node_of_unknown_level_is_left_out_of_the_level_terms_when_taken_as_the_baseline() {
    let v3 = [Platform::new("linux", "amd64", Some("v3"))];
    let silent_node_term = json!({"key": "feature.node.kubernetes.io/cpu-cpuid.CMPXCHG8", "operator": "NotIn", "values": ["true"]});
    let terms = |config: &WebhookConfig| {
        let (pod, result) = admitted(1, config, &v3);
        assert_eq!(result, AdmissionAffinityResult::Set);
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"]
            .as_array()
            .unwrap()
            .clone()
    };
    let names_silent_nodes = |terms: &[Value]| {
        terms.iter().any(|t| {
            t["matchExpressions"]
                .as_array()
                .unwrap()
                .contains(&silent_node_term)
        })
    };
    let by_default = terms(&config());
    assert_eq!(by_default.len(), 4);
    assert!(names_silent_nodes(&by_default));

    let mut baseline = config();
    baseline.cluster_plugins = Some(
        serde_json::from_value::<ClusterPlugins>(json!({"binaryInspection": {
            "enabled": true, "unknownNodeLevel": "Baseline"}}))
        .unwrap(),
    );
    let taken_as_baseline = terms(&baseline);
    assert_eq!(taken_as_baseline.len(), 3);
    assert!(!names_silent_nodes(&taken_as_baseline));
}
