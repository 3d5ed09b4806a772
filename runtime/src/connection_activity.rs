//! What a served connection is doing: requests in flight, how many have begun, and when
//! the last one ended. The idle timeout and the request-head deadline read it.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

/// Requests in flight on a connection, how many began, and when the last one ended.
pub(crate) struct Activity {
    in_flight: AtomicUsize,
    begun: AtomicU64,
    last: Mutex<Instant>,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Activity {
            in_flight: AtomicUsize::new(0),
            begun: AtomicU64::new(0),
            last: Mutex::new(Instant::now()),
        }
    }

    fn touch(&self) {
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
    }

    /// Requests in flight now.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Requests begun since the connection opened: a request that began and ended
    /// between two looks still changes it.
    pub(crate) fn begun(&self) -> u64 {
        self.begun.load(Ordering::SeqCst)
    }

    /// Resolves once no request has been in flight for `idle`.
    pub(crate) async fn idle(&self, idle: Duration) {
        loop {
            let since = self
                .last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .elapsed();
            if self.in_flight() == 0 && since >= idle {
                return;
            }
            tokio::time::sleep(idle.saturating_sub(since).max(Duration::from_millis(50))).await;
        }
    }
}

/// Counts a request in flight for as long as it lives (its response is being made).
pub(crate) struct InFlight(Arc<Activity>);

impl InFlight {
    pub(crate) fn begin(activity: &Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::SeqCst);
        activity.begun.fetch_add(1, Ordering::SeqCst);
        activity.touch();
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}
