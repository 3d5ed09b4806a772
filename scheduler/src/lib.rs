//! The multiarch scheduler: the I/O-free engine (queue, cycle, diagnosis), the scheduler
//! running in a cluster (watches, binder, events, leader election), and `simulate`, the
//! same engine on an in-memory cluster.

pub mod engine;
pub mod in_cluster;
pub mod simulate;
