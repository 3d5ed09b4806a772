//! The architecture constraint at admission (scheduler mode): when the pod's image
//! platforms are known in time, the required node affinity the gate path writes (one
//! shared function) and the preferred terms of the placement configurations join the
//! patch that sets `schedulerName`. Cluster autoscalers and Karpenter read the pod spec;
//! with the constraint in it they add nodes the pod can run on. No extra API write.
//! Pure: the lookup that produces the platforms is in `image_lookup`.

use k8s_openapi::api::core::v1::Pod;
use multiarch_policy::{
    affinity_writer::{merge_preferred, preferred_architectures},
    arch_constraint::{Constrained, constrain},
    platform::Platform,
    preferences::{architecture_preferences, preferences_apply, sources_annotation},
};
use serde_json::{Value, json};

use super::{
    decision::WebhookConfig,
    sent_fields::{SentField, SentFields},
};
use multiarch_crd::names::ANNOTATION_SOURCES;
use multiarch_crd::{ClusterPlugins, UnknownNodeLevel};

/// What admission did about the constraint, for the metric and the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionAffinityResult {
    /// `kubernetes.io/arch In [...]` written.
    Set,
    /// No platform in common, or the user's pin excludes every build: a requirement no
    /// node meets, so autoscalers do not scale up for the pod.
    Unsatisfiable,
    /// The user's own architecture constraint stands (preferred terms may be added).
    UserPinned,
    /// Not every image answered within the deadline: routed without it (the scheduler
    /// still filters by the images; the lookup goes on and warms the cache).
    TimedOut,
    /// An image could not be inspected: routed without it.
    Failed,
    /// Too many lookups in flight: routed without one.
    Busy,
    /// Every image is an OLM bundle image, runnable everywhere: no constraint to write.
    Unconstrained,
}

impl AdmissionAffinityResult {
    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionAffinityResult::Set => "set",
            AdmissionAffinityResult::Unsatisfiable => "unsatisfiable",
            AdmissionAffinityResult::UserPinned => "user_pinned",
            AdmissionAffinityResult::TimedOut => "timed_out",
            AdmissionAffinityResult::Failed => "failed",
            AdmissionAffinityResult::Busy => "busy",
            AdmissionAffinityResult::Unconstrained => "unconstrained",
        }
    }

    /// The pod left admission with an architecture constraint in its spec.
    pub fn constrained(self) -> bool {
        matches!(
            self,
            AdmissionAffinityResult::Set
                | AdmissionAffinityResult::Unsatisfiable
                | AdmissionAffinityResult::UserPinned
        )
    }
}

/// The JSONPatch operations that add the constraint for `platforms` (the pod's compatible
/// platforms) to the pod as the API server sent it (`sent`; `pod` is its typed reading),
/// and what they do. The operations touch only `spec.affinity` and
/// `metadata.annotations`, never `schedulerName`, so they join the routing patch as they
/// are; they are computed against `sent`, so they apply to exactly what the API server
/// holds.
pub fn constraint_patch(
    sent: &SentFields,
    pod: &Pod,
    namespace: &str,
    config: &WebhookConfig,
    platforms: &[Platform],
) -> (Vec<Value>, AdmissionAffinityResult) {
    let mut constrained = pod.clone();
    let unknown = config.cluster_plugins.as_ref().map_or(
        UnknownNodeLevel::AnyLevel,
        ClusterPlugins::unknown_node_level,
    );
    let result = match constrain(&mut constrained, platforms, unknown) {
        Constrained::Architectures(_) => AdmissionAffinityResult::Set,
        Constrained::NoSupportedArch | Constrained::PinContradicted => {
            AdmissionAffinityResult::Unsatisfiable
        }
        Constrained::UserPinned => AdmissionAffinityResult::UserPinned,
    };
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let cluster = config.cluster_plugins.as_ref();
    if preferences_apply(namespace, &labels, &config.pod_configs, cluster) {
        let own = preferred_architectures(&constrained);
        let preferences =
            architecture_preferences(namespace, &labels, &own, &config.pod_configs, cluster);
        if !preferences.is_empty() {
            merge_preferred(&mut constrained, &preferences);
            constrained
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(ANNOTATION_SOURCES.into(), sources_annotation(&preferences));
        }
    }
    (
        diff(
            sent,
            &constrained,
            &[SentField::Affinity, SentField::Annotations],
        ),
        result,
    )
}

/// Minimal operations from the fields as `sent` to these fields of the constrained pod (a
/// field the constrained pod does not have is left as it is; a field whose parent was
/// not sent is not written). Each field is compared on its own: nothing else of the
/// object is read or copied.
pub(super) fn diff(sent: &SentFields, constrained: &Pod, fields: &[SentField]) -> Vec<Value> {
    let mut ops = Vec::new();
    for &field in fields {
        if !sent.has_parent(field) {
            continue;
        }
        let (pointer, _) = field.pointer();
        let wanted = match field {
            SentField::Annotations => constrained
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| serde_json::to_value(a).ok()),
            SentField::Affinity => constrained
                .spec
                .as_ref()
                .and_then(|s| s.affinity.as_ref())
                .and_then(|a| serde_json::to_value(a).ok()),
            SentField::NodeSelector => constrained
                .spec
                .as_ref()
                .and_then(|s| s.node_selector.as_ref())
                .and_then(|n| serde_json::to_value(n).ok()),
        };
        let Some(wanted) = wanted.filter(|w| !w.is_null()) else {
            continue;
        };
        match sent.get(field) {
            None => ops.push(json!({"op": "add", "path": pointer, "value": wanted})),
            Some(before) => {
                let Ok(Value::Array(inner)) =
                    serde_json::to_value(json_patch::diff(before, &wanted))
                else {
                    continue;
                };
                ops.extend(inner.into_iter().map(|mut op| {
                    for key in ["path", "from"] {
                        if let Some(path) = op.get(key).and_then(Value::as_str) {
                            op[key] = json!(format!("{pointer}{path}"));
                        }
                    }
                    op
                }));
            }
        }
    }
    ops
}

#[cfg(test)]
#[path = "admission_affinity_tests.rs"]
mod tests;
