//! The mutating admission webhook for pods: routing to the multiarch scheduler, or gating
//! for the gate controller (MTO's gate mode).

pub mod admission_affinity;
pub mod architecture_rule;
pub mod configuration;
pub mod decision;
pub mod image_lookup;
pub mod metrics;
pub mod review;
pub mod sent_fields;
pub mod server;
pub mod tls;
