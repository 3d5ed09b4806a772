//! The ClusterPodPlacementConfig the audit suggests: prefer, through `nodeAffinityScoring`,
//! the architectures in proportion to the workloads that can run there, and, when some
//! images could not be inspected, a `fallbackArchitecture` where most workloads run.

use multiarch_crd::{
    ClusterPlugins, ClusterPodPlacementConfig, ClusterPodPlacementConfigSpec, NodeAffinityScoring,
    PlatformWeight, architecture::Architecture,
};

use crate::summary::ArchitectureSummary;

/// `None` when no workload can run on any architecture the API knows.
pub fn suggest(
    architectures: &[ArchitectureSummary],
    workloads: usize,
    unknown: usize,
) -> Option<ClusterPodPlacementConfig> {
    let mut known: Vec<(Architecture, usize)> = architectures
        .iter()
        .filter(|a| a.workloads > 0)
        .filter_map(|a| Some((a.architecture.parse::<Architecture>().ok()?, a.workloads)))
        .collect();
    if known.is_empty() || workloads == 0 {
        return None;
    }
    // Most workloads first; the API's order between equals.
    known.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let platforms = known
        .iter()
        .take(8)
        .map(|(architecture, count)| PlatformWeight {
            architecture: *architecture,
            weight: i32::try_from((count * 100).div_ceil(workloads).clamp(1, 100)).unwrap_or(100),
        })
        .collect();
    let spec = ClusterPodPlacementConfigSpec {
        plugins: Some(ClusterPlugins {
            node_affinity_scoring: Some(NodeAffinityScoring {
                enabled: true,
                platforms,
            }),
            exec_format_error_monitor: None,
            misplaced_pod_correction: None,
            binary_inspection: None,
        }),
        fallback_architecture: (unknown > 0).then_some(known[0].0),
        ..ClusterPodPlacementConfigSpec::default()
    };
    Some(ClusterPodPlacementConfig::new("cluster", spec))
}
