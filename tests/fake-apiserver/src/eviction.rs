//! `POST pods/{name}/eviction`, as the real server answers it: the pod's
//! PodDisruptionBudgets (in its namespace, selecting its labels) must each allow a
//! disruption (`status.disruptionsAllowed`, written by the disruption controller; a
//! budget without status allows none), else 429 with the real message; allowed, each
//! budget's count goes down by one and the pod is deleted with the eviction's
//! `deleteOptions` (its UID precondition included). 201 on success.

use axum::response::Response;
use serde_json::{Value, json};

use crate::{
    Key, Shared, Target, admissionregistration::selector_matches, json_response, not_found, writes,
};

const BUDGETS: &str = "policy/poddisruptionbudgets";

pub(crate) fn evict(shared: &Shared, target: &Target, name: &str, body: &Value) -> Response {
    let pods = Target {
        resource: "pods".into(),
        namespace: target.namespace.clone(),
        name: Some(name.into()),
        subresource: None,
    };
    {
        let mut store = shared.store.lock().unwrap();
        let key = Key {
            resource: "pods".into(),
            namespace: target.namespace.clone(),
            name: name.into(),
        };
        let Some(pod) = store.objects.get(&key).cloned() else {
            return not_found(&pods, name);
        };
        let labels = pod["metadata"]["labels"].clone();
        let budgets: Vec<(Key, Value)> = store
            .objects
            .iter()
            .filter(|(k, b)| {
                k.resource == BUDGETS
                    && k.namespace == target.namespace
                    && selector_matches(&b["spec"]["selector"], &labels)
            })
            .map(|(k, b)| (k.clone(), b.clone()))
            .collect();
        for (_, budget) in &budgets {
            if budget["status"]["disruptionsAllowed"].as_i64().unwrap_or(0) < 1 {
                let budget_name = budget["metadata"]["name"].as_str().unwrap_or_default();
                let body = json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                    "reason": "TooManyRequests",
                    "details": {"causes": [{"reason": "DisruptionBudget",
                        "message": format!("The disruption budget {budget_name} needs {} healthy pods and has {} currently",
                            budget["status"]["desiredHealthy"].as_i64().unwrap_or(0),
                            budget["status"]["currentHealthy"].as_i64().unwrap_or(0))}]},
                    "code": 429,
                });
                return json_response(429, &body);
            }
        }
        for (key, mut budget) in budgets {
            let allowed = budget["status"]["disruptionsAllowed"].as_i64().unwrap_or(0);
            budget["status"]["disruptionsAllowed"] = json!(allowed - 1);
            store.write(key, Some(budget), &shared.changes);
        }
    }
    let deleted = writes::delete(shared, &pods, name, &body["deleteOptions"]);
    if !deleted.status().is_success() {
        return deleted;
    }
    json_response(
        201,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    )
}
