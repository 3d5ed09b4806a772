//! The gate-mode controller (compatibility path): sets the architecture node affinity of
//! gated pods for the default scheduler and removes the gate.

pub mod controller;
pub mod metrics;
mod pass;
pub mod process;
