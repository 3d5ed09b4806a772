//! `multiarch audit --bundle`: does an OLM operator bundle keep the architecture promises
//! of its ClusterServiceVersion? The bundle's files are read (`contents`), its images'
//! answers judged by stable rules (`findings`) and summed up in a versioned report
//! (`report`). No I/O: the caller reads the directory or the bundle image and inspects
//! the images.

pub mod contents;
pub mod findings;
pub mod report;
