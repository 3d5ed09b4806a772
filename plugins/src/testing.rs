//! Fixtures for plugin tests, the scheduler's tests, simulate and the benches.

use std::sync::Arc;

use crate::{
    framework::CycleContext,
    image_platforms::{ImagePlatforms, PodImagePlatforms},
    model::{cluster::ClusterState, nominated::NominatedPods, pod::PodInfo},
};
use multiarch_policy::architecture_rules::ArchitectureDecision;
use multiarch_policy::platform::Platform;

/// Linux platforms with these architectures.
/// Linux platforms by architecture, with a variant where named: `["amd64/v3", "arm64"]`.
pub fn known(architectures: &[&str]) -> ImagePlatforms {
    ImagePlatforms::Known(
        architectures
            .iter()
            .map(|a| Platform::parse(&format!("linux/{a}")).unwrap_or_else(|| Platform::linux(a)))
            .collect::<Vec<_>>()
            .into(),
    )
}

/// Owns what a [`CycleContext`] borrows.
pub struct Fixture {
    pub pod: PodInfo,
    pub cluster: ClusterState,
    pub images: PodImagePlatforms,
    pub preferences: Vec<(String, i32)>,
    pub fallback: Option<String>,
    pub architecture_rule: Option<ArchitectureDecision>,
    pub nominated: NominatedPods,
    pub unknown_node_level: multiarch_crd::UnknownNodeLevel,
}

impl Fixture {
    pub fn new(pod: PodInfo) -> Self {
        Fixture {
            pod,
            cluster: ClusterState::new(),
            images: PodImagePlatforms::default(),
            preferences: Vec::new(),
            fallback: None,
            architecture_rule: None,
            nominated: NominatedPods::default(),
            unknown_node_level: multiarch_crd::UnknownNodeLevel::AnyLevel,
        }
    }

    pub fn with_cluster(mut self, cluster: ClusterState) -> Self {
        self.cluster = cluster;
        self
    }

    pub fn ctx(&self) -> CycleContext<'_> {
        CycleContext {
            pod: &self.pod,
            cluster: &self.cluster,
            images: &self.images,
            arch_preferences: &self.preferences,
            fallback_architecture: self.fallback.as_deref(),
            architecture_rule: self.architecture_rule.as_ref(),
            nominated: &self.nominated,
            unknown_node_level: self.unknown_node_level,
        }
    }
}

/// Shares a pod for `ClusterState::add_assigned_pod`.
pub fn shared(pod: PodInfo) -> Arc<PodInfo> {
    Arc::new(pod)
}
