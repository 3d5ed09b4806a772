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
use std::future::Future;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{follow::SenderGone, supervisor::Tasks};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionConfig {
    pub namespace: String,
    pub lease_name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// A timing that cannot keep one leader at a time (client-go's rules).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ElectionConfigError {
    #[error("the lease duration ({lease:?}) must be longer than the renew deadline ({renew:?})")]
    LeaseNotLongerThanRenewDeadline { lease: Duration, renew: Duration },
    #[error(
        "the renew deadline ({renew:?}) must be longer than 1.2 times the retry period ({retry:?})"
    )]
    RenewDeadlineTooShort { renew: Duration, retry: Duration },
    #[error("the retry period must be positive")]
    NoRetryPeriod,
}

impl ElectionConfig {
    /// A leader stops at the latest `renew_deadline` after its last renewal was sent, and a
    /// standby takes over no sooner than `lease_duration` after seeing it: the first must
    /// be shorter, or two replicas lead at once.
    pub fn validate(&self) -> Result<(), ElectionConfigError> {
        if self.retry_period.is_zero() {
            return Err(ElectionConfigError::NoRetryPeriod);
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ElectionConfigError::LeaseNotLongerThanRenewDeadline {
                lease: self.lease_duration,
                renew: self.renew_deadline,
            });
        }
        if self.renew_deadline <= self.retry_period.mul_f64(1.2) {
            return Err(ElectionConfigError::RenewDeadlineTooShort {
                renew: self.renew_deadline,
                retry: self.retry_period,
            });
        }
        Ok(())
    }
}

pub struct Elector {
    api: Api<Lease>,
    config: ElectionConfig,
    /// The last lease record seen and when it was first seen unchanged.
    observed: Option<(String, Instant)>,
}

/// Whether this replica leads. Dropping it stops the elector (the lease then expires);
/// [`Leadership::release`] gives the lease up at once, for a graceful shutdown.
pub struct Leadership {
    leading: watch::Receiver<bool>,
    alive: Option<watch::Sender<bool>>,
    /// Without an elector: the sender that keeps `leading` true for good.
    _always: Option<watch::Sender<bool>>,
}

/// The lease was lost after this replica led.
#[derive(Debug, thiserror::Error)]
#[error("lost the leader lease; exiting so that a fresh replica takes over with a fresh cache")]
pub struct LostLease;

impl Leadership {
    /// Starts an elector for `election` (supervised by `tasks`); without one this replica
    /// always leads.
    pub fn start(client: &kube::Client, election: Option<ElectionConfig>, tasks: &Tasks) -> Self {
        let (leading_tx, leading) = watch::channel(election.is_none());
        let Some(election) = election else {
            return Leadership {
                leading,
                alive: None,
                _always: Some(leading_tx),
            };
        };
        let (alive_tx, alive_rx) = watch::channel(false);
        // `multiarch_leader{lease}` follows whether this replica leads.
        let gauge = tasks.leaders().gauge(&election.lease_name);
        gauge.set(i64::from(*leading.borrow()));
        tasks.follow(
            "leader metric",
            leading.clone(),
            SenderGone::KeepLast,
            move |now| {
                gauge.set(i64::from(now));
            },
        );
        let elector = Elector::new(client.clone(), election);
        tasks.spawn_infallible("leader election", elector.run(leading_tx, alive_rx));
        Leadership {
            leading,
            alive: Some(alive_tx),
            _always: None,
        }
    }

    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Follows leadership changes.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Returns once this replica leads (never, once its elector has stopped).
    pub async fn acquired(&mut self) {
        if self.leading.wait_for(|leading| *leading).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Returns once this replica no longer leads (at once if it does not).
    pub async fn lost(&mut self) {
        if self.leading.wait_for(|leading| !*leading).await.is_err() && self.is_leading() {
            std::future::pending::<()>().await;
        }
    }

    /// Gives the lease up so that a standby takes over without waiting for it to expire.
    pub fn release(self) {
        if let Some(alive) = &self.alive {
            let _ = alive.send(true);
        }
    }

    /// Runs `work` while this replica leads: waits for the lease (or the shutdown), then
    /// runs `work` with a token cancelled on shutdown. Losing the lease cancels the token,
    /// lets `work` see it once, and drops it at its next wait: a replica that may no
    /// longer lead writes nothing more (a pass in progress stops at its next request; the
    /// roles' steps are safe to redo). It then ends with [`LostLease`]: a fresh replica
    /// starts over with fresh caches, as kube-controller-manager does. A graceful end
    /// (shutdown) lets `work` finish and releases the lease.
    pub async fn run_while_leading<F, Fut>(
        mut self,
        shutdown: &CancellationToken,
        work: F,
    ) -> Result<(), LostLease>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()>,
    {
        tokio::select! {
            () = self.acquired() => {}
            () = shutdown.cancelled() => return Ok(()),
        }
        let stop = shutdown.child_token();
        let work = work(stop.clone());
        tokio::pin!(work);
        tokio::select! {
            () = &mut work => {
                self.release();
                Ok(())
            }
            () = self.lost() => {
                stop.cancel();
                // One poll (a zero timeout polls its future first): the work sees the
                // cancellation, and whatever it would wait for next is dropped unsent.
                let _ = tokio::time::timeout(Duration::ZERO, work).await;
                Err(LostLease)
            }
        }
    }
}

impl Tasks {
    /// A controller's start, written once: runs `work` as the supervised task `name` while
    /// this replica holds the Lease `election` names (always, without one), by
    /// [`Leadership::run_while_leading`]; losing the Lease ends the role.
    pub fn spawn_while_leading<F, Fut>(
        &self,
        name: &'static str,
        client: &kube::Client,
        election: Option<ElectionConfig>,
        work: F,
    ) where
        F: FnOnce(CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let leadership = Leadership::start(client, election, self);
        let shutdown = self.shutdown().clone();
        self.spawn(name, async move {
            leadership.run_while_leading(&shutdown, work).await
        });
    }
}

/// The lease's `leaseDurationSeconds` for `duration`, rounded up: standbys wait that long
/// after the last renewal they saw, and this replica stops at its renew deadline, so the
/// recorded duration must never be shorter than the configured one (1.5 s written as 1 s
/// would let a standby take over at a 1 s renew deadline, while the leader still leads).
fn lease_duration_seconds(duration: Duration) -> Option<i32> {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i32::try_from(seconds).ok()
}

impl Elector {
    pub fn new(client: kube::Client, config: ElectionConfig) -> Self {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    /// Runs until `alive` closes (the role ended, gracefully or not),
    /// publishing whether this replica leads. On a graceful end the lease is released so
    /// that a standby takes over at once.
    pub async fn run(mut self, leading: watch::Sender<bool>, mut alive: watch::Receiver<bool>) {
        // When the last successful renewal was *sent*: the server wrote it at that
        // instant or later, so a standby cannot see the lease expire before
        // `last_renew + lease_duration`, and this replica stops at the latest at
        // `last_renew + renew_deadline`, earlier.
        let mut last_renew: Option<Instant> = None;
        loop {
            let started = Instant::now();
            let budget = match last_renew {
                Some(renewed) if *leading.borrow() => {
                    (renewed + self.config.renew_deadline).saturating_duration_since(started)
                }
                _ => self.config.renew_deadline,
            };
            // client-go bounds each attempt by the renew deadline: a hung API server must
            // not keep a leader leading past it.
            let ok = match tokio::time::timeout(budget, self.try_acquire_or_renew()).await {
                Ok(Ok(held)) => held,
                Ok(Err(e)) => {
                    warn!(error = %e, "lease update failed");
                    false
                }
                Err(_) => {
                    warn!(after = ?budget, "lease update timed out");
                    false
                }
            };
            let now = Instant::now();
            if ok {
                if !*leading.borrow() {
                    info!(identity = %self.config.identity, lease = %self.config.lease_name, "became leader");
                }
                last_renew = Some(started);
                let _ = leading.send(true);
            } else if *leading.borrow()
                && last_renew.is_none_or(|t| now.duration_since(t) >= self.config.renew_deadline)
            {
                warn!(identity = %self.config.identity, "could not renew the lease in time; stopping");
                let _ = leading.send(false);
                // Lost for good: the role ends (`LostLease`) and a fresh replica starts
                // over. Leading again from here could hide the loss from a reader that
                // looked only at the latest value.
                let _ = alive.changed().await;
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(self.config.retry_period) => {}
                changed = alive.changed() => {
                    // `true` sent: graceful stop; sender dropped: the loop died.
                    if changed.is_ok() && *alive.borrow() && *leading.borrow() {
                        // Bounded: a hung API server must not hold up the shutdown (the
                        // lease then expires instead).
                        let deadline = self.config.renew_deadline;
                        if tokio::time::timeout(deadline, self.release()).await.is_err() {
                            warn!(after = ?deadline, "releasing the lease timed out");
                        }
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
            lease_duration_seconds: lease_duration_seconds(self.config.lease_duration),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(lease: u64, renew: u64, retry: u64) -> ElectionConfig {
        ElectionConfig {
            namespace: "multiarch".into(),
            lease_name: "lease".into(),
            identity: "me".into(),
            lease_duration: Duration::from_millis(lease),
            renew_deadline: Duration::from_millis(renew),
            retry_period: Duration::from_millis(retry),
        }
    }

    #[test]
    fn the_recorded_lease_duration_is_never_shorter_than_the_configured_one() {
        for (configured, recorded) in [
            (Duration::from_secs(15), 15),
            (Duration::from_millis(1500), 2),
            (Duration::from_millis(1), 1),
            (Duration::from_millis(2000), 2),
        ] {
            assert_eq!(
                lease_duration_seconds(configured),
                Some(recorded),
                "{configured:?}"
            );
        }
    }

    #[test]
    fn timings_that_allow_two_leaders_are_refused() {
        assert_eq!(config(15_000, 10_000, 2_000).validate(), Ok(()));
        assert!(matches!(
            config(10_000, 10_000, 2_000).validate(),
            Err(ElectionConfigError::LeaseNotLongerThanRenewDeadline { .. })
        ));
        assert!(matches!(
            config(15_000, 2_400, 2_000).validate(),
            Err(ElectionConfigError::RenewDeadlineTooShort { .. })
        ));
        assert_eq!(
            config(15_000, 10_000, 0).validate(),
            Err(ElectionConfigError::NoRetryPeriod)
        );
        assert_eq!(
            config(15_000, 10_000, 0)
                .validate()
                .unwrap_err()
                .to_string(),
            "the retry period must be positive"
        );
    }
}
