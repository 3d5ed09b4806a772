//! The scheduling profile: which plugins run at which extension point, their score
//! weights and `percentageOfNodesToScore`, filled from `spec.placement`.

use std::sync::Arc;

use multiarch_crd::{PlacementSpec, ScorePluginName};

use crate::{
    events::{ClusterChange, EventKind, QueueingHint},
    framework::{FilterPlugin, Plugin, PreFilterPlugin, ScorePlugin},
    model::{cluster::ClusterState, pod::PodInfo},
    plugins::{
        balanced_allocation::BalancedAllocation,
        image_architecture::ImageArchitecture,
        image_locality::ImageLocality,
        inter_pod_affinity::InterPodAffinity,
        node_affinity::NodeAffinity,
        node_declared_features::NodeDeclaredFeatures,
        node_name::NodeName,
        node_ports::NodePorts,
        node_resources_fit::NodeResourcesFit,
        node_unschedulable::NodeUnschedulable,
        node_volume_limits::NodeVolumeLimits,
        pod_topology_spread::PodTopologySpread,
        taint_toleration::TaintToleration,
        unsupported_features::UnsupportedFeatures,
        volume_binding::{UtilizationScore, VolumeBinding},
        volume_restrictions::VolumeRestrictions,
        volume_zone::VolumeZone,
    },
};

pub struct WeightedScorer {
    pub plugin: Arc<dyn ScorePlugin>,
    pub weight: i64,
}

pub struct Profile {
    pub scheduler_name: String,
    /// 0 = adaptive (kube-scheduler's formula).
    pub percentage_of_nodes_to_score: u32,
    pub pre_filters: Vec<Arc<dyn PreFilterPlugin>>,
    /// In the order they run on a node; the first rejection is the node's reason.
    pub filters: Vec<Arc<dyn FilterPlugin>>,
    pub scorers: Vec<WeightedScorer>,
    /// Every plugin that can reject a pod, for the events it registers and its hints.
    rejecting: Vec<Arc<dyn Plugin>>,
    /// Off: every registered event retries the pods (the behaviour before queueing
    /// hints; kept to measure what the hints save).
    pub queueing_hints: bool,
}

/// The scorers with the weights `spec.placement.scoring` gives (default otherwise); a
/// weight of 0 turns one off.
fn weighted<const N: usize>(
    placement: &PlacementSpec,
    scorers: [(ScorePluginName, Arc<dyn ScorePlugin>); N],
) -> Vec<WeightedScorer> {
    let weight = |name: ScorePluginName| {
        i64::from(
            placement
                .scoring
                .iter()
                .find(|w| w.name == name)
                .map_or(name.default_weight(), |w| w.weight),
        )
    };
    scorers
        .into_iter()
        .map(|(name, plugin)| WeightedScorer {
            plugin,
            weight: weight(name),
        })
        .filter(|s| s.weight > 0)
        .collect()
}

impl Profile {
    pub fn new(placement: &PlacementSpec) -> Self {
        let unsupported = Arc::new(UnsupportedFeatures);
        let image_architecture = Arc::new(ImageArchitecture);
        let unschedulable = Arc::new(NodeUnschedulable);
        let node_name = Arc::new(NodeName);
        let taints = Arc::new(TaintToleration);
        let node_affinity = Arc::new(NodeAffinity);
        let ports = Arc::new(NodePorts);
        let fit = Arc::new(NodeResourcesFit);
        let restrictions = Arc::new(VolumeRestrictions);
        let limits = Arc::new(NodeVolumeLimits);
        let binding = Arc::new(VolumeBinding::with_capacity_scoring(
            UtilizationScore::configured(placement.storage_capacity_scoring.as_ref()),
        ));
        let zone = Arc::new(VolumeZone);
        let spread = Arc::new(PodTopologySpread);
        let pod_affinity = Arc::new(InterPodAffinity);
        let balanced = Arc::new(BalancedAllocation);
        let declared_features = Arc::new(NodeDeclaredFeatures);

        let scorers = weighted(
            placement,
            [
                (
                    ScorePluginName::ImageArchitecture,
                    image_architecture.clone() as Arc<dyn ScorePlugin>,
                ),
                (ScorePluginName::TaintToleration, taints.clone()),
                (ScorePluginName::NodeAffinity, node_affinity.clone()),
                (ScorePluginName::NodeResourcesFit, fit.clone()),
                (ScorePluginName::PodTopologySpread, spread.clone()),
                (ScorePluginName::InterPodAffinity, pod_affinity.clone()),
                (
                    ScorePluginName::NodeResourcesBalancedAllocation,
                    balanced.clone(),
                ),
                (ScorePluginName::ImageLocality, Arc::new(ImageLocality)),
                (ScorePluginName::VolumeBinding, binding.clone()),
            ],
        );

        let rejecting: Vec<Arc<dyn Plugin>> = vec![
            unsupported.clone(),
            unschedulable.clone(),
            node_name.clone(),
            image_architecture.clone(),
            taints.clone(),
            node_affinity.clone(),
            ports.clone(),
            fit.clone(),
            restrictions.clone(),
            limits.clone(),
            binding.clone(),
            zone.clone(),
            spread.clone(),
            pod_affinity.clone(),
            declared_features.clone(),
        ];

        Profile {
            scheduler_name: placement.scheduler_name.clone(),
            percentage_of_nodes_to_score: u32::try_from(placement.percentage_of_nodes_to_score)
                .unwrap_or(0)
                .min(100),
            // kube-scheduler's order, the image architectures last: in the situations
            // kube-scheduler knows, the first rejection and its message are the same.
            pre_filters: vec![
                unsupported,
                node_name.clone(),
                node_affinity.clone(),
                ports.clone(),
                restrictions.clone(),
                limits.clone(),
                binding.clone(),
                zone.clone(),
                spread.clone(),
                pod_affinity.clone(),
                declared_features.clone(),
                image_architecture.clone(),
            ],
            // The image architectures right after the node's own state: a node of the
            // wrong architecture is reported as such, whatever else it lacks.
            filters: vec![
                unschedulable,
                node_name,
                image_architecture,
                taints,
                node_affinity,
                ports,
                fit,
                restrictions,
                limits,
                binding,
                zone,
                spread,
                pod_affinity,
                // kube-scheduler 1.36 appends it to the default profile when its gate
                // is on (as it is by default): it runs last.
                declared_features,
            ],
            scorers,
            rejecting,
            queueing_hints: true,
        }
    }

    /// The same profile without one plugin at any extension point (used by `simulate` to
    /// measure what an architecture-blind scheduler would do).
    pub fn without(mut self, plugin: &str) -> Self {
        self.pre_filters.retain(|p| p.name() != plugin);
        self.filters.retain(|p| p.name() != plugin);
        self.scorers.retain(|s| s.plugin.name() != plugin);
        self.rejecting.retain(|p| p.name() != plugin);
        self
    }

    /// The kinds of change after which a pod rejected by `plugin` may fit.
    pub fn events_of(&self, plugin: &str) -> &'static [EventKind] {
        self.rejecting
            .iter()
            .find(|p| p.name() == plugin)
            .map_or(&[], |p| p.events())
    }

    /// Whether `change` may make `pod`, which `plugin` rejected, fit. Unknown plugins
    /// (none) answer Queue, so a pod never waits on a question nobody answers.
    pub fn hint(
        &self,
        plugin: &str,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        cluster: &ClusterState,
    ) -> QueueingHint {
        match self.rejecting.iter().find(|p| p.name() == plugin) {
            None => QueueingHint::Queue,
            Some(p) if !p.events().contains(&change.kind()) => QueueingHint::QueueSkip,
            Some(_) if !self.queueing_hints => QueueingHint::Queue,
            Some(p) => p.queueing_hint(pod, change, cluster),
        }
    }
}

impl Default for Profile {
    fn default() -> Self {
        Profile::new(&PlacementSpec::default())
    }
}

#[cfg(test)]
mod tests {
    use multiarch_crd::ScorePluginWeight;

    use super::*;

    #[test]
    fn default_weights_are_kube_schedulers_plus_image_architecture() {
        let profile = Profile::default();
        let weights: Vec<(&str, i64)> = profile
            .scorers
            .iter()
            .map(|s| (s.plugin.name(), s.weight))
            .collect();
        assert_eq!(
            weights,
            [
                ("ImageArchitecture", 3),
                ("TaintToleration", 3),
                ("NodeAffinity", 2),
                ("NodeResourcesFit", 1),
                ("PodTopologySpread", 2),
                ("InterPodAffinity", 2),
                ("NodeResourcesBalancedAllocation", 1),
                ("ImageLocality", 1),
                ("VolumeBinding", 1),
            ]
        );
        assert_eq!(profile.percentage_of_nodes_to_score, 0);
        assert_eq!(profile.scheduler_name, "multiarch-scheduler");
    }

    #[test]
    fn placement_overrides_weights_and_zero_turns_a_score_off() {
        let placement = PlacementSpec {
            scoring: vec![
                ScorePluginWeight {
                    name: ScorePluginName::ImageArchitecture,
                    weight: 10,
                },
                ScorePluginWeight {
                    name: ScorePluginName::NodeResourcesBalancedAllocation,
                    weight: 0,
                },
            ],
            percentage_of_nodes_to_score: 30,
            ..PlacementSpec::default()
        };
        let profile = Profile::new(&placement);
        assert_eq!(profile.scorers[0].weight, 10);
        assert!(
            profile
                .scorers
                .iter()
                .all(|s| s.plugin.name() != "NodeResourcesBalancedAllocation")
        );
        assert_eq!(profile.percentage_of_nodes_to_score, 30);
    }

    #[test]
    fn a_plugin_can_be_left_out() {
        let blind = Profile::default().without("ImageArchitecture");
        assert!(
            blind
                .pre_filters
                .iter()
                .all(|p| p.name() != "ImageArchitecture")
        );
        assert!(
            blind
                .filters
                .iter()
                .all(|p| p.name() != "ImageArchitecture")
        );
        assert!(
            blind
                .scorers
                .iter()
                .all(|s| s.plugin.name() != "ImageArchitecture")
        );
        assert_eq!(blind.filters.len(), Profile::default().filters.len() - 1);
    }

    #[test]
    fn requeue_events_are_known_per_plugin() {
        let profile = Profile::default();
        assert!(
            profile
                .events_of("NodeResourcesFit")
                .contains(&EventKind::AssignedPodDelete)
        );
        assert!(
            profile
                .events_of("ImageArchitecture")
                .contains(&EventKind::ImagesResolved)
        );
        assert!(
            profile
                .events_of("VolumeBinding")
                .contains(&EventKind::PersistentVolumeClaimChange)
        );
        assert!(profile.events_of("Unknown").is_empty());
    }

    #[test]
    fn hints_answer_only_for_registered_events_and_can_be_turned_off() {
        use crate::model::{node::NodeBuilder, pod::PodBuilder};
        let pod = PodBuilder::new("ns", "p")
            .container("c", "i", "8", "1Gi")
            .info();
        let cluster = ClusterState::new();
        let small = NodeBuilder::new("n", "amd64")
            .capacity("2", "4Gi", 110)
            .info();
        let added = ClusterChange::NodeAdded(&small);
        let mut profile = Profile::default();
        // Too small for the pod: the hint skips it.
        assert_eq!(
            profile.hint("NodeResourcesFit", &pod, &added, &cluster),
            QueueingHint::QueueSkip
        );
        // NodePorts registered NodeAdd and retries on any new node.
        assert_eq!(
            profile.hint("NodePorts", &pod, &added, &cluster),
            QueueingHint::Queue
        );
        // VolumeZone did not register namespace changes.
        assert_eq!(
            profile.hint(
                "VolumeZone",
                &pod,
                &ClusterChange::NamespaceChanged("ns"),
                &cluster
            ),
            QueueingHint::QueueSkip
        );
        assert_eq!(
            profile.hint("Unknown", &pod, &added, &cluster),
            QueueingHint::Queue
        );
        profile.queueing_hints = false;
        assert_eq!(
            profile.hint("NodeResourcesFit", &pod, &added, &cluster),
            QueueingHint::Queue
        );
    }
}
