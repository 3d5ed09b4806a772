//! The multiarch operator: from the ClusterPodPlacementConfig named `cluster`, it
//! installs every operand, keeps multiarch's certificates (`certificates`), routes pods
//! only to components that are running, reports what it sees in the status, serves the
//! conversion and validation webhooks (`crd_webhooks`), and uninstalls in an order that
//! strands no pod.
//!
//! A pass (`reconcile`) reads one `observe::Snapshot`, ticks the `clocks`, computes a
//! `decide::Plan` with no I/O, carries it out (`act`), and writes the `status` computed
//! from the three. What the operands are is `desired` (from a `target::Target`), how
//! they are written `apply`, their manifests `install`.

pub mod act;
pub mod apply;
pub mod certificate_check;
pub mod certificates;
pub mod clocks;
pub mod component;
pub mod context;
pub mod controller;
pub mod crd_webhooks;
pub mod decide;
pub mod desired;
pub mod install;
pub mod metrics;
pub mod observe;
pub mod operand_image;
pub mod pod_config_admission;
pub mod pod_ref;
pub mod reconcile;
pub mod rule_check_pace;
pub mod rule_usage;
pub mod run;
pub mod scheduler_name_check;
pub mod status;
pub mod target;
