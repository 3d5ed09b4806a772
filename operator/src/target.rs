//! What should be installed after a pass: which optional operands, and where the webhook
//! configuration routes pods. `decide` computes it; `desired` builds the objects from it;
//! the status reports it. No I/O.

use multiarch_crd::PlacementMode;

use crate::component::Component;

/// What to install.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub scheduler: bool,
    pub enoexec_daemon: bool,
    pub enoexec_handler: bool,
    /// The mode the webhook configuration routes to (`None`: no configuration).
    pub routing: Option<PlacementMode>,
    /// Pods still wait for a scheduler that is being removed.
    pub draining_scheduler: bool,
    /// Reports still wait for a handler that is being removed.
    pub draining_enoexec: bool,
}

impl Target {
    /// Nothing: what an uninstall leaves.
    pub const NOTHING: Target = Target {
        scheduler: false,
        enoexec_daemon: false,
        enoexec_handler: false,
        routing: None,
        draining_scheduler: false,
        draining_enoexec: false,
    };

    /// Whether `component` is installed (the webhook, inspector and gate controller
    /// always are, while multiarch is installed).
    pub fn wants(&self, component: Component) -> bool {
        match component {
            Component::Inspector | Component::Webhook | Component::GateController => true,
            Component::Scheduler => self.scheduler,
            Component::EnoexecDaemon => self.enoexec_daemon,
            Component::EnoexecHandler => self.enoexec_handler,
        }
    }
}
