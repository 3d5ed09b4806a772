//! The gate-mode controller (compatibility path): sets the architecture node affinity of
//! gated pods for the default scheduler and removes the gate.

mod context;
pub mod controller;
mod inspect;
pub mod metrics;
pub mod options;
mod pass;
pub mod process;
mod rule_override;
