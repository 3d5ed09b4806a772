//! Pure scheduling logic of multiarch: the cluster model, the plugins (kube-scheduler
//! 1.36 semantics plus `ImageArchitecture`), the profile, and the one definition of which
//! architectures a pod can run on. No I/O: everything here is tested directly.

pub mod affinity_writer;
pub mod arch_constraint;
pub mod architecture_rules;
pub mod events;
pub mod exemption;
pub mod framework;
pub mod image_platforms;
pub mod model;
pub mod plugins;
pub mod preferences;
pub mod profile;
pub mod routing;
pub mod testing;
