//! The multiarch scheduler: the I/O-free core (queue, cycle, diagnosis), the scheduler
//! running in a cluster (watches, binder, events, leader election), and `simulate`, the
//! same core on an in-memory cluster.

pub mod core;
pub mod in_cluster;
pub mod simulate;
