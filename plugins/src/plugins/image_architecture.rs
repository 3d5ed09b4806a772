//! `ImageArchitecture`: a node must be a platform that every image of the pod has a build
//! for; among those, preferred architectures score higher.

use std::sync::Arc;

use crate::{
    events::{ClusterChange, EventKind, QueueingHint},
    framework::{
        CycleContext, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, PreFilterPlugin, Reason,
        ScorePlugin, Status, score_each,
    },
    image_platforms::{ImagePlatforms, PodImagePlatforms},
    model::{cluster::ClusterState, node::NodeInfo, pod::PodInfo},
};
use multiarch_crd::UnknownNodeLevel;
use multiarch_policy::platform::{
    Platform, compatible_platforms, describe, lowest_levels, node_is_compatible, platform_bit,
    platform_bits, variant_level, variant_need, variants_are_levels,
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
    variants: VariantCheck,
    /// Set when an amd64 node whose level nothing says is taken as x86-64-v1
    /// (`unknownNodeLevel: Baseline`) and the images need a level above it: why such a
    /// node fails. Whether it is set decides; its text only says why.
    unknown_level_reason: Option<Reason>,
}

/// What decides a node that names a variant, when the pod's builds name some.
#[derive(Clone, Debug, Default)]
struct VariantCheck {
    /// Per platform of `platforms` that names a variant (x86-64-v3, arm/v7): why a node
    /// of its architecture whose own variant is too low fails, naming the image that
    /// needs it. Empty in the common case, where the bit test alone decides.
    reasons: Vec<(Platform, Reason)>,
    /// [`lowest_levels`] of `platforms`, computed and read only when `reasons` is not
    /// empty: a node with a level is checked by number, without reading its `platform`.
    lowest_levels: [u32; 16],
}

impl VariantCheck {
    fn of(platforms: &[Platform], images: &PodImagePlatforms) -> Self {
        let reasons = variant_reasons(platforms, images);
        if reasons.is_empty() {
            return VariantCheck::default();
        }
        VariantCheck {
            reasons,
            lowest_levels: lowest_levels(platforms),
        }
    }
}

impl CompatiblePlatforms {
    /// Whether the node is of a platform the pod's images have (any node when the pod
    /// has no image to restrict it).
    pub fn admits(&self, node: &NodeInfo) -> bool {
        if self.platforms.is_empty() {
            return true;
        }
        if self.judged_as_baseline(node) {
            let baseline = Platform::new(&node.platform.os, "amd64", Some("v1"));
            return node_is_compatible(&self.platforms, &baseline);
        }
        match (self.bits, node.platform_bit) {
            (Some(bits), Some(bit)) => {
                bits & (1 << bit) != 0
                    && (self.variants.reasons.is_empty()
                        || node
                            .variant_level
                            .meets(self.variants.lowest_levels[usize::from(bit)])
                            .unwrap_or_else(|| node_is_compatible(&self.platforms, &node.platform)))
            }
            _ => node_is_compatible(&self.platforms, &node.platform),
        }
    }

    /// Whether `node` is an amd64 node whose level nothing says, judged as x86-64-v1.
    fn judged_as_baseline(&self, node: &NodeInfo) -> bool {
        self.unknown_level_reason.is_some()
            && node.platform.variant.is_none()
            && node.platform.architecture == "amd64"
    }

    /// Why the node cannot take the pod: its architecture's variant (level) when the
    /// images have builds for the architecture, the architectures otherwise.
    fn refusal(&self, node: &NodeInfo) -> &Reason {
        if self.judged_as_baseline(node)
            && let Some(reason) = &self.unknown_level_reason
        {
            return reason;
        }
        self.variants
            .reasons
            .iter()
            .find(|(p, _)| p.os == node.platform.os && p.architecture == node.platform.architecture)
            .map_or(&self.reason, |(_, reason)| reason)
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
            variants: VariantCheck::default(),
            unknown_level_reason: None,
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
                variants: VariantCheck::default(),
                unknown_level_reason: None,
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
            variants: VariantCheck::default(),
            unknown_level_reason: None,
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
                    "{} ({}) supports {}{}",
                    c.container,
                    c.image,
                    describe_or_none(p),
                    c.left_out
                        .as_deref()
                        .map_or(String::new(), |left_out| format!(" ({left_out})"))
                )),
                ImagePlatforms::Anywhere | ImagePlatforms::Failed(_) => None,
            })
            .collect();
        return Err(Status::unresolvable(format!(
            "the pod's images have no architecture in common: {}",
            per_container.join("; ")
        )));
    }
    let variants = VariantCheck::of(&platforms, ctx.images);
    let unknown_level_reason = unknown_level_reason(ctx.unknown_node_level, &variants.reasons);
    Ok(CompatiblePlatforms {
        bits: Some(platform_bits(&platforms)),
        reason: with_left_out(mismatch_reason(&platforms, false), ctx.images),
        variants,
        unknown_level_reason,
        platforms,
        fallback_used: false,
        decided_by: None,
    })
}

/// For each compatible platform that names a variant, the refusal of a node below it:
/// `node(s) are below x86-64-v3 needed by image quay.io/app:1` (the first image whose
/// least demanding build of the architecture asks that much).
fn variant_reasons(platforms: &[Platform], images: &PodImagePlatforms) -> Vec<(Platform, Reason)> {
    platforms
        .iter()
        .filter_map(|platform| {
            let need = variant_need(platform)?;
            let level = platform.variant.as_deref().and_then(variant_level);
            let imposes = |builds: &[Platform]| {
                let mut same = builds
                    .iter()
                    .filter(|b| b.os == platform.os && b.architecture == platform.architecture);
                builds.contains(platform)
                    && same.all(|b| {
                        b.variant.is_some() && b.variant.as_deref().and_then(variant_level) >= level
                    })
            };
            let image = images
                .containers
                .iter()
                .find(|c| matches!(&c.platforms, ImagePlatforms::Known(builds) if imposes(builds)))
                .map_or("", |c| c.image.as_str());
            let text = if variants_are_levels(&platform.architecture) {
                format!("node(s) are below {need} needed by image {image}")
            } else {
                format!("node(s) are not {need} as needed by image {image}")
            };
            Some((platform.clone(), Reason::Shared(text.into())))
        })
        .collect()
}

/// Why an amd64 node whose level nothing says is refused when such nodes are taken as
/// x86-64-v1: the level refusal of the amd64 build, said of such a node. `None` when such
/// nodes run every level, or no amd64 build needs a level above the baseline.
fn unknown_level_reason(
    unknown: UnknownNodeLevel,
    variant_reasons: &[(Platform, Reason)],
) -> Option<Reason> {
    if unknown != UnknownNodeLevel::Baseline {
        return None;
    }
    let (_, below) = variant_reasons.iter().find(|(p, _)| {
        p.architecture == "amd64"
            && p.variant
                .as_deref()
                .and_then(variant_level)
                .is_some_and(|level| level > 1)
    })?;
    // The text only: a refusal worded otherwise is said whole, never dropped.
    let why = below.as_str();
    let needed = why.strip_prefix("node(s) are below ").unwrap_or(why);
    Some(Reason::Shared(
        format!(
            "node(s) do not say their x86-64 level, taken as x86-64-v1 (unknownNodeLevel: Baseline), below {needed}"
        )
        .into(),
    ))
}

/// The mismatch `reason`, naming the builds left out as mislabelled: the nodes of their
/// architecture are refused for it.
fn with_left_out(reason: Reason, images: &PodImagePlatforms) -> Reason {
    let left_out: Vec<&str> = images
        .containers
        .iter()
        .filter_map(|c| c.left_out.as_deref())
        .collect();
    if left_out.is_empty() {
        return reason;
    }
    Reason::Shared(format!("{} ({})", reason.as_str(), left_out.join("; ")).into())
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
            Status::unresolvable(found.refusal(node).clone())
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
mod tests;
