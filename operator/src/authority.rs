//! The operator's side of the certificates: reading and writing the CA's Secret and the
//! operator's own serving certificate, and giving the API server the CA bundle for the
//! webhooks the operator serves (the CRD's conversion webhook, the validating webhooks),
//! whose configurations come from `manifests/` without one. The certificates themselves
//! are made in `certificates`.

use std::{sync::Arc, time::SystemTime};

use base64::Engine;
use k8s_openapi::{
    ByteString,
    api::{admissionregistration::v1::ValidatingWebhookConfiguration, core::v1::Secret},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{Api, api::PostParams};
use multiarch_runtime::serving_cert::{ReloadingCert, certified_key};
use tokio::sync::Mutex;
use tracing::info;

use crate::{
    apply::{Applier, ApplyError},
    certificates::{
        Authority, CERT_KEY, CertificateError, PRIVATE_KEY_KEY, Renewal, SecretData,
        ensure_authority, ensure_serving,
    },
    desired::{owned, secret},
    install::{CA_SECRET, OPERATOR_TLS_SECRET, Settings, VALIDATING_WEBHOOK, operator_dns_names},
};

/// The CRD whose conversion webhook the operator serves.
pub const CONVERTED_CRD: &str = "clusterpodplacementconfigs.multiarch.openshift.io";

#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    #[error(transparent)]
    Certificate(#[from] CertificateError),
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error("cannot {what}: {source}")]
    Api {
        what: &'static str,
        source: kube::Error,
    },
    #[error("the operator's serving certificate is unusable: {0}")]
    Serving(String),
}

fn api_error(what: &'static str) -> impl FnOnce(kube::Error) -> AuthorityError {
    move |source| AuthorityError::Api { what, source }
}

/// What a certificate check changed, for the log and events.
#[derive(Debug, Default)]
pub struct Renewed {
    pub authority: Option<Renewal>,
    pub operator: Option<Renewal>,
    pub bundle_injected: bool,
}

/// Reads, renews and publishes multiarch's CA. One at a time: two tasks of the leader
/// must not each make a CA.
pub struct CertificateAuthority {
    client: kube::Client,
    applier: Applier,
    settings: Settings,
    lock: Mutex<()>,
}

pub fn secret_data(secret: &Secret) -> SecretData {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

impl CertificateAuthority {
    pub fn new(client: kube::Client, settings: Settings) -> Self {
        CertificateAuthority {
            applier: Applier::new(client.clone()),
            client,
            settings,
            lock: Mutex::new(()),
        }
    }

    async fn read(&self, name: &str) -> Result<Option<SecretData>, AuthorityError> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.settings.namespace);
        Ok(secrets
            .get_opt(name)
            .await
            .map_err(api_error("read a certificate Secret"))?
            .map(|s| secret_data(&s)))
    }

    async fn write(&self, name: &str, data: &SecretData) -> Result<(), AuthorityError> {
        let kind = if data.contains_key(CERT_KEY) && data.contains_key(PRIVATE_KEY_KEY) {
            "kubernetes.io/tls"
        } else {
            "Opaque"
        };
        self.applier
            .ensure(&owned(secret(&self.settings, name, kind, data), None))
            .await?;
        Ok(())
    }

    /// The CA, created or renewed when due.
    pub async fn authority(
        &self,
        now: SystemTime,
    ) -> Result<(Authority, Option<Renewal>), AuthorityError> {
        let _one = self.lock.lock().await;
        let stored = self.read(CA_SECRET).await?;
        let (authority, why) = ensure_authority(stored.as_ref(), now)?;
        if let Some(why) = &why {
            info!(secret = CA_SECRET, "CA written: {why}");
            self.write(CA_SECRET, &authority.to_secret_data()).await?;
        }
        Ok((authority, why))
    }

    /// The CA bundle as the API server takes it (`caBundle`: base64 of PEM).
    pub fn bundle_base64(authority: &Authority) -> String {
        base64::engine::general_purpose::STANDARD.encode(authority.bundle_pem.as_bytes())
    }

    /// Renews the operator's own certificate when due and serves it from `resolver`;
    /// writes the CA bundle into the webhook configurations the operator serves.
    pub async fn check(
        &self,
        resolver: &Arc<ReloadingCert>,
        now: SystemTime,
    ) -> Result<Renewed, AuthorityError> {
        let (authority, authority_renewed) = self.authority(now).await?;
        let stored = self.read(OPERATOR_TLS_SECRET).await?;
        let names = operator_dns_names(&self.settings);
        let (data, operator_renewed) = ensure_serving(stored.as_ref(), &authority, &names, now)?;
        if stored.as_ref() != Some(&data) {
            if let Some(why) = &operator_renewed {
                info!(
                    secret = OPERATOR_TLS_SECRET,
                    "serving certificate issued: {why}"
                );
            }
            self.write(OPERATOR_TLS_SECRET, &data).await?;
        }
        serve(resolver, &data)?;
        let bundle = ByteString(authority.bundle_pem.into_bytes());
        let injected = self.inject(&bundle).await?;
        Ok(Renewed {
            authority: authority_renewed,
            operator: operator_renewed,
            bundle_injected: injected,
        })
    }

    /// Serves the operator's certificate as stored (the replicas that do not lead).
    pub async fn follow(&self, resolver: &Arc<ReloadingCert>) -> Result<bool, AuthorityError> {
        match self.read(OPERATOR_TLS_SECRET).await? {
            Some(data) => serve(resolver, &data).map(|()| true),
            None => Ok(false),
        }
    }

    /// Writes `bundle` into the CRD's conversion webhook and the validating webhooks;
    /// `true` when something changed. Updates with the resourceVersion read: a
    /// concurrent change fails the update and the next check retries.
    async fn inject(&self, bundle: &ByteString) -> Result<bool, AuthorityError> {
        let mut changed = false;
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        if let Some(mut crd) = crds
            .get_opt(CONVERTED_CRD)
            .await
            .map_err(api_error("read the ClusterPodPlacementConfig CRD"))?
            && let Some(config) = crd
                .spec
                .conversion
                .as_mut()
                .and_then(|c| c.webhook.as_mut())
                .and_then(|w| w.client_config.as_mut())
        {
            let mut dirty = config.ca_bundle.as_ref() != Some(bundle);
            config.ca_bundle = Some(bundle.clone());
            if let Some(service) = config.service.as_mut()
                && service.namespace != self.settings.namespace
            {
                service.namespace = self.settings.namespace.clone();
                dirty = true;
            }
            if dirty {
                crds.replace(CONVERTED_CRD, &PostParams::default(), &crd)
                    .await
                    .map_err(api_error("write the conversion webhook's CA bundle"))?;
                changed = true;
            }
        }
        let hooks: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        if let Some(mut configuration) = hooks
            .get_opt(VALIDATING_WEBHOOK)
            .await
            .map_err(api_error("read the validating webhook configuration"))?
        {
            let mut dirty = false;
            for hook in configuration.webhooks.iter_mut().flatten() {
                if hook.client_config.ca_bundle.as_ref() != Some(bundle) {
                    hook.client_config.ca_bundle = Some(bundle.clone());
                    dirty = true;
                }
            }
            if dirty {
                hooks
                    .replace(VALIDATING_WEBHOOK, &PostParams::default(), &configuration)
                    .await
                    .map_err(api_error("write the validating webhooks' CA bundle"))?;
                changed = true;
            }
        }
        Ok(changed)
    }
}

fn serve(resolver: &Arc<ReloadingCert>, data: &SecretData) -> Result<(), AuthorityError> {
    let (Some(cert), Some(key)) = (data.get(CERT_KEY), data.get(PRIVATE_KEY_KEY)) else {
        return Err(AuthorityError::Serving(
            "the Secret has no tls.crt or tls.key".into(),
        ));
    };
    let key = certified_key(cert, key).map_err(|e| AuthorityError::Serving(e.to_string()))?;
    resolver.set(key);
    Ok(())
}
