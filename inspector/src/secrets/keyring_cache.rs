//! The inspector's cached keyrings: keyed by a hash of where a pod's credentials are,
//! each with what it was read from (so that a change drops it), bounded in count and in
//! bytes.

use std::{
    num::NonZeroUsize,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Instant,
};

use lru::LruCache;
use sha2::{Digest, Sha256};

use crate::keyring::Keyring;

/// A keyring's key: a SHA-256 of the namespace, the pull secret names and the service
/// account, so that a key costs 32 bytes however long the pod's list (and no two pods'
/// lists share one unless they are the same).
pub type KeyringKey = [u8; 32];

/// The key of `namespace`'s `pull_secrets` and `service_account`.
pub fn keyring_key(
    namespace: &str,
    pull_secrets: &[String],
    service_account: Option<&str>,
) -> KeyringKey {
    let mut hasher = Sha256::new();
    hasher.update(namespace.as_bytes());
    hasher.update([0]);
    for name in pull_secrets {
        hasher.update(name.as_bytes());
        hasher.update([0]);
    }
    // The list ends with 1; an account follows it with 2, so that none and "" differ.
    hasher.update([1]);
    if let Some(account) = service_account {
        hasher.update([2]);
        hasher.update(account.as_bytes());
    }
    hasher.finalize().into()
}

/// Keyrings kept at once (one per namespace, pull-secret list and service account)...
const CACHED_KEYRINGS: usize = 4096;
/// ...and the bytes they may hold together.
const CACHED_KEYRING_BYTES: usize = 16 * 1024 * 1024;

/// What a keyring was read from: a change to any of these drops it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Source {
    pub(super) kind: &'static str,
    pub(super) name: String,
    /// A Secret's `resourceVersion` when it was read (`None`: it did not exist), checked
    /// again before the keyring is used.
    pub(super) version: Option<String>,
}

pub(super) struct Cached {
    pub(super) at: Instant,
    pub(super) namespace: String,
    pub(super) keyring: Arc<Keyring>,
    pub(super) sources: Vec<Source>,
}

impl Cached {
    fn bytes(&self) -> usize {
        self.keyring.bytes()
            + self.namespace.len()
            + self
                .sources
                .iter()
                .map(|s| s.name.len() + s.version.as_ref().map_or(0, String::len) + 64)
                .sum::<usize>()
    }
}

/// The cached keyrings, bounded in count and in bytes.
pub(super) struct Keyrings {
    pub(super) lru: LruCache<KeyringKey, Cached>,
    pub(super) bytes: usize,
    max_bytes: usize,
}

impl Keyrings {
    pub(super) fn new(count: usize, max_bytes: usize) -> Self {
        Keyrings {
            lru: LruCache::new(NonZeroUsize::new(count).unwrap_or(NonZeroUsize::MIN)),
            bytes: 0,
            max_bytes,
        }
    }

    pub(super) fn put(&mut self, key: KeyringKey, cached: Cached) {
        self.pop(&key);
        self.bytes += cached.bytes();
        if let Some((_, evicted)) = self.lru.push(key, cached) {
            self.bytes -= evicted.bytes();
        }
        while self.bytes > self.max_bytes {
            match self.lru.pop_lru() {
                Some((_, evicted)) => self.bytes -= evicted.bytes(),
                None => break,
            }
        }
    }

    fn pop(&mut self, key: &KeyringKey) {
        if let Some(old) = self.lru.pop(key) {
            self.bytes -= old.bytes();
        }
    }

    fn clear(&mut self) {
        self.lru.clear();
        self.bytes = 0;
    }
}

pub(super) struct CacheState {
    cache: Mutex<Keyrings>,
    /// Bumped by every invalidation: a read that started before one is not cached.
    pub(super) generation: AtomicU64,
    pub(super) accounts_live: AtomicBool,
}

impl CacheState {
    pub(super) fn new() -> Self {
        CacheState {
            cache: Mutex::new(Keyrings::new(CACHED_KEYRINGS, CACHED_KEYRING_BYTES)),
            generation: AtomicU64::new(0),
            accounts_live: AtomicBool::new(false),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Keyrings> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn live(&self) -> bool {
        self.accounts_live.load(Ordering::SeqCst)
    }

    /// Drops every keyring read from `kind` `namespace/name`.
    pub(super) fn changed(&self, namespace: &str, kind: &'static str, name: &str) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let mut cache = self.lock();
        let stale: Vec<KeyringKey> = cache
            .lru
            .iter()
            .filter(|(_, cached)| {
                cached.namespace == namespace
                    && cached
                        .sources
                        .iter()
                        .any(|s| s.kind == kind && s.name == name)
            })
            .map(|(key, _)| *key)
            .collect();
        for key in stale {
            cache.pop(&key);
        }
    }

    pub(super) fn forget_all(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cached(namespace: &str, registries: usize) -> Cached {
        let auths: serde_json::Map<String, serde_json::Value> = (0..registries)
            .map(|i| {
                (
                    format!("r{i}.example"),
                    serde_json::json!({"username": "u", "password": "p"}),
                )
            })
            .collect();
        let mut keyring = Keyring::default();
        keyring
            .add_docker_config_json(serde_json::json!({ "auths": auths }).to_string().as_bytes())
            .unwrap();
        Cached {
            at: Instant::now(),
            namespace: namespace.to_owned(),
            keyring: Arc::new(keyring),
            sources: Vec::new(),
        }
    }

    #[test]
    fn keyrings_are_kept_within_their_bytes_least_recently_used_first() {
        let one = cached("a", 100).bytes();
        let mut keyrings = Keyrings::new(1000, 3 * one);
        for i in 0..10u8 {
            keyrings.put([i; 32], cached("a", 100));
            assert!(
                keyrings.bytes <= 3 * one,
                "{} > {}",
                keyrings.bytes,
                3 * one
            );
        }
        assert_eq!(keyrings.lru.len(), 3);
        assert!(keyrings.lru.contains(&[9; 32]) && !keyrings.lru.contains(&[6; 32]));
        // One larger than the whole is not kept at all.
        keyrings.put([42; 32], cached("a", 400));
        assert!(keyrings.lru.is_empty() && keyrings.bytes == 0);
    }

    #[test]
    fn keys_hash_every_part_apart() {
        let key = |ns: &str, names: &[&str], sa: Option<&str>| {
            let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
            keyring_key(ns, &names, sa)
        };
        assert_eq!(key("a", &["x"], None), key("a", &["x"], None));
        assert_ne!(key("a", &["x"], None), key("b", &["x"], None));
        assert_ne!(key("a", &["xy"], None), key("a", &["x", "y"], None));
        assert_ne!(key("a", &["x"], None), key("a", &["x"], Some("")));
        assert_ne!(key("a", &[], Some("x")), key("a", &["x"], None));
    }
}
