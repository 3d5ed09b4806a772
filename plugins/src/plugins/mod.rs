//! One module per plugin, with kube-scheduler 1.36 semantics and reason strings.

pub mod balanced_allocation;
pub mod image_architecture;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_declared_features;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod pod_topology_spread;
pub mod taint_toleration;
pub mod unsupported_features;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;
