//! One pass of the gate controller over a gated pod (MTO's pod reconciler, reference
//! §2.4-2.9, improved): pure, so every branch is a table test. The caller inspects the
//! images (when `needs_inspection`), writes the returned pod with one update, and
//! publishes the events.

use k8s_openapi::api::core::v1::Pod;
use multiarch_crd::names::ANNOTATION_ARCHITECTURE_RULE;
use multiarch_crd::{
    Architecture, ClusterPlugins, UnknownNodeLevel,
    names::{
        ANNOTATION_INSPECT_ERROR, ANNOTATION_SOURCES, LABEL_FALLBACK, LABEL_INSPECT_ERROR,
        LABEL_INSPECT_ERROR_COUNT, LABEL_NODE_AFFINITY, LABEL_PREFERRED_NODE_AFFINITY,
        LABEL_SCHEDULING_GATE, SCHEDULING_GATE,
    },
};
use multiarch_policy::{
    affinity_writer::{
        ArchRequirement, architecture_required, merge_preferred, merge_required,
        preferred_architectures,
    },
    arch_constraint::{Constrained, constrain},
    architecture_rules::{ArchitectureDecision, ArchitectureRules, RuleSubject},
    exemption::{architecture_set, exemption},
    platform::Platform,
    pod_configs::NamespacedConfigs,
    preferences::{
        ArchPreference, architecture_preferences, preferences_apply, skip_outside,
        sources_annotation,
    },
};
use multiarch_runtime::event_reason::EventReason;

/// What the controller knows besides the pod.
pub struct GateInputs<'a> {
    pub cluster_plugins: Option<&'a ClusterPlugins>,
    pub configs: &'a NamespacedConfigs,
    pub fallback_architecture: Option<&'a str>,
    pub own_namespace: &'a str,
    /// Inspection attempts before the fallback (or ungating without affinity).
    pub max_attempts: u32,
    /// The `celArchitecturePlacement` rules of the pod's namespace, compiled.
    pub architecture_rules: &'a ArchitectureRules,
}

/// The images' answer for this pass.
#[derive(Clone, Debug)]
pub enum Inspection {
    /// The platforms every image supports (the shared compatibility function's result).
    Compatible(Vec<Platform>),
    /// No image confines the pod: every one is an OLM bundle image (data, never run).
    Anywhere,
    Failed(String),
    /// The required affinity is the user's; nothing was inspected.
    NotNeeded,
}

/// An event the pass publishes on the pod (its type is the reason's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateEvent {
    pub reason: EventReason,
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

/// What the namespace's rules decide for the pod (`None`: its images do).
pub fn architecture_rule(pod: &Pod, inputs: &GateInputs<'_>) -> Option<ArchitectureDecision> {
    let meta = &pod.metadata;
    let name = meta.name.as_deref().unwrap_or_default();
    inputs
        .architecture_rules
        .decide(RuleSubject::of(meta, name, namespace(pod)))
}

/// MTO's `shouldIgnorePod`, on the controller side: the shared exemptions, and MTO's
/// gate-mode rule that the pod's own architecture constraints are complete (unless a
/// rule decides its architectures, which replaced them at admission).
fn ignored(pod: &Pod, inputs: &GateInputs<'_>, rule: Option<&ArchitectureDecision>) -> bool {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let preferences = preferences_apply(
        namespace(pod),
        &labels,
        inputs.configs,
        inputs.cluster_plugins,
    );
    exemption(pod, namespace(pod), inputs.own_namespace).is_some()
        || (rule.is_none() && architecture_set(pod, preferences))
}

/// Whether this pass needs the images' platforms: never for a pod a rule decides.
pub fn needs_inspection(pod: &Pod, inputs: &GateInputs<'_>) -> bool {
    let rule = architecture_rule(pod, inputs);
    has_gate(pod) && rule.is_none() && !ignored(pod, inputs, None) && !architecture_required(pod)
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

fn event(reason: EventReason, message: String) -> GateEvent {
    GateEvent { reason, message }
}

/// The preferred affinity of the pod's own preference and its configurations (within a
/// rule's architectures), written once.
fn prefer(
    pod: &mut Pod,
    inputs: &GateInputs<'_>,
    rule: Option<&ArchitectureDecision>,
    events: &mut Vec<GateEvent>,
) {
    let own = preferred_architectures(pod);
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let mut preferences = architecture_preferences(
        namespace(pod),
        &labels,
        &own,
        inputs.configs,
        inputs.cluster_plugins,
    );
    if let Some(rule) = rule {
        skip_outside(&mut preferences, &rule.architectures);
    }
    if !preferences.is_empty()
        && pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_PREFERRED_NODE_AFFINITY))
            .map(String::as_str)
            != Some("set")
    {
        if merge_preferred(pod, &preferences) > 0 {
            set_label(pod, LABEL_PREFERRED_NODE_AFFINITY, "set");
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
}

/// A failed inspection, counted on the pod: `Some(attempts)` to retry, `None` once the
/// attempts are spent (the fallback architecture, if any, is set).
fn inspection_failed(
    pod: &mut Pod,
    inputs: &GateInputs<'_>,
    error: &str,
    events: &mut Vec<GateEvent>,
) -> Option<u32> {
    let attempts = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_INSPECT_ERROR_COUNT))
        .and_then(|c| c.parse::<u32>().ok())
        .unwrap_or(0)
        + 1;
    set_label(pod, LABEL_INSPECT_ERROR, "");
    set_label(pod, LABEL_INSPECT_ERROR_COUNT, &attempts.to_string());
    let short: String = error.chars().take(256).collect();
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION_INSPECT_ERROR.into(), short);
    if attempts < inputs.max_attempts {
        events.push(event(EventReason::ArchAwareInspectionError, format!("The images' architectures could not be read; retrying with backoff. Registry error: {error}")));
        return Some(attempts);
    }
    events.push(event(EventReason::ArchAwareInspectionError, format!("The images' architectures could not be read after {attempts} attempts. Registry error: {error}")));
    match inputs.fallback_architecture {
        Some(fallback) => {
            merge_required(pod, &ArchRequirement::In(vec![fallback.to_owned()]));
            set_label(pod, LABEL_FALLBACK, fallback);
            set_label(pod, LABEL_NODE_AFFINITY, "set");
            events.push(event(EventReason::ArchAwareFallbackPredicateSet, format!("Image inspection failed; setting the nodeAffinity to the fallback architecture: {{{fallback}}}")));
        }
        None => set_label(pod, LABEL_NODE_AFFINITY, "not-set"),
    }
    None
}

/// The pod's required affinity set to the architectures its images share, and said.
fn constrain_to(
    pod: &mut Pod,
    platforms: &[Platform],
    unknown: UnknownNodeLevel,
    events: &mut Vec<GateEvent>,
) {
    // Only pods without their own architecture constraint get here.
    let requirement = match constrain(pod, platforms, unknown) {
        Constrained::Architectures(archs) => ArchRequirement::In(archs),
        _ => ArchRequirement::NoSupportedArch,
    };
    set_label(pod, LABEL_NODE_AFFINITY, "set");
    if let Some(labels) = pod.metadata.labels.as_mut() {
        labels.remove(LABEL_INSPECT_ERROR);
    }
    match &requirement {
        ArchRequirement::In(archs) => {
            label_architectures(pod, archs);
            events.push(event(
                EventReason::ArchAwarePredicateSet,
                format!(
                    "Set the supported architectures to {{{}}}",
                    archs.join(", ")
                ),
            ));
        }
        ArchRequirement::NoSupportedArch => {
            events.push(event(
                EventReason::NoSupportedArchitecturesFound,
                "Pod cannot be scheduled due to incompatible image architectures; container images have no supported architectures in common".into(),
            ));
        }
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
        events.push(event(
            EventReason::ArchAwareSchedGateAdded,
            format!("Successfully gated with the {SCHEDULING_GATE} scheduling gate"),
        ));
    }
    let rule = architecture_rule(&pod, inputs);
    if ignored(&pod, inputs, rule.as_ref()) {
        remove_gate(&mut pod);
        events.push(event(EventReason::ArchAwareGatedPodIgnored, "The gated pod has been modified and is no longer eligible for architecture-aware scheduling".into()));
        return Some(Processed {
            pod,
            events,
            retry: None,
        });
    }

    // Preferred affinity first: it is there even when inspection fails.
    prefer(&mut pod, inputs, rule.as_ref(), &mut events);

    if let Some(rule) = &rule {
        decided_by_rule(&mut pod, rule, &mut events);
        remove_gate(&mut pod);
        events.push(event(
            EventReason::ArchAwareSchedGateRemovalSuccess,
            format!("Successfully removed the {SCHEDULING_GATE} scheduling gate"),
        ));
        return Some(Processed {
            pod,
            events,
            retry: None,
        });
    }
    match inspection {
        Inspection::NotNeeded => {
            set_label(&mut pod, LABEL_NODE_AFFINITY, "not-set");
            events.push(event(
                EventReason::ArchAwarePredicatesConflict,
                "All the scheduling predicates already include architecture-specific constraints"
                    .into(),
            ));
        }
        Inspection::Anywhere => {
            set_label(&mut pod, LABEL_NODE_AFFINITY, "not-set");
            if let Some(labels) = pod.metadata.labels.as_mut() {
                labels.remove(LABEL_INSPECT_ERROR);
            }
            events.push(event(
                EventReason::ArchAwareOperatorBundle,
                "The pod's images are operator bundle images (manifests, never executed): they run on every architecture, so no architecture constraint was set".into(),
            ));
        }
        Inspection::Compatible(platforms) => {
            let unknown = inputs.cluster_plugins.map_or(
                UnknownNodeLevel::AnyLevel,
                ClusterPlugins::unknown_node_level,
            );
            constrain_to(&mut pod, &platforms, unknown, &mut events);
        }
        Inspection::Failed(error) => {
            if let Some(attempts) = inspection_failed(&mut pod, inputs, &error, &mut events) {
                return Some(Processed {
                    pod,
                    events,
                    retry: Some(attempts),
                });
            }
        }
    }
    remove_gate(&mut pod);
    events.push(event(
        EventReason::ArchAwareSchedGateRemovalSuccess,
        format!("Successfully removed the {SCHEDULING_GATE} scheduling gate"),
    ));
    Some(Processed {
        pod,
        events,
        retry: None,
    })
}

/// MTO's labels for the architectures a pod was given.
fn label_architectures(pod: &mut Pod, archs: &[String]) {
    let kind = if archs.len() == 1 {
        "multiarch.openshift.io/single-arch"
    } else {
        "multiarch.openshift.io/multi-arch"
    };
    set_label(pod, kind, "");
    for arch in archs
        .iter()
        .filter(|a| Architecture::NAMES.contains(&a.as_str()))
    {
        set_label(pod, &format!("multiarch.openshift.io/{arch}"), "");
    }
}

/// A rule decided: its requirement (the webhook replaced the pod's own constraint with it
/// at admission; here it is ANDed in, which leaves an already constrained term as it is),
/// MTO's labels, the decision recorded, and the event that names the rule.
fn decided_by_rule(pod: &mut Pod, rule: &ArchitectureDecision, events: &mut Vec<GateEvent>) {
    let mut archs = rule.architectures.clone();
    archs.sort();
    archs.dedup();
    merge_required(pod, &ArchRequirement::In(archs.clone()));
    set_label(pod, LABEL_NODE_AFFINITY, "set");
    label_architectures(pod, &archs);
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION_ARCHITECTURE_RULE.into(), rule.source());
    events.push(event(
        EventReason::ArchAwarePredicateSet,
        format!(
            "Set the supported architectures to {{{}}} by {}",
            archs.join(", "),
            rule.describe()
        ),
    ));
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
                event(
                    EventReason::ArchAwarePredicateSet,
                    format!("Applied all architecture preferences from configuration source: {source}"),
                )
            } else if skipped.len() < of_source().count() {
                event(
                    EventReason::ArchAwarePredicateSet,
                    format!(
                        "Applied some architecture preferences from configuration; others were already set source: {source}, skipped: {}",
                        skipped.join(", ")
                    ),
                )
            } else {
                event(
                    EventReason::ArchAwarePreferredAffinityDuplicates,
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
mod tests;
