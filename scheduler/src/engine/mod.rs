//! The scheduler core: queue, cycle, diagnosis, preemption and the state machine that
//! ties them to the plugins. Free of Kubernetes I/O so that it is tested and measured directly.

pub mod binder;
pub mod cycle;
pub mod diagnosis;
pub mod image_source;
pub mod outcome;
pub mod placement_inputs;
pub mod placement_quality;
pub mod preemption;
pub mod quantile;
pub mod queue;
pub mod rule_override;
pub mod scheduler;
pub mod storage_objects;
