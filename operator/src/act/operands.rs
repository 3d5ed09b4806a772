//! Writing the operands a reconcile's plan wants: their certificates, every object that
//! differs (server-side apply), the webhook configuration only with a valid namespace
//! selector and its certificate only once the API server has its CA, and deleting what
//! the plan no longer wants. One object that fails is recorded and the others go on.

use std::{collections::BTreeSet, time::SystemTime};

use kube::ResourceExt;
use multiarch_crd::{ClusterPodPlacementConfig, ClusterPodPlacementConfigSpec, label_selector};

use serde_json::Value;

use crate::{
    act::{failures::StepFailures, writes::delete},
    apply::{Applied, ObjectKey, Owner},
    certificates::{self, Authority, authority::CertificateAuthority},
    context::OperatorContext,
    desired::{self, Wanted, every_key, webhook_certificate_key, webhook_configuration_key},
    observe::reads::OptionalApis,
    target::Target,
};

/// What the operands are built from, besides the spec.
pub struct Operands<'a> {
    /// The spec in force.
    pub spec: &'a ClusterPodPlacementConfigSpec,
    pub authority: &'a Authority,
    pub now: SystemTime,
    pub target: &'a Target,
    pub apis: OptionalApis,
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
    let issued = certificates::operands::ensure_all(
        &ctx.certificate_keeper(),
        cppc,
        operands.authority,
        operands.now,
    )
    .await;
    // Without every certificate the workloads that mount them are left as they are.
    let Some(issued) = failures.keep(ctx, "issue a certificate", issued) else {
        return;
    };
    let [webhook_tls, inspector_tls, inspector_client_tls] = [&issued[0], &issued[1], &issued[2]];
    let objects = desired::objects(&Wanted {
        settings: &ctx.settings,
        spec: operands.spec,
        target: operands.target,
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
    let wanted = write_each(operands.spec, ctx, operands.authority, &objects, failures).await;
    for key in every_key {
        if !wanted.contains(&key) {
            let deleted = delete(ctx, &key).await;
            failures.keep(ctx, "delete an operand", deleted);
        }
    }
}

/// Writes each of `objects` that differs; the keys of all of them.
async fn write_each(
    spec: &ClusterPodPlacementConfigSpec,
    ctx: &OperatorContext,
    authority: &Authority,
    objects: &[Value],
    failures: &mut StepFailures,
) -> BTreeSet<ObjectKey> {
    let selector_errors = spec
        .namespace_selector
        .as_ref()
        .map(|s| label_selector::selector_errors(s, "spec.namespaceSelector"))
        .unwrap_or_default();
    let mut wanted = BTreeSet::new();
    let mut routed = true;
    for object in objects {
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
            let bundle = CertificateAuthority::bundle_base64(authority);
            let injected = ctx.authority.inject_mutating(&bundle).await;
            let step = "write the CA bundle into the webhook configuration";
            if failures.keep(ctx, step, injected).is_none() {
                continue;
            }
        }
        match ctx.applier.ensure(object).await {
            Ok(Applied::Unchanged) => {}
            Ok(Applied::Created) => ctx.metrics.wrote("created"),
            Ok(Applied::Updated) => ctx.metrics.wrote("updated"),
            Err(e) => {
                if key == webhook_configuration_key() {
                    routed = false;
                }
                failures.record(ctx, "apply an operand", format!("{key}: {e}"));
            }
        }
    }
    wanted
}
