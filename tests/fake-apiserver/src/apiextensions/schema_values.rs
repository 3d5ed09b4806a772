//! Values against an OpenAPI v3 schema, as the API server treats custom resources: unknown
//! fields pruned, defaults applied, then validated with the messages of its OpenAPI
//! validator (`in body should be ...`). CEL rules are evaluated separately (`cel_rules`).

use serde_json::{Map, Value};

use super::field_error::{FieldError, show};

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(value: &Value, wanted: &str) -> bool {
    match (wanted, value) {
        ("object", Value::Object(_))
        | ("array", Value::Array(_))
        | ("string", Value::String(_))
        | ("boolean", Value::Bool(_))
        | ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

/// Validates `value` (at field `path`) against `schema`.
pub fn validate(schema: &Value, value: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_into(schema, value, path, &mut errors);
    errors
}

fn validate_into(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if value.is_null() && schema["nullable"] == Value::Bool(true) {
        return;
    }
    let int_or_string = schema["x-kubernetes-int-or-string"] == Value::Bool(true);
    if int_or_string {
        if !(has_type(value, "integer") || has_type(value, "string")) {
            errors.push(FieldError::invalid(
                path,
                Some(format!("{:?}", json_type(value))),
                format!(
                    "{path} in body must be of type integer or string: {:?}",
                    json_type(value)
                ),
            ));
            return;
        }
    } else if let Some(wanted) = schema["type"].as_str()
        && !has_type(value, wanted)
    {
        errors.push(FieldError::invalid(
            path,
            Some(format!("{:?}", json_type(value))),
            format!(
                "{path} in body must be of type {wanted}: {:?}",
                json_type(value)
            ),
        ));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        let supported: Vec<String> = allowed
            .iter()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .collect();
        errors.push(FieldError::not_supported(path, value, &supported));
    }
    match value {
        Value::String(s) => strings(schema, s, value, path, errors),
        Value::Number(n) => numbers(schema, n.as_f64().unwrap_or(0.0), value, path, errors),
        Value::Array(items) => arrays(schema, items, path, errors),
        Value::Object(object) => objects(schema, object, path, errors),
        _ => {}
    }
}

fn strings(schema: &Value, s: &str, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let length = s.chars().count() as u64;
    if let Some(max) = schema["maxLength"].as_u64()
        && length > max
    {
        errors.push(FieldError::too_long(path, max));
    }
    if let Some(min) = schema["minLength"].as_u64()
        && length < min
    {
        errors.push(FieldError::invalid(
            path,
            Some(show(value)),
            format!("{path} in body should be at least {min} chars long"),
        ));
    }
    if let Some(pattern) = schema["pattern"].as_str() {
        match regex::Regex::new(pattern) {
            Ok(re) if re.is_match(s) => {}
            Ok(_) => errors.push(FieldError::invalid(
                path,
                Some(show(value)),
                format!("{path} in body should match '{pattern}'"),
            )),
            Err(e) => errors.push(FieldError::internal(path, format!("bad pattern: {e}"))),
        }
    }
}

fn numbers(schema: &Value, n: f64, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let shown = Some(show(value));
    if let Some(max) = schema["maximum"].as_f64() {
        let exclusive = schema["exclusiveMaximum"] == Value::Bool(true);
        if n > max || (exclusive && n == max) {
            let how = if exclusive {
                "less than"
            } else {
                "less than or equal to"
            };
            errors.push(FieldError::invalid(
                path,
                shown.clone(),
                format!("{path} in body should be {how} {}", schema["maximum"]),
            ));
        }
    }
    if let Some(min) = schema["minimum"].as_f64() {
        let exclusive = schema["exclusiveMinimum"] == Value::Bool(true);
        if n < min || (exclusive && n == min) {
            let how = if exclusive {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errors.push(FieldError::invalid(
                path,
                shown.clone(),
                format!("{path} in body should be {how} {}", schema["minimum"]),
            ));
        }
    }
    if let Some(multiple) = schema["multipleOf"].as_f64()
        && multiple != 0.0
        && (n / multiple).fract() != 0.0
    {
        errors.push(FieldError::invalid(
            path,
            shown,
            format!(
                "{path} in body should be a multiple of {}",
                schema["multipleOf"]
            ),
        ));
    }
}

fn arrays(schema: &Value, items: &[Value], path: &str, errors: &mut Vec<FieldError>) {
    if let Some(max) = schema["maxItems"].as_u64()
        && items.len() as u64 > max
    {
        errors.push(FieldError::too_many(path, items.len(), max));
    }
    if let Some(min) = schema["minItems"].as_u64()
        && (items.len() as u64) < min
    {
        errors.push(FieldError::invalid(
            path,
            Some(items.len().to_string()),
            format!("{path} in body should have at least {min} items"),
        ));
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            validate_into(item_schema, item, &index(path, i), errors);
        }
    }
    // x-kubernetes-list-type: map and set forbid duplicate keys and values.
    let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
        .as_array()
        .map(|k| k.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let identity = |item: &Value| -> Value {
        match schema["x-kubernetes-list-type"].as_str() {
            Some("map") => Value::Object(
                keys.iter()
                    .map(|k| ((*k).to_owned(), item[*k].clone()))
                    .collect(),
            ),
            _ => item.clone(),
        }
    };
    if matches!(
        schema["x-kubernetes-list-type"].as_str(),
        Some("map" | "set")
    ) {
        for (i, item) in items.iter().enumerate() {
            let id = identity(item);
            if items[..i].iter().any(|earlier| identity(earlier) == id) {
                errors.push(FieldError::duplicate(index(path, i), Some(id.to_string())));
            }
        }
    }
}

fn objects(schema: &Value, object: &Map<String, Value>, path: &str, errors: &mut Vec<FieldError>) {
    for name in schema["required"].as_array().into_iter().flatten() {
        if let Some(name) = name.as_str()
            && !object.contains_key(name)
        {
            errors.push(FieldError::required(child(path, name), ""));
        }
    }
    let properties = schema["properties"].as_object();
    for (name, value) in object {
        match properties.and_then(|p| p.get(name)) {
            Some(property) => validate_into(property, value, &child(path, name), errors),
            None => {
                if let Some(additional) =
                    schema.get("additionalProperties").filter(|a| a.is_object())
                {
                    validate_into(additional, value, &child(path, name), errors);
                }
            }
        }
    }
    if let Some(max) = schema["maxProperties"].as_u64()
        && object.len() as u64 > max
    {
        errors.push(FieldError::too_many(path, object.len(), max));
    }
    if let Some(min) = schema["minProperties"].as_u64()
        && (object.len() as u64) < min
    {
        errors.push(FieldError::invalid(
            path,
            Some(object.len().to_string()),
            format!("{path} in body should have at least {min} properties"),
        ));
    }
}

/// Fills in the `default` of every absent (or null and not nullable) property.
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(object) => {
            if let Some(properties) = schema["properties"].as_object() {
                for (name, property) in properties {
                    let absent = match object.get(name) {
                        None => true,
                        Some(Value::Null) => property["nullable"] != Value::Bool(true),
                        Some(_) => false,
                    };
                    if absent && let Some(default) = property.get("default") {
                        object.insert(name.clone(), default.clone());
                    }
                    if let Some(child) = object.get_mut(name) {
                        apply_defaults(property, child);
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                for child in object.values_mut() {
                    apply_defaults(additional, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                items
                    .iter_mut()
                    .for_each(|item| apply_defaults(item_schema, item));
            }
        }
        _ => {}
    }
}

/// Drops the fields the schema does not declare, as the API server prunes them, and says
/// which (by field path). At a resource's root `apiVersion`, `kind` and `metadata` stay.
pub fn prune(schema: &Value, value: &mut Value, path: &str, resource_root: bool) -> Vec<String> {
    let mut pruned = Vec::new();
    prune_into(schema, value, path, resource_root, &mut pruned);
    pruned
}

fn prune_into(schema: &Value, value: &mut Value, path: &str, root: bool, pruned: &mut Vec<String>) {
    if schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) {
        return;
    }
    match value {
        Value::Object(object) => {
            if let Some(properties) = schema["properties"].as_object() {
                object.retain(|name, _| {
                    let keep = properties.contains_key(name)
                        || (root && matches!(name.as_str(), "apiVersion" | "kind" | "metadata"));
                    if !keep {
                        pruned.push(child(path, name));
                    }
                    keep
                });
                for (name, child_value) in object.iter_mut() {
                    if let Some(property) = properties.get(name) {
                        prune_into(property, child_value, &child(path, name), false, pruned);
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                for (name, child_value) in object.iter_mut() {
                    prune_into(additional, child_value, &child(path, name), false, pruned);
                }
            } else if schema["type"] == "object" && schema.get("additionalProperties").is_none() {
                for name in object.keys() {
                    pruned.push(child(path, name));
                }
                object.clear();
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_into(item_schema, item, &index(path, i), false, pruned);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "required": ["plugins"], "properties": {
            "priority": {"type": "integer", "default": 0, "minimum": 0, "maximum": 255},
            "mode": {"type": "string", "enum": ["Scheduler", "SchedulingGate"]},
            "name": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
            "plugins": {"type": "object", "properties": {
                "platforms": {"type": "array", "maxItems": 2, "minItems": 1,
                    "items": {"type": "object", "properties": {"w": {"type": "integer"}}}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        }})
    }

    fn messages(value: Value) -> Vec<String> {
        validate(&schema(), &value, "spec")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn speaks_the_openapi_validator_messages() {
        assert_eq!(messages(json!({"plugins": {}})), Vec::<String>::new());
        assert_eq!(messages(json!({})), ["spec.plugins: Required value"]);
        assert_eq!(
            messages(json!({"plugins": {}, "priority": 300})),
            [
                "spec.priority: Invalid value: 300: spec.priority in body should be less than or equal to 255"
            ]
        );
        assert_eq!(
            messages(json!({"plugins": {}, "priority": "x"})),
            [
                "spec.priority: Invalid value: \"string\": spec.priority in body must be of type integer: \"string\""
            ]
        );
        assert_eq!(
            messages(json!({"plugins": {}, "mode": "Other"})),
            [
                "spec.mode: Unsupported value: \"Other\": supported values: \"Scheduler\", \"SchedulingGate\""
            ]
        );
        assert_eq!(
            messages(json!({"plugins": {}, "name": "ABCDEF"})),
            [
                "spec.name: Too long: may not be more than 5 bytes",
                "spec.name: Invalid value: \"ABCDEF\": spec.name in body should match '^[a-z]+$'"
            ]
        );
        assert_eq!(
            messages(json!({"plugins": {"platforms": [{}, {}, {}]}})),
            ["spec.plugins.platforms: Too many: 3: must have at most 2 items"]
        );
        assert_eq!(
            messages(json!({"plugins": {"platforms": [{"w": "1"}]}, "labels": {"a": 1}})),
            [
                "spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
                "spec.plugins.platforms[0].w: Invalid value: \"string\": spec.plugins.platforms[0].w in body must be of type integer: \"string\""
            ]
        );
    }

    #[test]
    fn defaults_fill_absent_fields_only() {
        let mut value = json!({"plugins": {}});
        apply_defaults(&schema(), &mut value);
        assert_eq!(value["priority"], 0);
        let mut set = json!({"plugins": {}, "priority": 7});
        apply_defaults(&schema(), &mut set);
        assert_eq!(set["priority"], 7);
    }

    #[test]
    fn prunes_undeclared_fields() {
        let mut value = json!({"plugins": {"platforms": [{"w": 1, "x": 2}], "y": 3},
            "labels": {"free": "form"}, "z": 4});
        let pruned = prune(&schema(), &mut value, "spec", false);
        assert_eq!(
            pruned,
            ["spec.z", "spec.plugins.y", "spec.plugins.platforms[0].x"]
        );
        assert_eq!(
            value,
            json!({"plugins": {"platforms": [{"w": 1}]}, "labels": {"free": "form"}})
        );
    }
}
