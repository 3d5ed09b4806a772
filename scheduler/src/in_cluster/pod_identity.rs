//! Writes to a pod by name that must only land on the pod the scheduler decided about,
//! not on a pod re-created since with the same name. A status patch carries the pod's UID
//! in its `metadata`: the API server refuses a patch whose UID differs from the stored
//! object's (`422 Invalid`, `metadata.uid: ... field is immutable`, recorded from
//! kube-apiserver 1.36.2 in `tests/fixtures/apiserver/pod-status-patch-uid-mismatch.json`)
//! and answers `404` once no pod has the name.

use serde_json::{Value, json};

/// `patch` (a strategic-merge patch of `pods/status`) that applies only to the pod with `uid`.
pub fn for_pod_uid(mut patch: Value, uid: &str) -> Value {
    if let Some(object) = patch.as_object_mut() {
        let metadata = object.entry("metadata").or_insert_with(|| json!({}));
        metadata["uid"] = json!(uid);
    }
    patch
}

/// The pod the write was for is gone (`404`) or its name now belongs to another pod (the
/// UID in the patch was refused): nothing to write, not an error to retry.
pub fn is_gone_or_replaced(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) if status.code == 404 => true,
        kube::Error::Api(status) if status.code == 422 => status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid")),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;

    #[test]
    fn the_uid_joins_the_patch_s_metadata() {
        let patch = for_pod_uid(json!({"status": {"nominatedNodeName": "n1"}}), "u-1");
        assert_eq!(
            patch,
            json!({"metadata": {"uid": "u-1"}, "status": {"nominatedNodeName": "n1"}})
        );
        let kept = for_pod_uid(json!({"metadata": {"labels": {"a": "b"}}}), "u-2");
        assert_eq!(
            kept,
            json!({"metadata": {"labels": {"a": "b"}, "uid": "u-2"}})
        );
    }

    #[test]
    fn the_api_server_s_refusal_of_another_uid_reads_as_replaced() {
        let recorded: kube::core::Status = serde_json::from_str(include_str!(
            "../../../tests/fixtures/apiserver/pod-status-patch-uid-mismatch.json"
        ))
        .unwrap();
        assert!(is_gone_or_replaced(&kube::Error::Api(Box::new(
            recorded.clone()
        ))));
        let mut other_invalid = recorded.clone();
        for cause in &mut other_invalid.details.as_mut().unwrap().causes {
            cause.field = "status.conditions".into();
        }
        assert!(!is_gone_or_replaced(&kube::Error::Api(Box::new(
            other_invalid
        ))));
        let mut not_found = recorded.clone();
        not_found.code = 404;
        not_found.details = None;
        assert!(is_gone_or_replaced(&kube::Error::Api(Box::new(not_found))));
        let mut unavailable = recorded;
        unavailable.code = 503;
        assert!(!is_gone_or_replaced(&kube::Error::Api(Box::new(
            unavailable
        ))));
    }
}
