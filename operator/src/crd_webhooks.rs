//! The webhooks the operator serves (every replica, not only the leader): the
//! ClusterPodPlacementConfig CRD's conversion between `v1alpha1` and `v1beta1`, and the
//! admission rules CEL and ValidatingAdmissionPolicies cannot express because they look at
//! other objects or go beyond CEL's cost limits: no ClusterPodPlacementConfig deletion
//! while PodPlacementConfigs exist, its namespaceSelector exactly as the API server checks
//! a label selector, PodPlacementConfig priorities unique per namespace, and the CEL of
//! their `celArchitecturePlacement` rules (parsed, metadata-only, bool, within cost).

use std::sync::Arc;

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
};
use kube::{Api, ResourceExt, api::ListParams};
use multiarch_crd::{
    CelArchitecturePlacement, PodPlacementConfig, cel_architecture_placement::rule_errors,
    conversion, label_selector,
};
use multiarch_runtime::{ops_server::health_routes, serving_cert::ReloadingCert};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tracing::{debug, warn};

use crate::install::{VALIDATE_CPPC_PATH, VALIDATE_PPC_PATH};

/// The largest review read.
pub const MAX_REVIEW_BYTES: usize = 8 * 1024 * 1024;

#[derive(Clone)]
pub struct AdmissionState {
    pub client: kube::Client,
    pub serving: Arc<ReloadingCert>,
    pub registry: Arc<Registry>,
}

pub fn router(state: AdmissionState) -> Router {
    let limit = axum::extract::DefaultBodyLimit::max(MAX_REVIEW_BYTES);
    Router::new()
        .route(
            multiarch_crd::names::CONVERSION_PATH,
            post(convert).layer(limit),
        )
        .route(
            VALIDATE_CPPC_PATH,
            post(validate_cluster_config).layer(limit),
        )
        .route(VALIDATE_PPC_PATH, post(validate_pod_config).layer(limit))
        .with_state(state.clone())
        .merge(health_routes(state.registry.clone(), move || {
            (!state.serving.is_set()).then_some("no serving certificate yet (the leader writes it)")
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

/// The AdmissionReview answering `request` (`Err`: the message of a denial).
pub fn admission_response(request: &Value, verdict: Result<(), String>) -> Value {
    let mut response = json!({"uid": request["uid"], "allowed": verdict.is_ok()});
    if let Err(message) = verdict {
        response["status"] = json!({"code": 403, "reason": "Forbidden", "message": message});
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// A ClusterPodPlacementConfig is not deleted while PodPlacementConfigs exist (MTO's
/// rule): they would lose the defaults they complete.
pub fn cluster_config_delete(configs: &[String]) -> Result<(), String> {
    if configs.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = configs.iter().take(10).map(String::as_str).collect();
    let more = configs.len().saturating_sub(shown.len());
    Err(format!(
        "cannot delete the ClusterPodPlacementConfig while PodPlacementConfigs exist: {}{}; delete them first",
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    ))
}

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

fn priority(object: &Value) -> i64 {
    object["spec"]["priority"].as_i64().unwrap_or(0)
}

/// Priorities are unique per namespace (they order the configs that match one pod). An
/// update is checked only when it changes the priority.
pub fn pod_config_priority(
    object: &Value,
    old: Option<&Value>,
    others: &[PodPlacementConfig],
) -> Result<(), String> {
    let wanted = priority(object);
    if old.is_some_and(|o| priority(o) == wanted) {
        return Ok(());
    }
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    match others
        .iter()
        .find(|c| c.name_any() != name && i64::from(c.spec.priority) == wanted)
    {
        Some(taken) => Err(format!(
            "priority {wanted} is already used by PodPlacementConfig {:?} in namespace {:?}: give each PodPlacementConfig of a namespace its own priority",
            taken.name_any(),
            taken.namespace().unwrap_or_default()
        )),
        None => Ok(()),
    }
}

/// The `celArchitecturePlacement` rules as written: what the CRD's schema cannot check
/// (see `multiarch_crd::cel_architecture_placement::rule_errors`).
pub fn pod_config_rules(object: &Value, old: Option<&Value>) -> Result<(), String> {
    let placement = |o: &Value| {
        serde_json::from_value::<CelArchitecturePlacement>(
            o["spec"]["plugins"]["celArchitecturePlacement"].clone(),
        )
        .ok()
    };
    let Some(rules) = placement(object) else {
        return Ok(());
    };
    let errors = rule_errors(&rules, old.and_then(placement).as_ref());
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "PodPlacementConfig {:?} is invalid: {}",
            object["metadata"]["name"].as_str().unwrap_or_default(),
            errors.join("; ")
        ))
    }
}

fn request(body: &Bytes) -> Result<Value, Box<Response>> {
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| Box::new(bad_request(format!("not an AdmissionReview: {e}"))))?;
    match review.get("request") {
        Some(request) if request.is_object() => Ok(request.clone()),
        _ => Err(Box::new(bad_request("the AdmissionReview has no request"))),
    }
}

async fn validate_cluster_config(State(state): State<AdmissionState>, body: Bytes) -> Response {
    let request = match request(&body) {
        Ok(r) => r,
        Err(refused) => return *refused,
    };
    if request["operation"] != "DELETE" {
        let verdict = cluster_config_spec(&request["object"]);
        return json_response(&admission_response(&request, verdict));
    }
    let verdict = match Api::<PodPlacementConfig>::all(state.client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => {
            let names: Vec<String> = list
                .items
                .iter()
                .map(|c| format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()))
                .collect();
            cluster_config_delete(&names)
        }
        // The finalizer waits for them anyway: let the deletion through.
        Err(e) => {
            warn!(error = %e, "cannot list PodPlacementConfigs; the deletion waits in the finalizer instead");
            Ok(())
        }
    };
    debug!(?verdict, "ClusterPodPlacementConfig deletion reviewed");
    json_response(&admission_response(&request, verdict))
}

async fn validate_pod_config(State(state): State<AdmissionState>, body: Bytes) -> Response {
    let request = match request(&body) {
        Ok(r) => r,
        Err(refused) => return *refused,
    };
    let object = &request["object"];
    let namespace = request["namespace"]
        .as_str()
        .or_else(|| object["metadata"]["namespace"].as_str())
        .unwrap_or("")
        .to_owned();
    let old = request.get("oldObject").filter(|o| o.is_object());
    if let Err(invalid) = pod_config_rules(object, old) {
        return json_response(&admission_response(&request, Err(invalid)));
    }
    let verdict = match Api::<PodPlacementConfig>::namespaced(state.client.clone(), &namespace)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => pod_config_priority(object, old, &list.items),
        Err(e) => Err(format!(
            "cannot check that the priority is unique in namespace {namespace:?} ({e}): try again"
        )),
    };
    json_response(&admission_response(&request, verdict))
}

/// Ready once a serving certificate is in place.
#[cfg(test)]
mod tests {
    use super::*;

    fn ppc(name: &str, priority: u8) -> PodPlacementConfig {
        serde_json::from_value(json!({
            "apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"priority": priority, "plugins": {}},
        }))
        .unwrap()
    }

    #[test]
    fn priorities_are_unique_per_namespace() {
        let others = [ppc("a", 10), ppc("b", 20)];
        let new = json!({"metadata": {"name": "c", "namespace": "shop"}, "spec": {"priority": 10}});
        assert_eq!(
            pod_config_priority(&new, None, &others).unwrap_err(),
            "priority 10 is already used by PodPlacementConfig \"a\" in namespace \"shop\": give each PodPlacementConfig of a namespace its own priority"
        );
        let fresh = json!({"metadata": {"name": "c"}, "spec": {"priority": 30}});
        assert!(pod_config_priority(&fresh, None, &others).is_ok());
        // An update that keeps its priority, or the config itself, is no conflict.
        let a_again = json!({"metadata": {"name": "a"}, "spec": {"priority": 10}});
        assert!(pod_config_priority(&a_again, None, &others).is_ok());
        let unchanged = json!({"metadata": {"name": "d"}, "spec": {"priority": 20}});
        assert!(pod_config_priority(&unchanged, Some(&unchanged), &others).is_ok());
        // MTO's default: two configs left at priority 0 conflict.
        let zero = json!({"metadata": {"name": "z"}, "spec": {}});
        assert!(pod_config_priority(&zero, None, &[ppc("y", 0)]).is_err());
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
        let request = json!({"uid": "u-7", "operation": "DELETE"});
        let denied = admission_response(&request, cluster_config_delete(&["shop/prefs".into()]));
        assert_eq!(denied["response"]["allowed"], false);
        assert_eq!(denied["response"]["uid"], "u-7");
        assert_eq!(denied["response"]["status"]["code"], 403);
        assert_eq!(
            denied["response"]["status"]["message"],
            "cannot delete the ClusterPodPlacementConfig while PodPlacementConfigs exist: shop/prefs; delete them first"
        );
        assert_eq!(
            admission_response(&request, cluster_config_delete(&[]))["response"]["allowed"],
            true
        );
    }
}
