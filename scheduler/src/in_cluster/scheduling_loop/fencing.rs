//! Fencing: what the scheduling loop does when this replica may stop leading. A lost
//! lease is read straight from the elector and stops every write under way; at shutdown
//! the bindings under way finish (or are cancelled) before the lease is released.

use std::time::Duration;

use multiarch_runtime::leader_election::LostLease;
use tokio::sync::{mpsc, watch as signal};
use tracing::{info, warn};

use super::Loop;
use crate::in_cluster::inbox::LoopMessage;

/// At shutdown, how long the bindings under way may take to finish before they are
/// cancelled (a binding is one request; one waiting for its volumes can take minutes).
/// Well inside the role's drain (25 s) and a pod's default grace period (30 s).
const SHUTDOWN_BINDINGS: Duration = Duration::from_secs(10);
/// After cancelling, how long their (immediate) results are waited for.
const CANCELLED_BINDINGS: Duration = Duration::from_secs(2);
/// At shutdown, how long the reports of what was decided (events, status patches) may
/// take to be written; what is left then is dropped and the lease released.
const SHUTDOWN_REPORTS: Duration = Duration::from_secs(5);

impl Loop {
    /// SIGTERM: nothing this replica started may be written once a successor can lead,
    /// so the lease goes only after its bindings and its reports about them. Evictions
    /// under way stop where they are (the next leader decides preemption afresh).
    pub(super) async fn shut_down(
        &mut self,
        inbox: &mut mpsc::Receiver<LoopMessage>,
        leadership: &mut signal::Receiver<bool>,
    ) {
        self.writers.evictions.cancel_all();
        let fenced = self.finish_bindings(inbox, leadership).await;
        if !self.writers.reports.flush(SHUTDOWN_REPORTS).await {
            // Written after the release they could land after the successor's first
            // write (and keep this process past its drain): they are dropped instead.
            warn!("pod reports still queued at shutdown: dropping them before releasing the lease");
            self.writers.reports.fence();
        }
        if fenced.is_ok()
            && let Some(leadership) = self.lease.leadership.take()
        {
            leadership.release();
            // Give the elector a moment to release the lease.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(super) fn elector_running(&self) -> bool {
        self.lease.leadership.is_some() && !self.lease.elector_stopped
    }

    /// [`Loop::handle`] after checking the lease: a replica that may no longer lead acts
    /// on nothing more, however long the inbox's backlog.
    pub(super) fn handle_leading(
        &mut self,
        message: LoopMessage,
        leadership: &mut signal::Receiver<bool>,
    ) -> Result<(), LostLease> {
        self.follow_leadership(leadership)?;
        self.handle(message);
        Ok(())
    }

    /// Reads the elector's latest word. Losing the lease after leading fences this
    /// replica: bindings, evictions and reports under way are cancelled and nothing more
    /// is started. The elector stops leading at the latest `renew_deadline` after its last
    /// renewal and a standby takes over no sooner than `lease_duration` after it: the
    /// difference (5 s by default) is the time a cancelled request has to end before the
    /// new leader's first write.
    pub(super) fn follow_leadership(
        &mut self,
        leadership: &mut signal::Receiver<bool>,
    ) -> Result<(), LostLease> {
        if self.lease.leadership.is_none() {
            return Ok(());
        }
        // The latest value, whether or not the elector is still running (it stops for
        // good after a loss).
        let leading = *leadership.borrow_and_update();
        if leading == self.lease.leading {
            return Ok(());
        }
        self.lease.leading = leading;
        if leading {
            self.lease.led = true;
        } else if self.lease.led {
            warn!(
                bindings = self.books.in_flight.len(),
                "lease lost: cancelling the writes under way"
            );
            self.fence();
            return Err(LostLease);
        }
        Ok(())
    }

    /// Nothing this replica started is written any more.
    fn fence(&mut self) {
        self.writers.binder.cancel_all();
        self.writers.evictions.cancel_all();
        self.writers.reports.fence();
    }

    /// At shutdown, before the lease is released: no new decision; the bindings under way
    /// finish and their results are reported (the `Scheduled` events), for at most
    /// [`SHUTDOWN_BINDINGS`], then what is left is cancelled. `Err` when the lease was
    /// lost meanwhile (everything cancelled; there is nothing to release).
    async fn finish_bindings(
        &mut self,
        inbox: &mut mpsc::Receiver<LoopMessage>,
        leadership: &mut signal::Receiver<bool>,
    ) -> Result<(), LostLease> {
        if self.books.in_flight.is_empty() {
            return Ok(());
        }
        info!(
            bindings = self.books.in_flight.len(),
            "shutting down: finishing the bindings under way before releasing the lease"
        );
        let mut deadline = tokio::time::Instant::now() + SHUTDOWN_BINDINGS;
        let mut cancelled = false;
        while !self.books.in_flight.is_empty() {
            tokio::select! {
                biased;
                changed = leadership.changed(), if self.elector_running() => {
                    self.lease.elector_stopped |= changed.is_err();
                    self.follow_leadership(leadership)?;
                }
                message = inbox.recv() => match message {
                    Some(m) => self.handle_leading(m, leadership)?,
                    None => return Ok(()),
                },
                () = tokio::time::sleep_until(deadline) => {
                    if cancelled {
                        warn!(bindings = self.books.in_flight.len(), "cancelled bindings did not report back; shutting down");
                        return Ok(());
                    }
                    warn!(bindings = self.books.in_flight.len(), "bindings still under way at shutdown: cancelling them");
                    self.writers.binder.cancel_all();
                    cancelled = true;
                    deadline = tokio::time::Instant::now() + CANCELLED_BINDINGS;
                }
            }
        }
        Ok(())
    }
}
