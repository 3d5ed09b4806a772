//! The PodPlacementConfig checks of the operator's validating webhook (`crd_webhooks`
//! runs them cheapest first): its priority unique in its namespace, the namespace's and
//! the cluster's rule budgets, the pace of rule checks in its namespace, then the CEL of
//! its rules (parsed, metadata-only, bool, within cost): a write refused by its size or
//! its pace never has its rules compiled.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, ResourceExt, api::ListParams};
use multiarch_crd::{
    PodPlacementConfig, PodPlacementConfigSpec,
    cel_architecture_placement::{
        CLUSTER_RULE_BUDGET, NAMESPACE_RULE_BUDGET, RuleUsage, expressions_to_check, rule_errors,
    },
};
use multiarch_runtime::placement_config::CONFIG_PAGE;
use serde::Deserialize;

use crate::rule_check_pace::{self, RuleCheckPace};

/// A PodPlacementConfig as a review carries it: its name and spec (the API server has
/// checked it against the schema).
#[derive(Clone, Debug, Deserialize)]
pub struct WrittenConfig {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: PodPlacementConfigSpec,
}

impl WrittenConfig {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    fn rule_usage(&self) -> RuleUsage {
        RuleUsage::of(self.spec.plugins.cel_architecture_placement.as_ref())
    }
}

/// What the operator knows of another config of the namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigSummary {
    pub name: String,
    pub priority: u8,
    pub rule_usage: RuleUsage,
}

impl ConfigSummary {
    pub fn of(config: &PodPlacementConfig) -> Self {
        ConfigSummary {
            name: config.name_any(),
            priority: config.spec.priority,
            rule_usage: RuleUsage::of(config.spec.plugins.cel_architecture_placement.as_ref()),
        }
    }
}

/// Priorities are unique per namespace (they order the configs that match one pod). An
/// update is checked only when it changes the priority.
pub fn pod_config_priority(
    config: &WrittenConfig,
    old: Option<&WrittenConfig>,
    namespace: &str,
    others: &[ConfigSummary],
) -> Result<(), String> {
    let wanted = config.spec.priority;
    if old.is_some_and(|o| o.spec.priority == wanted) {
        return Ok(());
    }
    match others
        .iter()
        .find(|c| c.name != config.name() && c.priority == wanted)
    {
        Some(taken) => Err(format!(
            "priority {wanted} is already used by PodPlacementConfig {:?} in namespace {namespace:?}: give each PodPlacementConfig of a namespace its own priority",
            taken.name,
        )),
        None => Ok(()),
    }
}

/// Whether the namespace may have this write's rule expressions checked now (see
/// `rule_check_pace`).
pub fn pod_config_pace(
    config: &WrittenConfig,
    old: Option<&WrittenConfig>,
    namespace: &str,
    pace: &RuleCheckPace,
    now: std::time::Instant,
) -> Result<(), String> {
    let placement = |c: &WrittenConfig| c.spec.plugins.cel_architecture_placement.clone();
    let Some(rules) = placement(config) else {
        return Ok(());
    };
    let expressions = expressions_to_check(&rules, old.and_then(placement).as_ref());
    pace.take(namespace, expressions, now).map_err(|wait| {
        let when = wait.map_or_else(
            || "split the change into smaller writes".to_owned(),
            |wait| format!("try again in {} s", wait.as_secs().max(1)),
        );
        format!(
            "PodPlacementConfig {:?} changes {expressions} rule expressions, more than namespace {namespace:?} may have checked now (a burst of {} and {} a minute): {when}",
            config.name(),
            rule_check_pace::BURST,
            (rule_check_pace::PER_SECOND * 60.0).round()
        )
    })
}

/// The `celArchitecturePlacement` rules as written: what the CRD's schema cannot check
/// (see `multiarch_crd::cel_architecture_placement::rule_errors`).
pub fn pod_config_rules(config: &WrittenConfig, old: Option<&WrittenConfig>) -> Result<(), String> {
    let placement = |c: &WrittenConfig| c.spec.plugins.cel_architecture_placement.clone();
    let Some(rules) = placement(config) else {
        return Ok(());
    };
    let errors = rule_errors(&rules, old.and_then(placement).as_ref());
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "PodPlacementConfig {:?} is invalid: {}",
            config.name(),
            errors.join("; ")
        ))
    }
}

/// The rule budgets: the namespace's configs (`others`, this one left out) and the
/// cluster's (`cluster`, likewise) may hold [`NAMESPACE_RULE_BUDGET`] and
/// [`CLUSTER_RULE_BUDGET`] with this one. A config whose rules do not grow is never
/// refused, so that a stored config stays writable.
pub fn pod_config_budget(
    config: &WrittenConfig,
    old: Option<&WrittenConfig>,
    namespace: &str,
    others: &[ConfigSummary],
    cluster: RuleUsage,
) -> Result<(), String> {
    let usage = config.rule_usage();
    let before = old.map(WrittenConfig::rule_usage).unwrap_or_default();
    if usage.rules <= before.rules && usage.expression_bytes <= before.expression_bytes {
        return Ok(());
    }
    let in_namespace = others
        .iter()
        .filter(|c| c.name != config.name())
        .fold(usage, |sum, c| sum.plus(c.rule_usage));
    if !in_namespace.within(NAMESPACE_RULE_BUDGET) {
        return Err(format!(
            "PodPlacementConfig {:?} would bring namespace {namespace:?}'s PodPlacementConfigs to {}, more than the {} a namespace may have: use fewer or shorter rules",
            config.name(),
            in_namespace.describe(),
            NAMESPACE_RULE_BUDGET.describe(),
        ));
    }
    let in_cluster = cluster.plus(usage);
    if !in_cluster.within(CLUSTER_RULE_BUDGET) {
        return Err(format!(
            "PodPlacementConfig {:?} would bring the cluster's PodPlacementConfigs to {}, more than the {} the cluster may have: ask the cluster's admin",
            config.name(),
            in_cluster.describe(),
            CLUSTER_RULE_BUDGET.describe(),
        ));
    }
    Ok(())
}

/// The namespace's configs, summarized a page at a time (a page holds at most
/// `CONFIG_PAGE` configs, each dropped once summarized).
pub async fn namespace_summaries(
    client: &kube::Client,
    listings: &tokio::sync::Semaphore,
    namespace: &str,
) -> Result<Vec<ConfigSummary>, kube::Error> {
    let _turn = listings.acquire().await;
    let api = Api::<PodPlacementConfig>::namespaced(client.clone(), namespace);
    let mut summaries = Vec::new();
    let mut params = ListParams::default().limit(CONFIG_PAGE);
    loop {
        let page = api.list(&params).await?;
        summaries.extend(page.items.iter().map(ConfigSummary::of));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(summaries),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn ppc(name: &str, priority: u8) -> ConfigSummary {
        ConfigSummary {
            name: name.into(),
            priority,
            rule_usage: RuleUsage::default(),
        }
    }

    fn written(value: Value) -> WrittenConfig {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn priorities_are_unique_per_namespace() {
        let others = [ppc("a", 10), ppc("b", 20)];
        let new = written(
            json!({"metadata": {"name": "c", "namespace": "shop"}, "spec": {"priority": 10, "plugins": {}}}),
        );
        assert_eq!(
            pod_config_priority(&new, None, "shop", &others).unwrap_err(),
            "priority 10 is already used by PodPlacementConfig \"a\" in namespace \"shop\": give each PodPlacementConfig of a namespace its own priority"
        );
        let fresh =
            written(json!({"metadata": {"name": "c"}, "spec": {"priority": 30, "plugins": {}}}));
        assert!(pod_config_priority(&fresh, None, "shop", &others).is_ok());
        // An update that keeps its priority, or the config itself, is no conflict.
        let a_again =
            written(json!({"metadata": {"name": "a"}, "spec": {"priority": 10, "plugins": {}}}));
        assert!(pod_config_priority(&a_again, None, "shop", &others).is_ok());
        let unchanged =
            written(json!({"metadata": {"name": "d"}, "spec": {"priority": 20, "plugins": {}}}));
        assert!(pod_config_priority(&unchanged, Some(&unchanged), "shop", &others).is_ok());
        // MTO's default: two configs left at priority 0 conflict.
        let zero = written(json!({"metadata": {"name": "z"}, "spec": {"plugins": {}}}));
        assert!(pod_config_priority(&zero, None, "shop", &[ppc("y", 0)]).is_err());
    }

    /// A config of `rules` rules of `bytes` bytes each.
    fn with_rules(name: &str, rules: usize, bytes: usize) -> WrittenConfig {
        let expression = format!("'{}' == ''", "x".repeat(bytes - 8));
        written(
            json!({"metadata": {"name": name}, "spec": {"priority": 1, "plugins": {
            "celArchitecturePlacement": {"enabled": true, "fallbackArchitectures": ["amd64"],
                "rules": (0..rules).map(|i| json!({"name": format!("r{i}"), "expression": expression,
                    "architectures": ["arm64"]})).collect::<Vec<_>>()}}}}),
        )
    }

    #[test]
    fn the_namespace_and_the_cluster_rule_budgets_are_kept() {
        let full = with_rules("full", 1000, 1024);
        assert_eq!(full.rule_usage().expression_bytes, 1024 * 1000);
        let others = |configs: &[&WrittenConfig]| -> Vec<ConfigSummary> {
            configs
                .iter()
                .map(|c| ConfigSummary {
                    name: c.name().to_owned(),
                    priority: c.spec.priority,
                    rule_usage: c.rule_usage(),
                })
                .collect()
        };
        let none = RuleUsage::default();
        // One config at the schema's limits fits a namespace; a second does not.
        assert!(pod_config_budget(&full, None, "shop", &[], none).is_ok());
        let second = with_rules("second", 10, 100);
        assert_eq!(
            pod_config_budget(&second, None, "shop", &others(&[&full]), none).unwrap_err(),
            "PodPlacementConfig \"second\" would bring namespace \"shop\"'s PodPlacementConfigs to 1010 rules with 1025000 bytes of expressions, more than the 1000 rules with 1048576 bytes of expressions a namespace may have: use fewer or shorter rules"
        );
        // Rewriting the full one itself is not counting it twice.
        assert!(pod_config_budget(&full, Some(&second), "shop", &others(&[&full]), none).is_ok());
        // An update that does not grow its rules is never refused (a config stored
        // before the budgets stays writable).
        assert!(pod_config_budget(&second, Some(&second), "shop", &others(&[&full]), none).is_ok());
        // The cluster's budget.
        let cluster = RuleUsage {
            rules: 9_999,
            expression_bytes: 100,
        };
        let refused = pod_config_budget(&second, None, "bank", &[], cluster).unwrap_err();
        assert!(
            refused.contains("would bring the cluster's PodPlacementConfigs to 10009 rules")
                && refused.contains("more than the 10000 rules with 2097152 bytes"),
            "{refused}"
        );
    }

    #[test]
    fn a_namespace_rewriting_its_rules_in_a_loop_is_paced() {
        let pace = RuleCheckPace::default();
        let now = std::time::Instant::now();
        let full = |generation: usize| {
            let mut config = with_rules("full", 1000, 64);
            if let Some(p) = config.spec.plugins.cel_architecture_placement.as_mut() {
                for (i, rule) in p.rules.iter_mut().enumerate() {
                    rule.expression = format!("self.metadata.name == '{}'", i + generation * 1000);
                }
            }
            config
        };
        assert!(pod_config_pace(&full(0), None, "shop", &pace, now).is_ok());
        assert!(pod_config_pace(&full(1), Some(&full(0)), "shop", &pace, now).is_ok());
        let refused = pod_config_pace(&full(2), Some(&full(1)), "shop", &pace, now).unwrap_err();
        assert_eq!(
            refused,
            "PodPlacementConfig \"full\" changes 1000 rule expressions, more than namespace \"shop\" may have checked now (a burst of 2000 and 1000 a minute): try again in 60 s"
        );
        // An update that leaves its expressions as they are costs nothing.
        assert!(pod_config_pace(&full(1), Some(&full(1)), "shop", &pace, now).is_ok());
    }
}
