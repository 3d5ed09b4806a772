//! Releasing a list of waiting pods in one pass: each pod on its own, so one that cannot
//! be released (a refusal, an error) is counted and reported while the others go on.

pub mod pod;

use crate::{
    act::failures::StepFailures,
    context::OperatorContext,
    decide::{Left, Release},
    pod_ref::PodRef,
};
use pod::Released;

/// Counts one release's result into `left`.
fn count(
    left: &mut Left,
    result: Result<Released, pod::DrainError>,
    ctx: &OperatorContext,
    action: &'static str,
    failures: &mut StepFailures,
) {
    match result {
        Ok(Released::Done) => ctx.metrics.released(action),
        Ok(Released::Skipped) => {}
        Ok(Released::Refused(_)) => left.refused += 1,
        Err(e) => {
            failures.record(ctx, "release a waiting pod", e);
            left.failed += 1;
        }
    }
}
/// Releases `pods` as `how` says, each on its own.
pub async fn all(
    ctx: &OperatorContext,
    how: Release,
    pods: &[PodRef],
    why: &str,
    failures: &mut StepFailures,
) -> Left {
    let mut left = Left::default();
    for pod in pods {
        let (result, action) = match how {
            Release::Recreate => {
                let namespace = &ctx.settings.namespace;
                let result = pod::reset(&ctx.client, &ctx.events, namespace, pod, why).await;
                (result, "recreated")
            }
            Release::Ungate => (
                pod::ungate(&ctx.client, &ctx.events, pod, why).await,
                "ungated",
            ),
        };
        count(&mut left, result, ctx, action, failures);
    }
    left
}
