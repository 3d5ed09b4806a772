//! Label selectors (pods, namespaces) and node selectors (node affinity), with the exact
//! matching rules of `k8s.io/apimachinery` and the node-affinity helpers.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

pub type Labels = BTreeMap<String, String>;

/// What a selector reads of an object's labels: the value of one. The API's label maps
/// answer it, and so does the scheduler's node model, which keeps the node's own
/// hostname label beside a label set shared with the nodes of its pool.
pub trait LabelLookup {
    fn label_value(&self, key: &str) -> Option<&str>;
}

impl LabelLookup for Labels {
    fn label_value(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl<T: LabelLookup + ?Sized> LabelLookup for std::sync::Arc<T> {
    fn label_value(&self, key: &str) -> Option<&str> {
        (**self).label_value(key)
    }
}

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    /// Node selectors only: the label is an integer greater than the value.
    Gt(String, i64),
    /// Node selectors only: the label is an integer less than the value.
    Lt(String, i64),
    /// A requirement the API would reject (unknown operator, bad values): matches nothing,
    /// as apimachinery treats a selector that fails to parse.
    Invalid,
}

impl Requirement {
    pub fn key(&self) -> Option<&str> {
        match self {
            Requirement::In(k, _)
            | Requirement::NotIn(k, _)
            | Requirement::Exists(k)
            | Requirement::DoesNotExist(k)
            | Requirement::Gt(k, _)
            | Requirement::Lt(k, _) => Some(k),
            Requirement::Invalid => None,
        }
    }

    pub fn matches<L: LabelLookup + ?Sized>(&self, labels: &L) -> bool {
        match self {
            Requirement::In(k, values) => labels
                .label_value(k)
                .is_some_and(|v| values.iter().any(|w| w == v)),
            Requirement::NotIn(k, values) => labels
                .label_value(k)
                .is_none_or(|v| !values.iter().any(|w| w == v)),
            Requirement::Exists(k) => labels.label_value(k).is_some(),
            Requirement::DoesNotExist(k) => labels.label_value(k).is_none(),
            Requirement::Gt(k, n) => labels
                .label_value(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Requirement::Lt(k, n) => labels
                .label_value(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
            Requirement::Invalid => false,
        }
    }

    fn from_parts(key: &str, operator: &str, values: Option<&Vec<String>>, node: bool) -> Self {
        let key = key.to_owned();
        let values = values.cloned().unwrap_or_default();
        let single_int = || match values.as_slice() {
            [v] => v.parse::<i64>().ok(),
            _ => None,
        };
        match operator {
            "In" if !values.is_empty() => Requirement::In(key, values),
            "NotIn" if !values.is_empty() => Requirement::NotIn(key, values),
            "Exists" if values.is_empty() => Requirement::Exists(key),
            "DoesNotExist" if values.is_empty() => Requirement::DoesNotExist(key),
            "Gt" if node => single_int().map_or(Requirement::Invalid, |n| Requirement::Gt(key, n)),
            "Lt" if node => single_int().map_or(Requirement::Invalid, |n| Requirement::Lt(key, n)),
            _ => Requirement::Invalid,
        }
    }
}

/// A `metav1.LabelSelector`. The empty selector matches everything; `None` where the API
/// says "nil selects nothing" is handled by callers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// The first `In` requirement (a `matchLabels` entry is one): the key and its values,
    /// which a label index can answer.
    pub fn first_in(&self) -> Option<(&String, &Vec<String>)> {
        self.requirements.iter().find_map(|r| match r {
            Requirement::In(key, values) => Some((key, values)),
            _ => None,
        })
    }

    pub fn matches<L: LabelLookup + ?Sized>(&self, labels: &L) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Selects exactly the given labels (`matchLabels`).
    pub fn from_labels(labels: &Labels) -> Self {
        LabelSelector {
            requirements: labels
                .iter()
                .map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()]))
                .collect(),
        }
    }
}

impl From<&meta::LabelSelector> for LabelSelector {
    fn from(selector: &meta::LabelSelector) -> Self {
        let mut requirements: Vec<Requirement> = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()]))
            .collect();
        requirements.extend(
            selector
                .match_expressions
                .iter()
                .flatten()
                .map(|e| Requirement::from_parts(&e.key, &e.operator, e.values.as_ref(), false)),
        );
        LabelSelector { requirements }
    }
}

/// One `nodeSelectorTerm`: its expressions over labels and its fields (only
/// `metadata.name` exists) are ANDed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSelectorTerm {
    pub expressions: Vec<Requirement>,
    pub fields: Vec<Requirement>,
}

impl NodeSelectorTerm {
    /// A term with no requirement matches no node (apimachinery's rule).
    pub fn matches<L: LabelLookup + ?Sized>(&self, labels: &L, node_name: &str) -> bool {
        if self.expressions.is_empty() && self.fields.is_empty() {
            return false;
        }
        self.expressions.iter().all(|r| r.matches(labels))
            && self.fields.iter().all(|r| match r {
                Requirement::In(k, values) if k == "metadata.name" => {
                    values.iter().any(|v| v == node_name)
                }
                Requirement::NotIn(k, values) if k == "metadata.name" => {
                    !values.iter().any(|v| v == node_name)
                }
                _ => false,
            })
    }
}

impl From<&core::NodeSelectorTerm> for NodeSelectorTerm {
    fn from(term: &core::NodeSelectorTerm) -> Self {
        let convert = |list: &Option<Vec<core::NodeSelectorRequirement>>| {
            list.iter()
                .flatten()
                .map(|e| Requirement::from_parts(&e.key, &e.operator, e.values.as_ref(), true))
                .collect()
        };
        NodeSelectorTerm {
            expressions: convert(&term.match_expressions),
            fields: convert(&term.match_fields),
        }
    }
}

/// Required node affinity: the terms are ORed; no term matches no node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSelector {
    pub terms: Vec<NodeSelectorTerm>,
}

impl NodeSelector {
    pub fn matches<L: LabelLookup + ?Sized>(&self, labels: &L, node_name: &str) -> bool {
        self.terms.iter().any(|t| t.matches(labels, node_name))
    }
}

impl From<&core::NodeSelector> for NodeSelector {
    fn from(selector: &core::NodeSelector) -> Self {
        NodeSelector {
            terms: selector
                .node_selector_terms
                .iter()
                .map(NodeSelectorTerm::from)
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> core::NodeSelectorRequirement {
        core::NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    /// kube's node-affinity operator table (apimachinery selector tests).
    #[test]
    fn node_selector_operators() {
        let node = labels(&[("zone", "a"), ("gen", "5"), ("arch", "arm64")]);
        let cases = [
            (req("zone", "In", &["a", "b"]), true),
            (req("zone", "In", &["b"]), false),
            (req("missing", "In", &["a"]), false),
            (req("zone", "NotIn", &["b"]), true),
            (req("zone", "NotIn", &["a"]), false),
            (req("missing", "NotIn", &["a"]), true),
            (req("zone", "Exists", &[]), true),
            (req("missing", "Exists", &[]), false),
            (req("zone", "DoesNotExist", &[]), false),
            (req("missing", "DoesNotExist", &[]), true),
            (req("gen", "Gt", &["4"]), true),
            (req("gen", "Gt", &["5"]), false),
            (req("gen", "Lt", &["6"]), true),
            (req("gen", "Lt", &["5"]), false),
            (req("zone", "Gt", &["1"]), false), // not an integer
            (req("gen", "Gt", &["x"]), false),  // invalid value
            (req("gen", "Gt", &["1", "2"]), false),
            (req("zone", "In", &[]), false),        // In needs values
            (req("zone", "Exists", &["a"]), false), // Exists takes none
            (req("zone", "Matches", &["a"]), false),
        ];
        for (requirement, want) in cases {
            let term = core::NodeSelectorTerm {
                match_expressions: Some(vec![requirement.clone()]),
                match_fields: None,
            };
            assert_eq!(
                NodeSelectorTerm::from(&term).matches(&node, "n1"),
                want,
                "{requirement:?}"
            );
        }
    }

    #[test]
    fn match_fields_select_by_node_name() {
        let term = core::NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![req("metadata.name", "In", &["n1", "n2"])]),
        };
        let term = NodeSelectorTerm::from(&term);
        assert!(term.matches(&Labels::new(), "n1"));
        assert!(!term.matches(&Labels::new(), "n3"));
        let other_field = core::NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![req("metadata.uid", "In", &["n1"])]),
        };
        assert!(!NodeSelectorTerm::from(&other_field).matches(&Labels::new(), "n1"));
    }

    #[test]
    fn empty_terms_match_nothing_and_terms_are_ored() {
        let node = labels(&[("zone", "a")]);
        assert!(!NodeSelectorTerm::default().matches(&node, "n"));
        assert!(!NodeSelector::default().matches(&node, "n"));
        let selector = core::NodeSelector {
            node_selector_terms: vec![
                core::NodeSelectorTerm {
                    match_expressions: Some(vec![req("zone", "In", &["b"])]),
                    match_fields: None,
                },
                core::NodeSelectorTerm {
                    match_expressions: Some(vec![req("zone", "In", &["a"])]),
                    match_fields: None,
                },
            ],
        };
        assert!(NodeSelector::from(&selector).matches(&node, "n"));
    }

    #[test]
    fn label_selector_ands_labels_and_expressions() {
        let selector = meta::LabelSelector {
            match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
            match_expressions: Some(vec![meta::LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["db".into()]),
            }]),
        };
        let selector = LabelSelector::from(&selector);
        assert!(selector.matches(&labels(&[("app", "web")])));
        assert!(selector.matches(&labels(&[("app", "web"), ("tier", "fe")])));
        assert!(!selector.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!selector.matches(&labels(&[("app", "api")])));
        assert!(LabelSelector::default().matches(&labels(&[])));
        // Gt is not a label-selector operator.
        let gt = meta::LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![meta::LabelSelectorRequirement {
                key: "n".into(),
                operator: "Gt".into(),
                values: Some(vec!["1".into()]),
            }]),
        };
        assert!(!LabelSelector::from(&gt).matches(&labels(&[("n", "5")])));
    }
}
