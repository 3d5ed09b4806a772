//! Releasing a list of waiting pods in one pass: each pod on its own, so one that cannot
//! be released (a refusal, an error) is counted and reported while the others go on.

use crate::{
    context::OperatorContext,
    drain::{self, Released},
    observe::PodRef,
    step::{StepFailures, released},
};

/// What still waits after a pass of releases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Left {
    /// Pods the API server refuses to create again: left for a person.
    pub refused: usize,
    /// Pods whose release failed this pass (tried again next pass).
    pub failed: usize,
}

impl Left {
    pub fn total(self) -> usize {
        self.refused + self.failed
    }

    fn count(
        &mut self,
        result: Result<Released, drain::DrainError>,
        ctx: &OperatorContext,
        action: &'static str,
        failures: &mut StepFailures,
    ) {
        match result {
            Ok(Released::Done) => released(ctx, action),
            Ok(Released::Skipped) => {}
            Ok(Released::Refused(_)) => self.refused += 1,
            Err(e) => {
                failures.record(ctx, "release a waiting pod", e);
                self.failed += 1;
            }
        }
    }
}

/// Recreates `pods` (pending for a scheduler that goes away) for the default scheduler.
pub async fn reset_all(
    ctx: &OperatorContext,
    pods: &[PodRef],
    why: &str,
    failures: &mut StepFailures,
) -> Left {
    let mut left = Left::default();
    for pod in pods {
        let result =
            drain::reset(&ctx.client, &ctx.events, &ctx.settings.namespace, pod, why).await;
        left.count(result, ctx, "recreated", failures);
    }
    left
}

/// Removes multiarch's gate from `pods` (the gate controller goes away).
pub async fn ungate_all(
    ctx: &OperatorContext,
    pods: &[PodRef],
    why: &str,
    failures: &mut StepFailures,
) -> Left {
    let mut left = Left::default();
    for pod in pods {
        let result = drain::ungate(&ctx.client, &ctx.events, pod, why).await;
        left.count(result, ctx, "ungated", failures);
    }
    left
}
