//! Reads of Secrets and ServiceAccounts, paced per namespace (one tenant's pods cannot
//! take the inspector's reads from the others) and in all (the API server's share).

use std::{
    num::NonZeroUsize,
    sync::{Arc, Mutex},
};

use lru::LruCache;
use multiarch_runtime::rate_limit::TokenBucket;

/// Reads per second for one namespace, and its burst...
const NAMESPACE_READS: (f64, u32) = (20.0, 100);
/// ...and for all of them together.
const ALL_READS: (f64, u32) = (200.0, 400);
/// Namespaces whose read rate is remembered.
const NAMESPACE_BUCKETS: usize = 4096;

/// Reads of Secrets and ServiceAccounts, paced per namespace and in all.
pub(super) struct ReadRate {
    all: TokenBucket,
    namespaces: Mutex<LruCache<String, Arc<TokenBucket>>>,
}

impl ReadRate {
    pub(super) fn new() -> Self {
        ReadRate {
            all: TokenBucket::new(ALL_READS.0, ALL_READS.1),
            namespaces: Mutex::new(LruCache::new(
                NonZeroUsize::new(NAMESPACE_BUCKETS).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }

    /// Waits for the next read of `namespace`.
    pub(super) async fn acquire(&self, namespace: &str) {
        let bucket = {
            let mut namespaces = self
                .namespaces
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match namespaces.get(namespace) {
                Some(bucket) => bucket.clone(),
                None => {
                    let bucket = Arc::new(TokenBucket::new(NAMESPACE_READS.0, NAMESPACE_READS.1));
                    namespaces.put(namespace.to_owned(), bucket.clone());
                    bucket
                }
            }
        };
        bucket.acquire().await;
        self.all.acquire().await;
    }
}
