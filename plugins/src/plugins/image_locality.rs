//! `ImageLocality`: prefers nodes that already have the pod's images, by their size and
//! scaled down by how many nodes have them (so that a popular image does not pull every
//! pod onto the few nodes that pulled it first). kube-scheduler 1.36's plugin, formula
//! for formula: the pod's init containers, containers and `image` volumes, looked up by
//! name (a name without a tag gets `:latest`) in what nodes report in `status.images`.

use crate::{
    events::EventKind,
    framework::{CycleContext, CycleState, MAX_NODE_SCORE, Plugin, ScorePlugin, score_each},
    model::node::NodeInfo,
};

pub const NAME: &str = "ImageLocality";

const MB: i64 = 1024 * 1024;
/// Below this, an image on the node scores nothing (kube-scheduler's `minThreshold`).
const MIN_THRESHOLD: i64 = 23 * MB;
/// Per container, the size past which more bytes score nothing more.
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

pub struct ImageLocality;

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Scores only: it never rejects a pod.
    fn events(&self) -> &'static [EventKind] {
        &[]
    }
}

/// kube-scheduler's `normalizedImageName`: the CRI's name of an image reference.
fn normalized(name: &str) -> std::borrow::Cow<'_, str> {
    let colon = name.rfind(':');
    let slash = name.rfind('/');
    if colon.is_none_or(|c| slash.is_some_and(|s| c <= s)) {
        format!("{name}:latest").into()
    } else {
        name.into()
    }
}

/// One of the pod's images that some node has: its id in the cluster's image table and
/// its score on a node that has it (size scaled by its spread).
#[derive(Clone, Copy, Debug)]
struct PresentImage {
    id: u32,
    scaled: i64,
}

/// kube-scheduler's `calculatePriority`.
fn priority(sum: i64, containers: usize) -> i64 {
    let max = MAX_CONTAINER_THRESHOLD.saturating_mul(i64::try_from(containers).unwrap_or(i64::MAX));
    if max <= MIN_THRESHOLD {
        return 0;
    }
    let sum = sum.clamp(MIN_THRESHOLD, max);
    MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max - MIN_THRESHOLD)
}

impl ImageLocality {
    /// The pod's images some node reports, in the pod's order (a name repeated in the pod
    /// counts each time, as in kube-scheduler).
    fn present(ctx: &CycleContext<'_>) -> Vec<PresentImage> {
        let states = ctx.cluster.image_states();
        if states.is_empty() {
            return Vec::new();
        }
        #[allow(clippy::cast_precision_loss)] // node counts are far below 2^52
        let total = ctx.cluster.nodes().len().max(1) as f64;
        ctx.pod
            .images
            .iter()
            .map(|c| c.image.as_str())
            .chain(ctx.pod.extras().image_volumes.iter().map(String::as_str))
            .filter_map(|image| states.summary(&normalized(image)))
            .map(|summary| {
                #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
                // as kube-scheduler: int64(float64(size) * spread)
                let scaled =
                    (summary.size_bytes as f64 * (f64::from(summary.nodes) / total)) as i64;
                PresentImage {
                    id: summary.id,
                    scaled,
                }
            })
            .collect()
    }

    fn node_score(present: &[PresentImage], containers: usize, node: &NodeInfo) -> i64 {
        let ids = node.images.ids();
        let sum = present
            .iter()
            .filter(|image| ids.binary_search(&image.id).is_ok())
            .map(|image| image.scaled)
            .fold(0i64, i64::saturating_add);
        priority(sum, containers)
    }
}

impl ScorePlugin for ImageLocality {
    fn score(&self, ctx: &CycleContext<'_>, _: &CycleState, node: &NodeInfo) -> i64 {
        Self::node_score(&Self::present(ctx), ctx.pod.images.len(), node)
    }

    /// The pod's images are looked up once per cycle; none on any node scores 0
    /// everywhere without reading a node.
    fn score_all(
        &self,
        ctx: &CycleContext<'_>,
        _: &CycleState,
        nodes: &[&NodeInfo],
        out: &mut [i64],
    ) {
        let present = Self::present(ctx);
        if present.is_empty() {
            out.iter_mut().for_each(|score| *score = 0);
            return;
        }
        let containers = ctx.pod.images.len();
        score_each(nodes, out, |node| {
            Self::node_score(&present, containers, node)
        });
    }
}

#[cfg(test)]
mod tests;
