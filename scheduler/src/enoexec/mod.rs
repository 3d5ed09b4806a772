//! Exec format errors, from the node to the pod: `multiarch enoexec-daemon` (one per node)
//! turns the kernel's reports into `ENoExecEvent`s, `multiarch enoexec-handler` turns those
//! into a Warning event and a label on the pod.

pub mod burst;
pub mod daemon;
pub mod handler;
pub mod message;
