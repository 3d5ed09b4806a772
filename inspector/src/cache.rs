//! The inspection cache: LRU with a TTL for tags (digests never change), a short negative
//! cache for failures, single-flight (however many pods ask at once, one registry round
//! trip), and keys that include the credentials, so that a private answer obtained with
//! one pod's pull secret is never served to a pod without it.

use std::{
    collections::HashMap,
    future::Future,
    num::NonZeroUsize,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use lru::LruCache;
use tokio::sync::OnceCell;

use crate::{error::InspectError, image::ImageInfo, metrics::InspectorMetrics};

#[derive(Clone, Debug)]
pub struct CacheOptions {
    pub capacity: usize,
    /// Bytes the entries may hold in all (their estimated size): answers vary from a few
    /// hundred bytes to a few MiB, so a count alone does not bound the memory.
    pub max_bytes: usize,
    /// How long a tag's answer is trusted (tags can move).
    pub tag_ttl: Duration,
    /// How long a failure is remembered before the registry is asked again.
    pub negative_ttl: Duration,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            capacity: 10_000,
            max_bytes: 64 * 1024 * 1024,
            tag_ttl: Duration::from_secs(6 * 3600),
            negative_ttl: Duration::from_secs(30),
        }
    }
}

/// The normalized image and a fingerprint of the credentials that apply to it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub image: String,
    pub credentials: Option<[u8; 32]>,
}

pub type Answer = Result<Arc<ImageInfo>, InspectError>;

struct Entry {
    answer: Answer,
    /// `None`: never expires (a digest).
    expires: Option<Instant>,
    /// Estimated bytes of the entry, key included.
    weight: usize,
}

/// The LRU and the bytes its entries hold.
struct Entries {
    lru: LruCache<CacheKey, Entry>,
    bytes: usize,
}

impl Entries {
    fn remove(&mut self, key: &CacheKey) {
        if let Some(old) = self.lru.pop(key) {
            self.bytes -= old.weight;
        }
    }

    /// Adds an entry, then evicts the least recently used until both bounds hold (an
    /// entry larger than the whole budget is not kept).
    fn insert(&mut self, key: CacheKey, entry: Entry, max_bytes: usize) {
        self.bytes += entry.weight;
        if let Some((_, old)) = self.lru.push(key, entry) {
            self.bytes -= old.weight;
        }
        while self.bytes > max_bytes {
            match self.lru.pop_lru() {
                Some((_, old)) => self.bytes -= old.weight,
                None => break,
            }
        }
    }
}

/// What an entry costs in memory, approximately: its strings and their headers.
fn weight(key: &CacheKey, answer: &Answer) -> usize {
    const STRING: usize = std::mem::size_of::<String>();
    let answer = match answer {
        Ok(info) => {
            std::mem::size_of::<ImageInfo>()
                + info.image.len()
                + info.digest.len()
                + info
                    .platforms
                    .iter()
                    .map(|p| {
                        std::mem::size_of_val(p)
                            + p.os.len()
                            + p.architecture.len()
                            + p.variant.as_ref().map_or(0, |v| v.len() + STRING)
                            + p.digest.len()
                    })
                    .sum::<usize>()
        }
        Err(e) => std::mem::size_of::<InspectError>() + e.to_string().len(),
    };
    std::mem::size_of::<Entry>() + std::mem::size_of::<CacheKey>() + key.image.len() + answer
}

pub struct InspectionCache {
    options: CacheOptions,
    entries: Mutex<Entries>,
    in_flight: Mutex<HashMap<CacheKey, Arc<OnceCell<Answer>>>>,
    metrics: InspectorMetrics,
}

impl InspectionCache {
    pub fn new(options: CacheOptions, metrics: InspectorMetrics) -> Self {
        let capacity = NonZeroUsize::new(options.capacity).unwrap_or(NonZeroUsize::MIN);
        InspectionCache {
            options,
            entries: Mutex::new(Entries {
                lru: LruCache::new(capacity),
                bytes: 0,
            }),
            in_flight: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    pub fn len(&self) -> usize {
        lock(&self.entries).lru.len()
    }

    /// Estimated bytes held by the entries.
    pub fn bytes(&self) -> usize {
        lock(&self.entries).bytes
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A fresh cached answer, if any.
    pub fn get(&self, key: &CacheKey) -> Option<Answer> {
        let mut entries = lock(&self.entries);
        let fresh = entries
            .lru
            .get(key)
            .map(|e| e.expires.is_none_or(|t| t > Instant::now()))?;
        if fresh {
            entries.lru.get(key).map(|e| e.answer.clone())
        } else {
            entries.remove(key);
            self.gauges(&entries);
            None
        }
    }

    /// The cached answer, or the one `fetch` produces; concurrent callers with the same
    /// key share one `fetch`. `bypass` skips the cached answer (imagePullPolicy Always)
    /// but still shares an in-flight fetch and stores the fresh answer.
    pub async fn get_or_fetch<F, Fut>(
        &self,
        key: CacheKey,
        immutable: bool,
        bypass: bool,
        fetch: F,
    ) -> Answer
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Answer>,
    {
        if !bypass && let Some(answer) = self.get(&key) {
            self.metrics.cache_hits.inc();
            return answer;
        }
        self.metrics.cache_misses.inc();
        let cell = lock(&self.in_flight)
            .entry(key.clone())
            .or_default()
            .clone();
        let answer = cell
            .get_or_init(|| async {
                let answer = fetch().await;
                self.store(key.clone(), answer.clone(), immutable);
                answer
            })
            .await
            .clone();
        let mut in_flight = lock(&self.in_flight);
        if in_flight.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            in_flight.remove(&key);
        }
        answer
    }

    fn store(&self, key: CacheKey, answer: Answer, immutable: bool) {
        let expires = match &answer {
            Ok(_) if immutable => None,
            Ok(_) => Some(Instant::now() + self.options.tag_ttl),
            Err(_) => Some(Instant::now() + self.options.negative_ttl),
        };
        let weight = weight(&key, &answer);
        let mut entries = lock(&self.entries);
        entries.insert(
            key,
            Entry {
                answer,
                expires,
                weight,
            },
            self.options.max_bytes,
        );
        self.gauges(&entries);
    }

    fn gauges(&self, entries: &Entries) {
        self.metrics
            .cache_entries
            .set(i64::try_from(entries.lru.len()).unwrap_or(i64::MAX));
        self.metrics
            .cache_bytes
            .set(i64::try_from(entries.bytes).unwrap_or(i64::MAX));
    }

    /// Forgets everything (e.g. after pull secrets changed).
    pub fn clear(&self) {
        let mut entries = lock(&self.entries);
        entries.lru.clear();
        entries.bytes = 0;
        self.gauges(&entries);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::image::ManifestKind;

    fn info(image: &str) -> Arc<ImageInfo> {
        Arc::new(ImageInfo {
            image: image.into(),
            digest: "sha256:x".into(),
            kind: ManifestKind::Index,
            operator_bundle: false,
            binaries_pending: false,
            platforms: vec![],
        })
    }

    fn key(image: &str, creds: Option<u8>) -> CacheKey {
        CacheKey {
            image: image.into(),
            credentials: creds.map(|c| [c; 32]),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_share_one_fetch() {
        let cache = Arc::new(InspectionCache::new(
            CacheOptions::default(),
            InspectorMetrics::default(),
        ));
        let calls = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let cache = cache.clone();
                let calls = calls.clone();
                tokio::spawn(async move {
                    cache
                        .get_or_fetch(key("a", None), false, false, || async {
                            calls.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            Ok(info("a"))
                        })
                        .await
                })
            })
            .collect();
        for t in tasks {
            assert!(t.await.unwrap().is_ok());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(cache.len(), 1);
    }

    #[tokio::test]
    async fn credentials_are_part_of_the_key_and_bypass_refetches() {
        let cache = InspectionCache::new(CacheOptions::default(), InspectorMetrics::default());
        let calls = AtomicUsize::new(0);
        let fetch = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(info("a"))
        };
        cache
            .get_or_fetch(key("a", Some(1)), false, false, fetch)
            .await
            .unwrap();
        cache
            .get_or_fetch(key("a", Some(1)), false, false, fetch)
            .await
            .unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        cache
            .get_or_fetch(key("a", Some(2)), false, false, fetch)
            .await
            .unwrap();
        cache
            .get_or_fetch(key("a", None), false, false, fetch)
            .await
            .unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            3,
            "other credentials never share an answer"
        );
        cache
            .get_or_fetch(key("a", Some(1)), false, true, fetch)
            .await
            .unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 4, "bypass asks the registry");
    }

    #[tokio::test]
    async fn tags_and_failures_expire_digests_do_not() {
        let options = CacheOptions {
            capacity: 10,
            max_bytes: 1 << 20,
            tag_ttl: Duration::from_millis(30),
            negative_ttl: Duration::from_millis(10),
        };
        let cache = InspectionCache::new(options, InspectorMetrics::default());
        let calls = AtomicUsize::new(0);
        let ok = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(info("a"))
        };
        let fail = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(InspectError::NotFound { image: "b".into() })
        };
        cache
            .get_or_fetch(key("tag", None), false, false, ok)
            .await
            .unwrap();
        cache
            .get_or_fetch(key("digest", None), true, false, ok)
            .await
            .unwrap();
        cache
            .get_or_fetch(key("bad", None), false, false, fail)
            .await
            .unwrap_err();
        cache
            .get_or_fetch(key("bad", None), false, false, fail)
            .await
            .unwrap_err();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            3,
            "a failure is remembered for a while"
        );
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(cache.get(&key("tag", None)).is_none());
        assert!(cache.get(&key("bad", None)).is_none());
        assert!(cache.get(&key("digest", None)).is_some());
    }

    #[tokio::test]
    async fn the_least_recently_used_entry_goes_first() {
        let cache = InspectionCache::new(
            CacheOptions {
                capacity: 2,
                ..CacheOptions::default()
            },
            InspectorMetrics::default(),
        );
        for image in ["a", "b"] {
            cache
                .get_or_fetch(key(image, None), true, false, || async { Ok(info(image)) })
                .await
                .unwrap();
        }
        cache.get(&key("a", None));
        cache
            .get_or_fetch(key("c", None), true, false, || async { Ok(info("c")) })
            .await
            .unwrap();
        assert!(cache.get(&key("b", None)).is_none());
        assert!(cache.get(&key("a", None)).is_some());
        assert_eq!(cache.len(), 2);
    }
}

#[cfg(test)]
mod byte_bound_tests {
    use super::*;
    use crate::image::{ManifestKind, PlatformEntry};

    fn answer(platforms: usize) -> Answer {
        Ok(Arc::new(ImageInfo {
            image: "registry.example/app:1".into(),
            digest: format!("sha256:{}", "0".repeat(64)),
            kind: ManifestKind::Index,
            operator_bundle: false,
            binaries_pending: false,
            platforms: (0..platforms)
                .map(|i| PlatformEntry {
                    os: "linux".into(),
                    architecture: format!("arch{i}"),
                    variant: None,
                    digest: format!("sha256:{i:064}"),
                    binary: None,
                })
                .collect(),
        }))
    }

    fn key(image: &str) -> CacheKey {
        CacheKey {
            image: image.into(),
            credentials: None,
        }
    }

    #[tokio::test]
    async fn entries_are_evicted_by_bytes_as_well_as_by_count() {
        let max_bytes = 256 * 1024;
        let cache = InspectionCache::new(
            CacheOptions {
                max_bytes,
                ..CacheOptions::default()
            },
            InspectorMetrics::default(),
        );
        // 1,000 platforms: about 150 KB an answer, so only one fits at a time.
        for image in ["a", "b", "c"] {
            cache
                .get_or_fetch(key(image), true, false, || async { answer(1000) })
                .await
                .unwrap();
            assert!(cache.bytes() <= max_bytes, "{} bytes", cache.bytes());
        }
        assert_eq!(cache.len(), 1);
        assert!(cache.get(&key("c")).is_some(), "the newest stays");
        assert!(cache.bytes() > 100_000, "{} bytes", cache.bytes());
        // Small answers share the budget: the large one goes once they need its room.
        for i in 0..1000 {
            let image = format!("small-{i}");
            cache
                .get_or_fetch(key(&image), true, false, || async { answer(2) })
                .await
                .unwrap();
        }
        assert!(cache.get(&key("c")).is_none());
        assert!(cache.bytes() <= max_bytes);
        assert!(cache.len() > 100, "{} entries", cache.len());
        // An answer larger than the whole budget is answered, not kept.
        let huge = cache
            .get_or_fetch(key("huge"), true, false, || async { answer(5000) })
            .await
            .unwrap();
        assert_eq!(huge.platforms.len(), 5000);
        assert!(cache.get(&key("huge")).is_none());
        assert!(cache.bytes() <= max_bytes);
        cache.clear();
        assert_eq!((cache.len(), cache.bytes()), (0, 0));
    }
}
