//! The parts of the configuration CRDs that placement reads, as the core holds them.

use std::sync::Arc;

use multiarch_crd::{ClusterPlugins, UnknownNodeLevel};
use multiarch_policy::architecture_rules::ArchitectureRules;
use multiarch_policy::pod_configs::NamespacedConfigs;

/// The parts of the configuration CRDs that placement reads, shared with the snapshot
/// they came from (never copied).
#[derive(Clone, Debug, Default)]
pub struct PlacementInputs {
    pub cluster_plugins: Option<ClusterPlugins>,
    pub configs: NamespacedConfigs,
    /// The configs' `celArchitecturePlacement` rules, compiled.
    pub architecture_rules: Arc<ArchitectureRules>,
    pub fallback_architecture: Option<String>,
}

impl PlacementInputs {
    /// Inputs from these configs; rules compiled here, reusing `previous`'s programs for
    /// the configs that are unchanged (`simulate`, benchmarks: in a cluster the rules
    /// come compiled with the configuration's snapshot).
    pub fn new(
        cluster_plugins: Option<ClusterPlugins>,
        configs: NamespacedConfigs,
        fallback_architecture: Option<String>,
        previous: &ArchitectureRules,
    ) -> Self {
        PlacementInputs {
            architecture_rules: Arc::new(ArchitectureRules::compile(&configs, previous)),
            cluster_plugins,
            configs,
            fallback_architecture,
        }
    }

    /// What an amd64 node whose x86-64 level nothing says runs
    /// (`binaryInspection.unknownNodeLevel`).
    pub fn unknown_node_level(&self) -> UnknownNodeLevel {
        self.cluster_plugins.as_ref().map_or(
            UnknownNodeLevel::AnyLevel,
            ClusterPlugins::unknown_node_level,
        )
    }
}
