//! `ImageArchitecture`: a node must be a platform that every image of the pod has a build
//! for; among those, preferred architectures score higher.

use std::sync::Arc;

use crate::{
    events::{ClusterChange, EventKind, QueueingHint},
    framework::{
        CycleContext, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, PreFilterPlugin, Reason,
        ScorePlugin, Status, score_each,
    },
    image_platforms::ImagePlatforms,
    model::{cluster::ClusterState, node::NodeInfo, pod::PodInfo},
};
use multiarch_policy::platform::{
    Platform, compatible_platforms, describe, node_is_compatible, platform_bit, platform_bits,
};

pub const NAME: &str = "ImageArchitecture";

pub struct ImageArchitecture;

/// What PreFilter found, for Filter and for the messages users read.
#[derive(Clone, Debug)]
pub struct CompatiblePlatforms {
    pub platforms: Vec<Platform>,
    /// `platforms` as a bit set, when every one has a bit (the common case).
    bits: Option<u64>,
    /// Set when `fallbackArchitecture` replaced images that could not be inspected.
    pub fallback_used: bool,
    /// Set when a `celArchitecturePlacement` rule decided the platforms: how it is named.
    pub decided_by: Option<String>,
    reason: Reason,
}

impl CompatiblePlatforms {
    /// Whether the node is of a platform the pod's images have (any node when the pod
    /// has no image to restrict it).
    pub fn admits(&self, node: &NodeInfo) -> bool {
        if self.platforms.is_empty() {
            return true;
        }
        match (self.bits, node.platform_bit) {
            (Some(bits), Some(bit)) => bits & (1 << bit) != 0,
            _ => node_is_compatible(&self.platforms, &node.platform),
        }
    }

    /// `amd64, arm64`.
    pub fn describe(&self) -> String {
        describe(&self.platforms)
    }
}

/// The platforms the pod can run on, or the status that explains why none.
pub fn pod_compatibility(ctx: &CycleContext<'_>) -> Result<CompatiblePlatforms, Status> {
    if let Some(decision) = ctx.architecture_rule {
        // The namespace admin's rule decides, whatever the images say (the caller warns
        // when they have no build there).
        let platforms: Vec<Platform> = decision
            .architectures
            .iter()
            .map(|a| Platform::linux(a))
            .collect();
        return Ok(CompatiblePlatforms {
            bits: Some(platform_bits(&platforms)),
            reason: Reason::Shared(
                format!(
                    "node(s) didn't match the architectures of {} ({})",
                    decision.describe(),
                    describe(&platforms)
                )
                .into(),
            ),
            platforms,
            fallback_used: false,
            decided_by: Some(decision.describe()),
        });
    }
    let failed: Vec<String> = ctx
        .images
        .containers
        .iter()
        .filter_map(|c| match &c.platforms {
            ImagePlatforms::Failed(err) => Some(format!("image {}: {err}", c.image)),
            ImagePlatforms::Known(_) | ImagePlatforms::Anywhere => None,
        })
        .collect();
    if !failed.is_empty() {
        if let Some(fallback) = ctx.fallback_architecture {
            let platforms = vec![Platform::linux(fallback)];
            return Ok(CompatiblePlatforms {
                bits: Some(platform_bits(&platforms)),
                reason: mismatch_reason(&platforms, true),
                platforms,
                fallback_used: true,
                decided_by: None,
            });
        }
        let mut status = Status::unschedulable(format!(
            "cannot read the platforms of the pod's images ({}); retrying with backoff",
            failed.join("; ")
        ));
        status.retry_with_backoff = true;
        return Err(status);
    }
    let containers = ctx.images.known();
    if containers.is_empty() {
        // Every image is a bundle image (an OLM unpack Job): nothing to restrict.
        return Ok(CompatiblePlatforms {
            platforms: Vec::new(),
            bits: None,
            fallback_used: false,
            decided_by: None,
            reason: Reason::Static(""),
        });
    }
    let platforms = compatible_platforms(&containers);
    if platforms.is_empty() {
        let per_container: Vec<String> = ctx
            .images
            .containers
            .iter()
            .filter_map(|c| match &c.platforms {
                ImagePlatforms::Known(p) => Some(format!(
                    "{} ({}) supports {}",
                    c.container,
                    c.image,
                    describe_or_none(p)
                )),
                ImagePlatforms::Anywhere | ImagePlatforms::Failed(_) => None,
            })
            .collect();
        return Err(Status::unresolvable(format!(
            "the pod's images have no architecture in common: {}",
            per_container.join("; ")
        )));
    }
    Ok(CompatiblePlatforms {
        bits: Some(platform_bits(&platforms)),
        reason: mismatch_reason(&platforms, false),
        platforms,
        fallback_used: false,
        decided_by: None,
    })
}

fn describe_or_none(platforms: &Arc<[Platform]>) -> String {
    if platforms.is_empty() {
        "no platform".into()
    } else {
        describe(platforms)
    }
}

fn mismatch_reason(platforms: &[Platform], fallback: bool) -> Reason {
    let which = describe(platforms);
    Reason::Shared(
        if fallback {
            format!("node(s) didn't match the pod's fallback architecture ({which}; image inspection failed)")
        } else {
            format!("node(s) didn't match the pod's image architectures (images support {which})")
        }
        .into(),
    )
}

impl Plugin for ImageArchitecture {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventKind] {
        &[
            EventKind::NodeAdd,
            EventKind::NodeUpdate,
            EventKind::ImagesResolved,
            EventKind::ConfigChange,
        ]
    }

    /// A new node, a node whose platform changed, a new answer about one of the pod's
    /// images, or a new configuration (`fallbackArchitecture`) may help.
    fn queueing_hint(
        &self,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        _: &ClusterState,
    ) -> QueueingHint {
        match change {
            ClusterChange::NodeAdded(_) | ClusterChange::ConfigChanged => QueueingHint::Queue,
            ClusterChange::NodeUpdated { old, new, .. } => {
                QueueingHint::from_bool(old.platform != new.platform)
            }
            ClusterChange::ImagesResolved(images) => {
                QueueingHint::from_bool(pod.images.iter().any(|i| images.contains(&i.image)))
            }
            _ => QueueingHint::QueueSkip,
        }
    }
}

impl PreFilterPlugin for ImageArchitecture {
    fn pre_filter(&self, ctx: &CycleContext<'_>, state: &mut CycleState) -> Status {
        match pod_compatibility(ctx) {
            Ok(found) => {
                let skip = found.platforms.is_empty();
                state.write(found);
                if skip {
                    Status::skip()
                } else {
                    Status::success()
                }
            }
            Err(status) => status,
        }
    }

    /// The nodes of the platforms the images have, from the cluster's platform index:
    /// a pod with an s390x-only image visits the s390x nodes, not the cluster.
    fn candidate_nodes(
        &self,
        ctx: &CycleContext<'_>,
        state: &CycleState,
    ) -> Option<std::sync::Arc<[usize]>> {
        let bits = state.read::<CompatiblePlatforms>()?.bits?;
        let index = ctx.cluster.platform_index();
        (index.count(bits) < ctx.cluster.nodes().len()).then(|| index.candidates(bits))
    }
}

impl FilterPlugin for ImageArchitecture {
    fn filter(&self, _: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> Status {
        let Some(found) = state.read::<CompatiblePlatforms>() else {
            return Status::error("ImageArchitecture: PreFilter did not run");
        };
        if found.admits(node) {
            Status::success()
        } else {
            Status::unresolvable(found.reason.clone())
        }
    }
}

/// The preferred weights by [`platform_bit`] (either OS), so that scoring a node that
/// has a bit is an index, not a string comparison per preference.
#[derive(Clone)]
struct WeightsByBit([i64; 16]);

/// The configured weight of the node's architecture, by its platform bit when it has one.
fn weight_of(ctx: &CycleContext<'_>, weights: Option<&WeightsByBit>, node: &NodeInfo) -> i64 {
    if let (Some(bit), Some(weights)) = (node.platform_bit, weights) {
        return weights.0[usize::from(bit)];
    }
    ctx.arch_preferences
        .iter()
        .find(|(arch, _)| *arch == node.platform.architecture)
        .map_or(0, |(_, weight)| i64::from(*weight))
}

impl ScorePlugin for ImageArchitecture {
    fn pre_score(&self, ctx: &CycleContext<'_>, state: &mut CycleState, _: &[&NodeInfo]) -> Status {
        if ctx.arch_preferences.is_empty() {
            return Status::skip();
        }
        let mut weights = [0i64; 16];
        // First match wins, as in the string comparison below.
        for (arch, weight) in ctx.arch_preferences.iter().rev() {
            let platform = Platform::linux(arch);
            // Only names as nodes report them: the comparison below is exact.
            if platform.architecture != *arch {
                continue;
            }
            if let Some(bit) = platform_bit(&platform) {
                weights[usize::from(bit)] = i64::from(*weight);
                weights[usize::from(bit) + 8] = i64::from(*weight);
            }
        }
        state.write(WeightsByBit(weights));
        Status::success()
    }

    /// The configured weight of the node's architecture (0 when not preferred).
    fn score(&self, ctx: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> i64 {
        weight_of(ctx, state.read::<WeightsByBit>(), node)
    }

    fn score_all(
        &self,
        ctx: &CycleContext<'_>,
        state: &CycleState,
        nodes: &[&NodeInfo],
        out: &mut [i64],
    ) {
        let weights = state.read::<WeightsByBit>();
        score_each(nodes, out, |node| weight_of(ctx, weights, node));
    }

    /// Scaled by the largest configured weight, so weight 100 is a full score whatever the
    /// other weights are, and a config of one architecture at weight 10 scores it 100.
    fn normalize(&self, ctx: &CycleContext<'_>, _: &CycleState, scores: &mut [i64]) {
        let max = ctx
            .arch_preferences
            .iter()
            .map(|(_, w)| i64::from(*w))
            .max()
            .unwrap_or(0);
        if max <= 0 {
            scores.iter_mut().for_each(|s| *s = 0);
            return;
        }
        scores
            .iter_mut()
            .for_each(|s| *s = *s * MAX_NODE_SCORE / max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        framework::Code,
        image_platforms::{ContainerImagePlatforms, PodImagePlatforms},
        model::{node::NodeBuilder, pod::PodBuilder},
        testing::{Fixture, known},
    };

    fn fixture(images: Vec<(&str, ImagePlatforms)>) -> Fixture {
        let mut fixture = Fixture::new(PodBuilder::new("ns", "p").info());
        fixture.images = PodImagePlatforms {
            containers: images
                .into_iter()
                .enumerate()
                .map(|(i, (image, platforms))| ContainerImagePlatforms {
                    container: format!("c{i}"),
                    image: image.into(),
                    platforms,
                })
                .collect(),
        };
        fixture
    }

    #[test]
    fn filters_nodes_by_the_intersection_of_all_images() {
        let f = fixture(vec![
            ("multi", known(&["amd64", "arm64", "s390x"])),
            ("sidecar", known(&["amd64", "arm64"])),
        ]);
        let ctx = f.ctx();
        let mut state = CycleState::new();
        assert!(ImageArchitecture.pre_filter(&ctx, &mut state).is_success());
        let arm = NodeBuilder::new("arm", "arm64").info();
        let z = NodeBuilder::new("z", "s390x").info();
        assert!(ImageArchitecture.filter(&ctx, &state, &arm).is_success());
        let status = ImageArchitecture.filter(&ctx, &state, &z);
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            status.message(),
            "node(s) didn't match the pod's image architectures (images support amd64, arm64)"
        );
    }

    #[test]
    fn no_common_architecture_is_unresolvable_and_names_each_image() {
        let f = fixture(vec![
            ("quay.io/a:1", known(&["amd64"])),
            ("quay.io/b:1", known(&["arm64"])),
        ]);
        let status = ImageArchitecture.pre_filter(&f.ctx(), &mut CycleState::new());
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            status.message(),
            "the pod's images have no architecture in common: c0 (quay.io/a:1) supports amd64; c1 (quay.io/b:1) supports arm64"
        );
    }

    #[test]
    fn inspection_failure_waits_with_backoff_unless_a_fallback_is_set() {
        let mut f = fixture(vec![
            ("ok", known(&["amd64", "arm64"])),
            (
                "quay.io/private:1",
                ImagePlatforms::Failed("unauthorized at quay.io".into()),
            ),
        ]);
        let status = ImageArchitecture.pre_filter(&f.ctx(), &mut CycleState::new());
        assert_eq!(status.code, Code::Unschedulable);
        assert!(status.retry_with_backoff);
        assert_eq!(
            status.message(),
            "cannot read the platforms of the pod's images (image quay.io/private:1: unauthorized at quay.io); retrying with backoff"
        );

        f.fallback = Some("arm64".into());
        let ctx = f.ctx();
        let mut state = CycleState::new();
        assert!(ImageArchitecture.pre_filter(&ctx, &mut state).is_success());
        assert!(state.read::<CompatiblePlatforms>().unwrap().fallback_used);
        assert!(
            ImageArchitecture
                .filter(&ctx, &state, &NodeBuilder::new("a", "arm64").info())
                .is_success()
        );
        assert!(
            !ImageArchitecture
                .filter(&ctx, &state, &NodeBuilder::new("b", "amd64").info())
                .is_success()
        );
    }

    #[test]
    fn a_rules_architectures_replace_the_images_platforms() {
        // Images with no common build, and one that cannot be read: the rule decides.
        let mut f = fixture(vec![
            ("quay.io/a:1", known(&["amd64"])),
            ("quay.io/b:1", known(&["arm64"])),
            ("quay.io/c:1", ImagePlatforms::Failed("unauthorized".into())),
        ]);
        f.architecture_rule = Some(multiarch_policy::architecture_rules::ArchitectureDecision {
            config: "tiers".into(),
            rule: Some("db".into()),
            architectures: vec!["ppc64le".into(), "s390x".into()],
            errors: Vec::new(),
        });
        let ctx = f.ctx();
        let mut state = CycleState::new();
        assert!(ImageArchitecture.pre_filter(&ctx, &mut state).is_success());
        let found = state.read::<CompatiblePlatforms>().unwrap();
        assert_eq!(
            found.decided_by.as_deref(),
            Some("rule \"db\" of PodPlacementConfig tiers")
        );
        let z = NodeBuilder::new("z", "s390x").info();
        assert!(ImageArchitecture.filter(&ctx, &state, &z).is_success());
        let status = ImageArchitecture.filter(&ctx, &state, &NodeBuilder::new("a", "amd64").info());
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            status.message(),
            "node(s) didn't match the architectures of rule \"db\" of PodPlacementConfig tiers (ppc64le, s390x)"
        );
    }

    #[test]
    fn os_mismatch_filters_too() {
        let f = fixture(vec![(
            "windows-only",
            ImagePlatforms::Known(vec![Platform::new("windows", "amd64", None)].into()),
        )]);
        let ctx = f.ctx();
        let mut state = CycleState::new();
        assert!(ImageArchitecture.pre_filter(&ctx, &mut state).is_success());
        let linux = NodeBuilder::new("l", "amd64").info();
        let windows = NodeBuilder::new("w", "amd64")
            .label("kubernetes.io/os", "windows")
            .info();
        assert!(!ImageArchitecture.filter(&ctx, &state, &linux).is_success());
        assert!(
            ImageArchitecture
                .filter(&ctx, &state, &windows)
                .is_success()
        );
    }

    #[test]
    fn scores_by_weight_normalized_to_the_largest() {
        let mut f = fixture(vec![("multi", known(&["amd64", "arm64", "s390x"]))]);
        f.preferences = vec![("arm64".into(), 50), ("amd64".into(), 25)];
        let ctx = f.ctx();
        let state = CycleState::new();
        assert!(
            ImageArchitecture
                .pre_score(&ctx, &mut CycleState::new(), &[])
                .is_success()
        );
        let nodes = ["arm64", "amd64", "s390x"].map(|a| NodeBuilder::new(a, a).info());
        let mut scores: Vec<i64> = nodes
            .iter()
            .map(|n| ImageArchitecture.score(&ctx, &state, n))
            .collect();
        assert_eq!(scores, [50, 25, 0]);
        // The same through the table PreScore leaves (nodes with a platform bit).
        let mut scored = CycleState::new();
        assert!(
            ImageArchitecture
                .pre_score(&ctx, &mut scored, &[])
                .is_success()
        );
        let by_table: Vec<i64> = nodes
            .iter()
            .map(|n| ImageArchitecture.score(&ctx, &scored, n))
            .collect();
        assert_eq!(by_table, scores);
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        for state in [&state, &scored] {
            let mut all = vec![-7; nodes.len()];
            ImageArchitecture.score_all(&ctx, state, &refs, &mut all);
            assert_eq!(
                all, scores,
                "every node at once, with and without the table"
            );
        }
        ImageArchitecture.normalize(&ctx, &state, &mut scores);
        assert_eq!(scores, [100, 50, 0]);

        f.preferences.clear();
        assert_eq!(
            ImageArchitecture
                .pre_score(&f.ctx(), &mut CycleState::new(), &[])
                .code,
            Code::Skip
        );
    }
}
