//! The parts of the configuration CRDs that placement reads, as the core holds them.

use multiarch_crd::{ClusterPlugins, PodPlacementConfig};
use multiarch_plugins::architecture_rules::ArchitectureRules;

/// The parts of the configuration CRDs that placement reads.
#[derive(Clone, Debug, Default)]
pub struct PlacementInputs {
    pub cluster_plugins: Option<ClusterPlugins>,
    pub configs: Vec<PodPlacementConfig>,
    /// The configs' `celArchitecturePlacement` rules, compiled.
    pub architecture_rules: ArchitectureRules,
    pub fallback_architecture: Option<String>,
}

impl PlacementInputs {
    /// Inputs from these configs; rules compiled, reusing `previous`'s programs for the
    /// configs whose spec is unchanged.
    pub fn new(
        cluster_plugins: Option<ClusterPlugins>,
        configs: Vec<PodPlacementConfig>,
        fallback_architecture: Option<String>,
        previous: &ArchitectureRules,
    ) -> Self {
        PlacementInputs {
            architecture_rules: ArchitectureRules::compile(&configs, previous),
            cluster_plugins,
            configs,
            fallback_architecture,
        }
    }
}
