//! One pass of the gate controller over a gated pod (MTO's pod reconciler, reference
//! §2.4-2.9, improved): pure, so every branch is a table test. The caller inspects the
//! images (when `needs_inspection`), writes the returned pod with one update, and
//! publishes the events.

use k8s_openapi::api::core::v1::Pod;
use multiarch_crd::{
    ClusterPlugins, PodPlacementConfig,
    names::{
        LABEL_NODE_AFFINITY, LABEL_PREFERRED_NODE_AFFINITY, LABEL_SCHEDULING_GATE, SCHEDULING_GATE,
    },
};
use multiarch_plugins::{
    affinity_writer::{
        ArchRequirement, architecture_required, common_os, merge_preferred, merge_required,
        merge_required_for, merge_required_os, preferred_architectures,
    },
    model::platform::Platform,
    preferences::{ArchPreference, architecture_preferences, sources_annotation},
};

pub const LABEL_INSPECT_ERROR: &str = "multiarch.openshift.io/image-inspect-error";
pub const LABEL_INSPECT_ERROR_COUNT: &str = "multiarch.openshift.io/image-inspect-error-count";
pub const LABEL_FALLBACK: &str = "multiarch.openshift.io/fallback-arch";
pub const ANNOTATION_INSPECT_ERROR: &str = "multiarch.openshift.io/image-inspect-error";
pub const ANNOTATION_SOURCES: &str = "multiarch.openshift.io/preferred-affinity-sources";
const KNOWN_ARCHS: [&str; 4] = ["amd64", "arm64", "ppc64le", "s390x"];

/// What the controller knows besides the pod.
pub struct GateInputs<'a> {
    pub cluster_plugins: Option<&'a ClusterPlugins>,
    pub configs: &'a [PodPlacementConfig],
    pub fallback_architecture: Option<&'a str>,
    pub own_namespace: &'a str,
    /// Inspection attempts before the fallback (or ungating without affinity).
    pub max_attempts: u32,
}

/// The images' answer for this pass.
#[derive(Clone, Debug)]
pub enum Inspection {
    /// The platforms every image supports (the shared compatibility function's result).
    Compatible(Vec<Platform>),
    Failed(String),
    /// The required affinity is the user's; nothing was inspected.
    NotNeeded,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateEvent {
    pub type_: EventType,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Clone, Debug)]
pub struct Processed {
    pub pod: Pod,
    pub events: Vec<GateEvent>,
    /// The gate stays: inspect again after a backoff (this was attempt `attempts`).
    pub retry: Option<u32>,
}

pub fn has_gate(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == SCHEDULING_GATE))
}

fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or_default()
}

fn preferences_enabled(pod: &Pod, inputs: &GateInputs<'_>) -> bool {
    inputs
        .cluster_plugins
        .and_then(ClusterPlugins::enabled_node_affinity_scoring)
        .is_some()
        || inputs.configs.iter().any(|c| {
            multiarch_plugins::preferences::config_matches(
                c,
                namespace(pod),
                pod.metadata.labels.as_ref().unwrap_or(&Default::default()),
            ) && c.spec.plugins.enabled_node_affinity_scoring().is_some()
        })
}

/// MTO's `shouldIgnorePod`, on the controller side.
fn ignored(pod: &Pod, inputs: &GateInputs<'_>) -> bool {
    let ns = namespace(pod);
    let spec = pod.spec.as_ref();
    ns.starts_with("kube-")
        || ns == inputs.own_namespace
        || spec
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
        || spec
            .and_then(|s| s.node_selector.as_ref())
            .is_some_and(|s| {
                s.contains_key("node-role.kubernetes.io/master")
                    || s.contains_key("node-role.kubernetes.io/control-plane")
            })
        || pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "DaemonSet" && o.controller == Some(true))
        || (architecture_required(pod)
            && (!preferred_architectures(pod).is_empty() || !preferences_enabled(pod, inputs)))
}

/// Whether this pass needs the images' platforms.
pub fn needs_inspection(pod: &Pod, inputs: &GateInputs<'_>) -> bool {
    has_gate(pod) && !ignored(pod, inputs) && !architecture_required(pod)
}

fn set_label(pod: &mut Pod, key: &str, value: &str) {
    pod.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
}

fn remove_gate(pod: &mut Pod) {
    if let Some(gates) = pod.spec.as_mut().and_then(|s| s.scheduling_gates.as_mut()) {
        gates.retain(|g| g.name != SCHEDULING_GATE);
    }
    set_label(pod, LABEL_SCHEDULING_GATE, "removed");
}

fn normal(reason: &'static str, message: String) -> GateEvent {
    GateEvent {
        type_: EventType::Normal,
        reason,
        message,
    }
}

fn warning(reason: &'static str, message: String) -> GateEvent {
    GateEvent {
        type_: EventType::Warning,
        reason,
        message,
    }
}

/// One pass. `None` when the pod is not (or no longer) gated by us.
pub fn process(
    original: &Pod,
    inputs: &GateInputs<'_>,
    inspection: Inspection,
) -> Option<Processed> {
    if !has_gate(original) {
        return None;
    }
    let mut pod = original.clone();
    let mut events = Vec::new();
    // MTO's webhook emits this once the pod exists, by polling for it by name, which pods
    // created from generateName do not have at admission. The controller sees every gated
    // pod; its first pass (no inspection attempt counted yet) announces the gate instead.
    if first_pass(&pod) {
        events.push(normal(
            "ArchAwareSchedGateAdded",
            format!("Successfully gated with the {SCHEDULING_GATE} scheduling gate"),
        ));
    }
    if ignored(&pod, inputs) {
        remove_gate(&mut pod);
        events.push(warning("ArchAwareGatedPodIgnored", "The gated pod has been modified and is no longer eligible for architecture-aware scheduling".into()));
        return Some(Processed {
            pod,
            events,
            retry: None,
        });
    }

    // Preferred affinity first: it is there even when inspection fails.
    let own = preferred_architectures(&pod);
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let preferences = architecture_preferences(
        namespace(&pod),
        &labels,
        &own,
        inputs.configs,
        inputs.cluster_plugins,
    );
    if !preferences.is_empty()
        && pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_PREFERRED_NODE_AFFINITY))
            .map(String::as_str)
            != Some("set")
    {
        if merge_preferred(&mut pod, &preferences) > 0 {
            set_label(&mut pod, LABEL_PREFERRED_NODE_AFFINITY, "set");
        }
        // The pod's own arch preference wins over every config: annotated, not announced.
        if own.is_empty() {
            events.extend(preference_events(&preferences));
        }
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANNOTATION_SOURCES.into(), sources_annotation(&preferences));
    }

    match inspection {
        Inspection::NotNeeded => {
            set_label(&mut pod, LABEL_NODE_AFFINITY, "not-set");
            events.push(normal(
                "ArchAwarePredicatesConflict",
                "All the scheduling predicates already include architecture-specific constraints"
                    .into(),
            ));
        }
        Inspection::Compatible(platforms) => {
            let requirement = ArchRequirement::from_platforms(&platforms);
            merge_required_for(&mut pod, &requirement, &platforms);
            if let Some(os) = common_os(&platforms) {
                merge_required_os(&mut pod, os);
            }
            set_label(&mut pod, LABEL_NODE_AFFINITY, "set");
            if let Some(labels) = pod.metadata.labels.as_mut() {
                labels.remove(LABEL_INSPECT_ERROR);
            }
            match &requirement {
                ArchRequirement::In(archs) => {
                    let kind = if archs.len() == 1 {
                        "multiarch.openshift.io/single-arch"
                    } else {
                        "multiarch.openshift.io/multi-arch"
                    };
                    set_label(&mut pod, kind, "");
                    for arch in archs.iter().filter(|a| KNOWN_ARCHS.contains(&a.as_str())) {
                        set_label(&mut pod, &format!("multiarch.openshift.io/{arch}"), "");
                    }
                    events.push(normal(
                        "ArchAwarePredicateSet",
                        format!(
                            "Set the supported architectures to {{{}}}",
                            archs.join(", ")
                        ),
                    ));
                }
                ArchRequirement::NoSupportedArch => {
                    events.push(normal(
                        "NoSupportedArchitecturesFound",
                        "Pod cannot be scheduled due to incompatible image architectures; container images have no supported architectures in common".into(),
                    ));
                }
            }
        }
        Inspection::Failed(error) => {
            let attempts = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_INSPECT_ERROR_COUNT))
                .and_then(|c| c.parse::<u32>().ok())
                .unwrap_or(0)
                + 1;
            set_label(&mut pod, LABEL_INSPECT_ERROR, "");
            set_label(&mut pod, LABEL_INSPECT_ERROR_COUNT, &attempts.to_string());
            let short: String = error.chars().take(256).collect();
            pod.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(ANNOTATION_INSPECT_ERROR.into(), short);
            if attempts < inputs.max_attempts {
                events.push(warning("ArchAwareInspectionError", format!("The images' architectures could not be read; retrying with backoff. Registry error: {error}")));
                return Some(Processed {
                    pod,
                    events,
                    retry: Some(attempts),
                });
            }
            events.push(warning("ArchAwareInspectionError", format!("The images' architectures could not be read after {attempts} attempts. Registry error: {error}")));
            match inputs.fallback_architecture {
                Some(fallback) => {
                    merge_required(&mut pod, &ArchRequirement::In(vec![fallback.to_owned()]));
                    set_label(&mut pod, LABEL_FALLBACK, fallback);
                    set_label(&mut pod, LABEL_NODE_AFFINITY, "set");
                    events.push(warning("ArchAwareFallbackPredicateSet", format!("Image inspection failed; setting the nodeAffinity to the fallback architecture: {{{fallback}}}")));
                }
                None => set_label(&mut pod, LABEL_NODE_AFFINITY, "not-set"),
            }
        }
    }
    remove_gate(&mut pod);
    events.push(normal(
        "ArchAwareSchedGateRemovalSuccess",
        format!("Successfully removed the {SCHEDULING_GATE} scheduling gate"),
    ));
    Some(Processed {
        pod,
        events,
        retry: None,
    })
}

/// No pass has written its outcome to the pod yet (a pass that keeps the gate counts its
/// inspection attempt in a label).
fn first_pass(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .is_none_or(|l| !l.contains_key(LABEL_INSPECT_ERROR_COUNT))
}

/// MTO's events for preferred affinity, one per configuration source in priority order.
fn preference_events(preferences: &[ArchPreference]) -> Vec<GateEvent> {
    let mut sources: Vec<&str> = Vec::new();
    for p in preferences {
        if !sources.contains(&p.source.as_str()) {
            sources.push(&p.source);
        }
    }
    sources
        .into_iter()
        .map(|source| {
            let of_source = || preferences.iter().filter(move |p| p.source == source);
            let skipped: Vec<&str> = of_source()
                .filter(|p| p.skipped)
                .map(|p| p.architecture.as_str())
                .collect();
            if skipped.is_empty() {
                normal(
                    "ArchAwarePredicateSet",
                    format!("Applied all architecture preferences from configuration source: {source}"),
                )
            } else if skipped.len() < of_source().count() {
                normal(
                    "ArchAwarePredicateSet",
                    format!(
                        "Applied some architecture preferences from configuration; others were already set source: {source}, skipped: {}",
                        skipped.join(", ")
                    ),
                )
            } else {
                normal(
                    "ArchAwarePreferredAffinityDuplicates",
                    format!(
                        "Skipped all architecture preferences from configuration; all were already set source: {source}, architectures: {}",
                        skipped.join(", ")
                    ),
                )
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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

    fn inputs<'a>(
        plugins: Option<&'a ClusterPlugins>,
        fallback: Option<&'a str>,
    ) -> GateInputs<'a> {
        GateInputs {
            cluster_plugins: plugins,
            configs: &[],
            fallback_architecture: fallback,
            own_namespace: "multiarch",
            max_attempts: 3,
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
        let reasons: Vec<&str> = done.events.iter().map(|e| e.reason).collect();
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
                .filter(|e| e.reason == "ArchAwareSchedGateAdded")
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
                .any(|e| e.reason == "ArchAwareFallbackPredicateSet")
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
        assert_eq!(done.events[1].reason, "ArchAwareGatedPodIgnored");
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
                .any(|e| e.reason == "ArchAwarePredicatesConflict")
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
                .any(|e| e.reason == "NoSupportedArchitecturesFound")
        );
    }

    #[test]
    fn preference_events_name_each_source_in_priority_order() {
        let config = |name: &str,
                      priority: u8,
                      platforms: serde_json::Value|
         -> PodPlacementConfig {
            serde_json::from_value(json!({
                "apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig",
                "metadata": {"name": name, "namespace": "shop"},
                "spec": {"priority": priority, "plugins": {"nodeAffinityScoring": {"enabled": true, "platforms": platforms}}}
            }))
            .unwrap()
        };
        let configs = [
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
        ];
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
            .map(|e| (e.reason, e.message.as_str()))
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
}
