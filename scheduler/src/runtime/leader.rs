//! Leader election on a Lease, with client-go's algorithm (kube-scheduler's): acquire or
//! renew with an optimistic-concurrency update every retry period; another holder's lease
//! counts as expired only after it has not changed for a whole lease duration *as
//! observed locally* (so clock skew between nodes does not matter); a leader that cannot
//! renew within the renew deadline stops leading at once.
//!
//! Written here rather than with kube-lease-manager: its mutual exclusion rests on
//! server-side-apply field ownership and its timing knobs do not map to the
//! lease/renew/retry triple users know from kube-scheduler.

use std::time::{Duration, Instant};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};
use tokio::sync::watch;
use tracing::{info, warn};

#[derive(Clone, Debug)]
pub struct ElectionConfig {
    pub namespace: String,
    pub lease_name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

pub struct Elector {
    api: Api<Lease>,
    config: ElectionConfig,
    /// The last lease record seen and when it was first seen unchanged.
    observed: Option<(String, Instant)>,
}

/// Whether this replica leads, and the handle that keeps its elector running.
pub struct Leadership {
    pub leading: watch::Receiver<bool>,
    /// Dropped with the component: the elector stops renewing and releases the lease.
    pub alive: Option<watch::Sender<bool>>,
}

/// Starts an elector for `election`; without one this replica always leads.
pub fn elect(client: &kube::Client, election: Option<ElectionConfig>) -> Leadership {
    let (leading_tx, leading) = watch::channel(election.is_none());
    let alive = election.map(|election| {
        let (alive_tx, alive_rx) = watch::channel(false);
        tokio::spawn(Elector::new(client.clone(), election).run(leading_tx, alive_rx));
        alive_tx
    });
    Leadership { leading, alive }
}

impl Elector {
    pub fn new(client: kube::Client, config: ElectionConfig) -> Self {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    /// Runs until `alive` closes (the scheduling loop ended, gracefully or not),
    /// publishing whether this replica leads. On a graceful end the lease is released so
    /// that a standby takes over at once.
    pub async fn run(mut self, leading: watch::Sender<bool>, mut alive: watch::Receiver<bool>) {
        let mut last_renew: Option<Instant> = None;
        loop {
            let ok = match self.try_acquire_or_renew().await {
                Ok(held) => held,
                Err(e) => {
                    warn!(error = %e, "lease update failed");
                    false
                }
            };
            let now = Instant::now();
            if ok {
                if !*leading.borrow() {
                    info!(identity = %self.config.identity, lease = %self.config.lease_name, "became leader");
                }
                last_renew = Some(now);
                let _ = leading.send(true);
            } else if *leading.borrow()
                && last_renew.is_none_or(|t| now.duration_since(t) >= self.config.renew_deadline)
            {
                warn!(identity = %self.config.identity, "could not renew the lease in time; stopping");
                let _ = leading.send(false);
                last_renew = None;
            }
            tokio::select! {
                () = tokio::time::sleep(self.config.retry_period) => {}
                changed = alive.changed() => {
                    // `true` sent: graceful stop; sender dropped: the loop died.
                    if changed.is_ok() && *alive.borrow() && *leading.borrow() {
                        self.release().await;
                    }
                    let _ = leading.send(false);
                    return;
                }
            }
        }
    }

    /// Gives the lease up (graceful shutdown), as client-go's ReleaseOnCancel.
    async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.lease_name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.acquire_time = None;
        spec.renew_time = None;
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(identity = %self.config.identity, "released the lease"),
            Err(e) => warn!(error = %e, "cannot release the lease"),
        }
    }

    fn record(&self, holder: &str) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: i32::try_from(self.config.lease_duration.as_secs()).ok(),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let me = self.config.identity.clone();
        let Some(mut lease) = self.api.get_opt(&self.config.lease_name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.lease_name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.record(&me)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let fingerprint = format!(
            "{holder}|{:?}|{:?}",
            spec.renew_time, spec.lease_transitions
        );
        let now = Instant::now();
        match &self.observed {
            Some((seen, _)) if *seen == fingerprint => {}
            _ => self.observed = Some((fingerprint, now)),
        }
        let unchanged_since = self.observed.as_ref().map_or(now, |(_, t)| *t);
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.config.lease_duration, Duration::from_secs);
        let expired = now.duration_since(unchanged_since) >= duration;
        if !holder.is_empty() && holder != me && !expired {
            return Ok(false);
        }
        let mut record = self.record(&me);
        if holder == me {
            record.acquire_time = spec.acquire_time.clone();
            record.lease_transitions = spec.lease_transitions;
        } else {
            record.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        lease.spec = Some(record);
        // The resourceVersion in `lease` makes this an optimistic-concurrency update: of
        // two replicas racing for an expired lease, one gets 409.
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}
