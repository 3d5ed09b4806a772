//! What happens around a write besides the write: `metadata.generation` for kinds that
//! have one, finalizers (a delete marks the object and waits for them, as recorded), and
//! owner references (kube-controller-manager's garbage collector, run here at once: an
//! object whose owners are all gone is deleted).

use serde_json::{Value, json};

use crate::apiextensions::FieldError;

/// Kinds the real server gives a `metadata.generation` (spec changes bump it).
pub fn has_generation(resource: &str) -> bool {
    let group = resource.split_once('/').map_or("", |(g, _)| g);
    matches!(
        group,
        "apps"
            | "batch"
            | "admissionregistration.k8s.io"
            | "policy"
            | "networking.k8s.io"
            | "apiextensions.k8s.io"
            | "monitoring.coreos.com"
            | "multiarch.openshift.io"
    )
}

/// Everything but `metadata` and `status`: what a generation counts.
fn spec_part(object: &Value) -> Value {
    let mut v = object.clone();
    if let Some(map) = v.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
        map.remove("apiVersion");
        map.remove("kind");
    }
    v
}

/// Sets `new`'s generation from `old`'s: 1 on create, one more when the spec changed.
pub fn set_generation(resource: &str, old: Option<&Value>, new: &mut Value) {
    if !has_generation(resource) {
        return;
    }
    let generation = match old {
        None => 1,
        Some(old) => {
            let previous = old["metadata"]["generation"].as_i64().unwrap_or(1);
            if spec_part(old) == spec_part(new) {
                previous
            } else {
                previous + 1
            }
        }
    };
    new["metadata"]["generation"] = json!(generation);
}

fn finalizers(object: &Value) -> Vec<&str> {
    object["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

pub fn has_finalizers(object: &Value) -> bool {
    !finalizers(object).is_empty()
}

pub fn deleting(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

/// The real server's refusal of a finalizer added to an object being deleted.
pub fn finalizer_added_while_deleting(old: &Value, new: &Value) -> Option<FieldError> {
    if !deleting(old) {
        return None;
    }
    let before = finalizers(old);
    finalizers(new)
        .iter()
        .any(|f| !before.contains(f))
        .then(|| {
            FieldError::forbidden(
                "metadata.finalizers",
                "no new finalizers can be added if the object is being deleted",
            )
        })
}

/// The deletion marker a delete writes on an object that has finalizers (recorded:
/// `deletionTimestamp` now, grace period 0).
pub fn mark_deleted(object: &mut Value, now: &str) {
    if !deleting(object) {
        object["metadata"]["deletionTimestamp"] = json!(now);
        object["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    }
}

/// Whether the last finalizer of an object being deleted is gone: it goes too. A pod in
/// its termination grace period waits for the kubelet instead (`shouldDeleteDuringUpdate`
/// wants a grace period of 0).
pub fn finalized(object: &Value) -> bool {
    deleting(object)
        && !has_finalizers(object)
        && object["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .is_none_or(|g| g == 0)
}

/// `new` with the owner reference to `owner_uid` removed, and whether an owner is left.
pub fn without_owner(object: &Value, owner_uid: &str) -> Option<(Value, bool)> {
    let owners = object["metadata"]["ownerReferences"].as_array()?;
    if !owners.iter().any(|o| o["uid"] == owner_uid) {
        return None;
    }
    let left: Vec<Value> = owners
        .iter()
        .filter(|o| o["uid"] != owner_uid)
        .cloned()
        .collect();
    let mut updated = object.clone();
    let remaining = !left.is_empty();
    if remaining {
        updated["metadata"]["ownerReferences"] = Value::Array(left);
    } else if let Some(meta) = updated["metadata"].as_object_mut() {
        meta.remove("ownerReferences");
    }
    Some((updated, remaining))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_counts_spec_changes_only() {
        let mut first = json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}});
        set_generation("apps/deployments", None, &mut first);
        assert_eq!(first["metadata"]["generation"], 1);
        let mut status_only = first.clone();
        status_only["status"] = json!({"availableReplicas": 1});
        status_only["metadata"]["labels"] = json!({"a": "b"});
        set_generation("apps/deployments", Some(&first), &mut status_only);
        assert_eq!(status_only["metadata"]["generation"], 1);
        let mut scaled = status_only.clone();
        scaled["spec"]["replicas"] = json!(2);
        set_generation("apps/deployments", Some(&status_only), &mut scaled);
        assert_eq!(scaled["metadata"]["generation"], 2);
        let mut config = json!({"metadata": {"name": "c"}, "data": {}});
        set_generation("configmaps", None, &mut config);
        assert!(config["metadata"]["generation"].is_null());
    }

    #[test]
    fn finalizers_cannot_be_added_while_deleting() {
        let mut old = json!({"metadata": {"finalizers": ["a"]}});
        mark_deleted(&mut old, "2026-11-23T06:28:26Z");
        assert_eq!(old["metadata"]["deletionGracePeriodSeconds"], 0);
        let added = json!({"metadata": {"finalizers": ["a", "b"], "deletionTimestamp": "x"}});
        assert!(finalizer_added_while_deleting(&old, &added).is_some());
        let removed = json!({"metadata": {"deletionTimestamp": "x"}});
        assert!(finalizer_added_while_deleting(&old, &removed).is_none());
        assert!(finalized(&removed));
    }
}
