//! The webhooks the operator serves (every replica, not only the leader): the
//! ClusterPodPlacementConfig CRD's conversion between `v1alpha1` and `v1beta1`, and the
//! admission rules CEL and ValidatingAdmissionPolicies cannot express because they look at
//! other objects or go beyond CEL's cost limits: no ClusterPodPlacementConfig deletion
//! while PodPlacementConfigs exist, its namespaceSelector exactly as the API server checks
//! a label selector, PodPlacementConfig priorities unique per namespace, the CEL of
//! their `celArchitecturePlacement` rules (parsed, metadata-only, bool, within cost), and
//! the rule budgets of a namespace and of the cluster. Reviews are read within a byte
//! budget (`request_body`) and parsed without a tree of the whole review.

use std::sync::Arc;

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, ResourceExt, api::ListParams, core::PartialObjectMeta};
use multiarch_crd::{
    PodPlacementConfig, PodPlacementConfigSpec,
    cel_architecture_placement::{
        CLUSTER_RULE_BUDGET, NAMESPACE_RULE_BUDGET, RuleUsage, expressions_to_check, rule_errors,
    },
    conversion, label_selector,
    names::DEFAULT_SCHEDULER_NAME,
};
use multiarch_runtime::{
    json_shape::Prices,
    ops_server::health_routes,
    placement_config::CONFIG_PAGE,
    request_body::{RequestBodies, within_budget},
    serving_cert::ReloadingCert,
};
use prometheus_client::registry::Registry;
use serde::Deserialize;
use serde_json::{Value, json};
use tracing::{debug, warn};

use crate::{
    install::{VALIDATE_CPPC_PATH, VALIDATE_PPC_PATH},
    rename,
    rule_check_pace::{self, RuleCheckPace},
    rule_usage::ClusterRuleUsage,
    scheduler_name_check,
};

pub use multiarch_runtime::request_body::MAX_REVIEW_BYTES;

/// Namespaces whose PodPlacementConfigs are listed at once (each page up to
/// `CONFIG_PAGE` configs): reviews beyond it wait their turn.
const NAMESPACE_LISTINGS: usize = 2;

#[derive(Clone)]
pub struct AdmissionState {
    pub client: kube::Client,
    /// The operator's namespace (its scheduler's Deployment is there).
    pub namespace: String,
    pub serving: Arc<ReloadingCert>,
    pub registry: Arc<Registry>,
    /// Every PodPlacementConfig's rule usage, followed.
    pub rule_usage: ClusterRuleUsage,
    pub listings: Arc<tokio::sync::Semaphore>,
    /// Rule expressions checked per namespace, paced.
    pub rule_checks: Arc<RuleCheckPace>,
}

impl AdmissionState {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        serving: Arc<ReloadingCert>,
        registry: Arc<Registry>,
        rule_usage: ClusterRuleUsage,
    ) -> Self {
        AdmissionState {
            client,
            namespace: namespace.to_owned(),
            serving,
            registry,
            rule_usage,
            listings: Arc::new(tokio::sync::Semaphore::new(NAMESPACE_LISTINGS)),
            rule_checks: Arc::default(),
        }
    }
}

pub fn router(state: AdmissionState) -> Router {
    let bodies = Arc::new(RequestBodies::for_reviews(Prices::ANY));
    Router::new()
        .route(multiarch_crd::names::CONVERSION_PATH, post(convert))
        .route(VALIDATE_CPPC_PATH, post(validate_cluster_config))
        .route(VALIDATE_PPC_PATH, post(validate_pod_config))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .layer(axum::middleware::from_fn_with_state(bodies, within_budget))
        .with_state(state.clone())
        .merge(health_routes(state.registry.clone(), move || {
            if !state.serving.is_set() {
                Some("no serving certificate yet (the leader writes it)")
            } else if !state.rule_usage.synced() {
                Some("the PodPlacementConfigs' rule usage has not been listed yet")
            } else {
                None
            }
        }))
}

fn json_response(value: &Value) -> Response {
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        value.to_string(),
    )
        .into_response()
}

fn bad_request(error: impl std::fmt::Display) -> Response {
    (StatusCode::BAD_REQUEST, error.to_string()).into_response()
}

async fn convert(body: Bytes) -> Response {
    match serde_json::from_slice::<Value>(&body) {
        Ok(review) => json_response(&conversion::review(&review)),
        Err(e) => bad_request(format!("not a ConversionReview: {e}")),
    }
}

/// The AdmissionReview answering the request of `uid` (`Err`: the message of a denial).
pub fn admission_response(uid: &str, verdict: Result<(), String>) -> Value {
    let mut response = json!({"uid": uid, "allowed": verdict.is_ok()});
    if let Err(message) = verdict {
        response["status"] = json!({"code": 403, "reason": "Forbidden", "message": message});
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// A ClusterPodPlacementConfig is not deleted while PodPlacementConfigs exist (MTO's
/// rule): they would lose the defaults they complete.
/// `configs` are the first few found (`namespace/name`), `more` how many others there
/// are (`None`: some, uncounted).
pub fn cluster_config_delete(configs: &[String], more: Option<u64>) -> Result<(), String> {
    if configs.is_empty() {
        return Ok(());
    }
    let more = match more {
        Some(0) => String::new(),
        Some(n) => format!(" and {n} more"),
        None => " and more".to_owned(),
    };
    Err(format!(
        "cannot delete the ClusterPodPlacementConfig while PodPlacementConfigs exist: {}{more}; delete them first",
        configs.join(", "),
    ))
}

/// Configs a deletion's refusal names (the rest are counted).
const NAMED_IN_REFUSAL: u32 = 10;

/// What the CRD's CEL cannot check of a ClusterPodPlacementConfig as written: its
/// `namespaceSelector` as the API server checks the webhook configuration it is copied
/// into (which would otherwise refuse it, long after the user wrote it).
pub fn cluster_config_spec(object: &Value) -> Result<(), String> {
    let selector = &object["spec"]["namespaceSelector"];
    if selector.is_null() {
        return Ok(());
    }
    let errors = match serde_json::from_value(selector.clone()) {
        Ok(selector) => label_selector::selector_errors(&selector, "spec.namespaceSelector"),
        Err(e) => vec![format!("spec.namespaceSelector: Invalid value: {e}")],
    };
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the namespaceSelector would be refused in the webhook configuration: {}",
            errors.join("; ")
        ))
    }
}

/// A PodPlacementConfig as a review carries it: its name and spec (the API server has
/// checked it against the schema).
#[derive(Clone, Debug, Deserialize)]
pub struct WrittenConfig {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: PodPlacementConfigSpec,
}

impl WrittenConfig {
    fn name(&self) -> &str {
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

/// An AdmissionReview's request, with its objects read as `T`.
#[derive(Deserialize)]
struct Review<T> {
    request: Option<ReviewRequest<T>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewRequest<T> {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    operation: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default = "none")]
    object: Option<T>,
    #[serde(default = "none")]
    old_object: Option<T>,
}

fn none<T>() -> Option<T> {
    None
}

fn request<T: serde::de::DeserializeOwned>(
    body: &Bytes,
) -> Result<ReviewRequest<T>, Box<Response>> {
    let review: Review<T> = serde_json::from_slice(body)
        .map_err(|e| Box::new(bad_request(format!("not an AdmissionReview: {e}"))))?;
    review
        .request
        .ok_or_else(|| Box::new(bad_request("the AdmissionReview has no request")))
}

async fn validate_cluster_config(State(state): State<AdmissionState>, body: Bytes) -> Response {
    let request = match request::<Value>(&body) {
        Ok(r) => r,
        Err(refused) => return *refused,
    };
    if request.operation != "DELETE" {
        let object = request.object.unwrap_or_default();
        let mut verdict = cluster_config_spec(&object);
        if verdict.is_ok() {
            verdict = scheduler_name(&state, &object, request.old_object.as_ref()).await;
        }
        return json_response(&admission_response(&request.uid, verdict));
    }
    // Names only, one page: the rest are counted, never read.
    let verdict = match Api::<PartialObjectMeta<PodPlacementConfig>>::all(state.client.clone())
        .list(&ListParams::default().limit(NAMED_IN_REFUSAL))
        .await
    {
        Ok(list) => {
            let names: Vec<String> = list
                .items
                .iter()
                .map(|c| format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()))
                .collect();
            let more = match list.metadata.remaining_item_count {
                Some(count) => Some(u64::try_from(count).unwrap_or(0)),
                None if list
                    .metadata
                    .continue_
                    .as_deref()
                    .is_some_and(|c| !c.is_empty()) =>
                {
                    None
                }
                None => Some(0),
            };
            cluster_config_delete(&names, more)
        }
        // The finalizer waits for them anyway: let the deletion through.
        Err(e) => {
            warn!(error = %e, "cannot list PodPlacementConfigs; the deletion waits in the finalizer instead");
            Ok(())
        }
    };
    debug!(?verdict, "ClusterPodPlacementConfig deletion reviewed");
    json_response(&admission_response(&request.uid, verdict))
}

/// The scheduler name a ClusterPodPlacementConfig as written gives multiarch's scheduler.
fn placed_name(object: &Value) -> String {
    object["spec"]["placement"]["schedulerName"]
        .as_str()
        .unwrap_or(DEFAULT_SCHEDULER_NAME)
        .to_owned()
}

/// A new or changed `schedulerName` must not be another scheduler's (see
/// `scheduler_name_check`); an unchanged one is never refused.
async fn scheduler_name(
    state: &AdmissionState,
    object: &Value,
    old: Option<&Value>,
) -> Result<(), String> {
    let name = placed_name(object);
    if old.is_some_and(|old| placed_name(old) == name) {
        return Ok(());
    }
    let ours = match rename::deployed_in(&state.client, &state.namespace).await {
        Ok(deployed) => deployed
            .map(|d| std::iter::once(d.name).chain(d.previous).collect())
            .unwrap_or_default(),
        Err(e) => {
            return Err(format!(
                "cannot read multiarch's scheduler Deployment to check schedulerName {name:?} ({e}): try again"
            ));
        }
    };
    let ours: Vec<String> = ours;
    scheduler_name_check::check(&state.client, &name, &ours)
        .await
        .map_err(|taken| taken.to_string())
}

/// The namespace's configs, summarized a page at a time (a page holds at most
/// `CONFIG_PAGE` configs, each dropped once summarized).
async fn namespace_summaries(
    state: &AdmissionState,
    namespace: &str,
) -> Result<Vec<ConfigSummary>, kube::Error> {
    let _turn = state.listings.acquire().await;
    let api = Api::<PodPlacementConfig>::namespaced(state.client.clone(), namespace);
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

async fn validate_pod_config(State(state): State<AdmissionState>, body: Bytes) -> Response {
    let request = match request::<WrittenConfig>(&body) {
        Ok(r) => r,
        Err(refused) => return *refused,
    };
    let Some(config) = &request.object else {
        return json_response(&admission_response(&request.uid, Ok(())));
    };
    let namespace = request
        .namespace
        .clone()
        .or_else(|| config.metadata.namespace.clone())
        .unwrap_or_default();
    let old = request.old_object.as_ref();
    // The cheap checks first: a write refused by its priority, its size or its pace never
    // has its rules compiled.
    let verdict = match namespace_summaries(&state, &namespace).await {
        Ok(others) => pod_config_priority(config, old, &namespace, &others)
            .and_then(|()| {
                let cluster = state.rule_usage.total_without(&namespace, config.name());
                pod_config_budget(config, old, &namespace, &others, cluster)
            })
            .and_then(|()| {
                let now = std::time::Instant::now();
                pod_config_pace(config, old, &namespace, &state.rule_checks, now)
            })
            .and_then(|()| pod_config_rules(config, old)),
        Err(e) => Err(format!(
            "cannot check that the priority is unique in namespace {namespace:?} ({e}): try again"
        )),
    };
    json_response(&admission_response(&request.uid, verdict))
}

/// Ready once a serving certificate is in place.
#[cfg(test)]
mod tests {
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

    #[test]
    fn a_namespace_selector_the_webhook_configuration_would_refuse_is_refused() {
        let bad = json!({"spec": {"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": []}]}}});
        assert_eq!(
            cluster_config_spec(&bad).unwrap_err(),
            "the namespaceSelector would be refused in the webhook configuration: spec.namespaceSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
        );
        let good = json!({"spec": {"namespaceSelector": {"matchLabels": {"example.com/team": "payments"}}}});
        assert!(cluster_config_spec(&good).is_ok());
        assert!(cluster_config_spec(&json!({"spec": {}})).is_ok());
    }

    #[test]
    fn a_denial_is_a_403_with_the_message() {
        let denied = admission_response(
            "u-7",
            cluster_config_delete(&["shop/prefs".into()], Some(0)),
        );
        assert_eq!(denied["response"]["allowed"], false);
        assert_eq!(denied["response"]["uid"], "u-7");
        assert_eq!(denied["response"]["status"]["code"], 403);
        assert_eq!(
            denied["response"]["status"]["message"],
            "cannot delete the ClusterPodPlacementConfig while PodPlacementConfigs exist: shop/prefs; delete them first"
        );
        assert_eq!(
            admission_response("u-7", cluster_config_delete(&[], Some(0)))["response"]["allowed"],
            true
        );
        assert!(
            cluster_config_delete(&["a/b".into()], Some(4))
                .unwrap_err()
                .contains("a/b and 4 more;")
        );
    }
}
