//! `multiarch audit`: which workloads can run on which architectures, and what breaks.
//! Workloads are read from manifests (`workloads`), judged from their images' platforms
//! against target architectures (`verdict`), and summed up in a versioned report
//! (`report`). No I/O here: the caller resolves the images (registry or a platforms
//! file) and prints.

pub mod demo;
pub mod platforms_file;
pub mod report;
pub mod suggestion;
pub mod verdict;
pub mod workloads;

/// The platform type the verdicts are computed with, for callers that resolve images.
pub use multiarch_plugins::model::platform::Platform;
