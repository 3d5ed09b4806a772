//! The certificates' clocks, apart from the reconcile so that one failing never lets a
//! certificate expire: every replica follows the serving certificate the leader writes,
//! and the leader checks the CA, the operator's and the operands' certificates.

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{
    certificates::expires_at, context::OperatorContext, install::OPERATOR_TLS_SECRET,
    metrics::SecretLabel,
};

/// Every replica: loads the operator's serving certificate every `period` until `stop`.
pub async fn follow(context: Arc<OperatorContext>, period: Duration, stop: CancellationToken) {
    every(period, &stop, || async {
        if let Err(e) = context.authority.follow(&context.serving).await {
            warn!(error = %e, "cannot read the operator's serving certificate");
        }
    })
    .await;
}

/// The leader: checks (and renews) every certificate every `period` until `stop`.
pub async fn keep(context: Arc<OperatorContext>, period: Duration, stop: CancellationToken) {
    every(period, &stop, || check(&context)).await;
}

/// Runs `work` now and then every `period` after it ends, until `stop`.
async fn every<F, Fut>(period: Duration, stop: &CancellationToken, mut work: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    loop {
        work().await;
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
    }
}

async fn check(context: &OperatorContext) {
    match context
        .authority
        .check(&context.serving, SystemTime::now())
        .await
    {
        Ok(renewed) => {
            if let Some(why) = renewed.authority {
                info!("CA renewed: {why}");
            }
            if let Some(why) = renewed.operator {
                info!("operator certificate renewed: {why}");
            }
            if renewed.bundle_injected {
                info!("CA bundle written into the conversion and validating webhooks");
            }
        }
        Err(e) => warn!(error = %e, "certificate check failed; retrying at the next check"),
    }
    // The operands' too: a reconcile that keeps failing never lets one expire.
    if let Err(e) =
        crate::certificates::operands::renew(&context.certificate_keeper(), SystemTime::now()).await
    {
        warn!(error = %e, "operand certificate renewal failed; retrying at the next check");
    }
    let secrets: Api<Secret> = Api::namespaced(context.client.clone(), &context.settings.namespace);
    if let Ok(Some(secret)) = secrets.get_opt(OPERATOR_TLS_SECRET).await
        && let Some(expiry) = expires_at(&crate::certificates::authority::secret_data(&secret))
    {
        context
            .metrics
            .certificate_expiry
            .get_or_create(&SecretLabel {
                secret: OPERATOR_TLS_SECRET,
            })
            .set(expiry);
    }
}
