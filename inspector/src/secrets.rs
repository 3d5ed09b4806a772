//! Where pull credentials come from: a fixed keyring (CLI `--authfile`, tests) or, in a
//! cluster, the pod's `imagePullSecrets` and its service account's, read by the inspector
//! itself (the only component allowed to read Secrets).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::Api;
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

/// Reads Secrets and ServiceAccounts from the API server, keeping each answer for a short
/// while so that a burst of pods does not become a burst of GETs.
pub struct KubeSecrets {
    client: kube::Client,
    ttl: Duration,
    cache: Mutex<HashMap<KeyringKey, (Instant, Arc<Keyring>)>>,
}

impl KubeSecrets {
    pub fn new(client: kube::Client, ttl: Duration) -> Self {
        KubeSecrets {
            client,
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    async fn read(
        &self,
        namespace: &str,
        pull_secrets: &[String],
        service_account: Option<&str>,
    ) -> Result<Keyring, InspectError> {
        let mut names: Vec<String> = pull_secrets.to_vec();
        if let Some(sa) = service_account.filter(|s| !s.is_empty()) {
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
                Ok(Some(secret)) => secret,
                Ok(None) => {
                    warn!(namespace, secret = %name, "pull secret not found; skipping it");
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
        Ok(keyring)
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
        if let Some((at, keyring)) = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            && at.elapsed() < self.ttl
        {
            return Ok(keyring.clone());
        }
        let keyring = Arc::new(self.read(namespace, pull_secrets, service_account).await?);
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, (Instant::now(), keyring.clone()));
        Ok(keyring)
    }
}
