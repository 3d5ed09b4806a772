//! The placement policy every role shares, and nothing of the scheduler's model: which
//! platforms a pod's images allow (`platform`), label and node selectors, which pods are
//! exempt (`exemption`) or cannot be routed (`routing`), preferences and architecture
//! rules from the PodPlacementConfigs, and the affinity the webhook and the gate
//! controller write. No I/O: everything here is tested directly.

pub mod affinity_writer;
pub mod arch_constraint;
pub mod architecture_rules;
pub mod device_class_resources;
pub mod exemption;
pub mod node_level;
pub mod platform;
pub mod pod_configs;
pub mod pod_images;
pub mod preferences;
pub mod routing;
pub mod selectors;
