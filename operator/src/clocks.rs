//! The drain and settle clocks, as a value: `Clocks::tick` takes the clocks a snapshot
//! runs (`decide::running_clocks`) and says which have run out (`Expired`). A clock runs
//! while what it times is seen in the snapshot, from the snapshot's `seen_at` (after the
//! route was read, before any pod was listed), and stops when it is no longer seen. The clocks live in the leader's memory:
//! a new leader starts them again, so it waits longer, never less. No I/O.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

/// What is draining or settling, each with its own clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Drain {
    /// Pods wait for a scheduler that is being removed (mode switch).
    SchedulerPods,
    /// Reports wait for an exec-format-error handler that is being removed.
    EnoexecReports,
    /// The whole install is being removed: from when the route is seen gone.
    Uninstall,
    /// The webhook configuration is gone (uninstall): reviews already in flight, and API
    /// servers that have not seen the deletion yet, may still gate or route pods.
    UninstallSettle,
    /// The webhook configuration no longer routes to the scheduler (a mode switch): the
    /// same, for pods still routed to it.
    SchedulerRouteSettle,
}

impl Drain {
    /// Settle clocks run for the route's settle period; the others for the drain timeout.
    pub fn is_settle(self) -> bool {
        matches!(self, Drain::UninstallSettle | Drain::SchedulerRouteSettle)
    }
}

/// The clocks that run, each since when.
#[derive(Debug)]
pub struct Clocks {
    started: BTreeMap<Drain, Instant>,
    drain_timeout: Duration,
    route_settle: Duration,
}

impl Clocks {
    pub fn new(drain_timeout: Duration, route_settle: Duration) -> Self {
        Clocks {
            started: BTreeMap::new(),
            drain_timeout,
            route_settle,
        }
    }

    fn timeout(&self, drain: Drain) -> Duration {
        if drain.is_settle() {
            self.route_settle
        } else {
            self.drain_timeout
        }
    }

    /// Starts the clocks of `running` that are not running yet (at `at`), stops the
    /// others, and says how long each has left at `at`.
    pub fn tick(&mut self, running: &BTreeSet<Drain>, at: Instant) -> Expired {
        self.started.retain(|drain, _| running.contains(drain));
        let mut left = BTreeMap::new();
        for drain in running {
            let started = *self.started.entry(*drain).or_insert(at);
            let elapsed = at.saturating_duration_since(started);
            left.insert(*drain, self.timeout(*drain).saturating_sub(elapsed));
        }
        Expired {
            left,
            drain_timeout: self.drain_timeout,
            route_settle: self.route_settle,
        }
    }
}

/// How long each running clock has left, as of the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expired {
    left: BTreeMap<Drain, Duration>,
    /// For messages: how long pods are left to their component.
    pub drain_timeout: Duration,
    route_settle: Duration,
}

impl Expired {
    /// No clock runs (timeouts of ten minutes and fifteen seconds, for messages).
    pub fn none() -> Expired {
        Expired {
            left: BTreeMap::new(),
            drain_timeout: Duration::from_secs(600),
            route_settle: Duration::from_secs(15),
        }
    }

    /// `self`, with `drain` run out (for tests and tables).
    pub fn with(mut self, drain: Drain) -> Expired {
        self.left.insert(drain, Duration::ZERO);
        self
    }

    /// `drain` runs and has run out.
    pub fn expired(&self, drain: Drain) -> bool {
        self.left.get(&drain).is_some_and(Duration::is_zero)
    }

    /// How long `drain` has left (its whole timeout when it does not run).
    pub fn left(&self, drain: Drain) -> Duration {
        self.left
            .get(&drain)
            .copied()
            .unwrap_or(if drain.is_settle() {
                self.route_settle
            } else {
                self.drain_timeout
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_runs_while_seen_and_starts_again_after_it_stopped() {
        let mut clocks = Clocks::new(Duration::from_secs(10), Duration::from_secs(2));
        let t0 = Instant::now();
        let both = BTreeSet::from([Drain::Uninstall, Drain::UninstallSettle]);
        let first = clocks.tick(&both, t0);
        assert!(!first.expired(Drain::Uninstall));
        assert_eq!(first.left(Drain::UninstallSettle), Duration::from_secs(2));
        let later = clocks.tick(&both, t0 + Duration::from_secs(3));
        assert!(later.expired(Drain::UninstallSettle) && !later.expired(Drain::Uninstall));
        assert_eq!(later.left(Drain::Uninstall), Duration::from_secs(7));
        assert!(
            clocks
                .tick(&both, t0 + Duration::from_secs(10))
                .expired(Drain::Uninstall)
        );
        // Not seen for a pass: stopped; seen again: a fresh start.
        let stopped = clocks.tick(&BTreeSet::new(), t0 + Duration::from_secs(11));
        assert!(!stopped.expired(Drain::Uninstall));
        let again = clocks.tick(&both, t0 + Duration::from_secs(12));
        assert_eq!(again.left(Drain::Uninstall), Duration::from_secs(10));
    }
}
