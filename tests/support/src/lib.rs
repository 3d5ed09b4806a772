//! What several crates' tests share, one module per helper behind a feature of the same
//! name: a crate's tests depend on this crate (a dev-dependency) with the helpers they use.

// Test code: a failed unwrap is a failed test; each user takes part of a helper.
#![allow(clippy::unwrap_used, dead_code)]

#[cfg(feature = "registry")]
pub mod chunked_layer;
#[cfg(feature = "elf")]
pub mod elf;
#[cfg(feature = "fake-cri")]
pub mod fake_cri;
#[cfg(feature = "generated")]
pub mod generated;
#[cfg(feature = "kit")]
pub mod kit;
#[cfg(feature = "kubeconfig")]
pub mod kubeconfig;
#[cfg(feature = "memory")]
pub mod memory;
#[cfg(feature = "registry")]
pub mod range_blind_proxy;
#[cfg(feature = "rbac")]
pub mod rbac;
#[cfg(feature = "registry")]
pub mod registry;
#[cfg(feature = "scheduler")]
pub mod scheduler;
#[cfg(feature = "table-inspector")]
pub mod table_inspector;
