//! A rule's decision at admission, on an AdmissionReview recorded from a real API server
//! (request 0: a Deployment's pod with a required node-affinity term), in both modes.

use std::sync::Arc;

use base64::Engine;
use multiarch_crd::{
    Architecture, ArchitectureRule, CelArchitecturePlacement, LocalPlugins, NodeAffinityScoring,
    PlatformWeight, PodPlacementConfig, PodPlacementConfigSpec,
};
use multiarch_policy::{architecture_rules::ArchitectureRules, pod_configs::NamespacedConfigs};
use serde_json::json;

use super::*;
use crate::webhook::review::review;

fn rules() -> PodPlacementConfig {
    let rule = |name: &str, expression: &str, archs: &[Architecture]| ArchitectureRule {
        name: name.into(),
        expression: expression.into(),
        architectures: archs.to_vec(),
    };
    let mut config = PodPlacementConfig::new(
        "tiers",
        PodPlacementConfigSpec {
            label_selector: None,
            plugins: LocalPlugins {
                node_affinity_scoring: Some(NodeAffinityScoring {
                    enabled: true,
                    platforms: vec![
                        PlatformWeight {
                            architecture: Architecture::S390x,
                            weight: 50,
                        },
                        PlatformWeight {
                            architecture: Architecture::Arm64,
                            weight: 20,
                        },
                    ],
                }),
                cel_architecture_placement: Some(CelArchitecturePlacement {
                    enabled: true,
                    fallback_architectures: vec![Architecture::Amd64],
                    rules: vec![
                        rule(
                            "web",
                            "self.metadata.labels['app'] == 'web'",
                            &[Architecture::Arm64, Architecture::Amd64],
                        ),
                        rule(
                            "redis",
                            "self.metadata.name.startsWith('redis-')",
                            &[Architecture::Ppc64le],
                        ),
                    ],
                }),
            },
            priority: 1,
        },
    );
    config.metadata.namespace = Some("default".into());
    config
}

fn config(mode: PlacementMode, configs: Vec<PodPlacementConfig>) -> WebhookConfig {
    let mut config = WebhookConfig::new(mode, "multiarch-scheduler", "multiarch");
    let configs = NamespacedConfigs::owned(configs);
    config.architecture_rules = Arc::new(ArchitectureRules::compile(
        &configs,
        &ArchitectureRules::default(),
    ));
    config.pod_configs = configs;
    config
}

/// Recorded request 0, with its object changed by `edit`.
fn request(edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/admission/admissionreview-request-0.json");
    let mut review: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut review["request"]["object"]);
    serde_json::to_vec(&review).unwrap()
}

/// The object after the webhook's patch, and the decision.
fn admitted(body: &[u8], config: &WebhookConfig) -> (Value, Decision) {
    let (response, decision) = review(body, config).unwrap();
    let sent: Value = serde_json::from_slice(body).unwrap();
    let mut object = sent["request"]["object"].clone();
    if let Some(patch) = response["response"]["patch"].as_str() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut object, &patch).unwrap();
    }
    (object, decision.unwrap())
}

fn pinned_to_s390x(object: &mut Value) {
    object["spec"]["nodeSelector"] = json!({"kubernetes.io/arch": "s390x", "disk": "ssd"});
}

fn required(object: &Value) -> &Value {
    &object["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
}

#[test]
fn scheduler_mode_routes_with_the_rules_constraint_instead_of_the_pods() {
    let (pod, decision) = admitted(
        &request(pinned_to_s390x),
        &config(PlacementMode::Scheduler, vec![rules()]),
    );
    assert!(decision.routed());
    assert_eq!(pod["spec"]["schedulerName"], "multiarch-scheduler");
    assert_eq!(pod["spec"]["nodeSelector"], json!({"disk": "ssd"}));
    assert_eq!(
        *required(&pod),
        json!([{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "Exists"},
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]}])
    );
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(
        annotations["multiarch.openshift.io/architecture-rule"],
        "PodPlacementConfig-tiers/web"
    );
    // Preferences only among the decided architectures: s390x is skipped.
    assert_eq!(
        annotations["multiarch.openshift.io/preferred-affinity-sources"],
        "s390x:50:PodPlacementConfig-tiers:skipped,arm64:20:PodPlacementConfig-tiers"
    );
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"],
        json!([{"weight": 20, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}}])
    );
}

#[test]
fn gate_mode_gates_a_pinned_pod_with_the_rules_constraint() {
    let (pod, decision) = admitted(
        &request(pinned_to_s390x),
        &config(PlacementMode::SchedulingGate, vec![rules()]),
    );
    // Its own pin would exempt it; the rule replaces the pin instead.
    assert!(decision.gated, "{decision:?}");
    assert_eq!(
        pod["spec"]["schedulingGates"],
        json!([{"name": "multiarch.openshift.io/scheduling-gate"}])
    );
    assert_eq!(pod["spec"]["nodeSelector"], json!({"disk": "ssd"}));
    assert_eq!(
        required(&pod)[0]["matchExpressions"][1],
        json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]})
    );
    // The gate controller writes preferences for gated pods, as it always does.
    assert!(
        pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            .is_null()
    );
}

#[test]
fn a_pod_without_a_name_is_seen_by_its_generate_name() {
    let (pod, decision) = admitted(
        &request(|object| {
            object["metadata"]["name"] = Value::Null;
            object["metadata"]["generateName"] = json!("redis-7d9f-");
            object["metadata"]["labels"] = json!({"app": "cache"});
        }),
        &config(PlacementMode::Scheduler, vec![rules()]),
    );
    assert_eq!(
        decision.architecture_rule.and_then(|r| r.rule).as_deref(),
        Some("redis")
    );
    assert_eq!(
        required(&pod)[0]["matchExpressions"][1]["values"],
        json!(["ppc64le"])
    );
}

#[test]
fn a_claimed_decision_is_removed_and_exempt_pods_are_untouched() {
    let claimed = |object: &mut Value| {
        object["metadata"]["annotations"] =
            json!({"multiarch.openshift.io/architecture-rule": "PodPlacementConfig-x/y"});
    };
    // No config enables rules: the annotation is not the webhook's, so it goes.
    let (pod, _) = admitted(&request(claimed), &config(PlacementMode::Scheduler, vec![]));
    assert_eq!(pod["metadata"]["annotations"], json!({}));
    // A system namespace is never routed: nothing is changed, rules or not.
    let body = {
        let mut review: Value = serde_json::from_slice(&request(|object| {
            claimed(object);
            pinned_to_s390x(object);
        }))
        .unwrap();
        review["request"]["namespace"] = json!("kube-system");
        review["request"]["object"]["metadata"]["namespace"] = json!("kube-system");
        serde_json::to_vec(&review).unwrap()
    };
    let mut system = rules();
    system.metadata.namespace = Some("kube-system".into());
    let (pod, decision) = admitted(&body, &config(PlacementMode::Scheduler, vec![system]));
    assert!(decision.exemption.is_some());
    assert!(decision.patch.is_empty());
    assert_eq!(pod["spec"]["nodeSelector"]["kubernetes.io/arch"], "s390x");
}
