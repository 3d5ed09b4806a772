//! The cluster model the plugins read: pods, nodes, resources, selectors, platforms.

pub mod cluster;
pub mod node;
pub mod platform;
pub mod pod;
pub mod quantity;
pub mod resources;
pub mod selectors;
