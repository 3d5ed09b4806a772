//! A workload's verdict: from the platforms of each of its images, which of the target
//! architectures it can run on, and whether its own placement already contradicts them.

use multiarch_policy::{
    arch_constraint::pinned_architectures,
    architecture_rules::ArchitectureDecision,
    platform::{ContainerPlatforms, Platform, compatible_platforms, node_is_compatible},
};
use serde::Serialize;

use crate::{cluster::RunningPod, workloads::Workload};

/// What the audit found about one image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageAudit {
    pub container: String,
    pub image: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub init: bool,
    /// Linux architectures it has builds for (`arm/v7` with its variant).
    pub platforms: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "camelCase")]
pub enum Verdict {
    /// Every target architecture.
    RunsOnAll,
    /// Some of them; `cannot` names the others.
    Restricted { cannot: Vec<String> },
    /// None: no architecture common to the images, or none among the targets.
    Blocked { reason: String },
    /// An image could not be inspected.
    Unknown { reason: String },
}

impl Verdict {
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::RunsOnAll => "runs on all",
            Verdict::Restricted { .. } => "restricted",
            Verdict::Blocked { .. } => "blocked",
            Verdict::Unknown { .. } => "unknown",
        }
    }
}

/// One workload's audit.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadAudit {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub images: Vec<ImageAudit>,
    /// The target architectures every image has a build for.
    pub architectures: Vec<String>,
    #[serde(flatten)]
    pub verdict: Verdict,
    /// The architectures the workload pins itself (`nodeSelector` or required affinity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned: Option<Vec<String>>,
    /// Its pin allows no architecture its images have: its pods crash (or wait) today.
    pub pin_contradicts_images: bool,
    /// The `kubernetes.io/arch In [...]` that routing gives its pods (the gate path's
    /// nodeAffinity and the scheduler's filter); none when the workload pins itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routed_constraint: Option<Vec<String>>,
    /// Live cluster: its pods running now on nodes whose architecture its images lack
    /// (they crash with `exec format error` or cannot pull).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub misplaced_pods: Vec<MisplacedPod>,
    /// The `celArchitecturePlacement` rule that decides its pods' architectures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture_rule: Option<RuleAudit>,
}

/// A rule's decision for a workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleAudit {
    /// `PodPlacementConfig-<name>/<rule>` (or `/fallback`).
    pub decided_by: String,
    pub architectures: Vec<String>,
    /// The rule sends the pods where their images have no build: they will fail there.
    pub overrides_images: bool,
}

/// A pod on a node its images cannot run on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MisplacedPod {
    pub pod: String,
    pub node: String,
    pub architecture: String,
}

impl WorkloadAudit {
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.kind, self.name)
    }
}

/// The platforms every container has a Linux build for (`resolved`: one per container,
/// all known), the most demanding variant of each kept.
fn common_platforms(containers: &[ContainerRefLike<'_>]) -> Vec<Platform> {
    let platforms: Vec<ContainerPlatforms<'_>> = containers
        .iter()
        .map(|(container, platforms)| ContainerPlatforms {
            container,
            platforms,
        })
        .collect();
    compatible_platforms(&platforms)
}

/// The architectures of [`common_platforms`].
fn common_architectures(containers: &[ContainerRefLike<'_>]) -> Vec<String> {
    let mut common: Vec<String> = common_platforms(containers)
        .into_iter()
        .map(|p| p.architecture)
        .collect();
    common.sort();
    common.dedup();
    common
}

/// A container's name and its images' Linux platforms.
type ContainerRefLike<'a> = (&'a str, Vec<Platform>);

/// `pod` as misplaced when every image is known and none of the node's architecture runs
/// all of them; `None` otherwise (an unknown image proves nothing).
pub fn misplaced(
    pod: &RunningPod,
    resolved: &[Result<Vec<Platform>, String>],
) -> Option<MisplacedPod> {
    let containers: Vec<ContainerRefLike<'_>> = pod
        .containers
        .iter()
        .zip(resolved)
        .map(|(c, r)| Some((c.container.as_str(), linux_platforms(r.as_ref().ok()?))))
        .collect::<Option<_>>()?;
    if containers.len() != pod.containers.len() {
        return None;
    }
    // The node's variant counts: an x86-64-v3 build on a node labelled v2 is misplaced.
    let node = Platform::new("linux", &pod.architecture, pod.variant.as_deref());
    (!node_is_compatible(&common_platforms(&containers), &node)).then(|| MisplacedPod {
        pod: pod.name.clone(),
        node: pod.node.clone(),
        architecture: platform_text(&node),
    })
}

/// Linux builds only: nodes run Linux.
fn linux_platforms(platforms: &[Platform]) -> Vec<Platform> {
    platforms
        .iter()
        .filter(|p| p.os == "linux")
        .cloned()
        .collect()
}

fn platform_text(p: &Platform) -> String {
    match &p.variant {
        Some(v) => format!("{}/{v}", p.architecture),
        None => p.architecture.clone(),
    }
}

/// Each container's image, its Linux platforms (sorted, each once) and its error.
fn image_audits(
    workload: &Workload,
    resolved: &[Result<Vec<Platform>, String>],
) -> Vec<ImageAudit> {
    workload
        .containers
        .iter()
        .zip(resolved)
        .map(|(c, r)| {
            let mut platforms: Vec<String> = match r {
                Ok(p) => linux_platforms(p).iter().map(platform_text).collect(),
                Err(_) => Vec::new(),
            };
            platforms.sort();
            platforms.dedup();
            ImageAudit {
                container: c.container.clone(),
                image: c.image.clone(),
                init: c.init,
                platforms,
                error: r.as_ref().err().cloned(),
            }
        })
        .collect()
}

/// The targets the images' common architectures cover, and the verdict it gives.
fn fit(common: &[String], targets: &[String]) -> (Vec<String>, Verdict) {
    let can: Vec<String> = targets
        .iter()
        .filter(|t| common.contains(*t))
        .cloned()
        .collect();
    let cannot: Vec<String> = targets
        .iter()
        .filter(|t| !common.contains(*t))
        .cloned()
        .collect();
    let verdict = if can.is_empty() {
        Verdict::Blocked {
            reason: format!(
                "the images run on {} only, none of {}",
                common.join(", "),
                targets.join(", ")
            ),
        }
    } else if cannot.is_empty() {
        Verdict::RunsOnAll
    } else {
        Verdict::Restricted { cannot }
    };
    (can, verdict)
}

/// Judges `workload`, whose images resolved to `resolved` (one per container, in order),
/// against `targets`.
pub fn judge(
    workload: &Workload,
    resolved: &[Result<Vec<Platform>, String>],
    targets: &[String],
    rule: Option<&ArchitectureDecision>,
) -> WorkloadAudit {
    let images = image_audits(workload, resolved);
    // A rule replaces the workload's own pin at admission.
    let pinned = pinned_architectures(&workload.pod).filter(|_| rule.is_none());
    let rule_audit = |overrides_images| {
        rule.map(|r| RuleAudit {
            decided_by: r.source(),
            architectures: r.architectures.clone(),
            overrides_images,
        })
    };
    let audit = |architectures, verdict, contradicts, routed, rule_audit| WorkloadAudit {
        kind: workload.kind.clone(),
        namespace: workload.namespace.clone(),
        name: workload.name.clone(),
        images: images.clone(),
        architectures,
        verdict,
        pinned: pinned.clone(),
        pin_contradicts_images: contradicts,
        routed_constraint: routed,
        misplaced_pods: Vec::new(),
        architecture_rule: rule_audit,
    };
    if let Some(failed) = images.iter().find(|i| i.error.is_some()) {
        let reason = format!(
            "{}: {}",
            failed.image,
            failed.error.clone().unwrap_or_default()
        );
        return audit(
            Vec::new(),
            Verdict::Unknown { reason },
            false,
            rule.map(|r| r.architectures.clone()),
            rule_audit(false),
        );
    }
    let containers: Vec<ContainerRefLike<'_>> = workload
        .containers
        .iter()
        .zip(resolved)
        .map(|(c, r)| {
            (
                c.container.as_str(),
                linux_platforms(r.as_deref().unwrap_or_default()),
            )
        })
        .collect();
    let images_common = common_architectures(&containers);
    // With a rule, the pods run where the rule sends them and the images have a build.
    let common: Vec<String> = match rule {
        Some(r) => images_common
            .iter()
            .filter(|a| r.allows(a))
            .cloned()
            .collect(),
        None => images_common.clone(),
    };
    let contradicts = pinned
        .as_ref()
        .is_some_and(|pin| !pin.iter().any(|a| common.contains(a)));
    let routed = match rule {
        Some(r) => Some(r.architectures.clone()),
        None => pinned.is_none().then(|| common.clone()),
    };
    if let Some(r) = rule
        && common.is_empty()
    {
        let images: Vec<Platform> = images_common.iter().map(|a| Platform::linux(a)).collect();
        let reason = r
            .overrides_images(&images)
            .unwrap_or_else(|| format!("{} leaves no architecture", r.describe()));
        return audit(
            Vec::new(),
            Verdict::Blocked { reason },
            false,
            routed,
            rule_audit(true),
        );
    }
    if common.is_empty() {
        let reason = "the images have no architecture in common".to_owned();
        return audit(
            Vec::new(),
            Verdict::Blocked { reason },
            contradicts,
            routed,
            None,
        );
    }
    let (can, verdict) = fit(&common, targets);
    audit(can, verdict, contradicts, routed, rule_audit(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::Manifests;

    fn workload(yaml: &str) -> Workload {
        Manifests::read(yaml, "default")
            .unwrap()
            .workloads
            .remove(0)
    }

    fn linux(archs: &[&str]) -> Result<Vec<Platform>, String> {
        Ok(archs.iter().map(|a| Platform::linux(a)).collect())
    }

    fn targets() -> Vec<String> {
        ["amd64", "arm64", "ppc64le", "s390x"]
            .map(String::from)
            .to_vec()
    }

    const TWO: &str = "kind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {containers: [{name: a, image: 'a:1'}, {name: b, image: 'b:1'}]}}}\n";

    #[test]
    fn every_verdict() {
        let w = workload(TWO);
        let all = ["amd64", "arm64", "ppc64le", "s390x"];
        assert_eq!(
            judge(&w, &[linux(&all), linux(&all)], &targets(), None).verdict,
            Verdict::RunsOnAll
        );
        let restricted = judge(
            &w,
            &[linux(&all), linux(&["amd64", "arm64"])],
            &targets(),
            None,
        );
        assert_eq!(
            restricted.verdict,
            Verdict::Restricted {
                cannot: vec!["ppc64le".into(), "s390x".into()]
            }
        );
        assert_eq!(restricted.architectures, ["amd64", "arm64"]);
        assert_eq!(
            restricted.routed_constraint,
            Some(vec!["amd64".into(), "arm64".into()])
        );
        assert_eq!(
            judge(
                &w,
                &[linux(&["amd64"]), linux(&["arm64"])],
                &targets(),
                None
            )
            .verdict,
            Verdict::Blocked {
                reason: "the images have no architecture in common".into()
            }
        );
        assert_eq!(
            judge(
                &w,
                &[linux(&["riscv64"]), linux(&["riscv64"])],
                &targets(),
                None
            )
            .verdict,
            Verdict::Blocked {
                reason: "the images run on riscv64 only, none of amd64, arm64, ppc64le, s390x"
                    .into()
            }
        );
        assert_eq!(
            judge(
                &w,
                &[linux(&all), Err("registry down".into())],
                &targets(),
                None
            )
            .verdict,
            Verdict::Unknown {
                reason: "b:1: registry down".into()
            }
        );
        // Windows builds run on no Linux node.
        let windows = Ok(vec![Platform::new("windows", "amd64", None)]);
        assert!(matches!(
            judge(&w, &[linux(&all), windows], &targets(), None).verdict,
            Verdict::Blocked { .. }
        ));
    }

    #[test]
    fn a_pin_that_contradicts_the_images_is_reported() {
        let pinned = workload(
            "kind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {nodeSelector: {kubernetes.io/arch: arm64}, containers: [{name: a, image: 'a:1'}]}}}\n",
        );
        let audit = judge(&pinned, &[linux(&["amd64"])], &targets(), None);
        assert!(audit.pin_contradicts_images);
        assert_eq!(audit.pinned, Some(vec!["arm64".into()]));
        assert_eq!(audit.routed_constraint, None);
        let fine = judge(&pinned, &[linux(&["amd64", "arm64"])], &targets(), None);
        assert!(!fine.pin_contradicts_images);
    }
}
