//! Which API groups the server serves, as the real one decides: the built-in groups,
//! multiarch's own (every test cluster has its CRDs, stored or not) and the groups of the
//! CustomResourceDefinitions stored. A path under any other group is answered as
//! kube-apiserver answers it, with a plain `404 page not found` (not a Status object);
//! a CRD group's version answers discovery with its resources.

use std::collections::BTreeMap;

use axum::{body::Body, response::Response};
use serde_json::{Value, json};

use crate::{Key, json_response};

/// The groups of kube-apiserver 1.36 this server stands in for.
const BUILT_IN: &[&str] = &[
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
];

/// The group of the tests' own CRDs, served whether or not a test stored them.
const MULTIARCH: &str = "multiarch.openshift.io";

const CRDS: &str = "apiextensions.k8s.io/customresourcedefinitions";

fn crds(objects: &BTreeMap<Key, Value>) -> impl Iterator<Item = &Value> {
    objects
        .iter()
        .filter(|(key, _)| key.resource == CRDS)
        .map(|(_, crd)| crd)
}

/// The answer for `path` when discovery decides it: a group nobody serves, or a CRD
/// group's version; `None` for everything else.
pub(crate) fn answer(objects: &BTreeMap<Key, Value>, path: &str) -> Option<Response> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["apis", group, rest @ ..] => (*group, rest),
        _ => return None,
    };
    if BUILT_IN.contains(&group) || group == MULTIARCH {
        return None;
    }
    let defining: Vec<&Value> = crds(objects)
        .filter(|crd| crd["spec"]["group"] == group)
        .collect();
    if defining.is_empty() {
        return Some(page_not_found());
    }
    match rest {
        [version] => Some(resource_list(group, version, &defining)),
        _ => None,
    }
}

/// kube-apiserver's answer for a path no handler serves.
fn page_not_found() -> Response {
    Response::builder()
        .status(404)
        .header("content-type", "text/plain; charset=utf-8")
        .body(Body::from("404 page not found\n"))
        .unwrap_or_default()
}

fn resource_list(group: &str, version: &str, crds: &[&Value]) -> Response {
    let mut resources = Vec::new();
    for crd in crds {
        let spec = &crd["spec"];
        let Some(served) = spec["versions"].as_array().and_then(|vs| {
            vs.iter()
                .find(|v| v["name"] == version && v["served"] == true)
        }) else {
            continue;
        };
        let plural = spec["names"]["plural"].as_str().unwrap_or_default();
        resources.push(json!({
            "name": plural,
            "singularName": spec["names"]["singular"],
            "namespaced": spec["scope"] == "Namespaced",
            "kind": spec["names"]["kind"],
            "verbs": ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"],
        }));
        if !served["subresources"]["status"].is_null() {
            resources.push(json!({
                "name": format!("{plural}/status"),
                "singularName": "",
                "namespaced": spec["scope"] == "Namespaced",
                "kind": spec["names"]["kind"],
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return page_not_found();
    }
    json_response(
        200,
        &json!({
            "kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": format!("{group}/{version}"),
            "resources": resources,
        }),
    )
}
