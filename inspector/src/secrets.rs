//! Where pull credentials come from: a fixed keyring (CLI `--authfile`, tests) or, in a
//! cluster, the pod's `imagePullSecrets` and its service account's, read by the inspector
//! itself (the only component allowed to read Secrets).

use std::{
    collections::{HashMap, HashSet},
    num::NonZeroUsize,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::{
    Api,
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher},
};
use lru::LruCache;
use multiarch_policy::pod_images::MAX_PULL_SECRETS;
use multiarch_runtime::{rate_limit::TokenBucket, supervisor::Tasks};
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;
use tracing::warn;

use crate::{error::InspectError, keyring::Keyring};

#[async_trait]
pub trait SecretSource: Send + Sync {
    /// The merged credentials of the named secrets and of the service account's
    /// `imagePullSecrets`. Missing secrets are skipped, as the kubelet does.
    async fn keyring(
        &self,
        namespace: &str,
        pull_secrets: &[String],
        service_account: Option<&str>,
    ) -> Result<Arc<Keyring>, InspectError>;
}

/// One keyring for every request.
#[derive(Debug, Default)]
pub struct StaticKeyring(pub Arc<Keyring>);

#[async_trait]
impl SecretSource for StaticKeyring {
    async fn keyring(
        &self,
        _: &str,
        _: &[String],
        _: Option<&str>,
    ) -> Result<Arc<Keyring>, InspectError> {
        Ok(self.0.clone())
    }
}

/// A keyring's key: a SHA-256 of the namespace, the pull secret names and the service
/// account, so that a key costs 32 bytes however long the pod's list (and no two pods'
/// lists share one unless they are the same).
type KeyringKey = [u8; 32];

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
/// However quiet the watches, a keyring is read again after this long.
const MAX_AGE: Duration = Duration::from_secs(600);
/// The docker config one pull secret may hold (a config of a few registries is a few
/// KiB; the API server lets a Secret hold 1 MiB).
pub const MAX_SECRET_CONFIG_BYTES: usize = 64 * 1024;
/// What one pod's keyring may hold, every pull secret together.
pub const MAX_KEYRING_BYTES: usize = 256 * 1024;
/// Reads of Secrets and ServiceAccounts per second for one namespace, and its burst:
/// one tenant's pods cannot take the inspector's reads from the others...
const NAMESPACE_READS: (f64, u32) = (20.0, 100);
/// ...and all of them together, the API server's share.
const ALL_READS: (f64, u32) = (200.0, 400);
/// Namespaces whose read rate is remembered.
const NAMESPACE_BUCKETS: usize = 4096;

/// What a keyring was read from: a change to any of these drops it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Source {
    kind: &'static str,
    name: String,
    /// A Secret's `resourceVersion` when it was read (`None`: it did not exist), checked
    /// again before the keyring is used.
    version: Option<String>,
}

struct Cached {
    at: Instant,
    namespace: String,
    keyring: Arc<Keyring>,
    sources: Vec<Source>,
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
struct Keyrings {
    lru: LruCache<KeyringKey, Cached>,
    bytes: usize,
    max_bytes: usize,
}

impl Keyrings {
    fn new(count: usize, max_bytes: usize) -> Self {
        Keyrings {
            lru: LruCache::new(NonZeroUsize::new(count).unwrap_or(NonZeroUsize::MIN)),
            bytes: 0,
            max_bytes,
        }
    }

    fn put(&mut self, key: KeyringKey, cached: Cached) {
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

/// Reads of Secrets and ServiceAccounts, paced per namespace and in all.
struct ReadRate {
    all: TokenBucket,
    namespaces: Mutex<LruCache<String, Arc<TokenBucket>>>,
}

impl ReadRate {
    fn new() -> Self {
        ReadRate {
            all: TokenBucket::new(ALL_READS.0, ALL_READS.1),
            namespaces: Mutex::new(LruCache::new(
                NonZeroUsize::new(NAMESPACE_BUCKETS).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }

    /// Waits for the next read of `namespace`.
    async fn acquire(&self, namespace: &str) {
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

struct CacheState {
    cache: Mutex<Keyrings>,
    /// Bumped by every invalidation: a read that started before one is not cached.
    generation: AtomicU64,
    accounts_live: AtomicBool,
}

impl CacheState {
    fn new() -> Self {
        CacheState {
            cache: Mutex::new(Keyrings::new(CACHED_KEYRINGS, CACHED_KEYRING_BYTES)),
            generation: AtomicU64::new(0),
            accounts_live: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Keyrings> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn live(&self) -> bool {
        self.accounts_live.load(Ordering::SeqCst)
    }

    /// Drops every keyring read from `kind` `namespace/name`.
    fn changed(&self, namespace: &str, kind: &'static str, name: &str) {
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

    fn forget_all(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.lock().clear();
    }
}

/// Follows one kind's metadata (names and versions only: no secret data is held) and
/// drops the keyrings that depend on what changed. `live` is true while the watch is
/// known to be current: after an error caching stops until the watch delivers again.
async fn follow<K>(
    api: Api<PartialObjectMeta<K>>,
    kind: &'static str,
    state: Arc<CacheState>,
    live: fn(&CacheState) -> &AtomicBool,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) => {
                let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
                let name = object.metadata.name.as_deref().unwrap_or_default();
                state.changed(namespace, kind, name);
                live(&state).store(true, Ordering::SeqCst);
            }
            Ok(watcher::Event::Init) => live(&state).store(false, Ordering::SeqCst),
            Ok(watcher::Event::InitApply(_)) => {}
            Ok(watcher::Event::InitDone) => {
                // Anything may have changed while the watch was away.
                state.forget_all();
                live(&state).store(true, Ordering::SeqCst);
            }
            Err(e) => {
                warn!(kind, error = %e, "pull-secret watch failed; reading pull secrets afresh until it is back");
                live(&state).store(false, Ordering::SeqCst);
                state.forget_all();
            }
        }
    }
}

/// Runs [`follow`] for `K` under `tasks` until the shutdown.
fn spawn_follow<K>(
    client: &kube::Client,
    tasks: &Tasks,
    name: &'static str,
    state: &Arc<CacheState>,
    live: fn(&CacheState) -> &AtomicBool,
) where
    K: kube::Resource<DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api = Api::<PartialObjectMeta<K>>::all(client.clone());
    let state = state.clone();
    let shutdown = tasks.shutdown().clone();
    tasks.spawn_infallible(name, async move {
        tokio::select! {
            () = follow(api, <K as k8s_openapi::Resource>::KIND, state, live) => {}
            () = shutdown.cancelled() => {}
        }
    });
}

/// Reads Secrets and ServiceAccounts from the API server, only those a request names: its
/// RBAC is `get` on Secrets, never `list` or `watch` (a Secret watch, even of metadata,
/// needs a grant that reads every Secret's data in the cluster). A keyring is kept while
/// the ServiceAccount watch is live, dropped when a ServiceAccount it was read from
/// changes, and used only after each of its Secrets is found at the `resourceVersion` it
/// was read at (a metadata-only GET per Secret): a revoked, changed, deleted or newly
/// created pull secret is honoured by the next request, not after a time-out. Without
/// the live watch every request reads afresh. Requests for the same keyring at once
/// share one read; every read is paced per namespace and in all; what one pod's pull
/// secrets may be (how many, how large) is bounded, and the cache in count and bytes.
pub struct KubeSecrets {
    client: kube::Client,
    state: Arc<CacheState>,
    rate: ReadRate,
    /// Reads under way, by key: a request arriving meanwhile waits for that one.
    reading: Mutex<HashMap<KeyringKey, SharedRead>>,
}

type SharedRead = Arc<OnceCell<Result<Arc<Keyring>, InspectError>>>;

impl KubeSecrets {
    fn with_state(client: kube::Client, state: Arc<CacheState>) -> Self {
        KubeSecrets {
            client,
            state,
            rate: ReadRate::new(),
            reading: Mutex::default(),
        }
    }

    /// A source that watches ServiceAccounts (metadata only) under `tasks`.
    pub fn start(client: kube::Client, tasks: &Tasks) -> Self {
        let state = Arc::new(CacheState::new());
        spawn_follow::<ServiceAccount>(&client, tasks, "service account watch", &state, |s| {
            &s.accounts_live
        });
        KubeSecrets::with_state(client, state)
    }

    /// For one-shot commands (`multiarch audit`): no watches, and each keyring read once
    /// and kept (up to the age ceiling): a snapshot of the cluster's pull secrets for the
    /// length of the command.
    pub fn snapshot(client: kube::Client) -> Self {
        let state = CacheState::new();
        state.accounts_live.store(true, Ordering::SeqCst);
        KubeSecrets::with_state(client, Arc::new(state))
    }

    /// Whether keyrings are being kept (the ServiceAccount watch is live).
    pub fn caching(&self) -> bool {
        self.state.live()
    }

    /// Changes seen so far (each drops the keyrings that depend on it).
    pub fn changes_seen(&self) -> u64 {
        self.state.generation.load(Ordering::SeqCst)
    }

    /// Bytes the cached keyrings hold.
    pub fn cached_bytes(&self) -> usize {
        self.state.lock().bytes
    }

    /// Whether every Secret in `sources` is still at the version it was read at (a
    /// missing one still missing). Any doubt (an API error) is a change: the caller reads
    /// afresh and reports what went wrong.
    async fn secrets_unchanged(&self, namespace: &str, sources: &[Source]) -> bool {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        for source in sources.iter().filter(|s| s.kind == "Secret") {
            self.rate.acquire(namespace).await;
            match api.get_metadata_opt(&source.name).await {
                Ok(found) => {
                    let now = found.and_then(|m| m.metadata.resource_version);
                    if now != source.version {
                        return false;
                    }
                }
                Err(_) => return false,
            }
        }
        true
    }

    async fn read(
        &self,
        namespace: &str,
        pull_secrets: &[String],
        service_account: Option<&str>,
    ) -> Result<(Keyring, Vec<Source>), InspectError> {
        let over_limit = |detail: String| InspectError::PullSecretsOverLimit {
            namespace: namespace.to_owned(),
            detail,
        };
        let mut names: Vec<String> = Vec::new();
        let mut seen = HashSet::new();
        let mut add = |name: String, names: &mut Vec<String>| {
            if seen.insert(name.clone()) {
                names.push(name);
            }
        };
        for name in pull_secrets {
            add(name.clone(), &mut names);
        }
        let mut sources = Vec::new();
        if let Some(sa) = service_account.filter(|s| !s.is_empty()) {
            sources.push(Source {
                kind: "ServiceAccount",
                name: sa.to_owned(),
                version: None,
            });
            let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
            self.rate.acquire(namespace).await;
            match api.get_opt(sa).await {
                Ok(Some(account)) => {
                    for reference in account.image_pull_secrets.into_iter().flatten() {
                        if names.len() > MAX_PULL_SECRETS {
                            break;
                        }
                        if !reference.name.is_empty() {
                            add(reference.name, &mut names);
                        }
                    }
                }
                Ok(None) => warn!(
                    namespace,
                    service_account = sa,
                    "service account not found; using the pod's pull secrets only"
                ),
                Err(e) => {
                    return Err(InspectError::Secret {
                        namespace: namespace.to_owned(),
                        name: format!("serviceaccount/{sa}"),
                        detail: e.to_string(),
                    });
                }
            }
        }
        if names.len() > MAX_PULL_SECRETS {
            return Err(over_limit(format!(
                "the pod and its service account name more than {MAX_PULL_SECRETS} distinct imagePullSecrets; no more are read for one pod"
            )));
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let mut keyring = Keyring::default();
        for name in names {
            self.rate.acquire(namespace).await;
            let secret = match api.get_opt(&name).await {
                Ok(Some(secret)) => {
                    sources.push(Source {
                        kind: "Secret",
                        name: name.clone(),
                        version: secret.metadata.resource_version.clone(),
                    });
                    secret
                }
                Ok(None) => {
                    warn!(namespace, secret = %name, "pull secret not found; skipping it");
                    sources.push(Source {
                        kind: "Secret",
                        name,
                        version: None,
                    });
                    continue;
                }
                Err(e) => {
                    return Err(InspectError::Secret {
                        namespace: namespace.to_owned(),
                        name,
                        detail: e.to_string(),
                    });
                }
            };
            let data = secret.data.unwrap_or_default();
            let config = match secret.type_.as_deref() {
                Some("kubernetes.io/dockerconfigjson") => data
                    .get(".dockerconfigjson")
                    .map(|d| (&d.0, Keyring::add_docker_config_json as AddConfig)),
                Some("kubernetes.io/dockercfg") => data
                    .get(".dockercfg")
                    .map(|d| (&d.0, Keyring::add_dockercfg as AddConfig)),
                _ => None,
            };
            let Some((bytes, add_config)) = config else {
                warn!(namespace, secret = %name, "secret is not of a docker config type; skipping it");
                continue;
            };
            if bytes.len() > MAX_SECRET_CONFIG_BYTES {
                return Err(over_limit(format!(
                    "pull secret {name} holds {} bytes of docker config, more than the {MAX_SECRET_CONFIG_BYTES} read",
                    bytes.len()
                )));
            }
            if let Err(e) = add_config(&mut keyring, bytes) {
                warn!(namespace, secret = %name, error = %e, "pull secret is not a valid docker config; skipping it");
            }
            if keyring.bytes() > MAX_KEYRING_BYTES {
                return Err(over_limit(format!(
                    "their credentials hold more than the {MAX_KEYRING_BYTES} bytes read for one pod"
                )));
            }
        }
        Ok((keyring, sources))
    }

    /// The keyring of a request, cached or read (a request arriving while the same
    /// keyring is being read waits for that read).
    async fn fetch(
        &self,
        key: KeyringKey,
        namespace: &str,
        pull_secrets: &[String],
        service_account: Option<&str>,
    ) -> Result<Arc<Keyring>, InspectError> {
        let live = self.state.live();
        let cached = if live {
            self.state
                .lock()
                .lru
                .get(&key)
                .filter(|c| c.at.elapsed() < MAX_AGE)
                .map(|c| (c.keyring.clone(), c.sources.clone()))
        } else {
            None
        };
        if let Some((keyring, sources)) = cached
            && self.secrets_unchanged(namespace, &sources).await
        {
            return Ok(keyring);
        }
        let generation = self.state.generation.load(Ordering::SeqCst);
        let (keyring, sources) = self.read(namespace, pull_secrets, service_account).await?;
        let keyring = Arc::new(keyring);
        // Kept only if nothing changed while it was read and the watch is still live.
        let mut cache = self.state.lock();
        if live && self.state.live() && self.state.generation.load(Ordering::SeqCst) == generation {
            cache.put(
                key,
                Cached {
                    at: Instant::now(),
                    namespace: namespace.to_owned(),
                    keyring: keyring.clone(),
                    sources,
                },
            );
        }
        Ok(keyring)
    }
}

/// Adds a docker config's entries to a keyring.
type AddConfig = fn(&mut Keyring, &[u8]) -> Result<(), crate::keyring::KeyringError>;

#[async_trait]
impl SecretSource for KubeSecrets {
    async fn keyring(
        &self,
        namespace: &str,
        pull_secrets: &[String],
        service_account: Option<&str>,
    ) -> Result<Arc<Keyring>, InspectError> {
        if pull_secrets.len() > MAX_PULL_SECRETS {
            return Err(InspectError::PullSecretsOverLimit {
                namespace: namespace.to_owned(),
                detail: format!(
                    "the pod names more than {MAX_PULL_SECRETS} distinct imagePullSecrets; no more are read for one pod"
                ),
            });
        }
        let key = keyring_key(namespace, pull_secrets, service_account);
        let shared = {
            let mut reading = self
                .reading
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            reading.entry(key).or_default().clone()
        };
        let result = shared
            .get_or_init(|| self.fetch(key, namespace, pull_secrets, service_account))
            .await
            .clone();
        // The first to finish retires the shared read; the next request reads afresh.
        let mut reading = self
            .reading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if reading.get(&key).is_some_and(|r| Arc::ptr_eq(r, &shared)) {
            reading.remove(&key);
        }
        result
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
