//! What the API server checks when a CustomResourceDefinition is created
//! (`apiextensions-apiserver/pkg/apis/apiextensions/validation`), for the constructs
//! multiarch's CRDs use: names and versions, the structural-schema rules, defaults valid
//! against their own schema (OpenAPI and CEL), and every `x-kubernetes-validations` rule
//! and `messageExpression` compiled and costed with the API server's estimator, per rule
//! (10 million, times how often the rule can run) and for the whole schema (100 million).
//!
//! Errors come out in the API server's words and field paths, so a refused CRD reads here
//! as it reads from `kubectl apply`. Properties are visited in sorted order; the API server
//! visits them in Go's map order, so only the set of errors is comparable.

use serde_json::Value;

use super::{
    cel::{
        check::{CelType, CheckError, check},
        cost::{Reach, estimate},
        decl::{Decl, MAX_REQUEST_SIZE_BYTES},
    },
    cel_rules,
    field_error::{FieldError, show},
    schema_values,
};

/// `StaticEstimatedCostLimit`: the largest estimated cost of one expression.
pub const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// `StaticEstimatedCRDCostLimit`: the largest estimated cost of all rules of a schema.
pub const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;

/// The outcome of creating a CRD.
#[derive(Debug, Default)]
pub struct CrdReport {
    /// What the API server answers; empty when it creates the CRD.
    pub errors: Vec<FieldError>,
    /// Where a rule or message depends on a size the schema does not bound, as
    /// `(field of the rule, what it reaches)`. The API server accepts these while their
    /// estimated cost stays in budget; multiarch's own CRDs must not have any.
    pub reach: Vec<(String, Reach)>,
    /// The estimated cost of every compiled rule and message, by field (with the rule's
    /// cardinality for rules), for reports and tests.
    pub costs: Vec<(String, u64)>,
}

/// Checks `crd` (a `CustomResourceDefinition` as JSON) as the API server does on create.
pub fn check_crd(crd: &Value) -> CrdReport {
    let mut report = CrdReport::default();
    names(crd, &mut report.errors);
    let versions = crd["spec"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    versions_rules(&versions, &mut report.errors);
    conversion(crd, &mut report.errors);
    let schemas: Vec<Option<&Value>> = versions
        .iter()
        .map(|v| v["schema"].get("openAPIV3Schema"))
        .collect();
    // The API server hoists a schema all versions share to `spec.validation`.
    let shared = !schemas.is_empty() && schemas.iter().all(|s| *s == schemas[0]);
    for (i, (version, schema)) in versions.iter().zip(&schemas).enumerate() {
        let Some(schema) = schema else { continue };
        if shared && i > 0 {
            break;
        }
        let base = if shared {
            "spec.validation".to_owned()
        } else {
            format!("spec.versions[{i}].schema")
        };
        let status = version["subresources"].get("status").is_some();
        schema_root(schema, &base, status, &mut report);
    }
    report
}

fn names(crd: &Value, errors: &mut Vec<FieldError>) {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or("");
    let group = spec["group"].as_str().unwrap_or("");
    let expected = format!("{plural}.{group}");
    if crd["metadata"]["name"].as_str() != Some(&expected) {
        errors.push(FieldError::invalid(
            "metadata.name",
            Some(show(&crd["metadata"]["name"])),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    for (field, value) in [
        ("plural", &names["plural"]),
        ("singular", &names["singular"]),
    ] {
        if let Some(name) = value.as_str()
            && !is_dns1035_label(name)
        {
            errors.push(dns1035_error(&format!("spec.names.{field}"), value));
        }
    }
    if names["kind"].as_str().is_none_or(str::is_empty) {
        errors.push(FieldError::required("spec.names.kind", ""));
    }
    if names["kind"].is_string() && names["kind"] == names["listKind"] {
        errors.push(FieldError::invalid(
            "spec.names.listKind",
            Some(show(&names["listKind"])),
            "kind and listKind may not be the same",
        ));
    }
    for list in ["shortNames", "categories"] {
        for (i, value) in names[list].as_array().into_iter().flatten().enumerate() {
            if !value.as_str().is_some_and(is_dns1035_label) {
                errors.push(dns1035_error(&format!("spec.names.{list}[{i}]"), value));
            }
        }
    }
}

fn is_dns1035_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !s.is_empty()
        && s.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[bytes.len() - 1] != b'-'
}

fn dns1035_error(field: &str, value: &Value) -> FieldError {
    FieldError::invalid(
        field,
        Some(show(value)),
        "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
    )
}

/// `spec.conversion` (`ValidateCustomResourceConversion`): `None`, or a webhook the API
/// server can call.
fn conversion(crd: &Value, errors: &mut Vec<FieldError>) {
    let conversion = &crd["spec"]["conversion"];
    let strategy = conversion["strategy"].as_str().unwrap_or("None");
    match strategy {
        "None" => {
            if !conversion["webhook"].is_null() {
                errors.push(FieldError::forbidden(
                    "spec.conversion.webhook",
                    "should not be set when strategy is not set to Webhook",
                ));
            }
            return;
        }
        "Webhook" => {}
        _ => {
            errors.push(FieldError::not_supported(
                "spec.conversion.strategy",
                &conversion["strategy"],
                &["None".into(), "Webhook".into()],
            ));
            return;
        }
    }
    if crd["spec"]["preserveUnknownFields"] == true {
        errors.push(FieldError::invalid(
            "spec.conversion.strategy",
            Some("\"Webhook\"".into()),
            "must be None if spec.preserveUnknownFields is true",
        ));
    }
    let webhook = &conversion["webhook"];
    if webhook.is_null() {
        errors.push(FieldError::required(
            "spec.conversion.webhook",
            "required when strategy is set to Webhook",
        ));
        return;
    }
    let versions: Vec<&str> = webhook["conversionReviewVersions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if versions.is_empty() {
        errors.push(FieldError::required(
            "spec.conversion.webhook.conversionReviewVersions",
            "must contain at least one version",
        ));
    } else if !versions.iter().any(|v| *v == "v1" || *v == "v1beta1") {
        errors.push(FieldError::invalid(
            "spec.conversion.webhook.conversionReviewVersions",
            Some(format!("{versions:?}")),
            "must include at least one of v1, v1beta1",
        ));
    }
    let config = &webhook["clientConfig"];
    if config.is_null() {
        errors.push(FieldError::required(
            "spec.conversion.webhook.clientConfig",
            "required when strategy is set to Webhook",
        ));
        return;
    }
    match (config["service"].is_object(), config["url"].is_string()) {
        (true, false) => {
            let service = &config["service"];
            for field in ["name", "namespace"] {
                if service[field].as_str().is_none_or(str::is_empty) {
                    errors.push(FieldError::required(
                        format!("spec.conversion.webhook.clientConfig.service.{field}"),
                        "",
                    ));
                }
            }
            if let Some(path) = service["path"].as_str()
                && !path.starts_with('/')
            {
                errors.push(FieldError::invalid(
                    "spec.conversion.webhook.clientConfig.service.path",
                    Some(format!("{path:?}")),
                    "must start with a '/'",
                ));
            }
        }
        (false, true) => {}
        _ => errors.push(FieldError::required(
            "spec.conversion.webhook.clientConfig",
            "exactly one of url or service is required",
        )),
    }
}

fn versions_rules(versions: &[Value], errors: &mut Vec<FieldError>) {
    if versions.is_empty() {
        errors.push(FieldError::invalid(
            "spec.versions",
            Some("[]".into()),
            "must have exactly one version marked as storage version",
        ));
        return;
    }
    let storage = versions.iter().filter(|v| v["storage"] == true).count();
    if storage != 1 {
        errors.push(FieldError::invalid(
            "spec.versions",
            None,
            "must have exactly one version marked as storage version",
        ));
    }
    let mut seen = Vec::new();
    for (i, version) in versions.iter().enumerate() {
        let name = version["name"].as_str().unwrap_or("");
        if !is_dns1035_label(name) {
            errors.push(dns1035_error(
                &format!("spec.versions[{i}].name"),
                &version["name"],
            ));
        }
        if seen.contains(&name) {
            errors.push(FieldError::duplicate(
                format!("spec.versions[{i}].name"),
                Some(format!("{name:?}")),
            ));
        }
        seen.push(name);
        for (j, column) in version["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let field = format!("spec.versions[{i}].additionalPrinterColumns[{j}]");
            let types = ["boolean", "date", "integer", "number", "string"];
            if !column["type"].as_str().is_some_and(|t| types.contains(&t)) {
                errors.push(FieldError::invalid(
                    format!("{field}.type"),
                    Some(show(&column["type"])),
                    "must be one of boolean,date,integer,number,string",
                ));
            }
            if column["jsonPath"].as_str().is_none_or(str::is_empty) {
                errors.push(FieldError::required(format!("{field}.JSONPath"), ""));
            }
        }
    }
}

/// The keys a root schema may have when the status subresource is enabled.
const ALLOWED_AT_ROOT: [&str; 22] = [
    "description",
    "type",
    "format",
    "title",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "required",
    "items",
    "properties",
    "externalDocs",
    "example",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
];

fn schema_root(schema: &Value, base: &str, status: bool, report: &mut CrdReport) {
    let path = format!("{base}.openAPIV3Schema");
    if status && let Some(object) = schema.as_object() {
        if object.get("type").is_some_and(|t| t != "object") {
            report.errors.push(FieldError::invalid(
                format!("{path}.type"),
                Some(show(&schema["type"])),
                "only \"object\" is allowed as the type at the root of the schema if the status subresource is enabled",
            ));
        } else if object
            .keys()
            .any(|k| !ALLOWED_AT_ROOT.contains(&k.as_str()))
        {
            report.errors.push(FieldError::invalid(
                path.clone(),
                None,
                "only [Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items Properties ExternalDocs Example XPreserveUnknownFields XValidations] fields are allowed at the root of the schema if the status subresource is enabled",
            ));
        }
    }
    if schema["nullable"] == true {
        report.errors.push(FieldError::forbidden(
            format!("{path}.nullable"),
            "nullable cannot be true at the root",
        ));
    }
    let mut structural = Vec::new();
    structural_rules(schema, &path, Level::Root, &mut structural);
    let cel = if structural.is_empty() {
        defaults(schema, &path, true, &mut structural);
        structural.is_empty()
    } else {
        false
    };
    report.errors.extend(structural);
    let mut walk = Walk {
        total: 0,
        most_expensive: Vec::new(),
        reach: Vec::new(),
        costs: Vec::new(),
    };
    let ctx = Ctx {
        root: true,
        inside_meta: false,
        forbidden_defaults: None,
        uncorrelatable: None,
        cardinality: Some(1),
        cel,
    };
    let node_errors = walk.node(schema, &path, &ctx);
    report.errors.extend(node_errors.schema);
    report.errors.extend(node_errors.cel);
    if cel && walk.total > STATIC_ESTIMATED_CRD_COST_LIMIT {
        for (field, _) in &walk.most_expensive {
            report.errors.push(FieldError::forbidden(
                field.clone(),
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
            ));
        }
        report.errors.push(FieldError::forbidden(
            path,
            cost_message(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                walk.total,
                STATIC_ESTIMATED_CRD_COST_LIMIT,
            ),
        ));
    }
    report.reach.extend(walk.reach);
    report.costs.extend(walk.costs);
}

/// `getCostErrorMessage`.
pub fn cost_message(what: &str, cost: u64, limit: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_owned()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Property,
    Items,
    AdditionalProperties,
    /// Inside `allOf`, `anyOf`, `oneOf` or `not`: value validations only.
    Junctor,
}

/// The rules on a schema node itself (not its children): what a junctor may not say,
/// that a type is given, an object at the root, items for an array.
fn own_rules(
    schema: &Value,
    object: &serde_json::Map<String, Value>,
    path: &str,
    level: Level,
    errors: &mut Vec<FieldError>,
) {
    let int_or_string = schema["x-kubernetes-int-or-string"] == true;
    let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
    if level == Level::Junctor {
        for key in ["type", "default", "additionalProperties", "nullable"] {
            if object.contains_key(key) {
                errors.push(FieldError::forbidden(
                    format!("{path}.{key}"),
                    "must be empty to be structural",
                ));
            }
        }
        for key in object.keys().filter(|k| k.starts_with("x-kubernetes-")) {
            errors.push(FieldError::forbidden(
                format!("{path}.{key}"),
                "must be undefined to be structural",
            ));
        }
    } else if schema.get("type").is_none() && !int_or_string && !preserve {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Items => "must not be empty for specified array items",
            Level::AdditionalProperties => "must not be empty for specified additionalProperties",
            _ => "must not be empty for specified object fields",
        };
        errors.push(FieldError::required(format!("{path}.type"), detail));
    }
    if level == Level::Root && schema.get("type").is_some_and(|t| t != "object") {
        errors.push(FieldError::invalid(
            format!("{path}.type"),
            Some(show(&schema["type"])),
            "must be object at the root",
        ));
    }
    if schema["type"] == "array" && schema.get("items").is_none() {
        errors.push(FieldError::required(
            format!("{path}.items"),
            "must be specified",
        ));
    }
}

/// `ValidateStructural`: the rules that make a schema structural.
fn structural_rules(schema: &Value, path: &str, level: Level, errors: &mut Vec<FieldError>) {
    let Some(object) = schema.as_object() else {
        return;
    };
    own_rules(schema, object, path, level, errors);
    if let Some(properties) = schema["properties"].as_object() {
        if level == Level::Root {
            for meta in ["kind", "apiVersion"] {
                if let Some(p) = properties.get(meta)
                    && p["type"] != "string"
                {
                    errors.push(FieldError::invalid(
                        format!("{path}.properties[{meta}].type"),
                        Some(show(&p["type"])),
                        "must be string",
                    ));
                }
            }
            if let Some(metadata) = properties.get("metadata") {
                metadata_rules(metadata, &format!("{path}.properties[metadata]"), errors);
            }
        }
        for (name, property) in properties {
            if level == Level::Root && name == "metadata" {
                continue;
            }
            structural_rules(
                property,
                &format!("{path}.properties[{name}]"),
                if level == Level::Junctor {
                    Level::Junctor
                } else {
                    Level::Property
                },
                errors,
            );
        }
    }
    if let Some(items) = schema.get("items") {
        let next = if level == Level::Junctor {
            Level::Junctor
        } else {
            Level::Items
        };
        structural_rules(items, &format!("{path}.items"), next, errors);
    }
    if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        structural_rules(
            additional,
            &format!("{path}.additionalProperties"),
            if level == Level::Junctor {
                Level::Junctor
            } else {
                Level::AdditionalProperties
            },
            errors,
        );
    }
    for junctor in ["allOf", "anyOf", "oneOf"] {
        for (i, branch) in schema[junctor].as_array().into_iter().flatten().enumerate() {
            structural_rules(
                branch,
                &format!("{path}.{junctor}[{i}]"),
                Level::Junctor,
                errors,
            );
        }
    }
    if let Some(not) = schema.get("not") {
        structural_rules(not, &format!("{path}.not"), Level::Junctor, errors);
    }
}

/// At the root, `metadata` may only restate `name` and `generateName` as strings.
fn metadata_rules(metadata: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if metadata["type"] != "object" {
        errors.push(FieldError::invalid(
            format!("{path}.type"),
            Some(show(&metadata["type"])),
            "must be object",
        ));
    }
    let allowed_keys = ["type", "description", "properties"];
    let extra_key = metadata
        .as_object()
        .is_some_and(|m| m.keys().any(|k| !allowed_keys.contains(&k.as_str())));
    let extra_property = metadata["properties"].as_object().is_some_and(|p| {
        p.iter().any(|(name, s)| {
            !matches!(name.as_str(), "name" | "generateName")
                || s.as_object()
                    .is_some_and(|s| s.keys().any(|k| k != "type" && k != "description"))
                || s["type"] != "string"
        })
    });
    if extra_key || extra_property {
        errors.push(FieldError::forbidden(
            path,
            "must not specify anything other than name and generateName, but metadata is implicitly specified",
        ));
    }
}

/// `ValidateDefaults`: each default is pruned, valid against its schema and its rules.
fn defaults(schema: &Value, path: &str, root: bool, errors: &mut Vec<FieldError>) {
    if let Some(default) = schema.get("default") {
        let field = format!("{path}.default");
        let mut pruned = default.clone();
        if !schema_values::prune(schema, &mut pruned, "", false).is_empty() {
            errors.push(FieldError::invalid(
                field.clone(),
                Some(show(default)),
                "must not have unknown fields",
            ));
        }
        errors.extend(schema_values::validate(schema, default, &field));
        errors.extend(cel_rules::validate(schema, default, None, &field));
    }
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            // Defaults in the root's metadata are refused with their own error.
            if root && name == "metadata" {
                continue;
            }
            defaults(
                property,
                &format!("{path}.properties[{name}]"),
                false,
                errors,
            );
        }
    }
    if let Some(items) = schema.get("items") {
        defaults(items, &format!("{path}.items"), false, errors);
    }
    if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        defaults(
            additional,
            &format!("{path}.additionalProperties"),
            false,
            errors,
        );
    }
}

#[derive(Clone)]
struct Ctx {
    root: bool,
    inside_meta: bool,
    forbidden_defaults: Option<String>,
    /// The first ancestor across which `oldSelf` cannot be correlated.
    uncorrelatable: Option<String>,
    /// How often a rule here can run at most; `None` under an unbounded list or map.
    cardinality: Option<u64>,
    cel: bool,
}

impl Ctx {
    /// The context of a child of `parent` (`CELSchemaContext.childContext`).
    fn child(&self, parent: &Value) -> Ctx {
        let factor = match parent["type"].as_str() {
            Some("object") if parent.get("additionalProperties").is_some() => {
                parent["maxProperties"].as_u64()
            }
            Some("array") => parent["maxItems"].as_u64(),
            _ => Some(1),
        };
        Ctx {
            root: false,
            cardinality: self
                .cardinality
                .zip(factor)
                .map(|(c, f)| c.saturating_mul(f)),
            ..self.clone()
        }
    }
}

#[derive(Default)]
struct NodeErrors {
    schema: Vec<FieldError>,
    cel: Vec<FieldError>,
}

impl NodeErrors {
    fn extend(&mut self, other: NodeErrors) {
        self.schema.extend(other.schema);
        self.cel.extend(other.cel);
    }
}

struct Walk {
    total: u64,
    most_expensive: Vec<(String, u64)>,
    reach: Vec<(String, Reach)>,
    costs: Vec<(String, u64)>,
}

impl Walk {
    /// `TotalCost.ObserveExpressionCost`.
    fn observe(&mut self, field: &str, cost: u64) {
        self.total = self.total.saturating_add(cost);
        self.costs.push((field.to_owned(), cost));
        if cost < STATIC_ESTIMATED_CRD_COST_LIMIT / 100 {
            return;
        }
        self.most_expensive.push((field.to_owned(), cost));
        // Stable, as Go's sort.Slice is on lists this short.
        self.most_expensive.sort_by_key(|e| std::cmp::Reverse(e.1));
        self.most_expensive.truncate(4);
    }

    /// `ValidateCustomResourceDefinitionOpenAPISchema` for one node and its subtree.
    fn node(&mut self, schema: &Value, path: &str, ctx: &Ctx) -> NodeErrors {
        let mut errors = NodeErrors::default();
        standard_rules(schema, path, ctx, &mut errors.schema);
        if schema["uniqueItems"] == true {
            errors.schema.push(FieldError::forbidden(
                format!("{path}.uniqueItems"),
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            ));
        }
        let has_properties = schema["properties"]
            .as_object()
            .is_some_and(|p| !p.is_empty());
        if let Some(additional) = schema.get("additionalProperties") {
            if has_properties && (additional == false || additional.is_object()) {
                errors.schema.push(FieldError::forbidden(
                    format!("{path}.additionalProperties"),
                    "additionalProperties and properties are mutual exclusive",
                ));
            }
            if additional.is_object() {
                let mut sub = ctx.child(schema);
                if ctx.inside_meta {
                    sub.forbidden_defaults =
                        Some("inside additionalProperties applying to object metadata".into());
                }
                errors.extend(self.node(additional, &format!("{path}.additionalProperties"), &sub));
            }
        }
        if let Some(properties) = schema["properties"].as_object() {
            for (name, property) in properties {
                let mut sub = ctx.child(schema);
                if schema["x-kubernetes-map-type"] == "atomic" && sub.uncorrelatable.is_none() {
                    sub.uncorrelatable = Some(path.to_owned());
                }
                let embedded = schema["x-kubernetes-embedded-resource"] == true;
                if (ctx.root || embedded)
                    && matches!(name.as_str(), "metadata" | "kind" | "apiVersion")
                {
                    sub.inside_meta = true;
                    if ctx.root {
                        sub.forbidden_defaults = Some(format!("in top-level {name}"));
                    }
                }
                errors.extend(self.node(property, &format!("{path}.properties[{name}]"), &sub));
            }
        }
        for junctor in ["allOf", "oneOf", "anyOf"] {
            for (i, branch) in schema[junctor].as_array().into_iter().flatten().enumerate() {
                let sub = Ctx {
                    cel: false,
                    root: false,
                    ..ctx.clone()
                };
                errors.extend(self.node(branch, &format!("{path}.{junctor}[{i}]"), &sub));
            }
        }
        if let Some(not) = schema.get("not") {
            let sub = Ctx {
                cel: false,
                root: false,
                ..ctx.clone()
            };
            errors.extend(self.node(not, &format!("{path}.not"), &sub));
        }
        if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
            let mut sub = ctx.child(schema);
            if schema["x-kubernetes-list-type"] != "map" && sub.uncorrelatable.is_none() {
                sub.uncorrelatable = Some(path.to_owned());
            }
            errors.extend(self.node(items, &format!("{path}.items"), &sub));
        }
        list_and_map_rules(schema, path, &mut errors.schema);
        let rules = schema["x-kubernetes-validations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for (i, rule) in rules.iter().enumerate() {
            rule_syntax(
                rule,
                &format!("{path}.x-kubernetes-validations[{i}]"),
                &mut errors.schema,
            );
        }
        // The API server compiles rules only where the schema itself is sound.
        if !rules.is_empty() && errors.schema.is_empty() && ctx.cel {
            self.compile_rules(schema, &rules, path, ctx, &mut errors.cel);
        }
        errors
    }

    fn compile_rules(
        &mut self,
        schema: &Value,
        rules: &[Value],
        path: &str,
        ctx: &Ctx,
        errors: &mut Vec<FieldError>,
    ) {
        let embedded = schema["x-kubernetes-embedded-resource"] == true;
        let Some(decl) = Decl::of(schema, ctx.root || embedded) else {
            errors.push(FieldError::internal(
                format!("{path}.x-kubernetes-validations"),
                "rule declared on schema that does not support validation rules",
            ));
            return;
        };
        let decl = std::sync::Arc::new(decl);
        let cardinality = ctx
            .cardinality
            .unwrap_or(MAX_REQUEST_SIZE_BYTES / (decl.min_serialized_size + 1));
        for (i, rule) in rules.iter().enumerate() {
            let base = format!("{path}.x-kubernetes-validations[{i}]");
            let rule_field = format!("{base}.rule");
            let Some(source) = rule["rule"].as_str().filter(|r| !r.trim().is_empty()) else {
                continue;
            };
            let compiled = match compile(source, &decl) {
                Ok(c) => c,
                Err(detail) => {
                    self.observe(&rule_field, 0);
                    errors.push(FieldError::invalid(
                        rule_field,
                        Some(rule.to_string()),
                        detail,
                    ));
                    continue;
                }
            };
            if compiled.result != CelType::Bool {
                self.observe(&rule_field, 0);
                errors.push(FieldError::invalid(
                    rule_field,
                    Some(rule.to_string()),
                    "cel expression must evaluate to a bool",
                ));
                continue;
            }
            let cost = compiled.cost.saturating_mul(cardinality);
            if cost > STATIC_ESTIMATED_COST_LIMIT {
                errors.push(FieldError::forbidden(
                    rule_field.clone(),
                    cost_message("estimated rule cost", cost, STATIC_ESTIMATED_COST_LIMIT),
                ));
            }
            self.observe(&rule_field, cost);
            self.reach
                .extend(compiled.reach.into_iter().map(|r| (rule_field.clone(), r)));
            if compiled.uses_old_self
                && let Some(within) = &ctx.uncorrelatable
            {
                errors.push(FieldError::invalid(
                    rule_field.clone(),
                    Some(format!("{source:?}")),
                    format!("oldSelf cannot be used on the uncorrelatable portion of the schema within {within}"),
                ));
            }
            if let Some(expression) = rule["messageExpression"]
                .as_str()
                .filter(|m| !m.trim().is_empty())
            {
                let field = format!("{base}.messageExpression");
                match compile(expression, &decl) {
                    Err(detail) => errors.push(FieldError::invalid(
                        field,
                        Some(rule.to_string()),
                        format!("messageExpression {detail}"),
                    )),
                    Ok(message) if message.result != CelType::String => {
                        errors.push(FieldError::invalid(
                            field,
                            Some(rule.to_string()),
                            "messageExpression must evaluate to a string",
                        ));
                    }
                    Ok(message) => {
                        if message.cost > STATIC_ESTIMATED_COST_LIMIT {
                            errors.push(FieldError::forbidden(
                                field.clone(),
                                cost_message(
                                    "estimated messageExpression cost",
                                    message.cost,
                                    STATIC_ESTIMATED_COST_LIMIT,
                                ),
                            ));
                        }
                        self.observe(&field, message.cost);
                        self.reach
                            .extend(message.reach.into_iter().map(|r| (field.clone(), r)));
                    }
                }
            }
        }
    }
}

struct Compiled {
    result: CelType,
    cost: u64,
    uses_old_self: bool,
    reach: Vec<Reach>,
}

/// Parses, type-checks and costs one expression; the error reads as the API server's.
fn compile(source: &str, decl: &std::sync::Arc<Decl>) -> Result<Compiled, String> {
    let program = kube_cel::cel::Program::compile(source)
        .map_err(|e| format!("compilation failed: ERROR: <input>: {e}"))?;
    let expr = program.expression();
    let checked = check(expr, decl).map_err(|errors| {
        let details: Vec<String> = errors
            .iter()
            .map(|e| match e {
                CheckError::Invalid(m) => format!("ERROR: <input>: {m}"),
                unmodelled @ CheckError::Unmodelled(_) => unmodelled.to_string(),
            })
            .collect();
        format!("compilation failed: {}", details.join("\n "))
    })?;
    let estimate = estimate(expr, &checked, decl);
    Ok(Compiled {
        result: checked.result.clone(),
        cost: estimate.cost.max,
        uses_old_self: checked.uses_old_self,
        reach: estimate.reach,
    })
}

/// The keys of a map list: scalar properties of its items, each required or defaulted,
/// none nullable.
fn map_key_rules(items: &Value, keys: &[&str], path: &str, errors: &mut Vec<FieldError>) {
    let required: Vec<&str> = items["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for key in keys {
        let property = &items["properties"][key];
        if property.is_null() {
            errors.push(FieldError::invalid(
                format!("{path}.x-kubernetes-list-map-keys"),
                None,
                "entries must all be names of item properties",
            ));
            continue;
        }
        if property["type"] == "array" || property["type"] == "object" {
            errors.push(FieldError::invalid(
                format!("{path}.items.properties[{key}].type"),
                Some(show(&property["type"])),
                "must be a scalar type if parent array's x-kubernetes-list-type is map",
            ));
        }
        if !required.contains(key) && property.get("default").is_none() {
            errors.push(FieldError::required(
                format!("{path}.items.properties[{key}].default"),
                "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
            ));
        }
        if property["nullable"] == true {
            errors.push(FieldError::forbidden(
                format!("{path}.items.properties[{key}].nullable"),
                "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
            ));
        }
    }
}

/// `specStandardValidatorV3.validate`: keywords a CRD schema may not use.
fn standard_rules(schema: &Value, path: &str, ctx: &Ctx, errors: &mut Vec<FieldError>) {
    let types = ["array", "boolean", "integer", "number", "object", "string"];
    if let Some(t) = schema["type"].as_str() {
        if t == "null" {
            errors.push(FieldError::forbidden(
                format!("{path}.type"),
                "type cannot be set to null, use nullable as an alternative",
            ));
        } else if !types.contains(&t) {
            errors.push(FieldError::not_supported(
                format!("{path}.type"),
                &schema["type"],
                &types.map(String::from),
            ));
        }
    }
    if schema.get("default").is_some()
        && let Some(reason) = &ctx.forbidden_defaults
    {
        errors.push(FieldError::forbidden(
            format!("{path}.default"),
            format!("must not be set {reason}"),
        ));
    }
    for (key, what) in [
        ("id", "id"),
        ("additionalItems", "additionalItems"),
        ("patternProperties", "patternProperties"),
        ("definitions", "definitions"),
        ("dependencies", "dependencies"),
        ("$ref", "$ref"),
    ] {
        if schema.get(key).is_some() {
            errors.push(FieldError::forbidden(
                format!("{path}.{key}"),
                format!("{what} is not supported"),
            ));
        }
    }
    if schema["items"].is_array() {
        errors.push(FieldError::forbidden(
            format!("{path}.items"),
            "items must be a schema object and not an array",
        ));
    }
    if ctx.inside_meta && schema["x-kubernetes-embedded-resource"] == true {
        errors.push(FieldError::forbidden(
            format!("{path}.x-kubernetes-embedded-resource"),
            "must not be used inside of resource meta",
        ));
    }
}

fn list_and_map_rules(schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if schema["x-kubernetes-preserve-unknown-fields"] == false {
        errors.push(FieldError::invalid(
            format!("{path}.x-kubernetes-preserve-unknown-fields"),
            Some("false".into()),
            "must be true or undefined",
        ));
    }
    if let Some(map_type) = schema.get("x-kubernetes-map-type") {
        if schema["type"] != "object" {
            errors.push(FieldError::invalid(
                format!("{path}.type"),
                Some(show(&schema["type"])),
                "must be object if x-kubernetes-map-type is specified",
            ));
        }
        if map_type != "atomic" && map_type != "granular" {
            errors.push(FieldError::not_supported(
                format!("{path}.x-kubernetes-map-type"),
                map_type,
                &["atomic".into(), "granular".into()],
            ));
        }
    }
    let list_type = schema["x-kubernetes-list-type"].as_str();
    if let Some(t) = list_type {
        if schema["type"] != "array" {
            errors.push(FieldError::invalid(
                format!("{path}.type"),
                Some(show(&schema["type"])),
                "must be array if x-kubernetes-list-type is specified",
            ));
        }
        if !matches!(t, "atomic" | "set" | "map") {
            errors.push(FieldError::not_supported(
                format!("{path}.x-kubernetes-list-type"),
                &schema["x-kubernetes-list-type"],
                &["atomic".into(), "set".into(), "map".into()],
            ));
        }
    }
    let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
        .as_array()
        .map(|k| k.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !keys.is_empty() && list_type != Some("map") {
        errors.push(FieldError::invalid(
            format!("{path}.x-kubernetes-list-type"),
            list_type.map(|t| format!("{t:?}")),
            "must be map if x-kubernetes-list-map-keys is non-empty",
        ));
    }
    let items = &schema["items"];
    if list_type == Some("map") {
        if keys.is_empty() {
            errors.push(FieldError::required(
                format!("{path}.x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        if items["type"] != "object" {
            errors.push(FieldError::invalid(
                format!("{path}.items.type"),
                Some(show(&items["type"])),
                "must be object if parent array's x-kubernetes-list-type is map",
            ));
        }
        map_key_rules(items, &keys, path, errors);
    }
    if matches!(list_type, Some("set" | "map")) && items["nullable"] == true {
        errors.push(FieldError::forbidden(
            format!("{path}.items.nullable"),
            format!(
                "cannot be nullable when x-kubernetes-list-type is {}",
                list_type.unwrap_or("")
            ),
        ));
    }
}

fn rule_syntax(rule: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let text = |key: &str| rule[key].as_str().unwrap_or("");
    let newline = |s: &str| s.contains('\n') || s.contains('\r');
    let (source, message) = (text("rule"), text("message"));
    if source.trim().is_empty() {
        errors.push(FieldError::required(
            format!("{path}.rule"),
            "rule is not specified",
        ));
    } else if !message.is_empty() && message.trim().is_empty() {
        errors.push(FieldError::invalid(
            format!("{path}.message"),
            Some(format!("{message:?}")),
            "message must be non-empty if specified",
        ));
    } else if newline(message.trim()) {
        errors.push(FieldError::invalid(
            format!("{path}.message"),
            Some(format!("{message:?}")),
            "message must not contain line breaks",
        ));
    } else if newline(source.trim()) && message.trim().is_empty() {
        errors.push(FieldError::required(
            format!("{path}.message"),
            "message must be specified if rule contains line breaks",
        ));
    }
    let expression = text("messageExpression");
    if !expression.is_empty() && expression.trim().is_empty() {
        errors.push(FieldError::required(
            format!("{path}.messageExpression"),
            "messageExpression must be non-empty if specified",
        ));
    }
    let reasons = [
        "FieldValueDuplicate",
        "FieldValueForbidden",
        "FieldValueInvalid",
        "FieldValueRequired",
    ];
    if let Some(reason) = rule.get("reason")
        && !reason.as_str().is_some_and(|r| reasons.contains(&r))
    {
        errors.push(FieldError::not_supported(
            format!("{path}.reason"),
            reason,
            &reasons.map(String::from),
        ));
    }
}

#[cfg(test)]
mod conversion_tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_conversion_webhook_needs_review_versions_and_a_service_path() {
        let mut errors = Vec::new();
        conversion(
            &json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": "op", "namespace": "m", "path": "convert"}}}}}}),
            &mut errors,
        );
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "spec.conversion.webhook.conversionReviewVersions: Required value: must contain at least one version",
                "spec.conversion.webhook.clientConfig.service.path: Invalid value: \"convert\": must start with a '/'",
            ]
        );
        let mut none = Vec::new();
        conversion(&json!({"spec": {}}), &mut none);
        assert!(none.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd(schema: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets", "singular": "widget",
                    "shortNames": ["wd"], "categories": ["example"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": schema}, "subresources": {"status": {}}}]}
        })
    }

    fn spec(properties: Value) -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": properties}}})
    }

    fn messages(crd: &Value) -> Vec<String> {
        check_crd(crd)
            .errors
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_sound_crd_is_created() {
        let schema = spec(
            json!({"weight": {"type": "integer", "x-kubernetes-validations": [
            {"rule": "self >= 1 && self <= 100", "message": "weight is out of range"}]}}),
        );
        assert_eq!(messages(&crd(schema)), Vec::<String>::new());
    }

    #[test]
    fn string_of_a_number_in_a_message_is_refused_as_by_the_api_server() {
        let schema = spec(
            json!({"weight": {"type": "integer", "x-kubernetes-validations": [
            {"rule": "self >= 1", "messageExpression": "'weight ' + string(self) + ' too small'"}]}}),
        );
        let field = "spec.validation.openAPIV3Schema.properties[spec].properties[weight].x-kubernetes-validations[0].messageExpression";
        let budget = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";
        assert_eq!(
            messages(&crd(schema)),
            [
                format!(
                    "{field}: Forbidden: estimated messageExpression cost exceeds budget by factor of more than 100x {budget}"
                ),
                format!(
                    "{field}: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
                ),
                format!(
                    "spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x {budget}"
                ),
            ]
        );
    }

    #[test]
    fn rules_under_unbounded_lists_are_multiplied_by_the_request_size() {
        let rule = json!([{"rule": "self.matches('^[a-z]+$')", "message": "lowercase"}]);
        let unbounded = spec(json!({"names": {"type": "array",
            "items": {"type": "string", "maxLength": 64, "x-kubernetes-validations": rule}}}));
        let report = check_crd(&crd(unbounded));
        assert!(
            report
                .errors
                .iter()
                .any(|e| e.detail.starts_with("estimated rule cost exceeds budget")),
            "{:?}",
            report.errors
        );
        let bounded = spec(json!({"names": {"type": "array", "maxItems": 16,
            "items": {"type": "string", "maxLength": 64, "x-kubernetes-validations": rule}}}));
        assert_eq!(messages(&crd(bounded)), Vec::<String>::new());
    }

    #[test]
    fn compile_errors_name_the_rule() {
        let schema = spec(
            json!({"weight": {"type": "integer", "x-kubernetes-validations": [
            {"rule": "self.size() > 0", "message": "m"}, {"rule": "self + 1", "message": "m"}]}}),
        );
        let errors = check_crd(&crd(schema)).errors;
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0]
                .detail
                .contains("found no matching overload for 'size'"),
            "{errors:?}"
        );
        assert_eq!(errors[1].detail, "cel expression must evaluate to a bool");
    }

    #[test]
    fn structural_rules_come_first() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"properties": {"a": {"type": "string"}}},
            "list": {"type": "array"},
            "both": {"type": "object", "properties": {"a": {"type": "string"}},
                "additionalProperties": {"type": "string"}},
        }});
        let got = messages(&crd(schema));
        let path = "spec.validation.openAPIV3Schema";
        assert!(got.contains(&format!("{path}.properties[spec].type: Required value: must not be empty for specified object fields")), "{got:?}");
        assert!(
            got.contains(&format!(
                "{path}.properties[list].items: Required value: must be specified"
            )),
            "{got:?}"
        );
        assert!(got.contains(&format!("{path}.properties[both].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive")), "{got:?}");
    }

    #[test]
    fn defaults_must_satisfy_their_schema_and_rules() {
        let schema = spec(json!({
            "priority": {"type": "integer", "default": 300, "x-kubernetes-validations": [
                {"rule": "self <= 255", "message": "priority is out of range"}]},
            "mode": {"type": "string", "default": "Other", "enum": ["Scheduler"]},
            "limits": {"type": "object", "default": {"cpu": 1, "extra": 2},
                "properties": {"cpu": {"type": "integer"}}},
        }));
        let got = messages(&crd(schema));
        let path = "spec.validation.openAPIV3Schema.properties[spec].properties";
        assert_eq!(
            got,
            [
                format!(
                    "{path}[limits].default: Invalid value: {{\"cpu\":1,\"extra\":2}}: must not have unknown fields"
                ),
                format!(
                    "{path}[mode].default: Unsupported value: \"Other\": supported values: \"Scheduler\""
                ),
                format!(
                    "{path}[priority].default: Invalid value: \"integer\": priority is out of range"
                ),
            ]
        );
    }

    #[test]
    fn names_are_dns_labels() {
        let mut bad = crd(spec(json!({})));
        bad["spec"]["names"]["shortNames"] = json!(["CPPC"]);
        bad["metadata"]["name"] = json!("widgets");
        let got = messages(&bad);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].starts_with("metadata.name: Invalid value: \"widgets\""));
        assert!(
            got[1]
                .starts_with("spec.names.shortNames[0]: Invalid value: \"CPPC\": a DNS-1035 label")
        );
    }

    #[test]
    fn old_self_needs_a_correlatable_path() {
        let schema = spec(json!({"items": {"type": "array", "maxItems": 4, "items": {
            "type": "integer", "x-kubernetes-validations": [
                {"rule": "self >= oldSelf", "message": "may not shrink"}]}}}));
        let got = messages(&crd(schema));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].ends_with("oldSelf cannot be used on the uncorrelatable portion of the schema within spec.validation.openAPIV3Schema.properties[spec].properties[items]"), "{got:?}");
    }

    #[test]
    fn a_schema_per_version_is_reported_per_version() {
        let mut two = crd(spec(json!({})));
        let mut v2 = two["spec"]["versions"][0].clone();
        v2["name"] = json!("v2");
        v2["storage"] = json!(false);
        v2["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"] =
            json!({"x": {"type": "array"}});
        two["spec"]["versions"].as_array_mut().unwrap().push(v2);
        assert_eq!(
            messages(&two),
            [
                "spec.versions[1].schema.openAPIV3Schema.properties[spec].properties[x].items: Required value: must be specified"
            ]
        );
    }

    #[test]
    fn cost_messages_show_the_factor_as_the_api_server() {
        assert!(cost_message("c", 12_000_000, 10_000_000).contains("factor of 1.200000x"));
        assert!(cost_message("c", 25_000_000, 10_000_000).contains("factor of 2.5x"));
        assert!(cost_message("c", u64::MAX, 10_000_000).contains("factor of more than 100x"));
    }
}
