//! The multiarch operator: from the ClusterPodPlacementConfig named `cluster`, it
//! installs every operand (`install`, `plan`, `desired`, `apply`), keeps multiarch's
//! certificates (`certificates`, `authority`), routes pods only to components that are
//! running, reports what it sees in the status (`status`), serves the conversion and
//! validation webhooks (`crd_webhooks`), and uninstalls in an order that strands no pod
//! (`uninstall`, `drain`).

pub mod apply;
pub mod authority;
pub mod certificate_check;
pub mod certificates;
pub mod context;
pub mod controller;
pub mod crd_webhooks;
pub mod desired;
pub mod drain;
pub mod finalizers;
pub mod install;
pub mod journal;
pub mod metrics;
pub mod mode_switch;
pub mod observe;
pub mod operand_certificates;
pub mod operand_image;
pub mod operands;
pub mod plan;
pub mod pod_config_admission;
pub mod reconcile;
pub mod release;
mod release_event;
pub mod rename;
pub mod routing_event;
pub mod rule_check_pace;
pub mod rule_usage;
pub mod run;
pub mod scheduler_name_check;
pub mod status;
pub mod step;
pub mod uninstall;
