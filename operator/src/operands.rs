//! Writing the operands a reconcile's plan wants: their certificates, every object that
//! differs (server-side apply), the webhook configuration only with a valid namespace
//! selector and its certificate only once the API server has its CA, and deleting what
//! the plan no longer wants. One object that fails is recorded and the others go on.

use std::{collections::BTreeSet, time::SystemTime};

use kube::ResourceExt;
use multiarch_crd::{ClusterPodPlacementConfig, label_selector};

use crate::{
    apply::{Applied, ObjectKey},
    authority::CertificateAuthority,
    context::OperatorContext,
    desired::{self, Owner, Wanted, every_key, webhook_certificate_key, webhook_configuration_key},
    operand_certificates,
    plan::Plan,
    step::{StepFailures, delete, wrote},
};

/// What the operands are built from, besides the spec.
pub struct Operands<'a> {
    pub authority: &'a crate::certificates::Authority,
    pub now: SystemTime,
    pub plan: &'a Plan,
    pub apis: desired::OptionalApis,
    pub previous_scheduler_names: &'a [String],
}

/// Writes every operand the plan wants (only what differs) and deletes the others; one
/// object that fails is recorded and the others go on.
pub async fn apply(
    cppc: &ClusterPodPlacementConfig,
    ctx: &OperatorContext,
    operands: &Operands<'_>,
    failures: &mut StepFailures,
) {
    let issued =
        operand_certificates::ensure_all(ctx, cppc, operands.authority, operands.now).await;
    // Without every certificate the workloads that mount them are left as they are.
    let Some(issued) = failures.keep(ctx, "issue a certificate", issued) else {
        return;
    };
    let [webhook_tls, inspector_tls, inspector_client_tls] = [&issued[0], &issued[1], &issued[2]];
    let objects = desired::objects(&Wanted {
        settings: &ctx.settings,
        spec: &cppc.spec,
        plan: operands.plan,
        owner: &Owner {
            uid: cppc.uid().unwrap_or_default(),
        },
        ca_bundle: &CertificateAuthority::bundle_base64(operands.authority),
        webhook_tls,
        inspector_tls,
        inspector_client_tls,
        apis: operands.apis,
        previous_scheduler_names: operands.previous_scheduler_names,
    });
    // Nothing is written or deleted without the whole set: a missing operand would be
    // read as one to remove.
    let Some(objects) = failures.keep(ctx, "write the operands' flags", objects) else {
        return;
    };
    let Some(every_key) = failures.keep(
        ctx,
        "list the operands",
        every_key(&ctx.settings, operands.apis),
    ) else {
        return;
    };
    let selector_errors = cppc
        .spec
        .namespace_selector
        .as_ref()
        .map(|s| label_selector::selector_errors(s, "spec.namespaceSelector"))
        .unwrap_or_default();
    let mut wanted = BTreeSet::new();
    let mut routed = true;
    for object in &objects {
        let key = ObjectKey::of(object);
        wanted.insert(key.clone());
        // Refused by the CRD and the validating webhook; written while they were not
        // there: the configuration in place stays as it is, and the user is told.
        if key == webhook_configuration_key() && !selector_errors.is_empty() {
            routed = false;
            failures.record(
                ctx,
                "use the namespaceSelector",
                format!(
                    "the webhook configuration keeps its previous namespaceSelector: {}",
                    selector_errors.join("; ")
                ),
            );
            continue;
        }
        // The webhook's certificate follows its configuration: a certificate from a new
        // CA is served only once the API server has that CA.
        if key == webhook_certificate_key(&ctx.settings) && !routed {
            let bundle = CertificateAuthority::bundle_base64(operands.authority);
            let injected = ctx.authority.inject_mutating(&bundle).await;
            if failures
                .keep(
                    ctx,
                    "write the CA bundle into the webhook configuration",
                    injected,
                )
                .is_none()
            {
                continue;
            }
        }
        match ctx.applier.ensure(object).await {
            Ok(Applied::Unchanged) => {}
            Ok(Applied::Created) => wrote(ctx, "created"),
            Ok(Applied::Updated) => wrote(ctx, "updated"),
            Err(e) => {
                if key == webhook_configuration_key() {
                    routed = false;
                }
                failures.record(ctx, "apply an operand", format!("{key}: {e}"));
            }
        }
    }
    for key in every_key {
        if !wanted.contains(&key) {
            let deleted = delete(ctx, &key).await;
            failures.keep(ctx, "delete an operand", deleted);
        }
    }
}
