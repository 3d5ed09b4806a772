//! `multiarch audit`: which workloads can run on which architectures, and what breaks.
//! Workloads are read from manifests (`workloads`) or a live cluster's objects
//! (`cluster`, with `routing` for `--routed-only`), judged from their images' platforms
//! against target architectures (`verdict`, `assemble`), and summed up in a versioned
//! report (`report`). No I/O here: the caller lists the cluster, resolves the images
//! (registry or a platforms file) and prints.

pub mod assemble;
pub mod bundle;
pub mod cluster;
pub mod demo;
pub mod platforms_file;
pub mod report;
pub mod routing;
pub mod suggestion;
pub mod summary;
mod table;
pub mod verdict;
pub mod workloads;
