//! The scheduling profile: which plugins run at which extension point, their score
//! weights and `percentageOfNodesToScore`, filled from `spec.placement`.

use std::sync::Arc;

use multiarch_crd::{PlacementSpec, ScorePluginName};

use crate::{
    framework::{FilterPlugin, Plugin, PreFilterPlugin, ScorePlugin},
    model::cluster::ClusterEvent,
    plugins::{
        balanced_allocation::BalancedAllocation, image_architecture::ImageArchitecture,
        inter_pod_affinity::InterPodAffinity, node_affinity::NodeAffinity, node_name::NodeName,
        node_ports::NodePorts, node_resources_fit::NodeResourcesFit,
        node_unschedulable::NodeUnschedulable, pod_topology_spread::PodTopologySpread,
        taint_toleration::TaintToleration, volume_binding::VolumeBinding,
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
    events: Vec<(&'static str, &'static [ClusterEvent])>,
}

impl Profile {
    pub fn new(placement: &PlacementSpec) -> Self {
        let image_architecture = Arc::new(ImageArchitecture);
        let taints = Arc::new(TaintToleration);
        let node_affinity = Arc::new(NodeAffinity);
        let fit = Arc::new(NodeResourcesFit);
        let spread = Arc::new(PodTopologySpread);
        let pod_affinity = Arc::new(InterPodAffinity);
        let ports = Arc::new(NodePorts);
        let balanced = Arc::new(BalancedAllocation);

        let weight = |name: ScorePluginName| {
            i64::from(
                placement
                    .scoring
                    .iter()
                    .find(|w| w.name == name)
                    .map_or(name.default_weight(), |w| w.weight),
            )
        };
        let scorers: Vec<WeightedScorer> = [
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
        ]
        .into_iter()
        .map(|(name, plugin)| WeightedScorer {
            plugin,
            weight: weight(name),
        })
        .filter(|s| s.weight > 0)
        .collect();

        let plugins: Vec<&dyn Plugin> = vec![
            &NodeUnschedulable,
            &NodeName,
            image_architecture.as_ref(),
            taints.as_ref(),
            node_affinity.as_ref(),
            ports.as_ref(),
            fit.as_ref(),
            &VolumeBinding,
            spread.as_ref(),
            pod_affinity.as_ref(),
            balanced.as_ref(),
        ];
        let events = plugins.iter().map(|p| (p.name(), p.events())).collect();

        Profile {
            scheduler_name: placement.scheduler_name.clone(),
            percentage_of_nodes_to_score: u32::try_from(placement.percentage_of_nodes_to_score)
                .unwrap_or(0)
                .min(100),
            pre_filters: vec![
                Arc::new(VolumeBinding),
                image_architecture.clone(),
                ports.clone(),
                spread.clone(),
                pod_affinity.clone(),
            ],
            filters: vec![
                Arc::new(NodeUnschedulable),
                Arc::new(NodeName),
                image_architecture,
                taints,
                node_affinity,
                ports,
                fit,
                spread,
                pod_affinity,
            ],
            scorers,
            events,
        }
    }

    /// The same profile without one plugin at any extension point (used by `simulate` to
    /// measure what an architecture-blind scheduler would do).
    pub fn without(mut self, plugin: &str) -> Self {
        self.pre_filters.retain(|p| p.name() != plugin);
        self.filters.retain(|p| p.name() != plugin);
        self.scorers.retain(|s| s.plugin.name() != plugin);
        self
    }

    /// The cluster events after which a pod rejected by `plugin` may fit.
    pub fn events_of(&self, plugin: &str) -> &'static [ClusterEvent] {
        self.events
            .iter()
            .find(|(name, _)| *name == plugin)
            .map_or(&[], |(_, events)| events)
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
                .contains(&ClusterEvent::AssignedPodDeleted)
        );
        assert!(
            profile
                .events_of("ImageArchitecture")
                .contains(&ClusterEvent::ImagePlatformsResolved)
        );
        assert!(profile.events_of("VolumeBinding").is_empty());
        assert!(profile.events_of("Unknown").is_empty());
    }
}
