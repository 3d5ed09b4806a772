//! The operands' certificates (the webhook's, the inspector's, the inspector clients'):
//! issued by every reconcile, and renewed on their own schedule by the certificate loop
//! too, so that a reconcile that keeps failing never lets one expire. The webhook's is
//! written only once its configuration holds the CA that signed it.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Resource, ResourceExt};
use multiarch_crd::{ClusterPodPlacementConfig, names::SINGLETON_NAME};
use tracing::info;

use crate::{
    apply::{Applier, ApplyError, Owner, owned},
    certificates::{
        Authority, CertificateError, SecretData,
        authority::{AuthorityError, CertificateAuthority, secret_data},
        ensure, expires_at,
        secrets::{self, secret},
    },
    install::{Settings, WEBHOOK_TLS_SECRET},
    metrics::{OperatorMetrics, SecretLabel},
};

/// What keeping the operands' certificates takes.
pub struct Keeper<'a> {
    pub client: &'a kube::Client,
    pub settings: &'a Settings,
    pub applier: &'a Applier,
    pub authority: &'a CertificateAuthority,
    pub metrics: &'a OperatorMetrics,
    /// One issuer at a time (the reconcile, the certificate loop): never both issue one.
    pub one_at_a_time: &'a tokio::sync::Mutex<()>,
}

/// Why an operand certificate could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum OperandCertificateError {
    #[error("cannot {what}: {source}")]
    Api {
        what: &'static str,
        source: kube::Error,
    },
    #[error(transparent)]
    Certificate(#[from] CertificateError),
    #[error(transparent)]
    Authority(#[from] AuthorityError),
    #[error(transparent)]
    Apply(#[from] ApplyError),
}

fn api_error(what: &'static str) -> impl FnOnce(kube::Error) -> OperandCertificateError {
    move |source| OperandCertificateError::Api { what, source }
}

/// A certificate the operator keeps in `secret`: the stored one while it is right, else
/// a new one; and the stored one.
async fn certificate(
    ctx: &Keeper<'_>,
    authority: &Authority,
    wanted: &secrets::Certificate,
    now: SystemTime,
) -> Result<(SecretData, Option<SecretData>), OperandCertificateError> {
    let secret = wanted.secret;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.settings.namespace);
    let stored = secrets
        .get_opt(secret)
        .await
        .map_err(api_error("read a certificate's Secret"))?
        .map(|s| secret_data(&s));
    let (data, renewed) = ensure(
        stored.as_ref(),
        authority,
        &wanted.dns_names,
        wanted.usage,
        now,
    )?;
    if let Some(why) = renewed {
        info!(secret, "certificate issued: {why}");
    }
    if let Some(expiry) = expires_at(&data) {
        ctx.metrics
            .certificate_expiry
            .get_or_create(&SecretLabel { secret })
            .set(expiry);
    }
    Ok((data, stored))
}

/// The operands' certificates as they are now, each issued and written when missing or
/// due (one writer at a time: the reconcile and the certificate loop never both issue
/// one). The webhook's is written only once its configuration, if any, holds the CA.
pub async fn ensure_all(
    ctx: &Keeper<'_>,
    cppc: &ClusterPodPlacementConfig,
    authority: &Authority,
    now: SystemTime,
) -> Result<[SecretData; 3], OperandCertificateError> {
    let _one = ctx.one_at_a_time.lock().await;
    let owner = Owner {
        uid: cppc.uid().unwrap_or_default(),
    };
    let [webhook, inspector, inspector_client] = secrets::certificates(ctx.settings);
    let mut issued = Vec::new();
    for wanted in [webhook, inspector, inspector_client] {
        let (data, stored) = certificate(ctx, authority, &wanted, now).await?;
        if stored.as_ref() != Some(&data) {
            if wanted.secret == WEBHOOK_TLS_SECRET {
                let bundle = CertificateAuthority::bundle_base64(authority);
                ctx.authority.inject_mutating(&bundle).await?;
            }
            ctx.applier
                .ensure(&owned(
                    secret(ctx.settings, wanted.secret, "kubernetes.io/tls", &data),
                    Some(&owner),
                ))
                .await?;
            ctx.metrics.wrote("updated");
        }
        issued.push(data);
    }
    let [webhook, inspector, inspector_client]: [SecretData; 3] = issued
        .try_into()
        .unwrap_or_else(|_| [SecretData::new(), SecretData::new(), SecretData::new()]);
    Ok([webhook, inspector, inspector_client])
}

/// The certificate loop's turn: every operand certificate renewed when due, while the
/// ClusterPodPlacementConfig exists and is not being deleted.
pub async fn renew(ctx: &Keeper<'_>, now: SystemTime) -> Result<(), OperandCertificateError> {
    let Some(cppc) = Api::<ClusterPodPlacementConfig>::all(ctx.client.clone())
        .get_opt(SINGLETON_NAME)
        .await
        .map_err(api_error("read the ClusterPodPlacementConfig"))?
    else {
        return Ok(());
    };
    if cppc.meta().deletion_timestamp.is_some() {
        return Ok(());
    }
    let (authority, _) = ctx.authority.authority(now).await?;
    ensure_all(ctx, &cppc, &authority, now).await?;
    Ok(())
}
