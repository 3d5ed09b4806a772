//! What failed in a pass without stopping it: the other actions, the status and the
//! certificates go on; each failure is logged, counted and named in the Degraded
//! condition.

use tracing::warn;

use crate::{context::OperatorContext, metrics::StepLabel};

#[derive(Debug, Default)]
pub struct StepFailures(Vec<String>);

impl StepFailures {
    pub fn record(
        &mut self,
        ctx: &OperatorContext,
        step: &'static str,
        error: impl std::fmt::Display,
    ) {
        warn!(step, %error, "reconcile step failed; the others go on");
        ctx.metrics
            .step_failures
            .get_or_create(&StepLabel { step })
            .inc();
        self.0.push(format!("{step}: {error}"));
    }

    /// `result`'s value, or `None` with the failure recorded.
    pub fn keep<T, E: std::fmt::Display>(
        &mut self,
        ctx: &OperatorContext,
        step: &'static str,
        result: Result<T, E>,
    ) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(e) => {
                self.record(ctx, step, e);
                None
            }
        }
    }

    pub fn messages(&self) -> &[String] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
