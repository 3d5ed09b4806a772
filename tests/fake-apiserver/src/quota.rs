//! ResourceQuota admission for the pod count, as the real server's runs last in the
//! chain: a pod created (or dry-run created) in a namespace whose quota's `pods` is
//! already used up is refused with its 403 and its words. Pods that finished
//! (Succeeded, Failed) or are being deleted do not count, as on the real server.

use axum::response::Response;
use serde_json::Value;

use super::{Store, status};

/// The refusal of a pod named `name` in `namespace`, `None` when every quota has room.
pub(crate) fn admit_pod(store: &Store, namespace: &str, name: &str) -> Option<Response> {
    let used = store
        .objects
        .iter()
        .filter(|(k, pod)| {
            k.resource == "pods"
                && k.namespace == namespace
                && pod["metadata"]["deletionTimestamp"].is_null()
                && !matches!(
                    pod["status"]["phase"].as_str(),
                    Some("Succeeded" | "Failed")
                )
        })
        .count();
    store
        .objects
        .iter()
        .filter(|(k, _)| k.resource == "resourcequotas" && k.namespace == namespace)
        .find_map(|(k, quota)| {
            let limit = hard_pods(quota)?;
            (used + 1 > limit).then(|| {
                status(
                    403,
                    "Forbidden",
                    &format!(
                        "pods \"{name}\" is forbidden: exceeded quota: {}, requested: pods=1, used: pods={used}, limited: pods={limit}",
                        k.name
                    ),
                    name,
                    "pods",
                )
            })
        })
}

fn hard_pods(quota: &Value) -> Option<usize> {
    match &quota["spec"]["hard"]["pods"] {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64().and_then(|n| usize::try_from(n).ok()),
        _ => None,
    }
}
