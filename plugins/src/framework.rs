//! The plugin contract: one trait per extension point and a `Status` whose code says what
//! happens next (kube-scheduler's framework, reduced to what this scheduler runs).

use std::{
    any::{Any, TypeId},
    fmt,
    sync::Arc,
};

use crate::{
    events::{ClusterChange, EventKind, QueueingHint},
    image_platforms::PodImagePlatforms,
    model::{cluster::ClusterState, node::NodeInfo, nominated::NominatedPods, pod::PodInfo},
};

/// The highest score a plugin gives a node after normalization.
pub const MAX_NODE_SCORE: i64 = 100;

/// What the result of a plugin means for the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    Success,
    /// The node does not fit now; it might after a cluster change (or preemption).
    Unschedulable,
    /// The node can never fit this pod as it is (affinity, taints, architecture):
    /// preemption cannot help.
    UnschedulableAndUnresolvable,
    /// The plugin could not decide (internal error); the pod is retried with backoff.
    Error,
    /// PreFilter/PreScore: this plugin has nothing to check for this pod.
    Skip,
}

/// A reason users read in `FailedScheduling` messages, counted per node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    Static(&'static str),
    /// Computed once per cycle (e.g. naming the image architectures) and shared by nodes.
    Shared(Arc<str>),
}

impl Reason {
    pub fn as_str(&self) -> &str {
        match self {
            Reason::Static(s) => s,
            Reason::Shared(s) => s,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&'static str> for Reason {
    fn from(s: &'static str) -> Self {
        Reason::Static(s)
    }
}

impl From<String> for Reason {
    fn from(s: String) -> Self {
        Reason::Shared(s.into())
    }
}

/// A status's reasons: none (a success) or, almost always when rejecting, one; both kept
/// inline, so a filter that rejects a node allocates nothing and a success costs nothing
/// to drop (filters return a status per node).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Reasons {
    #[default]
    None,
    One(Reason),
    Many(Vec<Reason>),
}

impl Reasons {
    pub const fn new() -> Self {
        Reasons::None
    }

    pub fn push(&mut self, reason: Reason) {
        *self = match std::mem::take(self) {
            Reasons::None => Reasons::One(reason),
            Reasons::One(first) => Reasons::Many(vec![first, reason]),
            Reasons::Many(mut all) => {
                all.push(reason);
                Reasons::Many(all)
            }
        };
    }

    pub fn as_slice(&self) -> &[Reason] {
        match self {
            Reasons::None => &[],
            Reasons::One(reason) => std::slice::from_ref(reason),
            Reasons::Many(all) => all,
        }
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Reason> {
        self.as_slice().iter()
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        matches!(self, Reasons::None)
    }
}

impl FromIterator<Reason> for Reasons {
    fn from_iter<I: IntoIterator<Item = Reason>>(iter: I) -> Self {
        let mut reasons = Reasons::None;
        for reason in iter {
            reasons.push(reason);
        }
        reasons
    }
}

impl<'a> IntoIterator for &'a Reasons {
    type Item = &'a Reason;
    type IntoIter = std::slice::Iter<'a, Reason>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub reasons: Reasons,
    /// The plugin that returned it (set by the framework).
    pub plugin: &'static str,
    /// Retry with backoff rather than waiting for a cluster event (image inspection failed:
    /// the fix is in the registry, which sends no event).
    pub retry_with_backoff: bool,
}

impl Status {
    pub const fn success() -> Self {
        Status {
            code: Code::Success,
            reasons: Reasons::None,
            plugin: "",
            retry_with_backoff: false,
        }
    }

    pub const fn skip() -> Self {
        Status {
            code: Code::Skip,
            reasons: Reasons::None,
            plugin: "",
            retry_with_backoff: false,
        }
    }

    pub fn new(code: Code, reason: impl Into<Reason>) -> Self {
        Status {
            code,
            reasons: Reasons::One(reason.into()),
            plugin: "",
            retry_with_backoff: false,
        }
    }

    pub fn unschedulable(reason: impl Into<Reason>) -> Self {
        Status::new(Code::Unschedulable, reason)
    }

    pub fn unresolvable(reason: impl Into<Reason>) -> Self {
        Status::new(Code::UnschedulableAndUnresolvable, reason)
    }

    pub fn error(reason: impl Into<Reason>) -> Self {
        Status::new(Code::Error, reason)
    }

    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    pub fn is_rejection(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }

    pub fn with_plugin(mut self, plugin: &'static str) -> Self {
        self.plugin = plugin;
        self
    }

    /// The reasons joined as kube-scheduler prints a single status.
    pub fn message(&self) -> String {
        self.reasons
            .iter()
            .map(Reason::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A value plugins keep in the [`CycleState`]: cloned when preemption tries a node
/// without some of its pods, or with the pods nominated to it.
pub trait StateData: Any + Send + Sync {
    fn clone_data(&self) -> Box<dyn StateData>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_data(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Per-pod, per-cycle data written in PreFilter/PreScore and read in Filter/Score.
/// A handful of entries, read once per node: a vector beats a hash map here.
#[derive(Default)]
pub struct CycleState {
    values: Vec<(TypeId, Box<dyn StateData>)>,
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        CycleState {
            values: self
                .values
                .iter()
                .map(|(id, value)| (*id, (**value).clone_data()))
                .collect(),
        }
    }
}

impl CycleState {
    pub fn new() -> Self {
        CycleState::default()
    }

    pub fn write<T: Any + Clone + Send + Sync>(&mut self, value: T) {
        let id = TypeId::of::<T>();
        match self.values.iter_mut().find(|(t, _)| *t == id) {
            Some(slot) => slot.1 = Box::new(value),
            None => self.values.push((id, Box::new(value))),
        }
    }

    pub fn read<T: Any + Send + Sync>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.values
            .iter()
            .find(|(t, _)| *t == id)
            .and_then(|(_, v)| (**v).as_any().downcast_ref())
    }

    pub fn read_mut<T: Any + Send + Sync>(&mut self) -> Option<&mut T> {
        let id = TypeId::of::<T>();
        self.values
            .iter_mut()
            .find(|(t, _)| *t == id)
            .and_then(|(_, v)| (**v).as_any_mut().downcast_mut())
    }
}

/// What a plugin may look at during one cycle. Everything is already in memory.
pub struct CycleContext<'a> {
    pub pod: &'a PodInfo,
    pub cluster: &'a ClusterState,
    /// The platforms of the pod's images, resolved before the cycle started.
    pub images: &'a PodImagePlatforms,
    /// Architecture preferences that apply to this pod (already merged from the
    /// ClusterPodPlacementConfig and matching PodPlacementConfigs), `(arch, weight)`.
    pub arch_preferences: &'a [(String, i32)],
    /// `fallbackArchitecture`, used when the images cannot be inspected.
    pub fallback_architecture: Option<&'a str>,
    /// The architectures a `celArchitecturePlacement` rule decided for the pod: they
    /// replace the images' platforms.
    pub architecture_rule: Option<&'a multiarch_policy::architecture_rules::ArchitectureDecision>,
    /// Pods a preemption made room for, counted on their node by pods of lower or equal
    /// priority.
    pub nominated: &'a NominatedPods,
    /// What an amd64 node whose x86-64 level nothing says runs
    /// (`binaryInspection.unknownNodeLevel`).
    pub unknown_node_level: multiarch_crd::UnknownNodeLevel,
}

pub trait Plugin: Send + Sync {
    fn name(&self) -> &'static str;

    /// The kinds of cluster change after which a pod this plugin rejected may fit.
    fn events(&self) -> &'static [EventKind];

    /// Whether `change` may make `pod`, which this plugin rejected, fit (kube-scheduler's
    /// queueing hint). The default retries on every registered change.
    fn queueing_hint(
        &self,
        _pod: &PodInfo,
        _change: &ClusterChange<'_>,
        _cluster: &ClusterState,
    ) -> QueueingHint {
        QueueingHint::Queue
    }
}

pub trait PreFilterPlugin: Plugin {
    /// Runs once per cycle. `Skip` turns this plugin's filter off for the pod; a rejection
    /// ends the cycle for every node.
    fn pre_filter(&self, ctx: &CycleContext<'_>, state: &mut CycleState) -> Status;

    /// After a successful PreFilter: the only nodes that can fit, when the plugin knows
    /// them already (kube-scheduler's `PreFilterResult`). The others are not filtered and
    /// count as "didn't satisfy plugin(s)".
    fn eligible_nodes(&self, _ctx: &CycleContext<'_>, _state: &CycleState) -> Option<Vec<String>> {
        None
    }

    /// After a successful PreFilter: the positions (sorted, in the cluster's node list)
    /// of every node that can pass this plugin's Filter, when an index knows them without
    /// a walk. Unlike [`eligible_nodes`](Self::eligible_nodes) it changes no outcome: the
    /// nodes left out are nodes Filter would reject, the number of feasible nodes to find
    /// still counts every node, and a pod that fits nowhere is diagnosed over every node.
    fn candidate_nodes(
        &self,
        _ctx: &CycleContext<'_>,
        _state: &CycleState,
    ) -> Option<Arc<[usize]>> {
        None
    }

    /// Preemption: `pod` (on `node`) is considered gone, or (nominated) present; plugins
    /// whose PreFilter state counts pods elsewhere in the cluster update it.
    fn remove_pod(
        &self,
        _ctx: &CycleContext<'_>,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _node: &NodeInfo,
    ) {
    }

    fn add_pod(
        &self,
        _ctx: &CycleContext<'_>,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _node: &NodeInfo,
    ) {
    }
}

pub trait FilterPlugin: Plugin {
    /// Runs per node, in parallel; must not block.
    fn filter(&self, ctx: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> Status;
}

pub trait ScorePlugin: Plugin {
    /// Runs once per cycle over the feasible nodes. `Skip` turns scoring off for the pod.
    fn pre_score(
        &self,
        _ctx: &CycleContext<'_>,
        _state: &mut CycleState,
        _nodes: &[&NodeInfo],
    ) -> Status {
        Status::success()
    }

    /// A raw score for one node.
    fn score(&self, ctx: &CycleContext<'_>, state: &CycleState, node: &NodeInfo) -> i64;

    /// The raw scores of `nodes`, into `out` (as long). The cycle calls this once per
    /// plugin, so the per-node call is static (and inlined) rather than dynamic; a plugin
    /// may also do its per-cycle lookups once here.
    fn score_all(
        &self,
        ctx: &CycleContext<'_>,
        state: &CycleState,
        nodes: &[&NodeInfo],
        out: &mut [i64],
    ) {
        score_each(nodes, out, |node| self.score(ctx, state, node));
    }

    /// Brings the raw scores of all feasible nodes to 0..=100. The default assumes they
    /// already are.
    fn normalize(&self, _ctx: &CycleContext<'_>, _state: &CycleState, _scores: &mut [i64]) {}
}

/// Fills `out` with `score` of each of `nodes`, in order: the loop of
/// [`ScorePlugin::score_all`], for plugins that read their cycle state first.
pub fn score_each(nodes: &[&NodeInfo], out: &mut [i64], mut score: impl FnMut(&NodeInfo) -> i64) {
    for (value, node) in out.iter_mut().zip(nodes) {
        *value = score(node);
    }
}

/// kube-scheduler's `DefaultNormalizeScore`: scale to 0..=100 by the maximum, optionally
/// reversed (fewer is better).
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        *s = MAX_NODE_SCORE * *s / max;
        if reverse {
            *s = MAX_NODE_SCORE - *s;
        }
    }
}
