//! How many evictions may happen: at most so many in any one minute cluster-wide, and at
//! most so many of one controller's pods in any one minute. A sliding window of the
//! evictions made, bounded by the cluster-wide limit; the caller passes the time, so the
//! rule is tested without a clock.

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

const WINDOW: Duration = Duration::from_secs(60);

/// Which limit an eviction would break.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Cluster,
    Controller,
}

#[derive(Debug)]
pub struct EvictionLimiter {
    per_minute: usize,
    per_controller: usize,
    /// When, and of which controller (`namespace/Kind/name`), the window's evictions.
    recent: VecDeque<(Instant, String)>,
}

impl EvictionLimiter {
    pub fn new(per_minute: usize, per_controller: usize) -> Self {
        EvictionLimiter {
            per_minute: per_minute.max(1),
            per_controller: per_controller.max(1),
            recent: VecDeque::new(),
        }
    }

    /// New limits from the configuration; the evictions already made still count.
    pub fn set_limits(&mut self, per_minute: usize, per_controller: usize) {
        self.per_minute = per_minute.max(1);
        self.per_controller = per_controller.max(1);
    }

    /// Takes one eviction of `controller`'s pod at `now`, or says which limit stops it.
    pub fn take(&mut self, controller: &str, now: Instant) -> Result<(), Limit> {
        while self
            .recent
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) >= WINDOW)
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= self.per_minute {
            return Err(Limit::Cluster);
        }
        if self.recent.iter().filter(|(_, c)| c == controller).count() >= self.per_controller {
            return Err(Limit::Controller);
        }
        self.recent.push_back((now, controller.to_owned()));
        Ok(())
    }

    /// Gives back an eviction taken but not made (the API refused it).
    pub fn give_back(&mut self, controller: &str) {
        if let Some(i) = self.recent.iter().rposition(|(_, c)| c == controller) {
            self.recent.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_and_each_controller_have_their_minute() {
        let start = Instant::now();
        let mut limiter = EvictionLimiter::new(3, 1);
        assert_eq!(limiter.take("shop/ReplicaSet/web", start), Ok(()));
        assert_eq!(
            limiter.take("shop/ReplicaSet/web", start),
            Err(Limit::Controller)
        );
        assert_eq!(limiter.take("shop/ReplicaSet/api", start), Ok(()));
        assert_eq!(limiter.take("shop/StatefulSet/db", start), Ok(()));
        assert_eq!(limiter.take("shop/Job/batch", start), Err(Limit::Cluster));
        // A minute later the window is empty again.
        let later = start + Duration::from_secs(60);
        assert_eq!(limiter.take("shop/ReplicaSet/web", later), Ok(()));
        // An eviction the API refused does not count.
        limiter.give_back("shop/ReplicaSet/web");
        assert_eq!(limiter.take("shop/ReplicaSet/web", later), Ok(()));
    }

    #[test]
    fn a_thousand_candidates_get_the_limit_and_no_more() {
        let start = Instant::now();
        let mut limiter = EvictionLimiter::new(10, 2);
        let mut taken = 0;
        for i in 0..1000 {
            let controller = format!("ns/ReplicaSet/rs-{}", i % 7);
            let now = start + Duration::from_millis(i * 10);
            if limiter.take(&controller, now).is_ok() {
                taken += 1;
            }
        }
        // Ten seconds of candidates: one window.
        assert_eq!(taken, 10);
    }
}
