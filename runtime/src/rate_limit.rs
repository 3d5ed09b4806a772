//! A token bucket, as client-go's client QPS and burst: the scheduler's per-pod writes
//! (bindings, events, status patches) and the exec-format-error daemon's reports go
//! through one. Watches are long-lived and not limited.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// `qps` tokens per second, at most `burst` saved up. `qps <= 0` disables limiting.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// How long to wait before the next request may go (and takes its token).
    fn reserve(&self) -> Duration {
        if self.qps <= 0.0 {
            return Duration::ZERO;
        }
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let (tokens, last) = *state;
        let refilled = (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst);
        let left = refilled - 1.0;
        *state = (left, now);
        if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-left / self.qps)
        }
    }

    pub async fn acquire(&self) {
        let wait = self.reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_then_paces() {
        let bucket = TokenBucket::new(10.0, 3);
        let waits: Vec<Duration> = (0..5).map(|_| bucket.reserve()).collect();
        assert!(waits[..3].iter().all(Duration::is_zero), "{waits:?}");
        // The 4th and 5th wait about 100 ms and 200 ms.
        assert!(
            waits[3] > Duration::from_millis(80) && waits[3] <= Duration::from_millis(100),
            "{waits:?}"
        );
        assert!(
            waits[4] > Duration::from_millis(180) && waits[4] <= Duration::from_millis(200),
            "{waits:?}"
        );
        assert!(TokenBucket::new(0.0, 1).reserve().is_zero());
    }
}
