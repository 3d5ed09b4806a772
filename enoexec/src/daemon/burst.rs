//! One report per container per window: a crash-looping entrypoint or a script that tries
//! several foreign binaries would otherwise flood the API server with identical objects.

use std::{
    num::NonZeroUsize,
    time::{Duration, Instant},
};

use lru::LruCache;

pub struct BurstFilter {
    window: Duration,
    seen: LruCache<String, Instant>,
}

impl BurstFilter {
    /// Remembers up to `capacity` containers (the least recently reported are forgotten).
    pub fn new(window: Duration, capacity: NonZeroUsize) -> Self {
        Self {
            window,
            seen: LruCache::new(capacity),
        }
    }

    /// Whether an event from `container_id` at `now` should be reported. The window runs from
    /// the first report, so a container that keeps failing is reported again once per window.
    pub fn admit(&mut self, container_id: &str, now: Instant) -> bool {
        if let Some(first) = self.seen.get(container_id)
            && now.saturating_duration_since(*first) < self.window
        {
            return false;
        }
        self.seen.put(container_id.to_owned(), now);
        true
    }
}

impl BurstFilter {
    /// Forgets a container, so that its next event is reported: for a report that could
    /// not be completed (the runtime did not answer).
    pub fn forget(&mut self, container_id: &str) {
        self.seen.pop(container_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(capacity: usize) -> BurstFilter {
        BurstFilter::new(
            Duration::from_secs(60),
            NonZeroUsize::new(capacity).unwrap(),
        )
    }

    #[test]
    fn one_report_per_container_per_window() {
        let mut f = filter(16);
        let t0 = Instant::now();
        assert!(f.admit("a", t0));
        assert!(!f.admit("a", t0 + Duration::from_secs(1)));
        assert!(
            f.admit("b", t0 + Duration::from_secs(1)),
            "other containers are independent"
        );
        assert!(!f.admit("a", t0 + Duration::from_secs(59)));
        assert!(
            f.admit("a", t0 + Duration::from_secs(60)),
            "reported again after the window"
        );
        assert!(!f.admit("a", t0 + Duration::from_secs(61)));
    }

    #[test]
    fn a_forgotten_container_is_reported_again() {
        let mut f = filter(16);
        let t0 = Instant::now();
        assert!(f.admit("a", t0));
        f.forget("a");
        assert!(f.admit("a", t0 + Duration::from_secs(1)));
    }

    #[test]
    fn memory_is_bounded() {
        let mut f = filter(2);
        let t0 = Instant::now();
        assert!(f.admit("a", t0));
        assert!(f.admit("b", t0));
        assert!(f.admit("c", t0)); // forgets "a"
        assert!(f.admit("a", t0));
        assert!(!f.admit("c", t0));
    }
}
