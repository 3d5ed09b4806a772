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
use multiarch_runtime::rate_limit::TokenBucket;
use serde_json::json;
use tracing::{info, warn};

use super::{
    inbox::Inbox,
    metrics::SchedulerMetrics,
    pod_reports::{PodReport, PodReports},
};
use crate::core::scheduler::Preemption;

/// Reports a failure for an eviction task that ends without saying so (it panicked).
struct Done {
    inbox: InboxSender,
    uid: String,
    sent: bool,
}

impl Done {
    fn send(mut self, ok: bool) {
        self.sent = true;
        self.inbox.deliver(Inbox::Preempted {
            uid: self.uid.clone(),
            ok,
        });
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        if !self.sent {
            self.inbox.deliver(Inbox::Preempted {
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
        let preemptor_pod = (preemptor.namespace.clone(), preemptor.name.clone());
        tokio::spawn(async move {
            // The nomination first: the preemptor cannot be bound before its victims are
            // gone, so it is never written after the binding (which clears it).
            match this
                .nominate(&preemptor_pod.0, &preemptor_pod.1, &preemption.node)
                .await
            {
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    info!(preemptor = %preemptor_key, "the preemptor is gone: no eviction");
                    done.send(false);
                    return;
                }
                Err(e) => {
                    warn!(preemptor = %preemptor_key, error = %e, "cannot write the nominated node; evicting anyway");
                }
                Ok(()) => {}
            }
            let mut ok = true;
            for victim in &preemption.victims {
                match this.evict_one(victim).await {
                    Ok(()) => {
                        this.metrics.preemption_victims.inc();
                        info!(preemptor = %preemptor_key, victim = %victim.key(), node = %preemption.node, "preempted");
                        this.reports.send(PodReport::about(
                            victim,
                            false,
                            "Preempted",
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
                this.reports.send(PodReport::nomination_of(displaced, None));
            }
            done.send(ok);
        });
    }

    /// `status.nominatedNodeName` of the preemptor.
    async fn nominate(&self, namespace: &str, name: &str, node: &str) -> Result<(), kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        self.limiter.acquire().await;
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(&json!({"status": {"nominatedNodeName": node}})),
        )
        .await
        .map(|_| ())
    }

    /// DisruptionTarget, then delete. A victim already gone is fine.
    async fn evict_one(&self, victim: &PodInfo) -> Result<(), kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &victim.namespace);
        let condition = json!({"status": {"conditions": [{
            "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
            "message": format!("{}: preempting to accommodate a higher priority pod", self.scheduler_name),
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        }]}});
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
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
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
