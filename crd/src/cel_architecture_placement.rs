//! `celArchitecturePlacement`: a `PodPlacementConfig` plugin that decides a pod's
//! architectures by ordered CEL rules over the pod's metadata instead of by its images
//! (MTO's enhancement MTO-0005). Namespaced only: never part of the cluster config.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    Architecture,
    cel::pod_rule::{CONFIG_COST_LIMIT, check_rule},
};

/// Where the plugin sits in a PodPlacementConfig, for error messages.
const FIELD: &str = "spec.plugins.celArchitecturePlacement";

/// The most rules one config may hold (the design's limit).
pub const MAX_RULES: u32 = 1000;
/// The longest expression: 1,000 of them stay well inside an object's size limit.
pub const MAX_EXPRESSION_LENGTH: u32 = 1024;

/// What the rules of one namespace's PodPlacementConfigs may hold together: one config
/// at the schema's limits fits. Compiled, a rule costs about 20 times its expression's
/// bytes in every component that evaluates rules (the webhook, the scheduler, the gate
/// controller), so these, not the schema's per-config limits, bound that memory.
pub const NAMESPACE_RULE_BUDGET: RuleUsage = RuleUsage {
    rules: 1000,
    expression_bytes: 1024 * 1024,
};
/// What the rules of every PodPlacementConfig of the cluster may hold together (about
/// 40 MB compiled at most in each component).
pub const CLUSTER_RULE_BUDGET: RuleUsage = RuleUsage {
    rules: 10_000,
    expression_bytes: 2 * 1024 * 1024,
};

/// Rules and the bytes of their expressions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuleUsage {
    pub rules: usize,
    pub expression_bytes: usize,
}

impl RuleUsage {
    /// What a config's rules hold (enabled or not: they are stored either way).
    pub fn of(placement: Option<&CelArchitecturePlacement>) -> Self {
        placement.map_or_else(RuleUsage::default, |p| RuleUsage {
            rules: p.rules.len(),
            expression_bytes: p.rules.iter().map(|r| r.expression.len()).sum(),
        })
    }

    pub fn plus(self, other: RuleUsage) -> Self {
        RuleUsage {
            rules: self.rules.saturating_add(other.rules),
            expression_bytes: self.expression_bytes.saturating_add(other.expression_bytes),
        }
    }

    pub fn minus(self, other: RuleUsage) -> Self {
        RuleUsage {
            rules: self.rules.saturating_sub(other.rules),
            expression_bytes: self.expression_bytes.saturating_sub(other.expression_bytes),
        }
    }

    /// Whether both counts are within `budget`.
    pub fn within(self, budget: RuleUsage) -> bool {
        self.rules <= budget.rules && self.expression_bytes <= budget.expression_bytes
    }

    /// `N rules with M bytes of expressions`, for messages.
    pub fn describe(self) -> String {
        format!(
            "{} rules with {} bytes of expressions",
            self.rules, self.expression_bytes
        )
    }
}

/// Ordered rules over a pod's metadata: the first rule whose expression is true decides
/// the pod's architectures; when none is, `fallbackArchitectures` do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CelArchitecturePlacement {
    /// Whether the rules decide the architectures of the pods this config selects.
    pub enabled: bool,

    /// The architectures of a selected pod no rule matches: 1 to 4, each once.
    #[schemars(length(min = 1, max = 4))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub fallback_architectures: Vec<Architecture>,

    /// Evaluated in order; the first match decides. At most 1,000, names unique.
    #[serde(default)]
    #[schemars(length(max = 1000))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub rules: Vec<ArchitectureRule>,
}

/// One rule: when `expression` is true for a pod, its architectures are `architectures`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchitectureRule {
    /// Names the rule in events, annotations and `multiarch audit`: a DNS label.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,

    /// A CEL expression returning bool. `self` is the pod, of which only
    /// `self.metadata.name`, `.namespace`, `.labels` and `.annotations` may be read
    /// (labels and annotations are maps: `'app' in self.metadata.labels`,
    /// `self.metadata.labels['app'] == 'db'`). Checked when the config is written.
    #[schemars(length(min = 1, max = 1024))]
    pub expression: String,

    /// The architectures of the pods the rule matches: 1 to 4, each once.
    #[schemars(length(min = 1, max = 4))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub architectures: Vec<Architecture>,
}

impl CelArchitecturePlacement {
    /// The fallback architectures' names, in the order written.
    pub fn fallback_names(&self) -> Vec<String> {
        names(&self.fallback_architectures)
    }
}

impl ArchitectureRule {
    /// The rule's architectures' names, in the order written.
    pub fn architecture_names(&self) -> Vec<String> {
        names(&self.architectures)
    }
}

fn names(architectures: &[Architecture]) -> Vec<String> {
    architectures
        .iter()
        .map(|a| a.as_str().to_owned())
        .collect()
}

/// How many of `placement`'s expressions [`rule_errors`] checks: those `previous` did not
/// hold already.
pub fn expressions_to_check(
    placement: &CelArchitecturePlacement,
    previous: Option<&CelArchitecturePlacement>,
) -> usize {
    placement
        .rules
        .iter()
        .filter(|rule| {
            !previous.is_some_and(|p| p.rules.iter().any(|r| r.expression == rule.expression))
        })
        .count()
}

/// What the API server cannot check of the rules (CEL inside a CEL string): each
/// expression parses, reads only the pod's metadata, returns a bool and is estimated within
/// one evaluation's budget, and together they stay within [`CONFIG_COST_LIMIT`]. An
/// expression `previous` already held (an update that leaves it) is not checked again,
/// so a stored config never becomes unwritable. Errors as the API server words field
/// errors.
pub fn rule_errors(
    placement: &CelArchitecturePlacement,
    previous: Option<&CelArchitecturePlacement>,
) -> Vec<String> {
    let kept = |expression: &str| {
        previous.is_some_and(|p| p.rules.iter().any(|r| r.expression == expression))
    };
    let mut errors = Vec::new();
    let mut total: u64 = 0;
    for (i, rule) in placement.rules.iter().enumerate() {
        if kept(&rule.expression) {
            continue;
        }
        match check_rule(&rule.expression) {
            Ok(checked) => total = total.saturating_add(checked.cost),
            Err(error) => errors.push(format!(
                "{FIELD}.rules[{i}].expression: Invalid value: {:?}: rule {:?}: {error}",
                rule.expression, rule.name
            )),
        }
    }
    if total > CONFIG_COST_LIMIT {
        errors.push(format!(
            "{FIELD}.rules: Forbidden: the rules' estimated cost together, {total}, is over the limit of {CONFIG_COST_LIMIT} for one pod: use fewer or cheaper rules"
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(expressions: &[&str]) -> CelArchitecturePlacement {
        CelArchitecturePlacement {
            enabled: true,
            fallback_architectures: vec![Architecture::Amd64],
            rules: expressions
                .iter()
                .enumerate()
                .map(|(i, e)| ArchitectureRule {
                    name: format!("r{i}"),
                    expression: (*e).to_owned(),
                    architectures: vec![Architecture::Arm64],
                })
                .collect(),
        }
    }

    #[test]
    fn each_bad_rule_is_named_with_its_field_and_place() {
        let errors = rule_errors(
            &placement(&[
                "self.metadata.labels['app'] == 'db'",
                "self.spec.nodeName == 'x'",
                "self.metadata.name",
            ]),
            None,
        );
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with(
                "spec.plugins.celArchitecturePlacement.rules[1].expression: Invalid value: \"self.spec.nodeName == 'x'\": rule \"r1\": ERROR: <input>:1:6: self.spec"
            ),
            "{}",
            errors[0]
        );
        assert!(errors[1].contains("rules[2]") && errors[1].contains("must return a bool"));
    }

    #[test]
    fn a_thousand_cheap_rules_pass_and_unchanged_ones_are_not_checked_again() {
        let expressions: Vec<String> = (0..1000)
            .map(|i| format!("self.metadata.labels['n'] == '{i}'"))
            .collect();
        let refs: Vec<&str> = expressions.iter().map(String::as_str).collect();
        assert_eq!(rule_errors(&placement(&refs), None), Vec::<String>::new());
        // A rule stored before a stricter check stays writable while unchanged.
        let stored = placement(&["self.status.phase == 'x'"]);
        assert_eq!(rule_errors(&stored, Some(&stored)), Vec::<String>::new());
        assert_eq!(rule_errors(&stored, None).len(), 1);
    }

    #[test]
    fn patterns_are_constants_of_a_bounded_program_and_their_compilation_is_charged() {
        let errors = rule_errors(
            &placement(&[
                "self.metadata.name.matches(self.metadata.labels['p'])",
                "self.metadata.name.matches('(a{1000}){1000}')",
                "self.metadata.name.matches('^db-[0-9]+$')",
            ]),
            None,
        );
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].contains("rules[0]") && errors[0].contains("must be a string constant"),
            "{}",
            errors[0]
        );
        assert!(
            errors[1].contains("rules[1]") && errors[1].contains("compiles to more than"),
            "{}",
            errors[1]
        );
        let plain = check_rule("self.metadata.name == 'db'").unwrap().cost;
        let with_pattern = check_rule("self.metadata.name.matches('^db$')")
            .unwrap()
            .cost;
        assert!(
            with_pattern >= 5 * crate::cel::patterns::COMPILE_COST_PER_BYTE + plain,
            "{with_pattern} vs {plain}"
        );
    }

    #[test]
    fn rules_too_costly_together_are_refused() {
        // Each within one evaluation's budget, too many together for one pod.
        let costly = "self.metadata.annotations['a'].matches('^(x|y)+$') && self.metadata.annotations['b'].matches('^(x|y)+$')";
        let one = check_rule(costly).map(|c| c.cost).unwrap_or_default();
        assert!(
            one > 0 && one <= crate::cel::pod_rule::RULE_COST_LIMIT,
            "{one}"
        );
        let many = vec![costly; usize::try_from(CONFIG_COST_LIMIT / one + 1).unwrap()];
        let errors = rule_errors(&placement(&many), None);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("Forbidden: the rules' estimated cost together"));
    }
}
