//! `spec.placement`: how pods reach an architecture-compatible node (new in multiarch).

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::names::DEFAULT_SCHEDULER_NAME;

/// How multiarch places pods.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    /// `Scheduler` (default): the webhook routes pods to the multiarch scheduler, which
    /// reads image architectures itself. `SchedulingGate`: MTO's compatibility path; pods
    /// are gated, given a `kubernetes.io/arch` node affinity and left to the default
    /// scheduler.
    #[serde(default)]
    pub mode: PlacementMode,

    /// The scheduler name pods are routed to and that the multiarch scheduler answers to.
    #[serde(default = "default_scheduler_name")]
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new(
        "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')"
    ).message(
        "schedulerName must be a lowercase DNS label: letters, digits and '-', starting and ending with a letter or digit"
    ))]
    #[x_kube(validation = Rule::new("self != 'default-scheduler'").message(
        "schedulerName may not be default-scheduler: that is kube-scheduler's name, and the pods waiting for it are not multiarch's to place or release"
    ))]
    pub scheduler_name: String,

    /// Percentage of feasible nodes after which the scheduler stops looking for more in a
    /// cycle. 0 means adaptive, as kube-scheduler does (50% on small clusters down to 5% on
    /// large ones); 100 always considers every node.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 100").message(
        "percentageOfNodesToScore is out of range: use 0 (adaptive) to 100"
    ))]
    pub percentage_of_nodes_to_score: i32,

    /// Weights of the score plugins; plugins not listed keep their default weight.
    /// Weight 0 turns a plugin's score off (its filter still applies).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new(
        "self.all(p, self.filter(q, q.name == p.name).size() == 1)"
    ).message(
        "each plugin may appear only once in scoring: merge the duplicate entries into one"
    ))]
    pub scoring: Vec<ScorePluginWeight>,

    /// `Enabled` (default): in `Scheduler` mode the webhook also writes the required
    /// `kubernetes.io/arch` node affinity (and the preferred terms when
    /// `nodeAffinityScoring` is on) into pods whose image platforms it knows within its
    /// deadline, so cluster autoscalers and Karpenter see the constraint. `Disabled`: pod
    /// specs are not changed beyond `schedulerName`.
    #[serde(default)]
    pub admission_affinity: AdmissionAffinity,

    /// kube-scheduler's `StorageCapacityScoring` (alpha in 1.36, off by default): when
    /// set, `VolumeBinding` scores the nodes a pod's unbound `WaitForFirstConsumer` claims
    /// could use by how full their storage would be (the volumes it would bind, or the
    /// CSIStorageCapacity it would provision from), through `shape`. Unset: no storage
    /// score, as kube-scheduler 1.36 by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_capacity_scoring: Option<StorageCapacityScoring>,
}

/// How `VolumeBinding` scores storage utilization (kube-scheduler's `VolumeBindingArgs`
/// `shape`, with the `StorageCapacityScoring` gate on).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageCapacityScoring {
    /// Points of the score as a function of utilization (requested / capacity, in
    /// percent), joined by straight lines; below the first point its score, above the
    /// last the last one's. Empty: kube-scheduler's default, `{0, 10}` to `{100, 0}`,
    /// which prefers the node whose storage would stay the emptiest. The points may come
    /// in any order; each utilization at most once; up to 20 points.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    #[x_kube(validation = Rule::new(
        "self.all(p, self.filter(q, q.utilization == p.utilization).size() == 1)"
    ).message(
        "each utilization may appear only once in shape: a shape is a function of utilization"
    ))]
    pub shape: Vec<UtilizationShapePoint>,
}

/// One point of a utilization score shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct UtilizationShapePoint {
    /// Utilization in percent, 0 to 100.
    #[x_kube(validation = Rule::new("self >= 0 && self <= 100").message(
        "utilization is out of range: use a percentage from 0 to 100"
    ))]
    pub utilization: i32,

    /// The score at that utilization, 0 to 10 (kube-scheduler's custom score range,
    /// scaled by 10 to a node score).
    #[x_kube(validation = Rule::new("self >= 0 && self <= 10").message(
        "score is out of range: use a value from 0 to 10"
    ))]
    pub score: i32,
}

/// Whether the webhook writes the architecture constraint at admission.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AdmissionAffinity {
    #[default]
    Enabled,
    Disabled,
}

impl Default for PlacementSpec {
    fn default() -> Self {
        PlacementSpec {
            mode: PlacementMode::default(),
            scheduler_name: default_scheduler_name(),
            percentage_of_nodes_to_score: 0,
            scoring: Vec::new(),
            admission_affinity: AdmissionAffinity::default(),
            storage_capacity_scoring: None,
        }
    }
}

fn default_scheduler_name() -> String {
    DEFAULT_SCHEDULER_NAME.to_owned()
}

/// The placement path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PlacementMode {
    /// Pods are routed to the multiarch scheduler.
    #[default]
    Scheduler,
    /// Pods are gated and get a node affinity for the default scheduler (MTO's behaviour).
    SchedulingGate,
}

/// The weight of one score plugin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScorePluginWeight {
    /// The score plugin.
    pub name: ScorePluginName,

    /// Its weight, from 0 (score off) to 100.
    #[x_kube(validation = Rule::new("self >= 0 && self <= 100").message(
        "weight is out of range: use a value from 0 (off) to 100"
    ))]
    pub weight: i32,
}

/// The score plugins whose weight can be tuned, with kube-scheduler's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ScorePluginName {
    /// Prefers architectures by the `nodeAffinityScoring` weights (default weight 3).
    ImageArchitecture,
    /// Prefers nodes with more free resources (LeastAllocated; default weight 1).
    NodeResourcesFit,
    /// Prefers nodes whose cpu and memory use stay balanced (default weight 1).
    NodeResourcesBalancedAllocation,
    /// Prefers nodes with fewer `PreferNoSchedule` taints the pod does not tolerate
    /// (default weight 3).
    TaintToleration,
    /// Prefers nodes that match the pod's preferred node affinity (default weight 2).
    NodeAffinity,
    /// Prefers placements that lower topology-spread skew (default weight 2).
    PodTopologySpread,
    /// Prefers nodes that match the pod's preferred pod (anti-)affinity (default weight 2).
    InterPodAffinity,
    /// Prefers nodes that already have the pod's images, by size and spread (default
    /// weight 1).
    ImageLocality,
    /// Prefers nodes by the storage utilization `storageCapacityScoring` describes; scores
    /// nothing without it (default weight 1).
    VolumeBinding,
}

impl ScorePluginName {
    /// kube-scheduler's default weight, and 3 for `ImageArchitecture`.
    pub fn default_weight(self) -> i32 {
        match self {
            ScorePluginName::ImageArchitecture | ScorePluginName::TaintToleration => 3,
            ScorePluginName::NodeAffinity
            | ScorePluginName::PodTopologySpread
            | ScorePluginName::InterPodAffinity => 2,
            ScorePluginName::NodeResourcesFit
            | ScorePluginName::NodeResourcesBalancedAllocation
            | ScorePluginName::ImageLocality
            | ScorePluginName::VolumeBinding => 1,
        }
    }
}
