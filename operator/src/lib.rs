//! The multiarch operator's home. Today: what gets installed, as code
//! (`multiarch manifests` writes it under `manifests/`). The reconciler that installs it
//! from the ClusterPodPlacementConfig comes with the operator issue.

pub mod install;
