//! The CEL declaration of a schema node, as the API server derives it
//! (`apiserver/pkg/cel/common/schemas.go`, `SchemaDeclType`): the CEL type, the largest
//! number of elements a value can have (used for size estimates) and the smallest size of
//! its JSON serialization (used for cardinality estimates under unbounded lists and maps).

use std::{collections::BTreeMap, sync::Arc};

use serde_json::Value;

/// `DefaultMaxRequestSizeBytes`: the API server bounds every unbounded size by a 3 MiB
/// request.
pub const MAX_REQUEST_SIZE_BYTES: u64 = 3 * 1024 * 1024;

const MIN_STRING_SIZE: u64 = 2; // ""
const MIN_BOOL_SIZE: u64 = 4; // true
const MIN_NUMBER_SIZE: u64 = 1; // 0
const MIN_DURATION_SIZE_JSON: u64 = 3;
const MAX_DURATION_SIZE_JSON: u64 = 32;
const JSON_DATE_SIZE: u64 = 12;
const MIN_DATETIME_SIZE_JSON: u64 = 21;
const MAX_DATETIME_SIZE_JSON: u64 = 32;

/// What kind of value a schema node holds, as CEL sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum DeclKind {
    Bool,
    Int,
    Double,
    String,
    Bytes,
    Duration,
    Timestamp,
    /// `x-kubernetes-int-or-string`.
    Dyn,
    List(Arc<Decl>),
    /// An object with `additionalProperties`: string keys.
    Map(Arc<Decl>),
    /// An object with declared `properties`, by their CEL (escaped) names.
    Object(BTreeMap<String, Arc<Decl>>),
}

/// Where a size bound comes from: the schema, the API server's own validation, or only the
/// request size limit (the estimate that makes rule costs explode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// `maxLength`, `maxItems`, `maxProperties`, an enum or a fixed-size format.
    Declared,
    /// `metadata.name` and `metadata.generateName`: the API server itself refuses names over
    /// 253 characters, though its cost estimator does not know it.
    ServerValidated,
    /// Nothing but the 3 MiB request limit.
    RequestSize,
    /// Scalars: sizes do not apply.
    NotApplicable,
}

/// One schema node's declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct Decl {
    pub kind: DeclKind,
    /// `DeclType.MaxElements`: characters (times 4: bytes) of a string, items of a list,
    /// entries of a map.
    pub max_elements: u64,
    pub min_serialized_size: u64,
    pub bound: Bound,
}

impl Decl {
    fn scalar(kind: DeclKind, min_serialized_size: u64) -> Decl {
        Decl {
            kind,
            max_elements: 0,
            min_serialized_size,
            bound: Bound::NotApplicable,
        }
    }

    /// The declaration of `schema`, or `None` where the API server exposes nothing to CEL
    /// (no type, or a list/map of such). `resource_root` adds `apiVersion`, `kind` and
    /// `metadata.{name,generateName}`, which rules at a resource's root may always read.
    pub fn of(schema: &Value, resource_root: bool) -> Option<Decl> {
        if schema["x-kubernetes-int-or-string"] == Value::Bool(true) {
            return Some(Decl {
                kind: DeclKind::Dyn,
                max_elements: MAX_REQUEST_SIZE_BYTES - 2,
                min_serialized_size: 1,
                bound: Bound::RequestSize,
            });
        }
        match schema["type"].as_str()? {
            "array" => {
                let items = Decl::of(schema.get("items")?, is_embedded(&schema["items"]))?;
                let (max, bound) = match non_negative(&schema["maxItems"]) {
                    Some(max) => (max, Bound::Declared),
                    None => (
                        (MAX_REQUEST_SIZE_BYTES - 2) / (items.min_serialized_size + 1),
                        Bound::RequestSize,
                    ),
                };
                Some(Decl {
                    kind: DeclKind::List(Arc::new(items)),
                    max_elements: max,
                    min_serialized_size: 2,
                    bound,
                })
            }
            "object" => Some(Decl::object(schema, resource_root)?),
            "string" => Some(Decl::string(schema)),
            "boolean" => Some(Decl::scalar(DeclKind::Bool, MIN_BOOL_SIZE)),
            "number" => Some(Decl::scalar(DeclKind::Double, MIN_NUMBER_SIZE)),
            "integer" => Some(Decl::scalar(DeclKind::Int, MIN_NUMBER_SIZE)),
            _ => None,
        }
    }

    fn object(schema: &Value, resource_root: bool) -> Option<Decl> {
        if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
            let values = Decl::of(additional, is_embedded(additional))?;
            let (max, bound) = match non_negative(&schema["maxProperties"]) {
                Some(max) => (max, Bound::Declared),
                // A key ("" and a colon), a comma and the smallest value.
                None => (
                    (MAX_REQUEST_SIZE_BYTES - 2) / (values.min_serialized_size + 6),
                    Bound::RequestSize,
                ),
            };
            return Some(Decl {
                kind: DeclKind::Map(Arc::new(values)),
                max_elements: max,
                min_serialized_size: 2,
                bound,
            });
        }
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut fields = BTreeMap::new();
        let mut min_size = 2; // {}
        if let Some(properties) = schema["properties"].as_object() {
            for (name, property) in properties {
                let Some(decl) = Decl::of(property, is_embedded(property)) else {
                    continue;
                };
                // Required fields without a default are in every serialization.
                if required.contains(&name.as_str()) && property.get("default").is_none() {
                    min_size += name.len() as u64 + decl.min_serialized_size + 4;
                }
                if let Some(escaped) = escape(name) {
                    fields.insert(escaped, Arc::new(decl));
                }
            }
        }
        if resource_root {
            add_type_and_object_meta(&mut fields);
        }
        Some(Decl {
            kind: DeclKind::Object(fields),
            max_elements: 0,
            min_serialized_size: min_size,
            bound: Bound::NotApplicable,
        })
    }

    fn string(schema: &Value) -> Decl {
        let from_request = |kind, min| Decl {
            kind,
            max_elements: match schema["format"].as_str() {
                Some("duration") => MAX_DURATION_SIZE_JSON,
                Some("date") => JSON_DATE_SIZE,
                Some("date-time") => MAX_DATETIME_SIZE_JSON,
                _ => MAX_REQUEST_SIZE_BYTES - 2,
            },
            min_serialized_size: min,
            bound: match schema["format"].as_str() {
                Some("duration" | "date" | "date-time") => Bound::Declared,
                _ => Bound::RequestSize,
            },
        };
        match schema["format"].as_str() {
            Some("byte") => match non_negative(&schema["maxLength"]) {
                Some(max) => Decl {
                    kind: DeclKind::Bytes,
                    max_elements: max,
                    min_serialized_size: MIN_STRING_SIZE,
                    bound: Bound::Declared,
                },
                None => from_request(DeclKind::Bytes, MIN_STRING_SIZE),
            },
            Some("duration") => from_request(DeclKind::Duration, MIN_DURATION_SIZE_JSON),
            Some("date") => from_request(DeclKind::Timestamp, JSON_DATE_SIZE),
            Some("date-time") => from_request(DeclKind::Timestamp, MIN_DATETIME_SIZE_JSON),
            _ => match non_negative(&schema["maxLength"]) {
                // maxLength counts characters; the estimator counts bytes, up to 4 each.
                Some(max) => Decl {
                    kind: DeclKind::String,
                    max_elements: max.saturating_mul(4),
                    min_serialized_size: MIN_STRING_SIZE,
                    bound: Bound::Declared,
                },
                // An enum is as long as its longest value (`estimateMaxStringEnumLength`).
                None => match schema["enum"].as_array().filter(|e| !e.is_empty()) {
                    Some(values) => Decl {
                        kind: DeclKind::String,
                        max_elements: values
                            .iter()
                            .filter_map(Value::as_str)
                            .map(|v| v.len() as u64)
                            .max()
                            .unwrap_or(0),
                        min_serialized_size: MIN_STRING_SIZE,
                        bound: Bound::Declared,
                    },
                    None => from_request(DeclKind::String, MIN_STRING_SIZE),
                },
            },
        }
    }

    /// The declaration reached by one step of a cost-estimator path (`@items`, `@values`,
    /// `@keys` or a field name).
    pub fn step(&self, step: &str) -> Option<Arc<Decl>> {
        match (&self.kind, step) {
            (DeclKind::List(items), "@items") | (DeclKind::Map(items), "@values") => {
                Some(items.clone())
            }
            (DeclKind::Map(_), "@keys") => Some(Arc::new(Decl {
                kind: DeclKind::String,
                max_elements: MAX_REQUEST_SIZE_BYTES - 2,
                min_serialized_size: MIN_STRING_SIZE,
                bound: Bound::RequestSize,
            })),
            (DeclKind::Object(fields), name) => fields.get(name).cloned(),
            _ => None,
        }
    }
}

/// `WithTypeAndObjectMeta`: plain strings, as the API server declares them for CEL.
fn add_type_and_object_meta(fields: &mut BTreeMap<String, Arc<Decl>>) {
    let plain_string = || Decl {
        kind: DeclKind::String,
        max_elements: MAX_REQUEST_SIZE_BYTES - 2,
        min_serialized_size: MIN_STRING_SIZE,
        bound: Bound::RequestSize,
    };
    let name = || Decl {
        bound: Bound::ServerValidated,
        ..plain_string()
    };
    fields
        .entry("kind".into())
        .or_insert_with(|| Arc::new(plain_string()));
    fields
        .entry("apiVersion".into())
        .or_insert_with(|| Arc::new(plain_string()));
    let metadata: BTreeMap<String, Arc<Decl>> = [
        ("name".to_owned(), Arc::new(name())),
        ("generateName".to_owned(), Arc::new(name())),
    ]
    .into();
    fields.insert(
        "metadata".into(),
        Arc::new(Decl {
            kind: DeclKind::Object(metadata),
            max_elements: 0,
            min_serialized_size: 2,
            bound: Bound::NotApplicable,
        }),
    );
}

fn is_embedded(schema: &Value) -> bool {
    schema["x-kubernetes-embedded-resource"] == Value::Bool(true)
}

fn non_negative(value: &Value) -> Option<u64> {
    value
        .as_i64()
        .map(|v| u64::try_from(v).unwrap_or(0))
        .or_else(|| value.as_u64())
}

const RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// A property name as CEL expressions spell it (`apiserver/pkg/cel/escaping.go`), or
/// `None` when it cannot be expressed (the property is then invisible to rules).
pub fn escape(name: &str) -> Option<String> {
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::new();
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("__") {
            out.push_str("__underscores__");
            rest = &rest[2..];
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn strings_count_four_bytes_per_declared_character() {
        let decl = Decl::of(&json!({"type": "string", "maxLength": 16}), false).unwrap();
        assert_eq!(decl.max_elements, 64);
        assert_eq!(decl.bound, Bound::Declared);
        let open = Decl::of(&json!({"type": "string"}), false).unwrap();
        assert_eq!(open.max_elements, 3_145_726);
        assert_eq!(open.bound, Bound::RequestSize);
    }

    #[test]
    fn an_enum_is_as_long_as_its_longest_value() {
        let decl = Decl::of(
            &json!({"type": "string", "enum": ["Scheduler", "SchedulingGate"]}),
            false,
        );
        let decl = decl.unwrap();
        assert_eq!((decl.max_elements, decl.bound), (14, Bound::Declared));
    }

    #[test]
    fn unbounded_lists_are_sized_by_the_request_and_their_smallest_item() {
        let strings = Decl::of(
            &json!({"type": "array", "items": {"type": "string"}}),
            false,
        );
        // (3 MiB - 2) / ("" + a comma)
        assert_eq!(strings.unwrap().max_elements, 1_048_575);
        let objects = json!({"type": "array", "items": {
            "type": "object", "required": ["name"],
            "properties": {"name": {"type": "string"}}}});
        // {"name":""} is 2 + 4 + 2 + 4 = 12 bytes
        assert_eq!(
            Decl::of(&objects, false).unwrap().max_elements,
            3_145_726 / 13
        );
    }

    #[test]
    fn maps_are_sized_by_key_value_pairs() {
        let map = json!({"type": "object", "additionalProperties": {"type": "string"}});
        assert_eq!(Decl::of(&map, false).unwrap().max_elements, 3_145_726 / 8);
    }

    #[test]
    fn the_resource_root_declares_name_and_kind() {
        let root = Decl::of(&json!({"type": "object", "properties": {}}), true).unwrap();
        let name = root.step("metadata").unwrap().step("name").unwrap();
        assert_eq!(name.kind, DeclKind::String);
        assert_eq!(name.bound, Bound::ServerValidated);
        assert!(root.step("kind").is_some());
    }

    #[test]
    fn escapes_property_names_as_the_api_server() {
        assert_eq!(escape("weight").as_deref(), Some("weight"));
        assert_eq!(
            escape("x-y.z/w").as_deref(),
            Some("x__dash__y__dot__z__slash__w")
        );
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape("a__b").as_deref(), Some("a__underscores__b"));
        assert_eq!(escape("1abc"), None);
        assert_eq!(escape("a b"), None);
    }
}
