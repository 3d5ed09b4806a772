//! A `celArchitecturePlacement` decision at admission, in both modes: the pod's own
//! `kubernetes.io/arch` constraint is replaced by the rule's (the only moment it can be:
//! a created pod's node affinity can only be narrowed, and only while it is gated), the
//! decision is recorded in an annotation, and in scheduler mode the preferred terms of
//! `nodeAffinityScoring` among the decided architectures join the routing patch. No image
//! is looked up for such a pod. Pure.

use k8s_openapi::api::core::v1::Pod;
use multiarch_crd::PlacementMode;
use multiarch_crd::names::ANNOTATION_ARCHITECTURE_RULE;
use multiarch_policy::{
    affinity_writer::{merge_preferred, preferred_architectures},
    arch_constraint::impose_rule,
    architecture_rules::ArchitectureDecision,
    preferences::{architecture_preferences, preferences_apply, skip_outside, sources_annotation},
};
use serde_json::{Value, json};

use super::{
    admission_affinity::diff,
    decision::{Decision, WebhookConfig},
    sent_fields::{SentField, SentFields},
};
use multiarch_crd::names::ANNOTATION_SOURCES;

/// The operations that apply the decision's rule to the pod as the API server sent it
/// (`sent`). A routed or gated pod no rule decides loses an architecture-rule annotation
/// it came with: only the webhook records a decision.
pub fn rule_patch(
    sent: &SentFields,
    pod: &Pod,
    namespace: &str,
    config: &WebhookConfig,
    decision: &Decision,
) -> Vec<Value> {
    // Not exempt: routed to the scheduler, or gated for the gate controller.
    let placed_by_us = decision.exemption.is_none();
    let Some(rule) = decision.architecture_rule.as_ref().filter(|_| placed_by_us) else {
        let claimed = sent
            .get(SentField::Annotations)
            .and_then(|a| a.get(ANNOTATION_ARCHITECTURE_RULE))
            .is_some();
        return if placed_by_us && claimed {
            vec![json!({
                "op": "remove",
                "path": format!("/metadata/annotations/{}", ANNOTATION_ARCHITECTURE_RULE.replace('/', "~1")),
            })]
        } else {
            Vec::new()
        };
    };
    let mut constrained = pod.clone();
    impose_rule(&mut constrained, &rule.architectures);
    annotate(
        &mut constrained,
        ANNOTATION_ARCHITECTURE_RULE,
        rule.source(),
    );
    // Gated pods get their preferences from the gate controller, as every gated pod.
    let routed = config.mode == PlacementMode::Scheduler && decision.unsupported.is_empty();
    if routed {
        prefer_within(&mut constrained, namespace, config, rule);
    }
    diff(
        sent,
        &constrained,
        &[
            SentField::NodeSelector,
            SentField::Affinity,
            SentField::Annotations,
        ],
    )
}

/// The configured preferences, among the rule's architectures only.
fn prefer_within(
    pod: &mut Pod,
    namespace: &str,
    config: &WebhookConfig,
    rule: &ArchitectureDecision,
) {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let cluster = config.cluster_plugins.as_ref();
    if !preferences_apply(namespace, &labels, &config.pod_configs, cluster) {
        return;
    }
    let own = preferred_architectures(pod);
    let mut preferences =
        architecture_preferences(namespace, &labels, &own, &config.pod_configs, cluster);
    skip_outside(&mut preferences, &rule.architectures);
    if preferences.is_empty() {
        return;
    }
    merge_preferred(pod, &preferences);
    annotate(pod, ANNOTATION_SOURCES, sources_annotation(&preferences));
}

fn annotate(pod: &mut Pod, key: &str, value: String) {
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value);
}

#[cfg(test)]
#[path = "architecture_rule_tests.rs"]
mod tests;
