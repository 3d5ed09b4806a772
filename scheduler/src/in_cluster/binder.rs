//! The Kubernetes binder: `POST pods/NAME/binding` with the pod's UID as precondition, in
//! background tasks with bounded concurrency; outcomes go back to the loop.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Binding as K8sBinding, ObjectReference, Pod};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};
use tokio::sync::{Semaphore, mpsc};

use multiarch_runtime::rate_limit::TokenBucket;

use super::{
    inbox::{BindOutcome, Inbox},
    metrics::SchedulerMetrics,
};
use crate::core::binder::{Binder, Binding};

pub struct KubeBinder {
    client: kube::Client,
    permits: Arc<Semaphore>,
    inbox: mpsc::UnboundedSender<Inbox>,
    metrics: SchedulerMetrics,
    limiter: Arc<TokenBucket>,
}

impl KubeBinder {
    pub fn new(
        client: kube::Client,
        concurrency: usize,
        inbox: mpsc::UnboundedSender<Inbox>,
        metrics: SchedulerMetrics,
        limiter: Arc<TokenBucket>,
    ) -> Self {
        KubeBinder {
            client,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            inbox,
            metrics,
            limiter,
        }
    }
}

impl Binder for KubeBinder {
    fn bind(&mut self, binding: Binding) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &binding.namespace);
        let permits = self.permits.clone();
        let inbox = self.inbox.clone();
        let metrics = self.metrics.clone();
        let limiter = self.limiter.clone();
        tokio::spawn(async move {
            let Ok(_permit) = permits.acquire().await else {
                return;
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
            let outcome = match result {
                Ok(_) => BindOutcome::Bound,
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                    BindOutcome::Gone(status.message)
                }
                Err(e) => BindOutcome::Failed(e.to_string()),
            };
            let _ = inbox.send(Inbox::Bind {
                uid: binding.uid,
                outcome,
            });
        });
    }
}
