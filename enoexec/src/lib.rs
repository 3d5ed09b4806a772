//! Exec format errors, and programs glibc's loader refuses to start, from the node to the
//! pod: `multiarch enoexec-daemon` (one per node) turns the kernel's reports
//! (`multiarch-ebpf`) into `ENoExecEvent`s, and `multiarch enoexec-handler` turns those
//! into a Warning event and a label on the pod.
//! The daemon is the node image's only role; the handler is built with the `handler`
//! feature.

pub mod daemon;
#[cfg(feature = "handler")]
pub mod handler;
pub mod loader_refusal;
