//! Pure scheduling logic of multiarch: the cluster model, the plugins (kube-scheduler
//! 1.36 semantics plus `ImageArchitecture`), the profile, and the one definition of which
//! architectures a pod can run on. No I/O: everything here is tested directly.

pub mod events;
pub mod framework;
pub mod image_platforms;
pub mod model;
pub mod plugins;
pub mod profile;
pub mod testing;

#[cfg(test)]
#[path = "arch_constraint_agreement_tests.rs"]
mod arch_constraint_agreement_tests;
