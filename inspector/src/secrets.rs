//! Where pull credentials come from: a fixed keyring (CLI `--authfile`, tests) or, in a
//! cluster, the pod's `imagePullSecrets` and its service account's, read by the inspector
//! itself (the only component allowed to read Secrets).

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
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
use multiarch_policy::pod_images::MAX_PULL_SECRETS;
use multiarch_runtime::supervisor::Tasks;
use tokio::sync::OnceCell;
use tracing::warn;

use crate::{error::InspectError, keyring::Keyring};

mod keyring_cache;
mod read_rate;

pub use keyring_cache::keyring_key;
use keyring_cache::{CacheState, Cached, KeyringKey, Source};
use read_rate::ReadRate;

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

/// However quiet the watches, a keyring is read again after this long.
const MAX_AGE: Duration = Duration::from_secs(600);
/// The docker config one pull secret may hold (a config of a few registries is a few
/// KiB; the API server lets a Secret hold 1 MiB).
pub const MAX_SECRET_CONFIG_BYTES: usize = 64 * 1024;
/// What one pod's keyring may hold, every pull secret together.
pub const MAX_KEYRING_BYTES: usize = 256 * 1024;

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

    /// The pull secrets the service account `sa` names (none when it is not found).
    async fn service_account_secrets(
        &self,
        namespace: &str,
        sa: &str,
    ) -> Result<Vec<String>, InspectError> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        self.rate.acquire(namespace).await;
        match api.get_opt(sa).await {
            Ok(Some(account)) => Ok(account
                .image_pull_secrets
                .into_iter()
                .flatten()
                .map(|reference| reference.name)
                .filter(|name| !name.is_empty())
                .collect()),
            Ok(None) => {
                warn!(
                    namespace,
                    service_account = sa,
                    "service account not found; using the pod's pull secrets only"
                );
                Ok(Vec::new())
            }
            Err(e) => Err(InspectError::Secret {
                namespace: namespace.to_owned(),
                name: format!("serviceaccount/{sa}"),
                detail: e.to_string(),
            }),
        }
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
            for name in self.service_account_secrets(namespace, sa).await? {
                if names.len() > MAX_PULL_SECRETS {
                    break;
                }
                add(name, &mut names);
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
