//! The yardstick: a client that binds each pending pod to the next node round-robin,
//! with no filtering or scoring, and writes one `Scheduled` event per pod as a scheduler
//! does: what the API server allows with the same client stack (token bucket at the same
//! QPS and burst, the same binding concurrency).

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use futures_util::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};
use multiarch_runtime::{
    event_reason::EventReason,
    event_recorder::{EventRecorder, pod_reference},
    rate_limit::TokenBucket,
};

/// The schedulerName of the baseline's pods (no scheduler claims it).
pub const BIND_ONLY_SCHEDULER: &str = "multiarch-bench-bind-only";

/// Binds `pods` (name, uid) in `namespace` to `nodes` round-robin; the number of
/// bindings the API server refused.
pub async fn bind_all(
    client: kube::Client,
    namespace: &str,
    pods: Vec<(String, String)>,
    nodes: &[String],
    limiter: Arc<TokenBucket>,
    concurrency: usize,
) -> usize {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let events = EventRecorder::new(client, BIND_ONLY_SCHEDULER, "bench");
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    stream::iter(pods)
        .for_each_concurrent(concurrency.max(1), |(name, uid)| {
            let node = nodes[next.fetch_add(1, Ordering::Relaxed) % nodes.len().max(1)].clone();
            let (api, events, limiter, failed) = (&api, &events, &limiter, &failed);
            async move {
                let binding = Binding {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        uid: Some(uid.clone()),
                        ..ObjectMeta::default()
                    },
                    target: ObjectReference {
                        kind: Some("Node".into()),
                        name: Some(node.clone()),
                        ..ObjectReference::default()
                    },
                };
                limiter.acquire().await;
                let bound = api
                    .create_subresource::<Binding, serde_json::Value>(
                        "binding",
                        &name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await;
                if let Err(e) = bound {
                    tracing::warn!(pod = %name, error = %e, "bind-only: binding refused");
                    failed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                limiter.acquire().await;
                let reference =
                    pod_reference(api.namespace().unwrap_or_default(), &name, Some(uid));
                let note = format!(
                    "Successfully assigned {}/{name} to {node}",
                    reference.namespace.clone().unwrap_or_default()
                );
                if let Err(e) = events
                    .publish(&reference, EventReason::Scheduled, "Binding", note)
                    .await
                {
                    tracing::warn!(pod = %name, error = %e, "bind-only: event refused");
                }
            }
        })
        .await;
    failed.into_inner()
}
