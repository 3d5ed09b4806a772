//! Admission: the mutating webhook that routes new pods to the multiarch scheduler (or
//! gates them), and the gate-mode controller that gives gated pods their architecture
//! affinity for the default scheduler.

pub mod gate;
pub mod webhook;
