//! The operator's side of the certificates: reading and writing the CA's Secret and the
//! operator's own serving certificate, and giving the API server the CA bundle for the
//! webhooks the operator serves (the CRD's conversion webhook, the validating webhooks),
//! whose configurations come from `manifests/` without one. The certificates themselves
//! are made in `certificates`.

use std::{sync::Arc, time::SystemTime};

use base64::Engine;
use k8s_openapi::{
    ByteString,
    api::{
        admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration},
        core::v1::Secret,
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use multiarch_runtime::serving_cert::{ReloadingCert, certified_key};
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tracing::info;

use crate::{
    apply::{Applier, ApplyError, owned},
    certificates::{
        Authority, CERT_KEY, CertificateError, PRIVATE_KEY_KEY, Renewal, SecretData,
        ensure_authority, ensure_serving, secrets::secret,
    },
    install::{
        CA_SECRET, OPERATOR_TLS_SECRET, Settings, VALIDATING_WEBHOOK, WEBHOOK, operator_dns_names,
    },
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
        // The API server gets the CA bundle before anything a new CA signed is served: a
        // failed injection keeps the certificate served now (still valid; renewals come
        // months before expiry) until the next check.
        let bundle = ByteString(authority.bundle_pem.into_bytes());
        let injected = self.inject(&bundle).await?;
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
    /// `true` when something changed. JSON patches of those fields only, with the
    /// resourceVersion read as a precondition: a concurrent change fails the patch and
    /// the next check retries; nothing else of the objects is rewritten.
    async fn inject(&self, bundle: &ByteString) -> Result<bool, AuthorityError> {
        let encoded = base64::engine::general_purpose::STANDARD.encode(&bundle.0);
        let mut changed = false;
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        if let Some(crd) = crds
            .get_opt(CONVERTED_CRD)
            .await
            .map_err(api_error("read the ClusterPodPlacementConfig CRD"))?
            && let Some(config) = crd
                .spec
                .conversion
                .as_ref()
                .and_then(|c| c.webhook.as_ref())
                .and_then(|w| w.client_config.as_ref())
        {
            let base = "/spec/conversion/webhook/clientConfig";
            let mut operations = Vec::new();
            if config.ca_bundle.as_ref() != Some(bundle) {
                operations.push(
                    json!({"op": "add", "path": format!("{base}/caBundle"), "value": encoded}),
                );
            }
            if config
                .service
                .as_ref()
                .is_some_and(|service| service.namespace != self.settings.namespace)
            {
                operations.push(json!({"op": "replace", "path": format!("{base}/service/namespace"), "value": self.settings.namespace}));
            }
            if !operations.is_empty() {
                patch_with_version(
                    &crds,
                    CONVERTED_CRD,
                    crd.metadata.resource_version.as_deref(),
                    operations,
                )
                .await
                .map_err(api_error("write the conversion webhook's CA bundle"))?;
                changed = true;
            }
        }
        let hooks: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        if let Some(configuration) = hooks
            .get_opt(VALIDATING_WEBHOOK)
            .await
            .map_err(api_error("read the validating webhook configuration"))?
        {
            let operations: Vec<Value> = configuration
                .webhooks
                .iter()
                .flatten()
                .enumerate()
                .filter(|(_, hook)| hook.client_config.ca_bundle.as_ref() != Some(bundle))
                .map(|(i, _)| json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": encoded}))
                .collect();
            if !operations.is_empty() {
                patch_with_version(
                    &hooks,
                    VALIDATING_WEBHOOK,
                    configuration.metadata.resource_version.as_deref(),
                    operations,
                )
                .await
                .map_err(api_error("write the validating webhooks' CA bundle"))?;
                changed = true;
            }
        }
        Ok(changed)
    }

    /// Writes `bundle` (base64) into the pod placement webhook's configuration, if it
    /// exists: on its own, so that a configuration the API server refuses for another
    /// reason still gets the CA its certificate is signed by.
    pub async fn inject_mutating(&self, bundle: &str) -> Result<bool, AuthorityError> {
        let hooks: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let Some(configuration) = hooks
            .get_opt(WEBHOOK)
            .await
            .map_err(api_error("read the mutating webhook configuration"))?
        else {
            return Ok(false);
        };
        let wanted = ByteString(
            base64::engine::general_purpose::STANDARD
                .decode(bundle)
                .unwrap_or_default(),
        );
        let operations: Vec<Value> = configuration
            .webhooks
            .iter()
            .flatten()
            .enumerate()
            .filter(|(_, hook)| hook.client_config.ca_bundle.as_ref() != Some(&wanted))
            .map(|(i, _)| json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": bundle}))
            .collect();
        if operations.is_empty() {
            return Ok(false);
        }
        patch_with_version(
            &hooks,
            WEBHOOK,
            configuration.metadata.resource_version.as_deref(),
            operations,
        )
        .await
        .map_err(api_error("write the mutating webhook's CA bundle"))?;
        Ok(true)
    }
}

/// A JSON patch of `operations` on the object as read at `version`.
async fn patch_with_version<K>(
    api: &Api<K>,
    name: &str,
    version: Option<&str>,
    mut operations: Vec<Value>,
) -> Result<(), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if let Some(version) = version {
        operations.insert(
            0,
            json!({"op": "replace", "path": "/metadata/resourceVersion", "value": version}),
        );
    }
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(operations)).map_err(kube::Error::SerdeError)?;
    api.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
        .map(|_| ())
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
