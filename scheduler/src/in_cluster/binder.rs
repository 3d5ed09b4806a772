//! The Kubernetes binder: the pod's volume decisions first (VolumeBinding's PreBind),
//! then `POST pods/NAME/binding` with the pod's UID as precondition, with bounded
//! concurrency of API calls; every outcome goes back to the loop, even if the task dies,
//! and a binding is cancelled when its pod is deleted.
//!
//! The loop decides far ahead of the API server (thousands of pods in a backlog): the
//! decided bindings wait in a queue as plain data (a few hundred bytes each) and a pool
//! of `concurrency` workers runs them. A task per decided pod held a 7.5 KB future each
//! (measured), 75 MB for a backlog of 10,000. A binding with volumes gets its own task,
//! as waiting for its claims can take minutes and must not hold a worker.

use super::inbox_sender::InboxSender;
use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::api::core::v1::{Binding as K8sBinding, ObjectReference, Pod};
use kube::{
    Api,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use multiarch_runtime::rate_limit::TokenBucket;

use super::{
    inbox::{BindOutcome, LoopMessage},
    metrics::SchedulerMetrics,
    pod_identity, volume_writer,
};
use crate::engine::binder::{Binder, Binding};

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
        self.inbox.deliver(LoopMessage::Bind {
            uid: self.uid.clone(),
            outcome,
        });
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if !self.sent {
            self.inbox.deliver(LoopMessage::Bind {
                uid: self.uid.clone(),
                outcome: BindOutcome::Failed("the binding task ended unexpectedly".into()),
            });
        }
    }
}

/// What every binding needs, shared by the workers and the volume tasks.
struct Shared {
    client: kube::Client,
    permits: Semaphore,
    inbox: InboxSender,
    metrics: SchedulerMetrics,
    limiter: Arc<TokenBucket>,
    volume_bind_timeout: Duration,
    /// Bindings under way, by pod UID.
    running: Mutex<HashMap<String, CancellationToken>>,
    /// Bindings decided and not started, in order.
    queued: Mutex<VecDeque<Binding>>,
    more: Notify,
    /// Stops the workers when the binder goes.
    stop: CancellationToken,
}

pub struct KubeBinder {
    shared: Arc<Shared>,
}

impl Drop for KubeBinder {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
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
        let concurrency = concurrency.max(1);
        let shared = Arc::new(Shared {
            client,
            permits: Semaphore::new(concurrency),
            inbox,
            metrics,
            limiter,
            volume_bind_timeout,
            running: Mutex::default(),
            queued: Mutex::default(),
            more: Notify::new(),
            stop: CancellationToken::new(),
        });
        for _ in 0..concurrency {
            tokio::spawn(work_the_queue(shared.clone()));
        }
        KubeBinder { shared }
    }

    /// Stops the binding of a deleted pod (its volumes may be waited for for minutes).
    pub fn cancel(&self, uid: &str) {
        let mut queued = self.shared.queued();
        let waiting = queued
            .iter()
            .position(|b| b.uid == uid)
            .and_then(|i| queued.remove(i));
        let running = self.shared.running().remove(uid);
        drop(queued);
        if let Some(binding) = waiting {
            self.shared.report(&binding.uid, cancelled());
        }
        if let Some(token) = running {
            token.cancel();
        }
    }

    /// Stops every binding under way or waiting (the lease is going or gone): each
    /// reports `Gone`. A request already on the wire may still land; none is started
    /// after this.
    pub fn cancel_all(&self) {
        let mut queued = self.shared.queued();
        let waiting: Vec<Binding> = queued.drain(..).collect();
        let running: Vec<CancellationToken> =
            self.shared.running().drain().map(|(_, t)| t).collect();
        drop(queued);
        for binding in waiting {
            self.shared.report(&binding.uid, cancelled());
        }
        for token in running {
            token.cancel();
        }
    }
}

fn cancelled() -> BindOutcome {
    BindOutcome::Gone(
        "the binding was cancelled (the pod was deleted, or this replica stopped leading)".into(),
    )
}

impl Shared {
    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn queued(&self) -> std::sync::MutexGuard<'_, VecDeque<Binding>> {
        self.queued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn report(&self, uid: &str, outcome: BindOutcome) {
        self.inbox.deliver(LoopMessage::Bind {
            uid: uid.to_owned(),
            outcome,
        });
    }

    /// Counts a binding as under way, cancellable by its pod's UID.
    fn register(&self, uid: &str) -> CancellationToken {
        let cancel = CancellationToken::new();
        self.running().insert(uid.to_owned(), cancel.clone());
        cancel
    }

    /// The next queued binding, counted as under way before the queue's lock is let go:
    /// `cancel_all` (which takes the queue first) finds every binding in one or the other.
    fn take_next(&self) -> Option<(Binding, CancellationToken)> {
        let mut queued = self.queued();
        let binding = queued.pop_front()?;
        let cancel = self.register(&binding.uid);
        Some((binding, cancel))
    }

    /// Runs one binding in its own task (a panic ends that task only, and is reported as
    /// a failure by its completion); returns when it ends.
    async fn run(self: &Arc<Self>, binding: Binding, cancel: CancellationToken) {
        let completion = Completion {
            inbox: self.inbox.clone(),
            uid: binding.uid.clone(),
            sent: false,
        };
        let shared = self.clone();
        let task = tokio::spawn(async move {
            let outcome = tokio::select! {
                () = cancel.cancelled() => cancelled(),
                outcome = shared.bind(&binding) => outcome,
            };
            shared.running().remove(&binding.uid);
            completion.send(outcome);
        });
        // The outcome is sent by the task (or its completion's drop): nothing to read.
        let _ = task.await;
    }

    /// kube-scheduler's `NominatedNodeNameForExpectation` (on by default since 1.35):
    /// before PreBind works on a pod's volumes, which can take minutes, the pod's
    /// `status.nominatedNodeName` says where it is about to be bound, so cluster
    /// autoscalers and other schedulers count it there. Written before the volumes, in
    /// the binding's own order; the API server clears it when the pod is bound. A failed
    /// write is logged and the binding goes on, as in kube-scheduler.
    async fn nominate(&self, binding: &Binding) {
        if binding.nominated.as_deref() == Some(binding.node.as_str()) {
            return;
        }
        self.limiter.acquire().await;
        let patch = pod_identity::for_pod_uid(
            json!({"status": {"nominatedNodeName": binding.node}}),
            &binding.uid,
        );
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &binding.namespace);
        if let Err(e) = api
            .patch_status(
                &binding.name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            warn!(pod = %format!("{}/{}", binding.namespace, binding.name), node = %binding.node, error = %e, "cannot set the nominated node before binding the pod's volumes");
        }
    }

    async fn bind(&self, binding: &Binding) -> BindOutcome {
        if !binding.volumes.is_empty() {
            self.nominate(binding).await;
            let started = std::time::Instant::now();
            let result = volume_writer::bind_volumes(
                &self.client,
                &binding.volumes,
                &binding.node,
                self.volume_bind_timeout,
                &self.limiter,
            )
            .await;
            self.metrics
                .volume_binding_seconds
                .observe(started.elapsed().as_secs_f64());
            if let Err(e) = result {
                return BindOutcome::Failed(format!(
                    "running PreBind plugin \"VolumeBinding\": binding volumes: {e}"
                ));
            }
        }
        let Ok(_permit) = self.permits.acquire().await else {
            return BindOutcome::Failed("the binder is shutting down".into());
        };
        self.limiter.acquire().await;
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
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &binding.namespace);
        let result = api
            .create_subresource::<K8sBinding, serde_json::Value>(
                "binding",
                &binding.name,
                &PostParams::default(),
                &body,
            )
            .await;
        self.metrics
            .binding_seconds
            .observe(started.elapsed().as_secs_f64());
        match result {
            Ok(_) => BindOutcome::Bound,
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                BindOutcome::Gone(status.message)
            }
            Err(e) => BindOutcome::Failed(e.to_string()),
        }
    }
}

/// A worker: the next queued binding, run to its end, until the binder goes.
async fn work_the_queue(shared: Arc<Shared>) {
    loop {
        let next = shared.take_next();
        match next {
            Some((binding, cancel)) => shared.run(binding, cancel).await,
            None => tokio::select! {
                () = shared.stop.cancelled() => return,
                () = shared.more.notified() => {}
            },
        }
    }
}

impl Binder for KubeBinder {
    fn bind(&mut self, binding: Binding) {
        if binding.volumes.is_empty() {
            self.shared.queued().push_back(binding);
            self.shared.more.notify_one();
        } else {
            // Its claims can take minutes to be bound: not on a worker.
            let cancel = self.shared.register(&binding.uid);
            let shared = self.shared.clone();
            tokio::spawn(async move { shared.run(binding, cancel).await });
        }
    }
}
