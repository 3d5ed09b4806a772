//! Everything the scheduling loop learns about, through one channel: watch events,
//! binding results, resolved images, leadership.

use std::sync::Arc;

use multiarch_plugins::model::{node::NodeInfo, pod::PodInfo};
use multiarch_runtime::placement_config::PlacementConfigs;

/// What the loop must have listed before it is ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Nodes,
    Pods,
    /// The ClusterPodPlacementConfig and the PodPlacementConfigs.
    Configs,
}

#[derive(Debug)]
pub enum BindOutcome {
    Bound,
    /// 404 or 409: the pod is gone, replaced, gated or bound by someone else.
    Gone(String),
    /// Any other failure: retry with backoff.
    Failed(String),
}

#[derive(Debug)]
pub enum Inbox {
    /// A relist started (initial list or after `410 Gone`).
    RelistStarted(Kind),
    /// A relist finished; objects of `kind` not in `keep` were deleted meanwhile.
    RelistDone(Kind, Vec<String>),
    NodeUpsert(Box<NodeInfo>),
    NodeDelete(String),
    PodUpsert(Box<PodInfo>),
    PodDelete(String),
    /// The placement configuration changed (or was listed).
    PlacementConfigs(Arc<PlacementConfigs>),
    ImagesResolved(Vec<String>),
    Bind {
        uid: String,
        outcome: BindOutcome,
    },
    Leader(bool),
}
