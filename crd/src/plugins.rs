//! The `plugins` section shared by `ClusterPodPlacementConfig` and `PodPlacementConfig`.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Architecture, CelArchitecturePlacement};

/// Optional features. A plugin is on when it is present and `enabled: true`;
/// `plugins: {}` is valid and turns everything off.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPlugins {
    /// Prefer some architectures over others when a pod's images run on several. The
    /// scheduler adds these weights to its `ImageArchitecture` score; in gate mode they are
    /// written into the pod as preferred `kubernetes.io/arch` node affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity_scoring: Option<NodeAffinityScoring>,

    /// Detect `exec format error` on nodes with an eBPF probe and report it on the pod
    /// (runs the `enoexec-daemon` DaemonSet and its handler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_format_error_monitor: Option<ExecFormatErrorMonitor>,

    /// Move pods that run on a node their own images have no build for: evicted (the
    /// Eviction API: PodDisruptionBudgets hold) so that their controller recreates them,
    /// routed or gated, on a compatible node. Bare pods and DaemonSet pods are only
    /// reported. Runs in the exec-format-error handler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misplaced_pod_correction: Option<MisplacedPodCorrection>,

    /// Read the program each image's builds start (its ELF header and x86-64 level
    /// notes) and place by what it is: an amd64 build needs the x86-64 level its binaries
    /// need (RHEL 10's v3 builds are not labelled so), and a build whose program is of
    /// another architecture than its index entry says is not counted as runnable. Read by
    /// the inspector in the background (a pod whose image is not read yet is placed by
    /// its platforms) and kept per build digest; costs each build's layers fetched once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_inspection: Option<BinaryInspection>,
}

impl ClusterPlugins {
    /// The architecture preferences, when the plugin is present and enabled.
    pub fn enabled_node_affinity_scoring(&self) -> Option<&NodeAffinityScoring> {
        self.node_affinity_scoring.as_ref().filter(|p| p.enabled)
    }

    /// The misplaced-pod correction, when the plugin is present and enabled.
    pub fn enabled_misplaced_pod_correction(&self) -> Option<&MisplacedPodCorrection> {
        self.misplaced_pod_correction.as_ref().filter(|p| p.enabled)
    }

    /// Whether images' binaries are read for placement.
    pub fn binary_inspection_enabled(&self) -> bool {
        self.binary_inspection.as_ref().is_some_and(|p| p.enabled)
    }

    /// What a node of unknown x86-64 level runs: the plugin's setting when it is on,
    /// every level otherwise.
    pub fn unknown_node_level(&self) -> UnknownNodeLevel {
        self.binary_inspection
            .as_ref()
            .filter(|p| p.enabled)
            .map_or(UnknownNodeLevel::AnyLevel, |p| p.unknown_node_level)
    }

    /// Whether the exec-format-error monitor is present and enabled.
    pub fn exec_format_error_monitor_enabled(&self) -> bool {
        self.exec_format_error_monitor
            .as_ref()
            .is_some_and(|p| p.enabled)
    }
}

/// The plugins a namespaced `PodPlacementConfig` may set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalPlugins {
    /// Architecture preferences for the pods this config selects. They are applied before
    /// the cluster-wide ones; see `priority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity_scoring: Option<NodeAffinityScoring>,

    /// Decide the architectures of the pods this config selects by ordered CEL rules
    /// over their metadata instead of by their images. Only the highest-priority config
    /// that selects a pod is consulted; its rules are never merged with another's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cel_architecture_placement: Option<CelArchitecturePlacement>,
}

impl LocalPlugins {
    /// The architecture preferences, when the plugin is present and enabled.
    pub fn enabled_node_affinity_scoring(&self) -> Option<&NodeAffinityScoring> {
        self.node_affinity_scoring.as_ref().filter(|p| p.enabled)
    }

    /// The architecture rules, when the plugin is present and enabled.
    pub fn enabled_cel_architecture_placement(&self) -> Option<&CelArchitecturePlacement> {
        self.cel_architecture_placement
            .as_ref()
            .filter(|p| p.enabled)
    }
}

/// Weighted architecture preferences.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeAffinityScoring {
    /// Whether the preferences are applied.
    pub enabled: bool,

    /// One entry per preferred architecture; a higher weight is a stronger preference.
    /// Each architecture may appear once.
    #[schemars(length(min = 1, max = 8))]
    #[x_kube(validation = Rule::new(
        "self.all(p, self.filter(q, q.architecture == p.architecture).size() == 1)"
    ).message(
        "each architecture may appear only once in platforms: merge the duplicate entries into one"
    ))]
    pub platforms: Vec<PlatformWeight>,
}

/// The weight of one architecture.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlatformWeight {
    /// The CPU architecture: amd64, arm64, ppc64le or s390x.
    pub architecture: Architecture,

    /// The preference for this architecture, from 1 (weak) to 100 (strong).
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100").message(
        "weight is out of range: use a value from 1 to 100"
    ))]
    pub weight: i32,
}

/// The exec-format-error monitor switch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecFormatErrorMonitor {
    /// Whether the monitor runs.
    pub enabled: bool,
}

/// The switch of reading images' binaries for placement, and what a node of unknown
/// x86-64 level runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BinaryInspection {
    /// Whether the inspector reads images' binaries.
    pub enabled: bool,

    /// What an amd64 node runs when nothing says its x86-64 level (neither the
    /// `multiarch.openshift.io/arch-variant` label nor node-feature-discovery's CPUID
    /// labels): `AnyLevel` (every level, as before levels were read) or `Baseline`
    /// (x86-64-v1 only: a build needing v2 or above never goes there).
    #[serde(default)]
    pub unknown_node_level: UnknownNodeLevel,
}

/// What an amd64 node whose x86-64 level nothing says is taken to run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum UnknownNodeLevel {
    /// Every level: placed as if its CPU ran what the image needs.
    #[default]
    AnyLevel,
    /// x86-64-v1 only: builds needing a level are kept off it.
    Baseline,
}

/// The misplaced-pod correction's switch and limits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MisplacedPodCorrection {
    /// Whether misplaced pods are looked for.
    pub enabled: bool,

    /// Only report (events, metrics, the status count): evict nothing. Start here.
    #[serde(default)]
    pub dry_run: bool,

    /// Evictions in any one minute, cluster-wide.
    #[serde(default = "default_evictions_per_minute")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 1000").message(
        "maxEvictionsPerMinute is out of range: use a value from 1 to 1000"
    ))]
    pub max_evictions_per_minute: i32,

    /// Evictions of one controller's pods (a ReplicaSet, StatefulSet or Job) in any one
    /// minute.
    #[serde(default = "default_evictions_per_controller")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100").message(
        "maxEvictionsPerControllerPerMinute is out of range: use a value from 1 to 100"
    ))]
    pub max_evictions_per_controller_per_minute: i32,
}

fn default_evictions_per_minute() -> i32 {
    10
}

fn default_evictions_per_controller() -> i32 {
    1
}
