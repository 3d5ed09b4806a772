//! AdmissionReview v1 in, AdmissionReview v1 out.
//!
//! The response is written here rather than with kube-core's `AdmissionResponse`, which
//! serializes `patch` as an array of numbers; the API server (Go `[]byte`) wants base64,
//! as in the responses recorded from a real one.

use base64::Engine;
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
use serde_json::{Value, json};

use super::decision::{Decision, WebhookConfig, decide};

#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("the request is not an AdmissionReview v1 with a request: {0}")]
    Decode(String),
}

/// The response AdmissionReview, and the decision (none when the request was not a pod
/// CREATE).
pub fn review(
    body: &[u8],
    config: &WebhookConfig,
) -> Result<(Value, Option<Decision>), ReviewError> {
    let review: AdmissionReview<Pod> =
        serde_json::from_slice(body).map_err(|e| ReviewError::Decode(e.to_string()))?;
    let request: AdmissionRequest<Pod> =
        review
            .try_into()
            .map_err(|e: kube::core::admission::ConvertAdmissionReviewError| {
                ReviewError::Decode(e.to_string())
            })?;
    let mut response = json!({"uid": request.uid, "allowed": true});
    let decision = match (&request.operation, request.object.as_ref()) {
        (Operation::Create, Some(pod)) => {
            let namespace = request
                .namespace
                .clone()
                .or_else(|| pod.metadata.namespace.clone())
                .unwrap_or_default();
            Some(decide(pod, &namespace, config))
        }
        _ => None,
    };
    if let Some(d) = decision.as_ref().filter(|d| !d.patch.is_empty()) {
        let bytes = serde_json::to_vec(&d.patch)
            .map_err(|e| ReviewError::Decode(format!("internal: {e}")))?;
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    Ok((
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
        decision,
    ))
}
