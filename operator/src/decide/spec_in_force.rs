//! The spec a pass works from: the configuration's, except a scheduler name stored
//! before the CRD refused kube-scheduler's, which is replaced by multiarch's default.
//! multiarch's scheduler never runs as kube-scheduler, and kube-scheduler's pods are
//! never its to release. No I/O.

use std::borrow::Cow;

use multiarch_crd::{
    ClusterPodPlacementConfigSpec,
    names::{DEFAULT_SCHEDULER_NAME, KUBE_SCHEDULER_NAME},
};

use crate::scheduler_name_check::NameTaken;

/// The spec in force, and why it is not `spec` as written (if it is not).
pub fn spec_in_force(
    spec: &ClusterPodPlacementConfigSpec,
) -> (Cow<'_, ClusterPodPlacementConfigSpec>, Option<NameTaken>) {
    let names_kube_scheduler = spec
        .placement
        .as_ref()
        .is_some_and(|p| p.scheduler_name == KUBE_SCHEDULER_NAME);
    if !names_kube_scheduler {
        return (Cow::Borrowed(spec), None);
    }
    let mut kept = spec.clone();
    if let Some(placement) = kept.placement.as_mut() {
        DEFAULT_SCHEDULER_NAME.clone_into(&mut placement.scheduler_name);
    }
    (Cow::Owned(kept), Some(NameTaken::KubeScheduler))
}
