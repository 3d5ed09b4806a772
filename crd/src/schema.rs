//! Hand-written schema fragments for fields whose rules derive macros cannot express.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// The CEL list literal of the architectures the API accepts.
pub(crate) const ARCHITECTURE_LIST: &str = "['amd64', 'arm64', 'ppc64le', 's390x']";

/// `fallbackArchitecture`: one architecture or the empty string (MTO's "not set").
pub(crate) fn fallback_architecture(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "maxLength": 16,
        "x-kubernetes-validations": [{
            "rule": format!("self == '' || self in {ARCHITECTURE_LIST}"),
            "messageExpression": "'fallbackArchitecture \"' + self + '\" is not supported: use one of amd64, arm64, ppc64le, s390x, or leave it empty'",
        }],
    })
}

/// `priority` of a `PodPlacementConfig`: an integer 0..=255 with default 0. Written by
/// hand because schemars would emit `format: uint8`, which is not a Kubernetes format.
pub(crate) fn priority(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "integer",
        "default": 0,
        "x-kubernetes-validations": [{
            "rule": "self >= 0 && self <= 255",
            "message": "priority is out of range: use a value from 0 to 255",
        }],
    })
}

/// A `LabelSelector` kept atomic, as MTO declares it, so a merge never mixes two selectors.
pub(crate) fn atomic_label_selector(generator: &mut SchemaGenerator) -> Schema {
    let mut schema =
        <k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as JsonSchema>::json_schema(
            generator,
        );
    schema.insert("x-kubernetes-map-type".into(), "atomic".into());
    schema
}
