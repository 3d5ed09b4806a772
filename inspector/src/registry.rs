//! Talking to registries: mirrors, credentials (then anonymous), retries with backoff on
//! transient failures, timeouts, size limits and nested indexes. The HTTP exchanges are
//! `bounded_fetch`'s (bodies bounded while they stream); references and error kinds are
//! oci-client's.

use std::{
    collections::HashSet,
    num::NonZeroUsize,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use lru::LruCache;
use multiarch_runtime::backoff::Backoff;
use oci_client::errors::{OciDistributionError, OciErrorCode};
use sha2::{Digest, Sha256};
use tracing::debug;

use crate::{
    address_policy::{self, AddressPolicy},
    body_budget::{self, BodyBudget},
    bounded_fetch::BoundedFetch,
    error::InspectError,
    image::{ImageInfo, ImageRef, ManifestKind, PlatformEntry},
    keyring::{Credential, Keyring},
    manifest::{self, ACCEPTED, MAX_MANIFEST_BYTES, Parsed},
    settings::RegistrySettings,
};

#[derive(Clone, Debug)]
pub struct RegistryOptions {
    pub connect_timeout: Duration,
    /// Per read on an open connection.
    pub read_timeout: Duration,
    /// For a whole inspection, retries and mirrors included.
    pub total_timeout: Duration,
    /// Attempts per request on transient failures (5xx, 429, timeouts, refused).
    pub attempts: u32,
    /// First retry delay; doubles per attempt.
    pub retry_backoff: Duration,
    /// Index inside index inside index... is refused beyond this.
    pub max_index_depth: usize,
    /// Registry bodies being read at once, in all and from one registry (see
    /// `body_budget`).
    pub body_budget_bytes: usize,
    pub body_budget_per_registry_bytes: usize,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(10),
            total_timeout: Duration::from_secs(30),
            attempts: 3,
            retry_backoff: Duration::from_millis(200),
            max_index_depth: 2,
            body_budget_bytes: body_budget::TOTAL_BYTES,
            body_budget_per_registry_bytes: body_budget::REGISTRY_BYTES,
        }
    }
}

/// Nested indexes one inspection may fetch (each digest once). Real images have none, or
/// one level of a few.
pub const MAX_NESTED_INDEXES: usize = 16;

/// The nested indexes an inspection has fetched so far.
#[derive(Default)]
struct NestedIndexes {
    seen: HashSet<String>,
}

/// A client per registry and credential: tokens are cached per client, so that one
/// pod's credentials can never serve another pod's request.
type ClientKey = (String, Option<[u8; 32]>);

pub struct RegistryClient {
    pub(crate) options: RegistryOptions,
    settings: RegistrySettings,
    clients: Mutex<LruCache<ClientKey, Arc<BoundedFetch>>>,
    /// Shared with the clients made from this one by [`RegistryClient::with_settings`].
    manifest_requests: Arc<AtomicU64>,
    /// Memory for bodies being read, shared likewise.
    budget: Arc<BodyBudget>,
}

pub(crate) enum Failure {
    Unauthorized,
    Other(InspectError),
}

impl RegistryClient {
    pub fn new(options: RegistryOptions, settings: RegistrySettings) -> Self {
        install_crypto_provider();
        let budget = Arc::new(BodyBudget::new(
            options.body_budget_bytes,
            options.body_budget_per_registry_bytes,
        ));
        RegistryClient {
            options,
            settings,
            clients: Mutex::new(LruCache::new(NonZeroUsize::MIN.saturating_add(255))),
            manifest_requests: Arc::new(AtomicU64::new(0)),
            budget,
        }
    }

    /// A client with the same options and new settings (its own connections: a CA or
    /// plain-HTTP setting may have changed), counting requests with this one.
    pub fn with_settings(&self, settings: RegistrySettings) -> Self {
        RegistryClient {
            manifest_requests: self.manifest_requests.clone(),
            budget: self.budget.clone(),
            ..RegistryClient::new(self.options.clone(), settings)
        }
    }

    /// The memory budget for bodies being read.
    pub fn body_budget(&self) -> &BodyBudget {
        &self.budget
    }

    /// Manifest GETs sent so far (for tests and the single-flight benchmark).
    pub fn manifest_requests(&self) -> u64 {
        self.manifest_requests.load(Ordering::Relaxed)
    }

    /// Resolves an image to its platforms, trying mirrors first.
    pub async fn resolve(
        &self,
        image: &ImageRef,
        keyring: &Keyring,
    ) -> Result<ImageInfo, InspectError> {
        let registry = image.registry().to_owned();
        match tokio::time::timeout(
            self.options.total_timeout,
            self.resolve_inner(image, keyring),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Err(InspectError::Timeout {
                registry,
                after: self.options.total_timeout,
            }),
        }
    }

    async fn resolve_inner(
        &self,
        image: &ImageRef,
        keyring: &Keyring,
    ) -> Result<ImageInfo, InspectError> {
        let source = image.registry();
        let settings = self.settings.for_registry(source);
        if settings.is_some_and(|s| s.blocked) {
            return Err(InspectError::Blocked {
                registry: source.to_owned(),
            });
        }
        for mirror in settings.map(|s| s.mirrors.as_slice()).unwrap_or_default() {
            if self
                .settings
                .for_registry(mirror)
                .is_some_and(|s| s.blocked)
            {
                continue;
            }
            match self.resolve_at(&image.on_registry(mirror), keyring).await {
                Ok(mut info) => {
                    info.image = image.to_string();
                    return Ok(info);
                }
                Err(e) => {
                    debug!(%mirror, image = %image, error = %e, "mirror failed, trying the next source")
                }
            }
        }
        self.resolve_at(image, keyring).await
    }

    /// At one registry: each matching credential, then anonymous.
    async fn resolve_at(
        &self,
        image: &ImageRef,
        keyring: &Keyring,
    ) -> Result<ImageInfo, InspectError> {
        each_credential(image, keyring, |credential| async move {
            self.fetch(image, credential, 0, &mut NestedIndexes::default())
                .await
        })
        .await
    }

    pub(crate) fn session(
        &self,
        registry: &str,
        credential: Option<&Credential>,
    ) -> Arc<BoundedFetch> {
        let fingerprint = credential.map(|c| {
            let mut h = Sha256::new();
            h.update(c.username.as_bytes());
            h.update([0]);
            h.update(c.password.as_bytes());
            h.finalize().into()
        });
        let key = (registry.to_owned(), fingerprint);
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(session) = clients.get(&key) {
            return session.clone();
        }
        let settings = self.settings.for_registry(registry);
        let insecure = settings.is_some_and(|s| s.insecure);
        let ca_pem = settings.and_then(|s| s.ca_pem.clone());
        let addresses = AddressPolicy::new(
            registry,
            settings.is_some_and(|s| s.allow_internal_redirects),
        );
        let mut http = reqwest::Client::builder()
            .connect_timeout(self.options.connect_timeout)
            .read_timeout(self.options.read_timeout)
            .redirect(addresses.redirects())
            .dns_resolver(addresses.resolver())
            .user_agent(USER_AGENT);
        // The settings' CA was checked when the settings were read; a bad one here makes
        // the TLS handshake fail with the registry's name.
        if let Some(certificate) = ca_pem.and_then(|pem| reqwest::Certificate::from_pem(&pem).ok())
        {
            http = http.tls_certs_merge([certificate]);
        }
        let http = http.build().unwrap_or_default();
        let session = Arc::new(BoundedFetch::new(
            http,
            insecure,
            addresses,
            (self.budget.clone(), registry),
        ));
        clients.put(key, session.clone());
        session
    }

    fn fetch<'a>(
        &'a self,
        image: &'a ImageRef,
        credential: Option<&'a Credential>,
        depth: usize,
        nested: &'a mut NestedIndexes,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<ImageInfo, Failure>> + Send + 'a>>
    {
        Box::pin(async move {
            let session = self.session(image.registry(), credential);
            // `_held` keeps the body counted in the memory budget until it is parsed.
            let (bytes, digest, _held) = self
                .with_retries(image, || async {
                    self.manifest_requests.fetch_add(1, Ordering::Relaxed);
                    session.get(image, credential, &ACCEPTED).await
                })
                .await?
                .map_err(|bytes| {
                    Failure::Other(malformed(image, manifest::ManifestError::TooLarge(bytes)))
                })?;
            match manifest::parse_manifest(&bytes, None)
                .map_err(|e| Failure::Other(malformed(image, e)))?
            {
                Parsed::Index(entries) => {
                    let mut platforms = Vec::new();
                    for entry in entries {
                        match entry.platform {
                            Some(p) if !is_index(&entry.media_type) => {
                                platforms.push(PlatformEntry::new(&p, &entry.digest))
                            }
                            _ if is_index(&entry.media_type) => {
                                if depth + 1 > self.options.max_index_depth {
                                    return Err(Failure::Other(InspectError::TooDeep {
                                        image: image.to_string(),
                                        depth: self.options.max_index_depth,
                                    }));
                                }
                                // Each nested index once per inspection, and only so
                                // many: a fan-out of K indexes of K is not K + K² fetches.
                                if !nested.seen.insert(entry.digest.clone()) {
                                    continue;
                                }
                                if nested.seen.len() > MAX_NESTED_INDEXES {
                                    return Err(Failure::Other(InspectError::Malformed {
                                        image: image.to_string(),
                                        detail: format!(
                                            "the index refers to more than {MAX_NESTED_INDEXES} nested indexes, more than an image may have here"
                                        ),
                                    }));
                                }
                                let found = self
                                    .fetch(
                                        &image.with_digest(&entry.digest),
                                        credential,
                                        depth + 1,
                                        nested,
                                    )
                                    .await?;
                                platforms.extend(found.platforms);
                            }
                            // An image entry without platform says nothing we can use.
                            _ => {}
                        }
                    }
                    // Entries repeated (in one index or across nested ones) are kept
                    // once: the answer, and the cache, hold each platform once. Nested
                    // levels leave it to the top one, which holds them all.
                    if depth == 0 {
                        let mut unique = HashSet::new();
                        platforms.retain(|p| unique.insert(p.clone()));
                    }
                    Ok(ImageInfo {
                        image: image.to_string(),
                        digest,
                        kind: ManifestKind::Index,
                        platforms,
                        // Bundle images are single manifests; an index is read by its
                        // entries' platforms (reading a child's config would double the
                        // registry requests of every multi-arch image).
                        operator_bundle: false,
                        binaries_pending: false,
                    })
                }
                Parsed::Image { config_digest } => {
                    let config = self
                        .image_config(&session, image, credential, &config_digest)
                        .await?;
                    let config = manifest::parse_image_config(&config)
                        .map_err(|e| Failure::Other(malformed(image, e)))?;
                    Ok(ImageInfo {
                        image: image.to_string(),
                        platforms: vec![PlatformEntry::new(&config.platform, &digest)],
                        digest,
                        kind: ManifestKind::Manifest,
                        operator_bundle: config.operator_bundle,
                        binaries_pending: false,
                    })
                }
            }
        })
    }

    /// An image's config blob, with the retries of every registry call; one larger than a
    /// manifest may be (4 MiB) is malformed.
    pub(crate) async fn image_config(
        &self,
        session: &BoundedFetch,
        image: &ImageRef,
        credential: Option<&Credential>,
        config_digest: &str,
    ) -> Result<Vec<u8>, Failure> {
        self.with_retries(image, || {
            session.get_blob(image, credential, config_digest, MAX_MANIFEST_BYTES)
        })
        .await?
        .map_err(|bytes| {
            Failure::Other(InspectError::Malformed {
                image: image.to_string(),
                detail: format!("the image config exceeds 4 MiB ({bytes} bytes or more)"),
            })
        })
    }

    /// Retries transient failures with doubling backoff; 401/403/404 and bad answers never.
    pub(crate) async fn with_retries<T, F, Fut>(
        &self,
        image: &ImageRef,
        mut call: F,
    ) -> Result<T, Failure>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, OciDistributionError>>,
    {
        let backoff = Backoff::new(self.options.retry_backoff, Duration::MAX);
        let mut attempt = 1;
        loop {
            let failure = match call().await {
                Ok(value) => return Ok(value),
                Err(e) => classify(e, image, attempt),
            };
            match failure {
                Failure::Other(e) if e.is_transient() && attempt < self.options.attempts => {
                    debug!(image = %image, attempt, error = %e, "retrying");
                    tokio::time::sleep(backoff.after(attempt)).await;
                    attempt += 1;
                }
                other => return Err(other),
            }
        }
    }
}

const USER_AGENT: &str = concat!("multiarch/", env!("CARGO_PKG_VERSION"));

/// reqwest's TLS (rustls without a built-in provider) needs a process-wide provider; the whole workspace uses
/// ring. Installing twice is harmless (the first one stays).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn is_index(media_type: &str) -> bool {
    media_type == manifest::OCI_INDEX || media_type == manifest::DOCKER_LIST
}

/// `attempt` with each credential of `keyring` for `image`'s registry, then anonymously,
/// until one is not refused; every refusal: no credentials, or the ones given rejected.
pub(crate) async fn each_credential<'k, T, Attempt>(
    image: &ImageRef,
    keyring: &'k Keyring,
    mut attempt: impl FnMut(Option<&'k Credential>) -> Attempt,
) -> Result<T, InspectError>
where
    Attempt: std::future::Future<Output = Result<T, Failure>>,
{
    let credentials = keyring.lookup(image.registry(), image.repository());
    let mut candidates: Vec<Option<&Credential>> = credentials.iter().copied().map(Some).collect();
    candidates.push(None);
    for credential in candidates {
        match attempt(credential).await {
            Ok(found) => return Ok(found),
            Err(Failure::Unauthorized) => continue,
            Err(Failure::Other(e)) => return Err(e),
        }
    }
    let registry = image.registry().to_owned();
    Err(if credentials.is_empty() {
        InspectError::NoCredentials { registry }
    } else {
        InspectError::CredentialsRejected { registry }
    })
}

pub(crate) fn malformed(image: &ImageRef, e: manifest::ManifestError) -> InspectError {
    InspectError::Malformed {
        image: image.to_string(),
        detail: e.to_string(),
    }
}

fn classify(error: OciDistributionError, image: &ImageRef, attempt: u32) -> Failure {
    let registry = image.registry().to_owned();
    let not_found = || {
        Failure::Other(InspectError::NotFound {
            image: image.to_string(),
        })
    };
    match error {
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => Failure::Unauthorized,
        OciDistributionError::ImageManifestNotFoundError(_) => not_found(),
        OciDistributionError::RegistryError { envelope, .. } => {
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
            {
                Failure::Unauthorized
            } else if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                        | OciErrorCode::BlobUnknown
                )
            }) {
                not_found()
            } else if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Toomanyrequests))
            {
                Failure::Other(InspectError::Server {
                    registry,
                    status: 429,
                    attempts: attempt,
                })
            } else {
                let detail = envelope
                    .errors
                    .iter()
                    .map(|e| e.message.clone())
                    .collect::<Vec<_>>()
                    .join("; ");
                Failure::Other(InspectError::Malformed {
                    image: image.to_string(),
                    detail: format!("registry error: {detail}"),
                })
            }
        }
        OciDistributionError::ServerError { code, .. } => match code {
            401 | 403 => Failure::Unauthorized,
            404 => not_found(),
            429 | 500..=599 => Failure::Other(InspectError::Server {
                registry,
                status: code,
                attempts: attempt,
            }),
            _ => Failure::Other(InspectError::Malformed {
                image: image.to_string(),
                detail: format!("unexpected HTTP {code}"),
            }),
        },
        OciDistributionError::RequestError(e) => {
            let detail = error_chain(&e);
            if e.is_redirect() || address_policy::is_refusal(&detail) {
                Failure::Other(InspectError::Refused { registry, detail })
            } else if e.is_timeout() {
                Failure::Other(InspectError::Unreachable {
                    registry,
                    detail: format!("timed out ({detail})"),
                })
            } else if detail.contains("certificate") || detail.contains("UnknownIssuer") {
                Failure::Other(InspectError::Tls { registry, detail })
            } else {
                Failure::Other(InspectError::Unreachable { registry, detail })
            }
        }
        OciDistributionError::GenericError(Some(detail)) if address_policy::is_refusal(&detail) => {
            Failure::Other(InspectError::Refused { registry, detail })
        }
        OciDistributionError::GenericError(Some(detail))
            if detail.contains(body_budget::EXHAUSTED) =>
        {
            Failure::Other(InspectError::Busy { registry, detail })
        }
        other => Failure::Other(InspectError::Malformed {
            image: image.to_string(),
            detail: other.to_string(),
        }),
    }
}

/// reqwest's error with its causes ("error sending request: connection refused").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.contains(&text) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}
