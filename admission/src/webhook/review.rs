//! AdmissionReview v1 in, AdmissionReview v1 out.
//!
//! The response is written here rather than with kube-core's `AdmissionResponse`, which
//! serializes `patch` as an array of numbers; the API server (Go `[]byte`) wants base64,
//! as in the responses recorded from a real one.

use base64::Engine;
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
use serde_json::{Value, json};

use super::{
    architecture_rule::rule_patch,
    decision::{Decision, WebhookConfig, decide},
    sent_fields::{SentFields, SentReview},
};

#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("the request is not an AdmissionReview v1 with a request: {0}")]
    Decode(String),
}

/// A decoded request: its UID, and for a pod CREATE the pod and its namespace.
pub struct Request {
    pub uid: String,
    pub pod: Option<(Pod, String)>,
    /// The fields patches write, as sent (patches are computed against them).
    pub sent: SentFields,
}

pub fn parse(body: &[u8]) -> Result<Request, ReviewError> {
    let review: AdmissionReview<Pod> =
        serde_json::from_slice(body).map_err(|e| ReviewError::Decode(e.to_string()))?;
    let request: AdmissionRequest<Pod> =
        review
            .try_into()
            .map_err(|e: kube::core::admission::ConvertAdmissionReviewError| {
                ReviewError::Decode(e.to_string())
            })?;
    let pod = match (&request.operation, request.object) {
        (Operation::Create, Some(pod)) => {
            let namespace = request
                .namespace
                .clone()
                .or_else(|| pod.metadata.namespace.clone())
                .unwrap_or_default();
            Some((pod, namespace))
        }
        _ => None,
    };
    // Only a pod CREATE is patched: no other request's object is read a second time.
    let sent = if pod.is_some() {
        serde_json::from_slice::<SentReview>(body)
            .map_err(|e| ReviewError::Decode(e.to_string()))?
            .request
            .and_then(|r| r.object)
            .unwrap_or_default()
    } else {
        SentFields::default()
    };
    Ok(Request {
        uid: request.uid,
        pod,
        sent,
    })
}

/// The response AdmissionReview allowing the request, with the patch when there is one.
pub fn respond(uid: &str, patch: &[Value]) -> Result<Value, ReviewError> {
    let mut response = json!({"uid": uid, "allowed": true});
    if !patch.is_empty() {
        let bytes =
            serde_json::to_vec(patch).map_err(|e| ReviewError::Decode(format!("internal: {e}")))?;
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    Ok(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
    )
}

impl Request {
    /// The webhook's decision on a pod CREATE, an architecture rule's patch included;
    /// none for any other request, or before the configuration and the DeviceClasses are
    /// read (the pod is admitted unchanged, as `failurePolicy: Ignore` would). The
    /// admission-time image lookup comes after it (`server::answer`).
    pub fn decide(&self, config: &WebhookConfig) -> Option<Decision> {
        let (pod, namespace) = self.pod.as_ref().filter(|_| config.not_ready().is_none())?;
        let mut decision = decide(pod, namespace, config);
        let rule_ops = rule_patch(&self.sent, pod, namespace, config, &decision);
        decision.patch.extend(rule_ops);
        Some(decision)
    }
}

/// The response AdmissionReview, and the decision (none when the request was not a pod
/// CREATE), without the admission-time lookup (see `server::answer`).
pub fn review(
    body: &[u8],
    config: &WebhookConfig,
) -> Result<(Value, Option<Decision>), ReviewError> {
    let request = parse(body)?;
    let decision = request.decide(config);
    let patch = decision
        .as_ref()
        .map(|d| d.patch.as_slice())
        .unwrap_or_default();
    Ok((respond(&request.uid, patch)?, decision))
}
