//! The operands, as the reconcile names them, and how far each has rolled out. No I/O.

/// An operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Component {
    Inspector,
    Webhook,
    GateController,
    Scheduler,
    EnoexecDaemon,
    EnoexecHandler,
}

impl Component {
    pub const ALL: [Component; 6] = [
        Component::Inspector,
        Component::Webhook,
        Component::GateController,
        Component::Scheduler,
        Component::EnoexecDaemon,
        Component::EnoexecHandler,
    ];

    /// As users read it in conditions.
    pub fn title(self) -> &'static str {
        match self {
            Component::Inspector => "image inspector",
            Component::Webhook => "pod placement webhook",
            Component::GateController => "pod placement controller (gate controller)",
            Component::Scheduler => "scheduler",
            Component::EnoexecDaemon => "exec-format-error daemon",
            Component::EnoexecHandler => "exec-format-error handler",
        }
    }
}

/// A workload's rollout, from its status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rollout {
    pub exists: bool,
    /// At least one replica (pod) available.
    pub available: bool,
    /// Every replica updated, ready and available, for the current generation.
    pub rolled_out: bool,
    /// Why it is not available or rolled out, in words (for conditions).
    pub detail: String,
}
