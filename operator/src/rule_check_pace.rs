//! How many architecture-rule expressions the operator's webhook checks for one
//! namespace over time. Checking a rule compiles, type-checks and prices its CEL (about a
//! millisecond each): a tenant that rewrites a config of 1,000 rules in a loop would
//! otherwise keep the operator's CPU (and the API server waiting on it) busy for as long
//! as it likes. Each namespace gets a bucket of expression checks: a burst of two full
//! configs, refilled at one config a minute; a write that needs more is refused, saying
//! when to try again. Unchanged expressions of an update are not checked, and cost
//! nothing.

use std::{
    num::NonZeroUsize,
    sync::Mutex,
    time::{Duration, Instant},
};

use lru::LruCache;

/// Expressions one namespace may have checked at once...
pub const BURST: f64 = 2000.0;
/// ...and per second after that (1,000 a minute).
pub const PER_SECOND: f64 = 1000.0 / 60.0;
/// Namespaces whose pace is remembered (a forgotten one starts with a full bucket).
const NAMESPACES: usize = 4096;

pub struct RuleCheckPace {
    buckets: Mutex<LruCache<String, (f64, Instant)>>,
}

impl Default for RuleCheckPace {
    fn default() -> Self {
        RuleCheckPace {
            buckets: Mutex::new(LruCache::new(
                NonZeroUsize::new(NAMESPACES).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }
}

impl RuleCheckPace {
    /// Takes `expressions` checks from `namespace`'s bucket at `now`, or says how long
    /// until there are that many (never, for more than a burst: `None`).
    pub fn take(
        &self,
        namespace: &str,
        expressions: usize,
        now: Instant,
    ) -> Result<(), Option<Duration>> {
        let wanted = expressions as f64;
        if wanted > BURST {
            return Err(None);
        }
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (tokens, at) = buckets.get(namespace).copied().unwrap_or((BURST, now));
        let tokens =
            (tokens + now.saturating_duration_since(at).as_secs_f64() * PER_SECOND).min(BURST);
        if tokens < wanted {
            buckets.put(namespace.to_owned(), (tokens, now));
            return Err(Some(Duration::from_secs_f64(
                (wanted - tokens) / PER_SECOND,
            )));
        }
        buckets.put(namespace.to_owned(), (tokens - wanted, now));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_full_configs_at_once_then_one_a_minute_per_namespace() {
        let pace = RuleCheckPace::default();
        let start = Instant::now();
        assert!(pace.take("tenant", 1000, start).is_ok());
        assert!(pace.take("tenant", 1000, start).is_ok());
        let wait = pace.take("tenant", 1000, start).unwrap_err().unwrap();
        assert!(
            wait > Duration::from_secs(59) && wait <= Duration::from_secs(60),
            "{wait:?}"
        );
        // Another namespace is not held back; the tenant's refills.
        assert!(pace.take("bank", 1000, start).is_ok());
        assert!(
            pace.take("tenant", 1000, start + Duration::from_secs(60))
                .is_ok()
        );
        assert_eq!(pace.take("tenant", 2001, start), Err(None));
        assert!(
            pace.take("tenant", 0, start).is_ok(),
            "nothing to check is free"
        );
    }
}
