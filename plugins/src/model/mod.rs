//! The cluster model the plugins read: pods, nodes, resources, selectors, platforms.

pub mod affinity_terms;
pub mod cluster;
pub mod controller_counts;
pub mod declared_features;
pub mod disruption_budget;
pub mod hostname;
pub mod hostname_index;
pub mod image_states;
pub mod local_volume_nodes;
pub mod node;
pub mod nominated;
pub mod placements;
pub mod platform_index;
pub mod pod;
pub mod pod_indexes;
pub mod pod_labels;
pub mod positions;
pub mod quantity;
pub mod resources;
pub mod shared;
pub mod shared_names;
pub mod spare_room;
pub mod storage;
