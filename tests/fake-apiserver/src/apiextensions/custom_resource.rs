//! A custom resource written through its CRD, as the API server stores it: fields the
//! schema does not declare pruned, defaults filled in, then the OpenAPI validation and,
//! unless a value has the wrong type, the CEL rules (with the stored object for
//! transition rules).

use serde_json::Value;

use super::{cel_rules, field_error::FieldError, schema_values};

/// The `openAPIV3Schema` that `api_version` is served with, or the storage version's.
pub fn schema_for<'a>(crd: &'a Value, api_version: Option<&str>) -> Option<&'a Value> {
    let versions = crd["spec"]["versions"].as_array()?;
    let wanted = api_version.and_then(|v| v.rsplit('/').next());
    versions
        .iter()
        .find(|v| wanted.is_some_and(|w| v["name"] == w))
        .or_else(|| versions.iter().find(|v| v["storage"] == true))
        .and_then(|v| v["schema"].get("openAPIV3Schema"))
}

/// Prunes, defaults and validates `object` against `crd`; `old` is the stored object on
/// updates.
pub fn admit(
    crd: &Value,
    mut object: Value,
    old: Option<&Value>,
) -> Result<Value, Vec<FieldError>> {
    let Some(schema) = schema_for(crd, object["apiVersion"].as_str()) else {
        return Ok(object);
    };
    schema_values::prune(schema, &mut object, "", true);
    schema_values::apply_defaults(schema, &mut object);
    let mut errors = schema_values::validate(&without_metadata(schema), &object, "");
    // The API server skips the rules when a value has the wrong type: they could not run.
    let blocked = errors
        .iter()
        .any(|e| e.detail.contains(" must be of type "));
    if !blocked {
        errors.extend(cel_rules::validate(schema, &object, old, ""));
    }
    if errors.is_empty() {
        Ok(object)
    } else {
        Err(errors)
    }
}

/// ObjectMeta is validated by the API server's own rules, not the CRD's schema.
fn without_metadata(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(properties) = schema["properties"].as_object_mut() {
        properties.remove("metadata");
    }
    schema
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd() -> Value {
        json!({"spec": {"versions": [{"name": "v1", "storage": true, "schema": {"openAPIV3Schema": {
            "type": "object", "required": ["spec"], "properties": {"spec": {"type": "object", "properties": {
                "weight": {"type": "integer", "default": 1, "x-kubernetes-validations": [
                    {"rule": "self <= 100", "message": "weight is out of range"}]}}}}}}}]}})
    }

    #[test]
    fn prunes_defaults_and_validates() {
        let admitted = admit(
            &crd(),
            json!({"apiVersion": "g/v1", "metadata": {"name": "a"}, "spec": {"x": 1}, "junk": 2}),
            None,
        )
        .unwrap();
        assert_eq!(
            admitted,
            json!({"apiVersion": "g/v1", "metadata": {"name": "a"}, "spec": {"weight": 1}})
        );
        let refused = admit(
            &crd(),
            json!({"metadata": {"name": "a"}, "spec": {"weight": 500}}),
            None,
        )
        .unwrap_err();
        assert_eq!(
            refused[0].to_string(),
            "spec.weight: Invalid value: \"integer\": weight is out of range"
        );
    }

    #[test]
    fn type_errors_skip_the_rules() {
        let refused = admit(
            &crd(),
            json!({"metadata": {"name": "a"}, "spec": {"weight": "x"}}),
            None,
        )
        .unwrap_err();
        assert_eq!(refused.len(), 1, "{refused:?}");
    }
}
