//! `NodeAffinity`: `nodeSelector` and required node affinity filter; preferred terms score.

use crate::{
    events::{ClusterChange, EventKind, QueueingHint, node_now_passes},
    framework::{
        CycleContext, CycleState, FilterPlugin, Plugin, PreFilterPlugin, ScorePlugin, Status,
        default_normalize,
    },
    model::{cluster::ClusterState, node::NodeInfo, pod::PodInfo},
};
use multiarch_policy::selectors::Requirement;

pub const NAME: &str = "NodeAffinity";
pub const REASON: &str = "node(s) didn't match Pod's node affinity/selector";

pub struct NodeAffinity;

/// Whether the pod has a `nodeSelector` or required node affinity: without either,
/// [`required_matches`] holds on every node.
pub fn selects_nodes(pod: &PodInfo) -> bool {
    !pod.node_selector.is_empty() || pod.required_node_affinity.is_some()
}

/// Whether the node satisfies the pod's `nodeSelector` and required node affinity (also
/// used by topology spread's `nodeAffinityPolicy: Honor`).
pub fn required_matches(pod: &PodInfo, node: &NodeInfo) -> bool {
    pod.node_selector
        .iter()
        .all(|(k, v)| node.label(k) == Some(v.as_str()))
        && pod
            .required_node_affinity
            .as_ref()
            .is_none_or(|s| s.matches(node, &node.name))
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [EventKind] {
        &[EventKind::NodeAdd, EventKind::NodeUpdate]
    }

    /// Retry when a node appears or its labels come to match.
    fn queueing_hint(
        &self,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        _: &ClusterState,
    ) -> QueueingHint {
        node_now_passes(change, |node| required_matches(pod, node))
    }
}

/// The conflict message when every term names nodes by `metadata.name` and their
/// intersections are all empty.
pub const CONFLICT_REASON: &str = "pod affinity terms conflict";

/// kube-scheduler's NodeAffinity PreFilter: terms that all name nodes by
/// `metadata.name In` narrow the candidates to those nodes.
fn named_nodes(pod: &PodInfo) -> Option<Vec<String>> {
    let terms = &pod.required_node_affinity.as_ref()?.terms;
    let mut union: Option<Vec<String>> = None;
    for term in terms {
        let mut names: Option<Vec<String>> = None;
        for field in &term.fields {
            if let Requirement::In(key, values) = field
                && key == "metadata.name"
            {
                names = Some(match names {
                    None => values.clone(),
                    Some(have) => have.into_iter().filter(|n| values.contains(n)).collect(),
                });
            }
        }
        // A term without a name requirement lets every node through (terms are ORed).
        let names = names?;
        let all = union.get_or_insert_with(Vec::new);
        for name in names {
            if !all.contains(&name) {
                all.push(name);
            }
        }
    }
    union
}

impl PreFilterPlugin for NodeAffinity {
    /// Nothing required: the filter has nothing to do (kube-scheduler skips it too, and
    /// a cycle then does not read each node's labels).
    fn pre_filter(&self, ctx: &CycleContext<'_>, _: &mut CycleState) -> Status {
        if !selects_nodes(ctx.pod) {
            return Status::skip();
        }
        match named_nodes(ctx.pod) {
            Some(names) if names.is_empty() => Status::unresolvable(CONFLICT_REASON),
            _ => Status::success(),
        }
    }

    fn eligible_nodes(&self, ctx: &CycleContext<'_>, _: &CycleState) -> Option<Vec<String>> {
        named_nodes(ctx.pod)
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, ctx: &CycleContext<'_>, _: &CycleState, node: &NodeInfo) -> Status {
        if required_matches(ctx.pod, node) {
            Status::success()
        } else {
            Status::unresolvable(REASON)
        }
    }
}

impl ScorePlugin for NodeAffinity {
    fn pre_score(&self, ctx: &CycleContext<'_>, _: &mut CycleState, _: &[&NodeInfo]) -> Status {
        if ctx.pod.preferred_node_affinity.is_empty() {
            Status::skip()
        } else {
            Status::success()
        }
    }

    fn score(&self, ctx: &CycleContext<'_>, _: &CycleState, node: &NodeInfo) -> i64 {
        ctx.pod
            .preferred_node_affinity
            .iter()
            .filter(|(_, term)| term.matches(node, &node.name))
            .map(|(weight, _)| i64::from(*weight))
            .sum()
    }

    fn normalize(&self, _: &CycleContext<'_>, _: &CycleState, scores: &mut [i64]) {
        default_normalize(scores, false);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1 as core;

    use super::*;
    use crate::{
        framework::Code,
        model::{node::NodeBuilder, pod::PodBuilder},
        testing::Fixture,
    };

    fn term(key: &str, op: &str, values: &[&str]) -> core::NodeSelectorTerm {
        core::NodeSelectorTerm {
            match_expressions: Some(vec![core::NodeSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
            }]),
            match_fields: None,
        }
    }

    fn required(terms: Vec<core::NodeSelectorTerm>) -> core::Affinity {
        core::Affinity {
            node_affinity: Some(core::NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(core::NodeSelector {
                    node_selector_terms: terms,
                }),
                preferred_during_scheduling_ignored_during_execution: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn node_selector_and_required_affinity_are_anded() {
        let node = NodeBuilder::new("n", "amd64")
            .label("zone", "a")
            .label("disk", "ssd")
            .info();
        let cases = [
            (PodBuilder::new("ns", "p"), true),
            (PodBuilder::new("ns", "p").node_selector("zone", "a"), true),
            (PodBuilder::new("ns", "p").node_selector("zone", "b"), false),
            (
                PodBuilder::new("ns", "p").affinity(required(vec![term("disk", "In", &["ssd"])])),
                true,
            ),
            (
                PodBuilder::new("ns", "p")
                    .node_selector("zone", "a")
                    .affinity(required(vec![term("disk", "NotIn", &["ssd"])])),
                false,
            ),
            (
                // Terms are ORed.
                PodBuilder::new("ns", "p").affinity(required(vec![
                    term("disk", "In", &["hdd"]),
                    term("zone", "Exists", &[]),
                ])),
                true,
            ),
            (PodBuilder::new("ns", "p").affinity(required(vec![])), false),
        ];
        for (i, (pod, want)) in cases.into_iter().enumerate() {
            let fixture = Fixture::new(pod.info());
            let status = NodeAffinity.filter(&fixture.ctx(), &CycleState::new(), &node);
            assert_eq!(status.is_success(), want, "case {i}");
        }
    }

    #[test]
    fn pre_filter_skips_the_filter_when_nothing_is_required() {
        let pre_filter = |pod: PodBuilder| {
            let fixture = Fixture::new(pod.info());
            NodeAffinity
                .pre_filter(&fixture.ctx(), &mut CycleState::new())
                .code
        };
        assert_eq!(pre_filter(PodBuilder::new("ns", "p")), Code::Skip);
        assert_eq!(
            pre_filter(PodBuilder::new("ns", "p").node_selector("zone", "a")),
            Code::Success
        );
        assert_eq!(
            pre_filter(PodBuilder::new("ns", "p").affinity(required(vec![term(
                "disk",
                "In",
                &["ssd"]
            )]))),
            Code::Success
        );
    }

    #[test]
    fn preferred_terms_add_their_weights() {
        let affinity = core::Affinity {
            node_affinity: Some(core::NodeAffinity {
                required_during_scheduling_ignored_during_execution: None,
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    core::PreferredSchedulingTerm {
                        weight: 20,
                        preference: term("zone", "In", &["a"]),
                    },
                    core::PreferredSchedulingTerm {
                        weight: 60,
                        preference: term("disk", "In", &["ssd"]),
                    },
                ]),
            }),
            ..Default::default()
        };
        let fixture = Fixture::new(PodBuilder::new("ns", "p").affinity(affinity).info());
        let ctx = fixture.ctx();
        let state = CycleState::new();
        let nodes = [
            NodeBuilder::new("both", "amd64")
                .label("zone", "a")
                .label("disk", "ssd")
                .info(),
            NodeBuilder::new("zone", "amd64").label("zone", "a").info(),
            NodeBuilder::new("none", "amd64").info(),
        ];
        let mut scores: Vec<i64> = nodes
            .iter()
            .map(|n| NodeAffinity.score(&ctx, &state, n))
            .collect();
        assert_eq!(scores, [80, 20, 0]);
        NodeAffinity.normalize(&ctx, &state, &mut scores);
        assert_eq!(scores, [100, 25, 0]);
    }
}
