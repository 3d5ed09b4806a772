//! The `x-kubernetes-validations` rules of a schema evaluated on a value (with the CEL
//! interpreter kube-rs uses), reported as the API server reports them.

use kube_cel::{ErrorKind, ValidationError, Validator};
use serde_json::Value;

use super::field_error::FieldError;

/// The rule failures of `value` (at field `base`) against `schema`; `old` is the stored
/// value for transition rules.
pub fn validate(schema: &Value, value: &Value, old: Option<&Value>, base: &str) -> Vec<FieldError> {
    match Validator::new().validate(schema, value, old) {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .into_vec()
            .into_iter()
            .filter(|e| !ratcheted(value, old, &e.field_path))
            .map(|e| field_error(schema, base, e))
            .collect(),
    }
}

/// Validation ratcheting (GA in 1.33): a rule failing on a value the update left as it
/// was is not reported. Values are correlated with the old object through object fields
/// and map keys, never through the items of a list (multiarch has no map-type lists).
fn ratcheted(value: &Value, old: Option<&Value>, path: &str) -> bool {
    let Some(old) = old else {
        return false;
    };
    if path.contains('[') {
        return false;
    }
    let at = |root: &Value| {
        path.split('.')
            .filter(|s| !s.is_empty())
            .try_fold(root, |node, field| node.get(field))
            .cloned()
    };
    matches!((at(value), at(old)), (Some(new), Some(before)) if new == before)
}

/// `fieldErrorForReason`: the rule's `reason` picks the error type. The value shown is the
/// schema type (`"integer"`), and `FieldValueDuplicate` drops the message altogether.
fn field_error(schema: &Value, base: &str, error: ValidationError) -> FieldError {
    let field = join(base, &error.field_path);
    // A nil field path prints as `<nil>`: what users see for rules at a resource's root.
    let field = if field.is_empty() {
        "<nil>".to_owned()
    } else {
        field
    };
    if error.kind != ErrorKind::ValidationFailure {
        return FieldError::invalid(field, None, error.message);
    }
    let type_name = schema_at(schema, &error.field_path)
        .and_then(|s| s["type"].as_str())
        .map(|t| format!("{t:?}"));
    match error.reason.as_deref() {
        Some("FieldValueForbidden") => FieldError::forbidden(field, error.message),
        Some("FieldValueRequired") => FieldError::required(field, error.message),
        Some("FieldValueDuplicate") => FieldError::duplicate(field, type_name),
        _ => FieldError::invalid(field, type_name, error.message),
    }
}

fn join(base: &str, path: &str) -> String {
    match (base.is_empty(), path.is_empty()) {
        (true, _) => path.to_owned(),
        (false, true) => base.to_owned(),
        (false, false) if path.starts_with('[') => format!("{base}{path}"),
        (false, false) => format!("{base}.{path}"),
    }
}

/// The schema node of a field path such as `spec.platforms[0].weight`.
pub fn schema_at<'a>(schema: &'a Value, path: &str) -> Option<&'a Value> {
    let mut node = schema;
    for segment in path.split('.').filter(|s| !s.is_empty()) {
        let (name, indices) = match segment.find('[') {
            Some(at) => (&segment[..at], segment[at..].matches('[').count()),
            None => (segment, 0),
        };
        if !name.is_empty() {
            node = match node["properties"].get(name) {
                Some(property) => property,
                None => node.get("additionalProperties")?,
            };
        }
        for _ in 0..indices {
            node = node.get("items")?;
        }
    }
    Some(node)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_value_left_as_it_was_is_not_checked_again() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "n": {"type": "integer", "x-kubernetes-validations": [{"rule": "self < 10", "message": "too big"}]},
            "m": {"type": "integer"}}}}});
        let stored = json!({"spec": {"n": 20, "m": 1}});
        let unchanged = json!({"spec": {"n": 20, "m": 2}});
        assert!(validate(&schema, &unchanged, Some(&stored), "").is_empty());
        let changed = json!({"spec": {"n": 30, "m": 1}});
        assert_eq!(validate(&schema, &changed, Some(&stored), "").len(), 1);
        assert_eq!(
            validate(&schema, &stored, None, "").len(),
            1,
            "a create is checked"
        );
    }

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "weight": {"type": "integer", "x-kubernetes-validations": [
                {"rule": "self <= 100", "message": "weight is out of range"}]},
            "list": {"type": "array", "items": {"type": "string"}, "x-kubernetes-validations": [
                {"rule": "self.all(x, self.exists_one(y, x == y))", "message": "each once",
                 "reason": "FieldValueDuplicate"}]},
        }}}, "x-kubernetes-validations": [{"rule": "self.metadata.name == 'cluster'",
            "message": "name it 'cluster'"}]})
    }

    fn messages(value: Value) -> Vec<String> {
        validate(&schema(), &value, None, "")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn reports_rule_failures_as_the_api_server() {
        assert_eq!(
            messages(json!({"metadata": {"name": "cluster"}, "spec": {"weight": 500}})),
            ["spec.weight: Invalid value: \"integer\": weight is out of range"]
        );
        assert_eq!(
            messages(json!({"metadata": {"name": "other"}, "spec": {}})),
            ["<nil>: Invalid value: \"object\": name it 'cluster'"]
        );
    }

    #[test]
    fn a_duplicate_reason_loses_the_message() {
        assert_eq!(
            messages(json!({"metadata": {"name": "cluster"}, "spec": {"list": ["a", "a"]}})),
            ["spec.list: Duplicate value: \"array\""]
        );
    }

    #[test]
    fn finds_schema_nodes_by_field_path() {
        let s = json!({"properties": {"a": {"items": {"properties": {"b": {"type": "integer"}}}},
            "m": {"additionalProperties": {"type": "string"}}}});
        assert_eq!(schema_at(&s, "a[3].b").unwrap()["type"], "integer");
        assert_eq!(schema_at(&s, "m.anykey").unwrap()["type"], "string");
        assert!(schema_at(&s, "nope").is_none());
    }
}
