//! DefaultPreemption's evictions, as kube-scheduler carries them out: each victim gets
//! the `DisruptionTarget` condition (reason `PreemptionByScheduler`), is deleted (with its
//! UID as precondition, so a pod recreated under the same name is never hit) and gets a
//! `Preempted` event; pods that lose their nomination have it cleared. In a background
//! task; the loop learns when it is done, even if the task dies.

use super::inbox_sender::InboxSender;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
};
use multiarch_plugins::model::pod::PodInfo;
use multiarch_runtime::{event_reason::EventReason, rate_limit::TokenBucket};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{
    inbox::LoopMessage,
    metrics::SchedulerMetrics,
    pod_identity,
    pod_reports::{PodReport, PodReports},
};
use crate::engine::outcome::Preemption;

/// Reports a failure for an eviction task that ends without saying so (it panicked).
struct Done {
    inbox: InboxSender,
    uid: String,
    sent: bool,
}

impl Done {
    fn send(mut self, ok: bool) {
        self.sent = true;
        self.inbox.deliver(LoopMessage::Preempted {
            uid: self.uid.clone(),
            ok,
        });
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        if !self.sent {
            self.inbox.deliver(LoopMessage::Preempted {
                uid: self.uid.clone(),
                ok: false,
            });
        }
    }
}

#[derive(Clone)]
pub struct Evictions {
    client: kube::Client,
    inbox: InboxSender,
    limiter: Arc<TokenBucket>,
    reports: PodReports,
    metrics: SchedulerMetrics,
    scheduler_name: String,
    /// Cancelled when this replica may no longer lead: no eviction step starts after it.
    fenced: CancellationToken,
}

impl Evictions {
    pub fn new(
        client: kube::Client,
        inbox: InboxSender,
        limiter: Arc<TokenBucket>,
        reports: PodReports,
        metrics: SchedulerMetrics,
        scheduler_name: &str,
    ) -> Self {
        Evictions {
            client,
            inbox,
            limiter,
            reports,
            metrics,
            scheduler_name: scheduler_name.to_owned(),
            fenced: CancellationToken::new(),
        }
    }

    /// Evicts the victims of `preemptor`'s preemption in the background.
    pub fn evict(&self, preemptor: &PodInfo, preemption: Preemption) {
        let this = self.clone();
        let done = Done {
            inbox: self.inbox.clone(),
            uid: preemptor.uid.clone(),
            sent: false,
        };
        let preemptor_uid = preemptor.uid.clone();
        let preemptor_key = preemptor.key();
        let preemptor_pod = (preemptor.namespace.to_string(), preemptor.name.clone());
        let fenced = self.fenced.clone();
        tokio::spawn(async move {
            let work = this.preempt(&preemptor_uid, &preemptor_key, &preemptor_pod, &preemption);
            let ok = tokio::select! {
                biased;
                // A request on the wire when the lease goes is dropped with its future.
                () = fenced.cancelled() => false,
                ok = work => ok,
            };
            done.send(ok);
        });
    }

    /// The lease is lost: every eviction under way stops where it is.
    pub fn cancel_all(&self) {
        self.fenced.cancel();
    }

    /// Nominates the preemptor, then evicts the victims in turn: whether every victim
    /// went (`false` too when the preemptor is gone).
    async fn preempt(
        &self,
        preemptor_uid: &str,
        preemptor_key: &str,
        (namespace, name): &(String, String),
        preemption: &Preemption,
    ) -> bool {
        // The nomination first: the preemptor cannot be bound before its victims are
        // gone, so it is never written after the binding (which clears it).
        match self
            .nominate(namespace, name, preemptor_uid, &preemption.node)
            .await
        {
            Err(e) if pod_identity::is_gone_or_replaced(&e) => {
                info!(preemptor = %preemptor_key, "the preemptor is gone or replaced: no eviction");
                return false;
            }
            Err(e) => {
                warn!(preemptor = %preemptor_key, error = %e, "cannot write the nominated node; evicting anyway");
            }
            Ok(()) => {}
        }
        let mut ok = true;
        for victim in &preemption.victims {
            match self.evict_one(victim).await {
                Ok(()) => {
                    self.metrics.preemption_victims.inc();
                    info!(preemptor = %preemptor_key, victim = %victim.key(), node = %preemption.node, "preempted");
                    self.reports.send(PodReport::about(
                        victim,
                        EventReason::Preempted,
                        "Preempting",
                        format!(
                            "Preempted by pod {preemptor_uid} on node {}",
                            preemption.node
                        ),
                        None,
                    ));
                }
                Err(e) => {
                    warn!(preemptor = %preemptor_key, victim = %victim.key(), error = %e, "cannot evict a preemption victim");
                    ok = false;
                    break;
                }
            }
        }
        for displaced in &preemption.displaced {
            self.reports.send(PodReport::nomination_of(displaced, None));
        }
        ok
    }

    /// `status.nominatedNodeName` of the preemptor.
    async fn nominate(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        node: &str,
    ) -> Result<(), kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        self.limiter.acquire().await;
        let patch = pod_identity::for_pod_uid(json!({"status": {"nominatedNodeName": node}}), uid);
        pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .map(|_| ())
    }

    /// DisruptionTarget, then delete. A victim already gone is fine.
    async fn evict_one(&self, victim: &PodInfo) -> Result<(), kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &victim.namespace);
        let condition = pod_identity::for_pod_uid(
            json!({"status": {"conditions": [{
                "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                "message": format!("{}: preempting to accommodate a higher priority pod", self.scheduler_name),
                "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
            }]}}),
            &victim.uid,
        );
        self.limiter.acquire().await;
        match pods
            .patch_status(
                &victim.name,
                &PatchParams::default(),
                &Patch::Strategic(&condition),
            )
            .await
        {
            Ok(_) => {}
            // The victim is gone, or its name is another pod's now: nothing to evict.
            Err(e) if pod_identity::is_gone_or_replaced(&e) => return Ok(()),
            Err(e) => return Err(e),
        }
        self.limiter.acquire().await;
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(victim.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match pods.delete(&victim.name, &params).await {
            // 409: the name now belongs to another pod; the victim is gone.
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }
}
