//! The inspection API every caller uses, in-process or over gRPC.

use std::{sync::Arc, time::Instant};

use async_trait::async_trait;
use multiarch_plugins::model::pod::{ContainerImage, PodInfo};
use sha2::{Digest, Sha256};

use crate::{
    cache::{Answer, CacheKey, CacheOptions, InspectionCache},
    error::InspectError,
    image::{ImageInfo, ImageRef},
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
    pub fn for_container(pod: &PodInfo, image: &ContainerImage) -> Self {
        InspectRequest {
            image: image.image.clone(),
            namespace: pod.namespace.clone(),
            pull_secrets: pod.image_pull_secrets.clone(),
            service_account: pod.service_account.clone(),
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
    registry: RegistryClient,
    settings: RegistrySettings,
    cache: InspectionCache,
    secrets: Arc<dyn SecretSource>,
    metrics: InspectorMetrics,
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
            registry: RegistryClient::new(registry_options, settings.clone()),
            settings,
            cache: InspectionCache::new(cache_options, metrics.clone()),
            secrets,
            metrics,
        }
    }

    pub fn cache(&self) -> &InspectionCache {
        &self.cache
    }

    /// Manifest requests sent to registries so far.
    pub fn registry_requests(&self) -> u64 {
        self.registry.manifest_requests()
    }
}

#[async_trait]
impl ImageInspector for Inspector {
    async fn inspect(&self, request: &InspectRequest) -> Answer {
        let image = ImageRef::parse(&request.image)?;
        let keyring = self
            .secrets
            .keyring(
                &request.namespace,
                &request.pull_secrets,
                request.service_account.as_deref(),
            )
            .await?;
        // Fingerprint every credential that could be sent for this image (source and
        // mirrors), so that answers obtained with different credentials stay apart.
        let mut registries = vec![image.registry().to_owned()];
        if let Some(s) = self.settings.for_registry(image.registry()) {
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
        self.cache
            .get_or_fetch(key, image.is_digest(), request.bypass_cache, || async {
                let started = Instant::now();
                let answer = self.registry.resolve(&image, &keyring).await.map(Arc::new);
                self.metrics
                    .inspection_seconds
                    .observe(started.elapsed().as_secs_f64());
                let result = match &answer {
                    Ok(_) => "ok",
                    Err(e) => e.metric_label(),
                };
                self.metrics
                    .registry_inspections
                    .get_or_create(&InspectionResultLabel { result })
                    .inc();
                answer
            })
            .await
    }
}
