//! The webhooks the operator serves (every replica, not only the leader): the
//! ClusterPodPlacementConfig CRD's conversion between `v1alpha1` and `v1beta1`, and the
//! admission rules CEL and ValidatingAdmissionPolicies cannot express because they look at
//! other objects or go beyond CEL's cost limits: no ClusterPodPlacementConfig deletion
//! while PodPlacementConfigs exist, its namespaceSelector exactly as the API server checks
//! a label selector, a scheduler name that is not another scheduler's, and the
//! PodPlacementConfig checks of `pod_config_admission`. Reviews are read within a byte
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
use kube::{Api, ResourceExt, api::ListParams, core::PartialObjectMeta};
use multiarch_crd::{
    PodPlacementConfig, conversion, label_selector, names::DEFAULT_SCHEDULER_NAME,
};
use multiarch_runtime::{
    json_shape::Prices,
    ops_server::health_routes,
    request_body::{RequestBodies, within_budget},
    serving_cert::ReloadingCert,
};
use prometheus_client::registry::Registry;
use serde::Deserialize;
use serde_json::{Value, json};
use tracing::{debug, warn};

use crate::{
    install::{VALIDATE_CPPC_PATH, VALIDATE_PPC_PATH},
    observe::scheduler_names,
    pod_config_admission::{
        WrittenConfig, namespace_summaries, pod_config_budget, pod_config_pace,
        pod_config_priority, pod_config_rules,
    },
    rule_check_pace::RuleCheckPace,
    rule_usage::ClusterRuleUsage,
    scheduler_name_check,
};

use multiarch_runtime::request_body::MAX_REVIEW_BYTES;

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

/// What the objects of a configuration's review cost parsed, by the key that holds them:
/// the many small ones a PodPlacementConfig may hold, as what they become in the
/// costlier of the two parses the routes make (a `serde_json::Value`, whose non-empty
/// object is a B-tree node of about 640 bytes; the typed `ArchitectureRule` and
/// `ManagedFieldsEntry` are smaller), with room. An UPDATE of a config of the
/// namespace's maximal rules, carried twice with the managed fields server-side apply
/// records, is then about 16 MiB, within one address's 32 MiB (priced as the largest
/// struct, it was 41 MiB and refused: found by the e2e hostile-tenant case). Any other
/// object costs `json_shape::OBJECT_BYTES`.
const CONFIG_REVIEW_PRICES: Prices = Prices {
    by_key: &[
        ("rules", 1024),
        ("managedFields", 1024),
        ("ownerReferences", 1024),
    ],
    subtrees: &[("fieldsV1", 1024), ("labels", 1024), ("annotations", 1024)],
};

pub fn router(state: AdmissionState) -> Router {
    let bodies = Arc::new(RequestBodies::for_reviews(CONFIG_REVIEW_PRICES));
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

pub(crate) fn json_response(value: &Value) -> Response {
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

/// An AdmissionReview's request, with its objects read as `T`.
#[derive(Deserialize)]
struct Review<T> {
    request: Option<ReviewRequest<T>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReviewRequest<T> {
    #[serde(default)]
    pub(crate) uid: String,
    #[serde(default)]
    pub(crate) operation: String,
    #[serde(default)]
    pub(crate) namespace: Option<String>,
    #[serde(default = "none")]
    pub(crate) object: Option<T>,
    #[serde(default = "none")]
    pub(crate) old_object: Option<T>,
}

fn none<T>() -> Option<T> {
    None
}

pub(crate) fn request<T: serde::de::DeserializeOwned>(
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
    let ours = match scheduler_names::deployed_in(&state.client, &state.namespace).await {
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
    let summaries = namespace_summaries(&state.client, &state.listings, &namespace).await;
    let verdict = match summaries {
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
