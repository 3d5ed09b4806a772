//! Whether a misplaced pod is moved, and if not why: the rules, without I/O. A pod is
//! misplaced when one of its own images (not its template's: a rollout may be halfway)
//! has no build that runs on its node: none for the node's architecture, or none at or
//! below the node's level (`multiarch.openshift.io/arch-variant`: an x86-64-v3 build on
//! a v2 node). It is evicted only when a controller will recreate it, the replacement is
//! routed or gated (so it lands where it can run), a node it can run on exists, and no
//! limit stops it.

use k8s_openapi::api::core::v1::Pod;
use multiarch_policy::arch_constraint::pinned_architectures;
use multiarch_policy::exemption::exemption;
use multiarch_policy::platform::{
    ContainerPlatforms, Platform, compatible_platforms, node_is_compatible, variant_need,
};

/// One container's image and what it runs on: `None` confines nothing (an OLM bundle).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JudgedImage {
    pub container: String,
    pub image: String,
    pub platforms: Option<Vec<Platform>>,
}

/// A node as the correction judges it: `linux`, its `kubernetes.io/arch` and, when the
/// node is labelled with one, its variant (its x86-64 level, say).
pub fn node_platform(architecture: &str, variant: Option<&str>) -> Platform {
    Platform::new("linux", architecture, variant)
}

/// The images of `containers` with no build that runs on `node`.
pub fn lacking(containers: &[JudgedImage], node: &Platform) -> Vec<String> {
    containers
        .iter()
        .filter(|c| {
            c.platforms
                .as_ref()
                .is_some_and(|p| !p.iter().any(|p| p.runs_on(node)))
        })
        .map(|c| c.image.clone())
        .collect()
}

/// Why a pod is misplaced on `node`, as its events say: the architecture's build that is
/// missing, or the level the image's builds for the node's architecture need.
pub fn why_misplaced(containers: &[JudgedImage], node: &Platform) -> String {
    let reasons: Vec<String> = containers
        .iter()
        .filter_map(|c| {
            let platforms = c.platforms.as_ref()?;
            if platforms.iter().any(|p| p.runs_on(node)) {
                return None;
            }
            // Builds of the node's architecture that ask for more than the node is.
            let mut needs: Vec<String> = platforms
                .iter()
                .filter(|p| p.os == node.os && p.architecture == node.architecture)
                .filter_map(variant_need)
                .collect();
            needs.sort();
            needs.dedup();
            Some(if needs.is_empty() {
                format!("{} has no linux/{} build", c.image, node.architecture)
            } else {
                format!("{} needs {}", c.image, needs.join(" or "))
            })
        })
        .collect();
    format!("its node is {node}, and {}", reasons.join(", "))
}

/// The controller that recreates a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Controller {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub namespace: String,
}

impl Controller {
    /// `namespace/Kind/name`: what the per-controller limit counts by.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.kind, self.name)
    }
}

/// The controller of `pod`, from its owner references.
pub fn controller_of(pod: &Pod) -> Option<Controller> {
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))?;
    Some(Controller {
        api_version: owner.api_version.clone(),
        kind: owner.kind.clone(),
        name: owner.name.clone(),
        uid: owner.uid.clone(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
    })
}

/// Why a misplaced pod is left where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotCorrected {
    /// No controller would recreate it.
    BarePod,
    /// A DaemonSet's pod belongs to its node: it cannot move.
    DaemonSet,
    /// A controller multiarch does not know recreates pods (a custom resource's).
    UnknownController(String),
    /// Its Job has no retries left: an eviction would fail the Job.
    JobOutOfRetries,
    /// The replacement would not be routed or gated: it could land on the same node.
    NotRouted(String),
    /// Its own node affinity pins it to architectures its images lack.
    PinnedWrongly(Vec<String>),
    /// No node of an architecture its images run on: it would only wait, Pending.
    NoCompatibleNode(Vec<String>),
    DryRun,
    RateLimited(&'static str),
    /// The Eviction API refused: a PodDisruptionBudget allows no disruption now.
    DisruptionBudget(String),
}

impl NotCorrected {
    /// Every [`label`](Self::label): the metric's series exist from the start, so the
    /// first pod left where it is is an increase an alert sees.
    pub const LABELS: [&'static str; 10] = [
        "bare_pod",
        "daemonset",
        "unknown_controller",
        "job_out_of_retries",
        "not_routed",
        "pinned",
        "no_compatible_node",
        "dry_run",
        "rate_limited",
        "disruption_budget",
    ];

    /// A label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            NotCorrected::BarePod => "bare_pod",
            NotCorrected::DaemonSet => "daemonset",
            NotCorrected::UnknownController(_) => "unknown_controller",
            NotCorrected::JobOutOfRetries => "job_out_of_retries",
            NotCorrected::NotRouted(_) => "not_routed",
            NotCorrected::PinnedWrongly(_) => "pinned",
            NotCorrected::NoCompatibleNode(_) => "no_compatible_node",
            NotCorrected::DryRun => "dry_run",
            NotCorrected::RateLimited(_) => "rate_limited",
            NotCorrected::DisruptionBudget(_) => "disruption_budget",
        }
    }

    /// What the event says.
    pub fn describe(&self) -> String {
        match self {
            NotCorrected::BarePod => {
                "it has no controller to recreate it: delete it and create it again (routing places the new one)".into()
            }
            NotCorrected::DaemonSet => {
                "it is a DaemonSet's pod, which belongs to its node: give the DaemonSet a kubernetes.io/arch node affinity or an image with a build for this node".into()
            }
            NotCorrected::UnknownController(kind) => {
                format!("its controller, a {kind}, is not one multiarch knows to recreate pods")
            }
            NotCorrected::JobOutOfRetries => {
                "its Job has no retries left (backoffLimit): an eviction would fail the Job".into()
            }
            NotCorrected::NotRouted(why) => format!(
                "its replacement would not be routed to a compatible node ({why}), so it is not evicted"
            ),
            NotCorrected::PinnedWrongly(archs) => format!(
                "its own node affinity or nodeSelector pins it to {}, which its images have no build for: fix the workload",
                archs.join(", ")
            ),
            NotCorrected::NoCompatibleNode(archs) => format!(
                "no node runs an architecture its images support ({}): evicted, it would only wait",
                archs.join(", ")
            ),
            NotCorrected::DryRun => "dry run: misplacedPodCorrection.dryRun is true".into(),
            NotCorrected::RateLimited(which) => {
                format!("the eviction limit ({which}) is reached; retried at the next scan")
            }
            NotCorrected::DisruptionBudget(message) => format!(
                "the Eviction API refused (a PodDisruptionBudget allows no disruption now: {message}); retried at the next scan"
            ),
        }
    }
}

/// What the rules need to know besides the pod.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    pub containers: &'a [JudgedImage],
    /// The distinct platforms of the cluster's nodes (architecture and level).
    pub node_platforms: &'a [Platform],
    /// `None` when the pod's namespace is routed; else why not.
    pub not_routed: Option<String>,
    /// Its Job's retries left (only read for a Job's pod).
    pub job_retries_left: Option<bool>,
    pub own_namespace: &'a str,
}

/// The controller to evict `pod` for, or why it stays. The limits and the dry run are
/// the caller's (they apply to pods that pass these rules).
pub fn decide(pod: &Pod, facts: &Facts<'_>) -> Result<Controller, NotCorrected> {
    let controller = controller_of(pod).ok_or(NotCorrected::BarePod)?;
    match controller.kind.as_str() {
        "DaemonSet" => return Err(NotCorrected::DaemonSet),
        "ReplicaSet" | "StatefulSet" | "ReplicationController" => {}
        "Job" => {
            if facts.job_retries_left != Some(true) {
                return Err(NotCorrected::JobOutOfRetries);
            }
        }
        other => return Err(NotCorrected::UnknownController(other.to_owned())),
    }
    // The replacement as admission sees it: not yet on a node.
    let mut replacement = pod.clone();
    if let Some(spec) = replacement.spec.as_mut() {
        spec.node_name = None;
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(exempt) = exemption(&replacement, namespace, facts.own_namespace) {
        return Err(NotCorrected::NotRouted(format!(
            "routing leaves it alone: {}",
            exempt.as_str()
        )));
    }
    if let Some(why) = &facts.not_routed {
        return Err(NotCorrected::NotRouted(why.clone()));
    }
    let constraining: Vec<ContainerPlatforms<'_>> = facts
        .containers
        .iter()
        .filter_map(|c| {
            Some(ContainerPlatforms {
                container: &c.container,
                platforms: c.platforms.as_deref()?,
            })
        })
        .collect();
    let supported: Vec<Platform> = compatible_platforms(&constraining)
        .into_iter()
        .filter(|p| p.os == "linux")
        .collect();
    if let Some(pinned) = pinned_architectures(pod)
        && !pinned
            .iter()
            .any(|a| supported.iter().any(|p| p.architecture == *a))
    {
        return Err(NotCorrected::PinnedWrongly(pinned));
    }
    if !facts
        .node_platforms
        .iter()
        .any(|node| node_is_compatible(&supported, node))
    {
        return Err(NotCorrected::NoCompatibleNode(
            supported.iter().map(Platform::to_string).collect(),
        ));
    }
    Ok(controller)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_reason_label_is_listed() {
        let all = [
            NotCorrected::BarePod,
            NotCorrected::DaemonSet,
            NotCorrected::UnknownController(String::new()),
            NotCorrected::JobOutOfRetries,
            NotCorrected::NotRouted(String::new()),
            NotCorrected::PinnedWrongly(Vec::new()),
            NotCorrected::NoCompatibleNode(Vec::new()),
            NotCorrected::DryRun,
            NotCorrected::RateLimited(""),
            NotCorrected::DisruptionBudget(String::new()),
        ];
        let labels: Vec<&str> = all.iter().map(NotCorrected::label).collect();
        assert_eq!(labels, NotCorrected::LABELS);
    }

    fn pod(owner: Option<(&str, &str)>, extra: serde_json::Value) -> Pod {
        let mut pod = json!({"metadata": {"name": "web-1", "namespace": "shop"},
            "spec": {"nodeName": "arm-1", "containers": [{"name": "app", "image": "web:1"}]}});
        if let Some((kind, name)) = owner {
            pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind,
                "name": name, "uid": "u", "controller": true}]);
        }
        if let Some(spec) = extra.as_object() {
            for (k, v) in spec {
                pod["spec"][k] = v.clone();
            }
        }
        serde_json::from_value(pod).unwrap()
    }

    fn amd64_only() -> Vec<JudgedImage> {
        vec![JudgedImage {
            container: "app".into(),
            image: "web:1".into(),
            platforms: Some(vec![Platform::linux("amd64")]),
        }]
    }

    fn facts<'a>(containers: &'a [JudgedImage], nodes: &'a [Platform]) -> Facts<'a> {
        Facts {
            containers,
            node_platforms: nodes,
            not_routed: None,
            job_retries_left: None,
            own_namespace: "multiarch",
        }
    }

    #[test]
    fn only_pods_a_known_controller_recreates_where_they_can_run_are_evicted() {
        let containers = amd64_only();
        let nodes = vec![Platform::linux("amd64"), Platform::linux("arm64")];
        assert_eq!(lacking(&containers, &Platform::linux("arm64")), ["web:1"]);
        assert!(lacking(&containers, &Platform::linux("amd64")).is_empty());
        let f = facts(&containers, &nodes);
        let rs = decide(&pod(Some(("ReplicaSet", "web-7d")), json!({})), &f).unwrap();
        assert_eq!(rs.key(), "shop/ReplicaSet/web-7d");
        assert!(decide(&pod(Some(("StatefulSet", "db")), json!({})), &f).is_ok());
        let cases = [
            (pod(None, json!({})), "bare_pod"),
            (pod(Some(("DaemonSet", "agent")), json!({})), "daemonset"),
            (pod(Some(("Job", "batch")), json!({})), "job_out_of_retries"),
            (
                pod(Some(("Workflow", "w")), json!({})),
                "unknown_controller",
            ),
            (
                pod(
                    Some(("ReplicaSet", "web-7d")),
                    json!({"nodeSelector": {"kubernetes.io/arch": "arm64"}}),
                ),
                "pinned",
            ),
        ];
        for (pod, label) in cases {
            assert_eq!(decide(&pod, &f).unwrap_err().label(), label);
        }
        let with_retries = Facts {
            job_retries_left: Some(true),
            ..facts(&containers, &nodes)
        };
        assert!(decide(&pod(Some(("Job", "batch")), json!({})), &with_retries).is_ok());
        let unrouted = Facts {
            not_routed: Some("namespace shop is not selected".into()),
            ..facts(&containers, &nodes)
        };
        assert_eq!(
            decide(&pod(Some(("ReplicaSet", "w")), json!({})), &unrouted)
                .unwrap_err()
                .label(),
            "not_routed"
        );
        let arm_only = vec![Platform::linux("arm64")];
        let no_node = decide(
            &pod(Some(("ReplicaSet", "w")), json!({})),
            &facts(&containers, &arm_only),
        )
        .unwrap_err();
        assert_eq!(
            no_node,
            NotCorrected::NoCompatibleNode(vec!["amd64".into()])
        );
    }

    fn image(name: &str, platforms: &[&str]) -> JudgedImage {
        JudgedImage {
            container: name.split(':').next().unwrap_or(name).into(),
            image: name.into(),
            platforms: Some(
                platforms
                    .iter()
                    .map(|p| Platform::parse(&format!("linux/{p}")).unwrap())
                    .collect(),
            ),
        }
    }

    #[test]
    fn a_node_below_the_level_an_image_needs_is_misplacing_it() {
        let ubi10 = image("ubi10:1", &["amd64/v3", "arm64"]);
        let any_level = image("web:1", &["amd64", "arm64"]);
        let arm7 = image("dash:1", &["arm/v7"]);
        // (node arch, node level label, images, lacking, why)
        let cases = [
            (
                "amd64",
                Some("v2"),
                vec![ubi10.clone()],
                vec!["ubi10:1"],
                "its node is amd64/v2, and ubi10:1 needs x86-64-v3",
            ),
            ("amd64", Some("v3"), vec![ubi10.clone()], vec![], ""),
            (
                "amd64",
                Some("v4"),
                vec![ubi10.clone(), any_level.clone()],
                vec![],
                "",
            ),
            // No label: the node's level is unknown, every build of its architecture runs.
            ("amd64", None, vec![ubi10.clone()], vec![], ""),
            (
                "amd64",
                Some("v1"),
                vec![any_level.clone(), ubi10.clone()],
                vec!["ubi10:1"],
                "its node is amd64/v1, and ubi10:1 needs x86-64-v3",
            ),
            (
                "arm",
                Some("v6"),
                vec![arm7.clone()],
                vec!["dash:1"],
                "its node is arm/v6, and dash:1 needs arm/v7",
            ),
            (
                "s390x",
                None,
                vec![ubi10.clone(), arm7.clone()],
                vec!["ubi10:1", "dash:1"],
                "its node is s390x, and ubi10:1 has no linux/s390x build, dash:1 has no linux/s390x build",
            ),
        ];
        for (arch, level, images, missing, why) in cases {
            let node = node_platform(arch, level);
            assert_eq!(lacking(&images, &node), missing, "{arch} {level:?}");
            if !missing.is_empty() {
                assert_eq!(why_misplaced(&images, &node), why);
            }
        }
    }

    #[test]
    fn a_pod_needing_a_level_no_node_has_is_not_evicted() {
        let containers = vec![image("ubi10:1", &["amd64/v3"])];
        let pod = pod(Some(("ReplicaSet", "web-7d")), json!({}));
        let low = [
            node_platform("amd64", Some("v2")),
            node_platform("arm64", None),
        ];
        assert_eq!(
            decide(&pod, &facts(&containers, &low)).unwrap_err(),
            NotCorrected::NoCompatibleNode(vec!["amd64/v3".into()])
        );
        // A v4 node runs it; so does one whose level is not labelled.
        for node in [
            node_platform("amd64", Some("v4")),
            node_platform("amd64", None),
        ] {
            let nodes = [node_platform("amd64", Some("v2")), node];
            assert!(decide(&pod, &facts(&containers, &nodes)).is_ok());
        }
    }
}
