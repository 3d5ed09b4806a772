//! `ClusterPodPlacementConfig`: the cluster-wide singleton named `cluster`.
//!
//! `v1beta1` is the storage version and the one the code reads. `v1alpha1` is still served
//! so that MTO's early objects and clients keep working; it has a subset of `v1beta1`'s
//! fields with the same meaning (see `v1alpha1` for what a `v1alpha1` client loses).

pub mod conditions;
pub mod v1alpha1;
pub mod v1beta1;
