//! The multiarch scheduler: the I/O-free core (queue, cycle, diagnosis) and the roles of
//! the `multiarch` binary.

pub mod core;
pub mod enoexec;
pub mod gate;
pub mod manifests;
pub mod ops;
pub mod runtime;
pub mod simulate;
pub mod webhook;
