//! The Kubernetes binder: the pod's volume decisions first (VolumeBinding's PreBind),
//! then `POST pods/NAME/binding` with the pod's UID as precondition, in background tasks
//! with bounded concurrency of API calls; every outcome goes back to the loop, even if
//! the task dies, and a binding is cancelled when its pod is deleted.

use super::inbox_sender::InboxSender;
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::api::core::v1::{Binding as K8sBinding, ObjectReference, Pod};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use multiarch_runtime::rate_limit::TokenBucket;

use super::{
    inbox::{BindOutcome, Inbox},
    metrics::SchedulerMetrics,
    volume_writer,
};
use crate::core::binder::{Binder, Binding};

/// Sends `Failed` for a binding whose task ends without an outcome (it panicked), so the
/// pod is never left assumed and forgotten.
struct Completion {
    inbox: InboxSender,
    uid: String,
    sent: bool,
}

impl Completion {
    fn send(mut self, outcome: BindOutcome) {
        self.sent = true;
        self.inbox.deliver(Inbox::Bind {
            uid: self.uid.clone(),
            outcome,
        });
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if !self.sent {
            self.inbox.deliver(Inbox::Bind {
                uid: self.uid.clone(),
                outcome: BindOutcome::Failed("the binding task ended unexpectedly".into()),
            });
        }
    }
}

pub struct KubeBinder {
    client: kube::Client,
    permits: Arc<Semaphore>,
    inbox: InboxSender,
    metrics: SchedulerMetrics,
    limiter: Arc<TokenBucket>,
    volume_bind_timeout: Duration,
    /// Bindings under way, by pod UID.
    running: Arc<Mutex<HashMap<String, CancellationToken>>>,
}

impl KubeBinder {
    pub fn new(
        client: kube::Client,
        concurrency: usize,
        inbox: InboxSender,
        metrics: SchedulerMetrics,
        limiter: Arc<TokenBucket>,
        volume_bind_timeout: Duration,
    ) -> Self {
        KubeBinder {
            client,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            inbox,
            metrics,
            limiter,
            volume_bind_timeout,
            running: Arc::default(),
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stops the binding of a deleted pod (its volumes may be waited for for minutes).
    pub fn cancel(&self, uid: &str) {
        if let Some(token) = self.running().remove(uid) {
            token.cancel();
        }
    }

    /// Stops every binding under way (the lease is going or gone): each reports `Gone`.
    /// A request already on the wire may still land; none is started after this.
    pub fn cancel_all(&self) {
        for (_, token) in self.running().drain() {
            token.cancel();
        }
    }
}

impl Binder for KubeBinder {
    fn bind(&mut self, binding: Binding) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &binding.namespace);
        let client = self.client.clone();
        let permits = self.permits.clone();
        let metrics = self.metrics.clone();
        let limiter = self.limiter.clone();
        let timeout = self.volume_bind_timeout;
        let cancel = CancellationToken::new();
        self.running().insert(binding.uid.clone(), cancel.clone());
        let running = self.running.clone();
        let completion = Completion {
            inbox: self.inbox.clone(),
            uid: binding.uid.clone(),
            sent: false,
        };
        tokio::spawn(async move {
            let work = async {
                if !binding.volumes.is_empty() {
                    let started = std::time::Instant::now();
                    let result = volume_writer::bind_volumes(
                        &client,
                        &binding.volumes,
                        &binding.node,
                        timeout,
                        &limiter,
                    )
                    .await;
                    metrics
                        .volume_binding_seconds
                        .observe(started.elapsed().as_secs_f64());
                    if let Err(e) = result {
                        return BindOutcome::Failed(format!(
                            "running PreBind plugin \"VolumeBinding\": binding volumes: {e}"
                        ));
                    }
                }
                let Ok(_permit) = permits.acquire().await else {
                    return BindOutcome::Failed("the binder is shutting down".into());
                };
                limiter.acquire().await;
                let started = std::time::Instant::now();
                let body = K8sBinding {
                    metadata: ObjectMeta {
                        name: Some(binding.name.clone()),
                        namespace: Some(binding.namespace.clone()),
                        uid: Some(binding.uid.clone()),
                        ..ObjectMeta::default()
                    },
                    target: ObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Node".into()),
                        name: Some(binding.node.clone()),
                        ..ObjectReference::default()
                    },
                };
                let result = api
                    .create_subresource::<K8sBinding, serde_json::Value>(
                        "binding",
                        &binding.name,
                        &PostParams::default(),
                        &body,
                    )
                    .await;
                metrics
                    .binding_seconds
                    .observe(started.elapsed().as_secs_f64());
                match result {
                    Ok(_) => BindOutcome::Bound,
                    Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                        BindOutcome::Gone(status.message)
                    }
                    Err(e) => BindOutcome::Failed(e.to_string()),
                }
            };
            let outcome = tokio::select! {
                () = cancel.cancelled() => {
                    BindOutcome::Gone("the binding was cancelled (the pod was deleted, or this replica stopped leading)".into())
                }
                outcome = work => outcome,
            };
            running
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&binding.uid);
            completion.send(outcome);
        });
    }
}
