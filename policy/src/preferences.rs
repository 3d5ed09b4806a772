//! Architecture preferences for one pod, from the matching `PodPlacementConfig`s (higher
//! priority first) and then the `ClusterPodPlacementConfig`: the first config that names
//! an architecture decides its weight (MTO's rule). Used by the scheduler's score and by
//! the gate path's preferred node affinity.

use multiarch_crd::{ClusterPlugins, NodeAffinityScoring, PodPlacementConfig};

use crate::{
    pod_configs::NamespacedConfigs,
    selectors::{LabelSelector, Labels},
};

pub const CLUSTER_SOURCE: &str = "ClusterPodPlacementConfig";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchPreference {
    pub architecture: String,
    pub weight: i32,
    /// `ClusterPodPlacementConfig` or `PodPlacementConfig-<name>`.
    pub source: String,
    /// Named by an earlier config already, or the pod states its own preference.
    pub skipped: bool,
}

/// Whether a `PodPlacementConfig` applies to a pod of this namespace and labels.
pub fn config_matches(config: &PodPlacementConfig, namespace: &str, labels: &Labels) -> bool {
    config.metadata.namespace.as_deref() == Some(namespace)
        && config
            .spec
            .label_selector
            .as_ref()
            .is_none_or(|s| LabelSelector::from(s).matches(labels))
}

/// Whether any preference applies to a pod of this namespace and labels: the cluster
/// config or a PodPlacementConfig that selects it enables `nodeAffinityScoring`.
pub fn preferences_apply(
    namespace: &str,
    labels: &Labels,
    configs: &NamespacedConfigs,
    cluster: Option<&ClusterPlugins>,
) -> bool {
    cluster
        .and_then(ClusterPlugins::enabled_node_affinity_scoring)
        .is_some()
        || configs.of(namespace).iter().any(|c| {
            c.spec.plugins.enabled_node_affinity_scoring().is_some()
                && config_matches(c, namespace, labels)
        })
}

/// The preferences for a pod. `pod_prefers_architectures` lists architectures the pod's
/// own preferred node affinity already names: those are skipped, as MTO does.
pub fn architecture_preferences(
    namespace: &str,
    labels: &Labels,
    pod_prefers_architectures: &[String],
    configs: &NamespacedConfigs,
    cluster: Option<&ClusterPlugins>,
) -> Vec<ArchPreference> {
    let mut matching: Vec<&PodPlacementConfig> = configs
        .of(namespace)
        .iter()
        .map(|c| &**c)
        .filter(|c| config_matches(c, namespace, labels))
        .filter(|c| c.spec.plugins.enabled_node_affinity_scoring().is_some())
        .collect();
    // Higher priority first; equal priorities (MTO forbids them) by name, to be stable.
    matching.sort_by(|a, b| {
        b.spec
            .priority
            .cmp(&a.spec.priority)
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    let mut sources: Vec<(String, &NodeAffinityScoring)> = matching
        .into_iter()
        .filter_map(|c| {
            let name = c.metadata.name.as_deref().unwrap_or_default();
            c.spec
                .plugins
                .enabled_node_affinity_scoring()
                .map(|s| (format!("PodPlacementConfig-{name}"), s))
        })
        .collect();
    if let Some(scoring) = cluster.and_then(ClusterPlugins::enabled_node_affinity_scoring) {
        sources.push((CLUSTER_SOURCE.to_owned(), scoring));
    }

    let user_has_preference = !pod_prefers_architectures.is_empty();
    let mut seen: Vec<String> = pod_prefers_architectures.to_vec();
    let mut out = Vec::new();
    for (source, scoring) in sources {
        for platform in &scoring.platforms {
            let arch = platform.architecture.as_str().to_owned();
            let skipped = user_has_preference || seen.contains(&arch);
            if !skipped {
                seen.push(arch.clone());
            }
            out.push(ArchPreference {
                architecture: arch,
                weight: platform.weight,
                source: source.clone(),
                skipped,
            });
        }
    }
    out
}

/// Marks skipped every preference for an architecture outside `architectures` (the ones a
/// `celArchitecturePlacement` rule decided): preferences only order the decided ones.
pub fn skip_outside(preferences: &mut [ArchPreference], architectures: &[String]) {
    for preference in preferences {
        if !architectures.contains(&preference.architecture) {
            preference.skipped = true;
        }
    }
}

/// `(architecture, weight)` of the preferences that apply.
pub fn applied(preferences: &[ArchPreference]) -> Vec<(String, i32)> {
    preferences
        .iter()
        .filter(|p| !p.skipped)
        .map(|p| (p.architecture.clone(), p.weight))
        .collect()
}

/// MTO's `multiarch.openshift.io/preferred-affinity-sources` annotation value:
/// `arch:weight:source[:skipped]`, comma-separated.
pub fn sources_annotation(preferences: &[ArchPreference]) -> String {
    preferences
        .iter()
        .map(|p| {
            let mut entry = format!("{}:{}:{}", p.architecture, p.weight, p.source);
            if p.skipped {
                entry.push_str(":skipped");
            }
            entry
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
    use multiarch_crd::{Architecture, LocalPlugins, PlatformWeight, PodPlacementConfigSpec};

    use super::*;

    fn scoring(platforms: &[(Architecture, i32)]) -> NodeAffinityScoring {
        NodeAffinityScoring {
            enabled: true,
            platforms: platforms
                .iter()
                .map(|(a, w)| PlatformWeight {
                    architecture: *a,
                    weight: *w,
                })
                .collect(),
        }
    }

    fn ppc(
        name: &str,
        priority: u8,
        app: Option<&str>,
        platforms: &[(Architecture, i32)],
    ) -> PodPlacementConfig {
        let mut config = PodPlacementConfig::new(
            name,
            PodPlacementConfigSpec {
                label_selector: app.map(|a| meta::LabelSelector {
                    match_labels: Some([("app".to_owned(), a.to_owned())].into()),
                    match_expressions: None,
                }),
                plugins: LocalPlugins {
                    node_affinity_scoring: Some(scoring(platforms)),
                    cel_architecture_placement: None,
                },
                priority,
            },
        );
        config.metadata.namespace = Some("shop".into());
        config
    }

    fn labels(app: &str) -> Labels {
        [("app".to_owned(), app.to_owned())].into()
    }

    #[test]
    fn configs_apply_by_priority_then_the_cluster() {
        let cluster = ClusterPlugins {
            node_affinity_scoring: Some(scoring(&[
                (Architecture::Amd64, 10),
                (Architecture::Arm64, 5),
            ])),
            exec_format_error_monitor: None,
            misplaced_pod_correction: None,
            binary_inspection: None,
        };
        let configs = NamespacedConfigs::owned([
            ppc("low", 1, None, &[(Architecture::Arm64, 20)]),
            ppc(
                "high",
                9,
                Some("web"),
                &[(Architecture::S390x, 90), (Architecture::Arm64, 80)],
            ),
            ppc("other-app", 50, Some("db"), &[(Architecture::Ppc64le, 1)]),
        ]);
        let prefs = architecture_preferences("shop", &labels("web"), &[], &configs, Some(&cluster));
        assert_eq!(
            sources_annotation(&prefs),
            "s390x:90:PodPlacementConfig-high,arm64:80:PodPlacementConfig-high,\
             arm64:20:PodPlacementConfig-low:skipped,\
             amd64:10:ClusterPodPlacementConfig,arm64:5:ClusterPodPlacementConfig:skipped"
        );
        assert_eq!(
            applied(&prefs),
            [
                ("s390x".to_owned(), 90),
                ("arm64".to_owned(), 80),
                ("amd64".to_owned(), 10)
            ]
        );
    }

    #[test]
    fn a_pod_with_its_own_preference_skips_everything() {
        let configs = NamespacedConfigs::owned([ppc("p", 1, None, &[(Architecture::Arm64, 20)])]);
        let prefs =
            architecture_preferences("shop", &labels("web"), &["amd64".into()], &configs, None);
        assert_eq!(
            sources_annotation(&prefs),
            "arm64:20:PodPlacementConfig-p:skipped"
        );
        assert!(applied(&prefs).is_empty());
    }

    #[test]
    fn a_rule_leaves_only_its_architectures_to_prefer() {
        let configs = NamespacedConfigs::owned([ppc(
            "p",
            1,
            None,
            &[(Architecture::Arm64, 20), (Architecture::Amd64, 10)],
        )]);
        let mut prefs = architecture_preferences("shop", &labels("web"), &[], &configs, None);
        skip_outside(&mut prefs, &["amd64".to_owned()]);
        assert_eq!(
            sources_annotation(&prefs),
            "arm64:20:PodPlacementConfig-p:skipped,amd64:10:PodPlacementConfig-p"
        );
        assert_eq!(applied(&prefs), [("amd64".to_owned(), 10)]);
    }

    #[test]
    fn other_namespaces_and_disabled_plugins_do_not_apply() {
        let mut disabled = ppc("off", 5, None, &[(Architecture::Arm64, 20)]);
        if let Some(s) = disabled.spec.plugins.node_affinity_scoring.as_mut() {
            s.enabled = false;
        }
        let mut elsewhere = ppc("elsewhere", 5, None, &[(Architecture::Amd64, 20)]);
        elsewhere.metadata.namespace = Some("other".into());
        let configs = NamespacedConfigs::owned([disabled, elsewhere]);
        let prefs = architecture_preferences("shop", &labels("web"), &[], &configs, None);
        assert!(prefs.is_empty());
    }
}
