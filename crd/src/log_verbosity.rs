//! `logVerbosity`, as MTO spells it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How much the operands log. Maps to tracing levels info, debug, trace and trace for all
/// modules (MTO's zap levels 0 to 3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LogVerbosity {
    #[default]
    Normal,
    Debug,
    Trace,
    TraceAll,
}

impl LogVerbosity {
    /// The `tracing` filter directive for this verbosity.
    pub fn filter_directive(self) -> &'static str {
        match self {
            LogVerbosity::Normal => "info",
            LogVerbosity::Debug => "debug",
            LogVerbosity::Trace => "info,multiarch=trace",
            LogVerbosity::TraceAll => "trace",
        }
    }
}
