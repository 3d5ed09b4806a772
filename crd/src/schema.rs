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

/// A `LabelSelector` kept atomic, as MTO declares it, so a merge never mixes two selectors;
/// bounded, and checked by CEL as far as the API server checks one where it is used (the
/// webhook configuration it is copied into): operators, values for each operator, keys
/// and values in the label syntax. The operator's validating webhook checks the rest
/// (matchLabels keys, matchExpressions values, the exact length limits of a qualified
/// name's parts), which would cost CEL more than the API server allows.
pub(crate) fn atomic_label_selector(generator: &mut SchemaGenerator) -> Schema {
    let schema =
        <k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as JsonSchema>::json_schema(
            generator,
        );
    let mut value = serde_json::Value::from(schema);
    value["x-kubernetes-map-type"] = "atomic".into();
    // The rules sit on the list, not its items: an unchanged list is not checked again
    // (the API server's ratcheting correlates objects and maps, never the items of an
    // atomic list), so a selector stored before these rules never blocks a status write.
    let expressions = &mut value["properties"]["matchExpressions"];
    expressions["maxItems"] = MAX_SELECTOR_REQUIREMENTS.into();
    expressions["x-kubernetes-validations"] = serde_json::json!([
        {
            "rule": "self.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",
            "message": "an operator must be In, NotIn, Exists or DoesNotExist",
        },
        {
            "rule": "self.all(e, e.operator in ['In', 'NotIn'] ? (has(e.values) && size(e.values) > 0) : (!(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0))",
            "message": "values must be given when the operator is In or NotIn, and must be empty when it is Exists or DoesNotExist",
        },
        {
            "rule": format!("self.all(e, e.key.matches('{QUALIFIED_NAME}'))"),
            "message": "a key must be a label key: an optional DNS subdomain prefix and '/', then a name of letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
        },
    ]);
    let requirement = &mut expressions["items"]["properties"];
    requirement["key"]["maxLength"] = QUALIFIED_NAME_MAX_LENGTH.into();
    requirement["operator"]["maxLength"] = 16.into();
    requirement["values"]["maxItems"] = MAX_SELECTOR_VALUES.into();
    requirement["values"]["items"]["maxLength"] = LABEL_VALUE_MAX_LENGTH.into();
    let labels = &mut value["properties"]["matchLabels"];
    labels["maxProperties"] = MAX_SELECTOR_REQUIREMENTS.into();
    labels["additionalProperties"]["maxLength"] = LABEL_VALUE_MAX_LENGTH.into();
    // Values only: a map key has no length bound the API server's CEL cost estimator
    // accepts; the operator's validating webhook checks the keys.
    labels["additionalProperties"]["x-kubernetes-validations"] = serde_json::json!([{
        "rule": format!("self.matches('{LABEL_VALUE}')"),
        "message": "a matchLabels value must be a label value: empty, or at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
    }]);
    Schema::try_from(value).unwrap_or_default()
}

/// Requirements (and matchLabels entries) in one selector: far more than a namespace
/// selector needs, few enough for the API server's CEL cost limits.
const MAX_SELECTOR_REQUIREMENTS: u32 = 16;
const MAX_SELECTOR_VALUES: u32 = 128;
/// A DNS subdomain prefix (253), '/', a name (63).
const QUALIFIED_NAME_MAX_LENGTH: u32 = 317;
const LABEL_VALUE_MAX_LENGTH: u32 = 63;
const QUALIFIED_NAME: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
const LABEL_VALUE: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$";
