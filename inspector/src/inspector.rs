//! The inspection API every caller uses, in-process or over gRPC.

use std::{
    sync::{Arc, RwLock},
    time::Instant,
};

use async_trait::async_trait;
use multiarch_policy::platform::Platform;
use multiarch_policy::pod_images::{ContainerImage, PullCredentials};
use sha2::{Digest, Sha256};

use crate::{
    binary_reading::{BinaryFacts, BinaryLimits},
    binary_reads::{BinaryReadingOptions, BinaryReads},
    cache::{Answer, CacheKey, CacheOptions, InspectionCache},
    error::InspectError,
    image::{ImageInfo, ImageRef},
    image_files::{FileLimits, ImageFiles},
    keyring::Keyring,
    metrics::{InspectionResultLabel, InspectorMetrics},
    registry::{RegistryClient, RegistryOptions},
    secrets::SecretSource,
    settings::RegistrySettings,
};

/// What a pod's container asks: the image, and where its credentials are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InspectRequest {
    pub image: String,
    pub namespace: String,
    pub pull_secrets: Vec<String>,
    pub service_account: Option<String>,
    /// `imagePullPolicy: Always`: the tag may have moved; do not answer from the cache.
    pub bypass_cache: bool,
}

impl InspectRequest {
    /// The request for one container image of a pod: the pod's namespace, pull secrets and
    /// service account say where the credentials are; `imagePullPolicy: Always` bypasses
    /// the cache.
    pub fn for_container(pod: PullCredentials<'_>, image: &ContainerImage) -> Self {
        InspectRequest {
            image: image.image.clone(),
            namespace: pod.namespace.to_owned(),
            pull_secrets: pod.pull_secrets.to_vec(),
            service_account: pod.service_account.map(str::to_owned),
            bypass_cache: image.pull_always,
        }
    }
}

#[async_trait]
pub trait ImageInspector: Send + Sync {
    async fn inspect(&self, request: &InspectRequest) -> Result<Arc<ImageInfo>, InspectError>;
}

/// The in-process inspector: secrets → keyring → cache → registry.
pub struct Inspector {
    /// Replaced whole when the registry settings change; an inspection keeps the one it
    /// started with.
    registries: RwLock<Arc<Registries>>,
    cache: InspectionCache,
    secrets: Arc<dyn SecretSource>,
    metrics: InspectorMetrics,
    /// Set with `binaryInspection`: builds' binaries read in the background.
    binary_reads: Option<BinaryReads>,
}

/// The registry client and the settings it was made with.
struct Registries {
    client: RegistryClient,
    settings: RegistrySettings,
}

impl Inspector {
    pub fn new(
        settings: RegistrySettings,
        registry_options: RegistryOptions,
        cache_options: CacheOptions,
        secrets: Arc<dyn SecretSource>,
        metrics: InspectorMetrics,
    ) -> Self {
        Inspector {
            registries: RwLock::new(Arc::new(Registries {
                client: RegistryClient::new(registry_options, settings.clone()),
                settings,
            })),
            cache: InspectionCache::new(cache_options, metrics.clone()),
            secrets,
            metrics,
            binary_reads: None,
        }
    }

    /// Reads the binaries of every image's builds in the background and answers with
    /// what they need (see `binary_reads`).
    pub fn with_binary_reading(mut self, options: BinaryReadingOptions) -> Self {
        self.binary_reads = Some(BinaryReads::new(options, self.metrics.clone()));
        self
    }

    fn registries(&self) -> Arc<Registries> {
        match self.registries.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The registry settings in use.
    pub fn settings(&self) -> RegistrySettings {
        self.registries().settings.clone()
    }

    /// Uses `settings` from the next inspection on, and forgets every answer obtained
    /// with the old ones (a mirror, CA or block may have changed what they say).
    pub fn replace_settings(&self, settings: RegistrySettings) {
        let current = self.registries();
        let client = current.client.with_settings(settings.clone());
        let next = Arc::new(Registries { client, settings });
        match self.registries.write() {
            Ok(mut slot) => *slot = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
        self.cache.clear();
    }

    pub fn cache(&self) -> &InspectionCache {
        &self.cache
    }

    /// The most bytes of registry bodies held at once so far (see `body_budget`).
    pub fn body_bytes_peak(&self) -> usize {
        self.registries().client.body_budget().peak_bytes()
    }

    /// Manifest requests sent to registries so far.
    pub fn registry_requests(&self) -> u64 {
        self.registries().client.manifest_requests()
    }

    /// The credentials `request` may use: its namespace's pull secrets and service account.
    async fn keyring(&self, request: &InspectRequest) -> Result<Arc<Keyring>, InspectError> {
        let keyring = self
            .secrets
            .keyring(
                &request.namespace,
                &request.pull_secrets,
                request.service_account.as_deref(),
            )
            .await;
        if let Err(e) = &keyring {
            self.metrics
                .credential_failures
                .get_or_create(&InspectionResultLabel {
                    result: e.metric_label(),
                })
                .inc();
            tracing::warn!(namespace = %request.namespace, image = %request.image, error = %e, "cannot read the pod's pull credentials");
        }
        keyring
    }

    /// What `request`'s image's build for `platform` runs (see `binary_reading`), with
    /// the request's credentials and the registry settings; never cached.
    pub async fn read_binaries(
        &self,
        request: &InspectRequest,
        platform: Option<&Platform>,
        limits: BinaryLimits,
    ) -> Result<BinaryFacts, InspectError> {
        let image = ImageRef::parse(&request.image)?;
        let keyring = self.keyring(request).await?;
        self.registries()
            .client
            .read_binaries(&image, platform, &keyring, limits)
            .await
    }

    /// The files of `request`'s image that `wanted` accepts (see `image_files`), with
    /// the request's credentials and the registry settings; never cached.
    pub async fn read_image_files(
        &self,
        request: &InspectRequest,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        limits: FileLimits,
    ) -> Result<ImageFiles, InspectError> {
        let image = ImageRef::parse(&request.image)?;
        let keyring = self.keyring(request).await?;
        self.registries()
            .client
            .read_files(&image, &keyring, wanted, limits)
            .await
    }
}

#[async_trait]
impl ImageInspector for Inspector {
    async fn inspect(&self, request: &InspectRequest) -> Answer {
        let image = ImageRef::parse(&request.image)?;
        let keyring = self.keyring(request).await?;
        // Fingerprint every credential that could be sent for this image (source and
        // mirrors), so that answers obtained with different credentials stay apart.
        let current = self.registries();
        let mut registries = vec![image.registry().to_owned()];
        if let Some(s) = current.settings.for_registry(image.registry()) {
            registries.extend(s.mirrors.iter().cloned());
        }
        let mut hasher = Sha256::new();
        let mut any = false;
        for registry in &registries {
            for c in keyring.lookup(registry, image.repository()) {
                any = true;
                hasher.update(registry.as_bytes());
                hasher.update([0]);
                hasher.update(c.username.as_bytes());
                hasher.update([0]);
                hasher.update(c.password.as_bytes());
                hasher.update([0]);
            }
        }
        let key = CacheKey {
            image: image.to_string(),
            credentials: any.then(|| hasher.finalize().into()),
        };
        let answer = self
            .cache
            .get_or_fetch(key, image.is_digest(), request.bypass_cache, || async {
                let started = Instant::now();
                let answer = current.client.resolve(&image, &keyring).await.map(Arc::new);
                self.metrics
                    .inspection_seconds
                    .observe(started.elapsed().as_secs_f64());
                let result = match &answer {
                    Ok(_) => "ok",
                    Err(e) => e.metric_label(),
                };
                self.metrics.count_inspection(image.registry(), result);
                answer
            })
            .await?;
        let Some(reads) = &self.binary_reads else {
            return Ok(answer);
        };
        // Each build read by its own manifest digest, with the asker's credentials.
        let limits = reads.limits();
        Ok(reads.annotate(&answer, image.registry(), |entry| {
            let build = image.with_digest(&entry.digest);
            let (current, keyring) = (current.clone(), keyring.clone());
            async move {
                current
                    .client
                    .read_binaries(&build, None, &keyring, limits)
                    .await
            }
        }))
    }
}
