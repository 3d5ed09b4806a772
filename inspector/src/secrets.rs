//! Where pull credentials come from: a fixed keyring (CLI `--authfile`, tests) or, in a
//! cluster, the pod's `imagePullSecrets` and its service account's, read by the inspector
//! itself (the only component allowed to read Secrets).

use std::{
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
use multiarch_runtime::supervisor::Tasks;
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

/// Namespace, pull secret names, service account.
type KeyringKey = (String, Vec<String>, Option<String>);

/// Keyrings kept at once (one per namespace, pull-secret list and service account).
const CACHED_KEYRINGS: usize = 4096;
/// However quiet the watches, a keyring is read again after this long.
const MAX_AGE: Duration = Duration::from_secs(600);

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
    keyring: Arc<Keyring>,
    sources: Vec<Source>,
}

/// Reads Secrets and ServiceAccounts from the API server, only those a request names: its
/// RBAC is `get` on Secrets, never `list` or `watch` (a Secret watch, even of metadata,
/// needs a grant that reads every Secret's data in the cluster). A keyring is kept while
/// the ServiceAccount watch is live, dropped when a ServiceAccount it was read from
/// changes, and used only after each of its Secrets is found at the `resourceVersion` it
/// was read at (a metadata-only GET per Secret): a revoked, changed, deleted or newly
/// created pull secret is honoured by the next request, not after a time-out. Without
/// the live watch every request reads afresh.
pub struct KubeSecrets {
    client: kube::Client,
    state: Arc<CacheState>,
}

struct CacheState {
    cache: Mutex<LruCache<KeyringKey, Cached>>,
    /// Bumped by every invalidation: a read that started before one is not cached.
    generation: AtomicU64,
    accounts_live: AtomicBool,
}

impl CacheState {
    fn new() -> Self {
        CacheState {
            cache: Mutex::new(LruCache::new(
                NonZeroUsize::new(CACHED_KEYRINGS).unwrap_or(NonZeroUsize::MIN),
            )),
            generation: AtomicU64::new(0),
            accounts_live: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<KeyringKey, Cached>> {
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
            .iter()
            .filter(|(key, cached)| {
                key.0 == namespace
                    && cached
                        .sources
                        .iter()
                        .any(|s| s.kind == kind && s.name == name)
            })
            .map(|(key, _)| key.clone())
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

impl KubeSecrets {
    /// A source that watches ServiceAccounts (metadata only) under `tasks`.
    pub fn start(client: kube::Client, tasks: &Tasks) -> Self {
        let state = Arc::new(CacheState::new());
        spawn_follow::<ServiceAccount>(&client, tasks, "service account watch", &state, |s| {
            &s.accounts_live
        });
        KubeSecrets { client, state }
    }

    /// For one-shot commands (`multiarch audit`): no watches, and each keyring read once
    /// and kept (up to the age ceiling): a snapshot of the cluster's pull secrets for the
    /// length of the command.
    pub fn snapshot(client: kube::Client) -> Self {
        let state = CacheState::new();
        state.accounts_live.store(true, Ordering::SeqCst);
        KubeSecrets {
            client,
            state: Arc::new(state),
        }
    }

    /// Whether keyrings are being kept (the ServiceAccount watch is live).
    pub fn caching(&self) -> bool {
        self.state.live()
    }

    /// Changes seen so far (each drops the keyrings that depend on it).
    pub fn changes_seen(&self) -> u64 {
        self.state.generation.load(Ordering::SeqCst)
    }

    /// Whether every Secret in `sources` is still at the version it was read at (a
    /// missing one still missing). Any doubt (an API error) is a change: the caller reads
    /// afresh and reports what went wrong.
    async fn secrets_unchanged(&self, namespace: &str, sources: &[Source]) -> bool {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        for source in sources.iter().filter(|s| s.kind == "Secret") {
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
        let mut names: Vec<String> = pull_secrets.to_vec();
        let mut sources = Vec::new();
        if let Some(sa) = service_account.filter(|s| !s.is_empty()) {
            sources.push(Source {
                kind: "ServiceAccount",
                name: sa.to_owned(),
                version: None,
            });
            let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
            match api.get_opt(sa).await {
                Ok(Some(account)) => {
                    names.extend(
                        account
                            .image_pull_secrets
                            .into_iter()
                            .flatten()
                            .map(|r| r.name),
                    );
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
        names.dedup();
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let mut keyring = Keyring::default();
        for name in names {
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
            let result = match secret.type_.as_deref() {
                Some("kubernetes.io/dockerconfigjson") => data
                    .get(".dockerconfigjson")
                    .map(|d| keyring.add_docker_config_json(&d.0)),
                Some("kubernetes.io/dockercfg") => {
                    data.get(".dockercfg").map(|d| keyring.add_dockercfg(&d.0))
                }
                _ => None,
            };
            match result {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    warn!(namespace, secret = %name, error = %e, "pull secret is not a valid docker config; skipping it")
                }
                None => {
                    warn!(namespace, secret = %name, "secret is not of a docker config type; skipping it")
                }
            }
        }
        Ok((keyring, sources))
    }
}

#[async_trait]
impl SecretSource for KubeSecrets {
    async fn keyring(
        &self,
        namespace: &str,
        pull_secrets: &[String],
        service_account: Option<&str>,
    ) -> Result<Arc<Keyring>, InspectError> {
        let key = (
            namespace.to_owned(),
            pull_secrets.to_vec(),
            service_account.map(str::to_owned),
        );
        let live = self.state.live();
        let cached = if live {
            self.state
                .lock()
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
                    keyring: keyring.clone(),
                    sources,
                },
            );
        }
        Ok(keyring)
    }
}
