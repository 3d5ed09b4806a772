//! `multiarch webhook`: the mutating admission webhook for pods (routing or gating).

pub mod decision;
pub mod review;
pub mod server;
pub mod tls;
