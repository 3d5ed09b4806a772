//! The one backoff policy of multiarch: the wait doubles with each failed attempt, from
//! `initial` up to `max`. The scheduler's queue uses kube-scheduler's defaults (1 s to
//! 10 s); controllers and writers pass their own bounds.

use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(10),
        }
    }
}

impl Backoff {
    pub const fn new(initial: Duration, max: Duration) -> Self {
        Backoff { initial, max }
    }

    /// The wait after `attempts` failed attempts (`initial << (attempts - 1)`, capped).
    pub fn after(&self, attempts: u32) -> Duration {
        if attempts == 0 {
            return Duration::ZERO;
        }
        let shift = (attempts - 1).min(30);
        self.initial.saturating_mul(1 << shift).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let b = Backoff::default();
        let waits: Vec<u64> = (0..7).map(|a| b.after(a).as_secs()).collect();
        assert_eq!(waits, [0, 1, 2, 4, 8, 10, 10]);
        assert_eq!(b.after(u32::MAX), Duration::from_secs(10));
    }
}
