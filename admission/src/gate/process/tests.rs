//! Every branch of a gate pass, as table tests.

use multiarch_crd::PodPlacementConfig;
use serde_json::json;

use super::*;

static NO_CONFIGS: std::sync::LazyLock<NamespacedConfigs> =
    std::sync::LazyLock::new(NamespacedConfigs::default);

fn gated(extra: serde_json::Value) -> Pod {
    let mut base = json!({"metadata": {"name": "p", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "i"}], "schedulingGates": [{"name": SCHEDULING_GATE}]}});
    if let (Some(b), Some(e)) = (base["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(base).unwrap()
}

fn inputs<'a>(plugins: Option<&'a ClusterPlugins>, fallback: Option<&'a str>) -> GateInputs<'a> {
    GateInputs {
        cluster_plugins: plugins,
        configs: &NO_CONFIGS,
        fallback_architecture: fallback,
        own_namespace: "multiarch",
        max_attempts: 3,
        architecture_rules: ArchitectureRules::none(),
    }
}

/// The pod's required node-selector terms, as JSON.
fn required_terms(pod: &Pod) -> serde_json::Value {
    serde_json::to_value(pod).unwrap()["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        .clone()
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

#[test]
fn sets_required_affinity_and_removes_the_gate_in_one_pass() {
    let pod = gated(json!({}));
    let done = process(
        &pod,
        &inputs(None, None),
        Inspection::Compatible(vec![Platform::linux("arm64"), Platform::linux("amd64")]),
    )
    .unwrap();
    assert!(!has_gate(&done.pod));
    assert_eq!(label(&done.pod, LABEL_SCHEDULING_GATE), Some("removed"));
    assert_eq!(label(&done.pod, LABEL_NODE_AFFINITY), Some("set"));
    assert_eq!(
        label(&done.pod, "multiarch.openshift.io/multi-arch"),
        Some("")
    );
    assert_eq!(label(&done.pod, "multiarch.openshift.io/arm64"), Some(""));
    let reasons: Vec<&str> = done.events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "ArchAwareSchedGateAdded",
            "ArchAwarePredicateSet",
            "ArchAwareSchedGateRemovalSuccess"
        ]
    );
    assert_eq!(
        done.events[0].message,
        "Successfully gated with the multiarch.openshift.io/scheduling-gate scheduling gate"
    );
    assert_eq!(
        done.events[1].message,
        "Set the supported architectures to {amd64, arm64}"
    );
    assert!(done.retry.is_none());
}

#[test]
fn inspection_failures_retry_then_fall_back() {
    let pod = gated(json!({}));
    let first = process(
        &pod,
        &inputs(None, Some("amd64")),
        Inspection::Failed("unauthorized at quay.io".into()),
    )
    .unwrap();
    assert_eq!(first.retry, Some(1));
    let gate_added = |events: &[GateEvent]| {
        events
            .iter()
            .filter(|e| e.reason == EventReason::ArchAwareSchedGateAdded)
            .count()
    };
    assert_eq!(gate_added(&first.events), 1);
    assert!(has_gate(&first.pod), "the gate stays while retrying");
    assert_eq!(label(&first.pod, LABEL_INSPECT_ERROR_COUNT), Some("1"));
    let second = process(
        &first.pod,
        &inputs(None, Some("amd64")),
        Inspection::Failed("unauthorized".into()),
    )
    .unwrap();
    assert_eq!(second.retry, Some(2));
    assert_eq!(gate_added(&second.events), 0, "announced once per pod");
    let third = process(
        &second.pod,
        &inputs(None, Some("amd64")),
        Inspection::Failed("unauthorized".into()),
    )
    .unwrap();
    assert!(third.retry.is_none());
    assert!(!has_gate(&third.pod));
    assert_eq!(label(&third.pod, LABEL_FALLBACK), Some("amd64"));
    assert!(
        third
            .events
            .iter()
            .any(|e| e.reason == EventReason::ArchAwareFallbackPredicateSet)
    );
    // Without a fallback the pod is ungated without affinity.
    let mut p = second.pod.clone();
    p.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(LABEL_INSPECT_ERROR_COUNT.into(), "2".into());
    let none = process(&p, &inputs(None, None), Inspection::Failed("x".into())).unwrap();
    assert!(!has_gate(&none.pod));
    assert_eq!(label(&none.pod, LABEL_NODE_AFFINITY), Some("not-set"));
}

#[test]
fn ignored_and_already_constrained_pods() {
    let daemon = {
        let mut p = gated(json!({}));
        p.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: "d".into(),
                uid: "u".into(),
                controller: Some(true),
                block_owner_deletion: None,
            },
        ]);
        p
    };
    let done = process(&daemon, &inputs(None, None), Inspection::NotNeeded).unwrap();
    assert!(!has_gate(&done.pod));
    assert_eq!(done.events[1].reason, EventReason::ArchAwareGatedPodIgnored);
    // Architecture pinned by nodeSelector, preferences enabled: preferred added, required untouched.
    let plugins: ClusterPlugins = serde_json::from_value(json!({"nodeAffinityScoring": {"enabled": true, "platforms": [{"architecture": "arm64", "weight": 10}]}})).unwrap();
    let pinned = gated(json!({"nodeSelector": {"kubernetes.io/arch": "arm64"}}));
    assert!(!needs_inspection(&pinned, &inputs(Some(&plugins), None)));
    let done = process(
        &pinned,
        &inputs(Some(&plugins), None),
        Inspection::NotNeeded,
    )
    .unwrap();
    assert_eq!(label(&done.pod, LABEL_PREFERRED_NODE_AFFINITY), Some("set"));
    assert_eq!(
        done.pod.metadata.annotations.as_ref().unwrap()[ANNOTATION_SOURCES],
        "arm64:10:ClusterPodPlacementConfig"
    );
    assert!(
        done.events
            .iter()
            .any(|e| e.reason == EventReason::ArchAwarePredicatesConflict)
    );
    assert!(!has_gate(&done.pod));
    // Not gated by us: nothing to do.
    let free: Pod =
        serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": {"containers": []}}))
            .unwrap();
    assert!(process(&free, &inputs(None, None), Inspection::NotNeeded).is_none());
}

#[test]
fn no_common_architecture_keeps_the_pod_pending_with_a_reason() {
    let done = process(
        &gated(json!({})),
        &inputs(None, None),
        Inspection::Compatible(vec![]),
    )
    .unwrap();
    assert_eq!(
        required_terms(&done.pod)[0]["matchExpressions"][0]["key"],
        "multiarch.openshift.io/no-supported-arch"
    );
    assert!(
        done.events
            .iter()
            .any(|e| e.reason == EventReason::NoSupportedArchitecturesFound)
    );
}

#[test]
fn preference_events_name_each_source_in_priority_order() {
    let config = |name: &str, priority: u8, platforms: serde_json::Value| -> PodPlacementConfig {
        serde_json::from_value(json!({
            "apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"priority": priority, "plugins": {"nodeAffinityScoring": {"enabled": true, "platforms": platforms}}}
        }))
        .unwrap()
    };
    let configs = NamespacedConfigs::owned([
        config(
            "low",
            10,
            json!([{"architecture": "arm64", "weight": 5}, {"architecture": "s390x", "weight": 5}]),
        ),
        config(
            "high",
            200,
            json!([{"architecture": "arm64", "weight": 50}]),
        ),
    ]);
    let cluster: ClusterPlugins = serde_json::from_value(json!({
        "nodeAffinityScoring": {"enabled": true, "platforms": [{"architecture": "arm64", "weight": 1}]}
    }))
    .unwrap();
    let inputs = GateInputs {
        cluster_plugins: Some(&cluster),
        configs: &configs,
        fallback_architecture: None,
        own_namespace: "multiarch",
        max_attempts: 3,
        architecture_rules: ArchitectureRules::none(),
    };
    let done = process(
        &gated(json!({})),
        &inputs,
        Inspection::Compatible(vec![Platform::linux("arm64")]),
    )
    .unwrap();
    let preference_events: Vec<(&str, &str)> = done
        .events
        .iter()
        .filter(|e| e.message.contains("source:"))
        .map(|e| (e.reason.as_str(), e.message.as_str()))
        .collect();
    assert_eq!(
        preference_events,
        [
            (
                "ArchAwarePredicateSet",
                "Applied all architecture preferences from configuration source: PodPlacementConfig-high"
            ),
            (
                "ArchAwarePredicateSet",
                "Applied some architecture preferences from configuration; others were already set source: PodPlacementConfig-low, skipped: arm64"
            ),
            (
                "ArchAwarePreferredAffinityDuplicates",
                "Skipped all architecture preferences from configuration; all were already set source: ClusterPodPlacementConfig, architectures: arm64"
            ),
        ]
    );
    assert_eq!(
        done.pod.metadata.annotations.as_ref().unwrap()[ANNOTATION_SOURCES],
        "arm64:50:PodPlacementConfig-high,arm64:5:PodPlacementConfig-low:skipped,s390x:5:PodPlacementConfig-low,arm64:1:ClusterPodPlacementConfig:skipped"
    );

    // The pod states its own arch preference: annotated as skipped, no events.
    let own = gated(
        json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}}]}}}),
    );
    let done = process(
        &own,
        &inputs,
        Inspection::Compatible(vec![Platform::linux("arm64")]),
    )
    .unwrap();
    assert!(
        !done.events.iter().any(|e| e.message.contains("source:")),
        "{:?}",
        done.events
    );
    assert!(
        done.pod.metadata.annotations.as_ref().unwrap()[ANNOTATION_SOURCES]
            .ends_with("ClusterPodPlacementConfig:skipped")
    );
}

#[test]
fn the_required_affinity_carries_os_and_variant() {
    let pod = gated(json!({}));
    let done = process(
        &pod,
        &inputs(None, None),
        Inspection::Compatible(vec![Platform::new("linux", "arm", Some("v7"))]),
    )
    .unwrap();
    let terms = required_terms(&done.pod);
    assert_eq!(
        terms,
        json!([{"matchExpressions": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm"]},
            {"key": "multiarch.openshift.io/arch-variant", "operator": "NotIn", "values": ["v1", "v2", "v3", "v4", "v5", "v6"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        ]}])
    );
}

/// `binaryInspection.unknownNodeLevel: Baseline`: the gate path writes the x86-64-v3
/// terms without the one for nodes whose level nothing says.
#[test]
fn the_level_terms_leave_out_nodes_of_unknown_level_when_taken_as_the_baseline() {
    let v3 = || Inspection::Compatible(vec![Platform::new("linux", "amd64", Some("v3"))]);
    let silent_node_term = json!({"key": "feature.node.kubernetes.io/cpu-cpuid.CMPXCHG8", "operator": "NotIn", "values": ["true"]});
    let names_silent_nodes = |terms: &serde_json::Value| {
        terms.as_array().unwrap().iter().any(|t| {
            t["matchExpressions"]
                .as_array()
                .unwrap()
                .contains(&silent_node_term)
        })
    };
    let by_default = required_terms(
        &process(&gated(json!({})), &inputs(None, None), v3())
            .unwrap()
            .pod,
    );
    assert_eq!(by_default.as_array().unwrap().len(), 4);
    assert!(names_silent_nodes(&by_default));

    let baseline: ClusterPlugins = serde_json::from_value(
        json!({"binaryInspection": {"enabled": true, "unknownNodeLevel": "Baseline"}}),
    )
    .unwrap();
    let done = process(&gated(json!({})), &inputs(Some(&baseline), None), v3()).unwrap();
    let taken_as_baseline = required_terms(&done.pod);
    assert_eq!(taken_as_baseline.as_array().unwrap().len(), 3);
    assert!(!names_silent_nodes(&taken_as_baseline));
}

#[test]
fn a_rule_decides_without_inspection_and_names_itself() {
    let config: PodPlacementConfig = serde_json::from_value(json!({
        "apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig",
        "metadata": {"name": "tiers", "namespace": "shop"},
        "spec": {"plugins": {
            "nodeAffinityScoring": {"enabled": true, "platforms": [
                {"architecture": "s390x", "weight": 50}, {"architecture": "ppc64le", "weight": 5}]},
            "celArchitecturePlacement": {"enabled": true, "fallbackArchitectures": ["amd64"],
                "rules": [{"name": "web", "expression": "self.metadata.labels['app'] == 'web'",
                    "architectures": ["ppc64le"]}]}}}
    }))
    .unwrap();
    let configs = NamespacedConfigs::owned([config]);
    let rules = ArchitectureRules::compile(&configs, ArchitectureRules::none());
    let mut inputs = inputs(None, Some("arm64"));
    inputs.configs = &configs;
    inputs.architecture_rules = &rules;
    // Its own pin (which the webhook replaced at admission) neither exempts it nor stays.
    let pod = gated(
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["ppc64le"]}]}]}}}}),
    );
    assert!(!needs_inspection(&pod, &inputs));
    let done = process(&pod, &inputs, Inspection::NotNeeded).unwrap();
    assert!(!has_gate(&done.pod));
    assert_eq!(
        required_terms(&done.pod),
        json!([{"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["ppc64le"]}]}])
    );
    assert_eq!(label(&done.pod, LABEL_NODE_AFFINITY), Some("set"));
    assert_eq!(
        label(&done.pod, "multiarch.openshift.io/single-arch"),
        Some("")
    );
    assert_eq!(label(&done.pod, "multiarch.openshift.io/ppc64le"), Some(""));
    let annotations = done.pod.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations["multiarch.openshift.io/architecture-rule"],
        "PodPlacementConfig-tiers/web"
    );
    // Preferences order only the rule's architectures.
    assert_eq!(
        annotations[ANNOTATION_SOURCES],
        "s390x:50:PodPlacementConfig-tiers:skipped,ppc64le:5:PodPlacementConfig-tiers"
    );
    let reasons: Vec<(&str, &str)> = done
        .events
        .iter()
        .map(|e| (e.reason.as_str(), e.message.as_str()))
        .collect();
    assert!(
        reasons.contains(&(
            "ArchAwarePredicateSet",
            "Set the supported architectures to {ppc64le} by rule \"web\" of PodPlacementConfig tiers"
        )),
        "{reasons:?}"
    );
    // A pod no rule matches gets the fallback, named as such.
    let mut other = gated(json!({}));
    other.metadata.labels = Some([("app".to_owned(), "db".to_owned())].into());
    let done = process(&other, &inputs, Inspection::NotNeeded).unwrap();
    assert_eq!(
        required_terms(&done.pod),
        json!([{"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}])
    );
    assert!(done.events.iter().any(|e| e.message
        == "Set the supported architectures to {amd64} by the fallback of PodPlacementConfig tiers"));
}
