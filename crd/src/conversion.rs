//! Conversion between the served versions of `ClusterPodPlacementConfig`, as the
//! operator's conversion webhook answers the API server's `ConversionReview`s.
//!
//! `v1alpha1` has only `logVerbosity` and `namespaceSelector`. What it lacks travels in
//! annotations, so an object read and written back through `v1alpha1` loses nothing:
//! `fallbackArchitecture` in MTO's own annotation (existing MTO tooling reads it), and
//! `plugins` and `placement` as JSON in two more. Converting back to `v1beta1` restores the
//! fields and removes the annotations. The names are reserved: on a `v1beta1` object they
//! are overwritten (or dropped when the field is absent) whenever it is read as `v1alpha1`.
//! Objects of the other kinds, and versions already right, pass through unchanged.

use serde_json::{Map, Value, json};

use crate::names::FALLBACK_ARCHITECTURE_ANNOTATION;

pub const V1ALPHA1: &str = "multiarch.openshift.io/v1alpha1";
pub const V1BETA1: &str = "multiarch.openshift.io/v1beta1";

/// The `v1beta1` field `spec.plugins` while the object is read as `v1alpha1` (JSON).
pub const PLUGINS_ANNOTATION: &str = "multiarch.openshift.io/v1beta1-plugins";
/// The `v1beta1` field `spec.placement` while the object is read as `v1alpha1` (JSON).
pub const PLACEMENT_ANNOTATION: &str = "multiarch.openshift.io/v1beta1-placement";

/// Why an object cannot be converted; the API server shows it to the client.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConversionError {
    #[error(
        "unsupported version {0:?}: ClusterPodPlacementConfig is served as {V1ALPHA1} and {V1BETA1}"
    )]
    UnsupportedVersion(String),
    #[error(
        "annotation {annotation} of {name} is not valid JSON ({detail}): remove it or write the field through {V1BETA1}"
    )]
    BadAnnotation {
        name: String,
        annotation: &'static str,
        detail: String,
    },
    #[error("the object is not a JSON object")]
    NotAnObject,
}

/// `object` as `desired` (an `apiVersion`).
pub fn convert(object: &Value, desired: &str) -> Result<Value, ConversionError> {
    if !object.is_object() {
        return Err(ConversionError::NotAnObject);
    }
    if object["kind"] != "ClusterPodPlacementConfig" || object["apiVersion"] == desired {
        let mut same = object.clone();
        same["apiVersion"] = json!(desired);
        return Ok(same);
    }
    match desired {
        V1ALPHA1 => Ok(to_v1alpha1(object)),
        V1BETA1 => to_v1beta1(object),
        other => Err(ConversionError::UnsupportedVersion(other.to_owned())),
    }
}

fn annotations(object: &mut Value) -> &mut Map<String, Value> {
    if !object["metadata"]["annotations"].is_object() {
        object["metadata"]["annotations"] = json!({});
    }
    match &mut object["metadata"]["annotations"] {
        Value::Object(map) => map,
        _ => unreachable!("just made an object"),
    }
}

fn drop_empty_annotations(object: &mut Value) {
    if object["metadata"]["annotations"]
        .as_object()
        .is_some_and(Map::is_empty)
        && let Some(meta) = object["metadata"].as_object_mut()
    {
        meta.remove("annotations");
    }
}

fn to_v1alpha1(object: &Value) -> Value {
    let mut out = object.clone();
    out["apiVersion"] = json!(V1ALPHA1);
    let spec = out
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .map(std::mem::take)
        .unwrap_or_default();
    let mut kept = Map::new();
    let mut moved: Vec<(&'static str, Option<String>)> = Vec::new();
    for (key, value) in spec {
        match key.as_str() {
            "plugins" => moved.push((PLUGINS_ANNOTATION, Some(value.to_string()))),
            "placement" => moved.push((PLACEMENT_ANNOTATION, Some(value.to_string()))),
            "fallbackArchitecture" => moved.push((
                FALLBACK_ARCHITECTURE_ANNOTATION,
                value.as_str().filter(|s| !s.is_empty()).map(str::to_owned),
            )),
            _ => {
                kept.insert(key, value);
            }
        }
    }
    out["spec"] = Value::Object(kept);
    let notes = annotations(&mut out);
    for annotation in [
        PLUGINS_ANNOTATION,
        PLACEMENT_ANNOTATION,
        FALLBACK_ARCHITECTURE_ANNOTATION,
    ] {
        match moved.iter().find(|(a, _)| *a == annotation) {
            Some((_, Some(text))) => {
                notes.insert(annotation.to_owned(), json!(text));
            }
            _ => {
                notes.remove(annotation);
            }
        }
    }
    drop_empty_annotations(&mut out);
    out
}

fn to_v1beta1(object: &Value) -> Result<Value, ConversionError> {
    let mut out = object.clone();
    out["apiVersion"] = json!(V1BETA1);
    let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
    if !out["spec"].is_object() {
        out["spec"] = json!({});
    }
    let notes = annotations(&mut out);
    let plugins = notes.remove(PLUGINS_ANNOTATION);
    let placement = notes.remove(PLACEMENT_ANNOTATION);
    let fallback = notes.remove(FALLBACK_ARCHITECTURE_ANNOTATION);
    for (annotation, field, text) in [
        (PLUGINS_ANNOTATION, "plugins", plugins),
        (PLACEMENT_ANNOTATION, "placement", placement),
    ] {
        if let Some(text) = text {
            let value: Value = serde_json::from_str(text.as_str().unwrap_or("")).map_err(|e| {
                ConversionError::BadAnnotation {
                    name: name.clone(),
                    annotation,
                    detail: e.to_string(),
                }
            })?;
            out["spec"][field] = value;
        }
    }
    if let Some(fallback) = fallback.as_ref().and_then(Value::as_str) {
        out["spec"]["fallbackArchitecture"] = json!(fallback);
    }
    drop_empty_annotations(&mut out);
    Ok(out)
}

/// The `ConversionReview` (v1) answering `review`: every object converted, or the first
/// failure as the review's failure (the API server then fails the client's request with
/// its message).
pub fn review(review: &Value) -> Value {
    let request = &review["request"];
    let uid = request["uid"].clone();
    let desired = request["desiredAPIVersion"].as_str().unwrap_or("");
    let converted: Result<Vec<Value>, ConversionError> = request["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| convert(o, desired))
        .collect();
    let response = match converted {
        Ok(objects) => {
            json!({"uid": uid, "convertedObjects": objects, "result": {"status": "Success"}})
        }
        Err(e) => json!({"uid": uid, "result": {"status": "Failure", "message": e.to_string()}}),
    };
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": response})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Value {
        json!({
            "apiVersion": V1BETA1, "kind": "ClusterPodPlacementConfig",
            "metadata": {"name": "cluster", "annotations": {"team": "platform"}},
            "spec": {
                "logVerbosity": "Debug",
                "namespaceSelector": {"matchLabels": {"a": "b"}},
                "plugins": {"nodeAffinityScoring": {"enabled": true, "platforms": [{"architecture": "arm64", "weight": 50}]}},
                "fallbackArchitecture": "amd64",
                "placement": {"mode": "SchedulingGate", "schedulerName": "multiarch-scheduler"},
            },
            "status": {"routing": "SchedulingGate", "conditions": []},
        })
    }

    #[test]
    fn what_v1alpha1_lacks_rides_in_annotations_and_comes_back() {
        let alpha = convert(&full(), V1ALPHA1).unwrap();
        assert_eq!(alpha["apiVersion"], V1ALPHA1);
        assert_eq!(
            alpha["spec"],
            json!({"logVerbosity": "Debug", "namespaceSelector": {"matchLabels": {"a": "b"}}})
        );
        let notes = &alpha["metadata"]["annotations"];
        assert_eq!(notes[FALLBACK_ARCHITECTURE_ANNOTATION], "amd64");
        assert_eq!(notes["team"], "platform");
        let back = convert(&alpha, V1BETA1).unwrap();
        assert_eq!(back, full());
    }

    #[test]
    fn absent_fields_leave_no_annotation_and_empty_fallback_is_mto_s_unset() {
        let mut minimal = full();
        minimal["spec"] = json!({"logVerbosity": "Normal", "fallbackArchitecture": ""});
        minimal["metadata"] = json!({"name": "cluster"});
        let alpha = convert(&minimal, V1ALPHA1).unwrap();
        assert!(alpha["metadata"]["annotations"].is_null(), "{alpha}");
        let back = convert(&alpha, V1BETA1).unwrap();
        assert_eq!(back["spec"], json!({"logVerbosity": "Normal"}));
    }

    #[test]
    fn stale_annotations_on_v1beta1_objects_are_not_resurrected() {
        let mut object = full();
        object["spec"].as_object_mut().unwrap().remove("plugins");
        object["metadata"]["annotations"][PLUGINS_ANNOTATION] = json!("{\"x\": 1}");
        let alpha = convert(&object, V1ALPHA1).unwrap();
        assert!(alpha["metadata"]["annotations"][PLUGINS_ANNOTATION].is_null());
        let back = convert(&alpha, V1BETA1).unwrap();
        assert!(back["spec"]["plugins"].is_null());
    }

    #[test]
    fn a_broken_annotation_fails_the_conversion_with_its_name() {
        let mut alpha = convert(&full(), V1ALPHA1).unwrap();
        alpha["metadata"]["annotations"][PLACEMENT_ANNOTATION] = json!("{not json");
        let error = convert(&alpha, V1BETA1).unwrap_err();
        assert!(
            error.to_string().starts_with(
                "annotation multiarch.openshift.io/v1beta1-placement of cluster is not valid JSON"
            ),
            "{error}"
        );
        let answer = review(
            &json!({"request": {"uid": "u1", "desiredAPIVersion": V1BETA1, "objects": [alpha]}}),
        );
        assert_eq!(answer["response"]["uid"], "u1");
        assert_eq!(answer["response"]["result"]["status"], "Failure");
    }

    #[test]
    fn a_review_converts_every_object_and_echoes_the_uid() {
        let answer = review(
            &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "705ab4f5", "desiredAPIVersion": V1ALPHA1, "objects": [full(), full()]}}),
        );
        assert_eq!(answer["kind"], "ConversionReview");
        assert_eq!(answer["response"]["uid"], "705ab4f5");
        assert_eq!(answer["response"]["result"]["status"], "Success");
        let objects = answer["response"]["convertedObjects"].as_array().unwrap();
        assert_eq!(objects.len(), 2);
        assert!(objects.iter().all(|o| o["apiVersion"] == V1ALPHA1));
        let unknown = review(
            &json!({"request": {"uid": "x", "desiredAPIVersion": "multiarch.openshift.io/v2", "objects": [full()]}}),
        );
        assert_eq!(unknown["response"]["result"]["status"], "Failure");
    }
}
