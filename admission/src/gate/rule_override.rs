//! After a pod is ungated on a rule's architectures: whether its images have a build
//! there. The rule is obeyed either way (the pod is already released, so a registry
//! outage never holds it); when the images are known not to run there the pod gets a
//! Warning event, and rules that could not be evaluated are logged and counted.

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::ResourceExt;
use multiarch_policy::architecture_rules::ArchitectureDecision;
use multiarch_runtime::event_reason::EventReason;
use tracing::{debug, info};

use super::{context::GateContext, inspect::inspect, process::Inspection};

pub(super) async fn report(
    context: &GateContext,
    pod: &Pod,
    reference: &ObjectReference,
    rule: &ArchitectureDecision,
) {
    let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
    for (name, error) in &rule.errors {
        context.metrics.architecture_rule_errors.inc();
        info!(pod = %key, config = %rule.config, rule = %name, %error, "architecture rule not evaluated for the pod; it did not match");
    }
    let platforms = match inspect(context, pod).await {
        Inspection::Compatible(platforms) => platforms,
        Inspection::Failed(error) => {
            debug!(pod = %key, %error, "images not inspected: cannot tell whether the rule overrides them");
            return;
        }
        Inspection::Anywhere | Inspection::NotNeeded => return,
    };
    let Some(note) = rule.overrides_images(&platforms) else {
        return;
    };
    context.metrics.architecture_rule_overrides.inc();
    context
        .publish(
            reference,
            EventReason::ArchitectureRuleOverridesImages,
            note,
        )
        .await;
}
