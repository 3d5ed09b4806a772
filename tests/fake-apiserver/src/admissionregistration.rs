//! `admissionregistration.k8s.io`: webhook configurations and validating admission
//! policies, stored with the defaults the real server fills in and refused with its field
//! errors; and the policies themselves, run on the writes they match (the validating
//! admission plugin: resource rules, namespace and object selectors, a parameter by name,
//! the validations' CEL, the failure policy), answering with the recorded statuses.

use std::collections::BTreeMap;

use base64::Engine;
use kube_cel::{KubeCelExt, cel};
use serde_json::{Value, json};

use crate::apiextensions::FieldError;

pub const MUTATING: &str = "admissionregistration.k8s.io/mutatingwebhookconfigurations";
pub const VALIDATING: &str = "admissionregistration.k8s.io/validatingwebhookconfigurations";
pub const POLICIES: &str = "admissionregistration.k8s.io/validatingadmissionpolicies";
pub const BINDINGS: &str = "admissionregistration.k8s.io/validatingadmissionpolicybindings";

fn set_default(object: &mut Value, key: &str, value: Value) {
    if let Some(map) = object.as_object_mut() {
        map.entry(key.to_owned()).or_insert(value);
    }
}

/// Go's base64 decoder (`[]byte` fields): padding required, stray low bits ignored.
fn decode_bytes(text: &str) -> Option<Vec<u8>> {
    let lenient = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
    );
    lenient.decode(text).ok()
}

/// Defaults as the real server stores them, then its validation errors.
pub fn admit(resource: &str, object: &mut Value) -> Result<(), Vec<FieldError>> {
    match resource {
        MUTATING | VALIDATING => webhooks(resource == MUTATING, object),
        POLICIES => {
            let spec = &mut object["spec"];
            set_default(spec, "failurePolicy", json!("Fail"));
            let constraints = &mut spec["matchConstraints"];
            set_default(constraints, "namespaceSelector", json!({}));
            set_default(constraints, "objectSelector", json!({}));
            set_default(constraints, "matchPolicy", json!("Equivalent"));
            for rule in constraints["resourceRules"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                set_default(rule, "scope", json!("*"));
            }
            set_default(object, "status", json!({}));
            let mut errors = Vec::new();
            if object["spec"]["validations"]
                .as_array()
                .is_none_or(Vec::is_empty)
                && object["spec"]["auditAnnotations"]
                    .as_array()
                    .is_none_or(Vec::is_empty)
            {
                errors.push(FieldError::required(
                    "spec.validations",
                    "validations or auditAnnotations must contain at least one item",
                ));
            }
            for (i, v) in object["spec"]["validations"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                if let Some(expression) = v["expression"].as_str()
                    && let Err(e) = cel::Program::compile(expression)
                {
                    errors.push(FieldError::invalid(
                        format!("spec.validations[{i}].expression"),
                        Some(format!("{expression:?}")),
                        format!("compilation failed: {e}"),
                    ));
                }
            }
            errors_or_ok(errors)
        }
        BINDINGS => {
            let spec = &mut object["spec"];
            let resources = &mut spec["matchResources"];
            if resources.is_object() {
                set_default(resources, "objectSelector", json!({}));
                set_default(resources, "namespaceSelector", json!({}));
                set_default(resources, "matchPolicy", json!("Equivalent"));
            }
            let mut errors = Vec::new();
            if object["spec"]["policyName"]
                .as_str()
                .is_none_or(str::is_empty)
            {
                errors.push(FieldError::required("spec.policyName", ""));
            }
            if object["spec"]["validationActions"]
                .as_array()
                .is_none_or(Vec::is_empty)
            {
                errors.push(FieldError::required(
                    "spec.validationActions",
                    "at least one validation action is required",
                ));
            }
            errors_or_ok(errors)
        }
        _ => Ok(()),
    }
}

fn errors_or_ok(errors: Vec<FieldError>) -> Result<(), Vec<FieldError>> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The API server's defaults for a webhook, and its CA bundle read as it reads it.
fn default_webhook(hook: &mut Value, mutating: bool, at: &str, errors: &mut Vec<FieldError>) {
    set_default(hook, "failurePolicy", json!("Fail"));
    set_default(hook, "matchPolicy", json!("Equivalent"));
    set_default(hook, "namespaceSelector", json!({}));
    set_default(hook, "objectSelector", json!({}));
    set_default(hook, "timeoutSeconds", json!(10));
    if mutating {
        set_default(hook, "reinvocationPolicy", json!("Never"));
    }
    for rule in hook["rules"].as_array_mut().into_iter().flatten() {
        set_default(rule, "scope", json!("*"));
    }
    if let Some(bundle) = hook["clientConfig"]["caBundle"].as_str().map(str::to_owned) {
        match decode_bytes(&bundle) {
            Some(bytes) => {
                hook["clientConfig"]["caBundle"] =
                    json!(base64::engine::general_purpose::STANDARD.encode(bytes));
            }
            None => errors.push(FieldError::invalid(
                format!("{at}.clientConfig.caBundle"),
                None,
                "illegal base64 data",
            )),
        }
    }
}

/// A webhook's operations, failure, reinvocation and side-effect policies and timeout.
fn check_policies(hook: &Value, mutating: bool, at: &str, errors: &mut Vec<FieldError>) {
    for (j, rule) in hook["rules"].as_array().into_iter().flatten().enumerate() {
        for (k, op) in rule["operations"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let known = ["*", "CREATE", "UPDATE", "DELETE", "CONNECT"];
            if !op.as_str().is_some_and(|o| known.contains(&o)) {
                errors.push(FieldError::not_supported(
                    format!("{at}.rules[{j}].operations[{k}]"),
                    op,
                    &supported(&known),
                ));
            }
        }
    }
    let failure = &hook["failurePolicy"];
    if !matches!(failure.as_str(), Some("Ignore" | "Fail")) {
        errors.push(FieldError::not_supported(
            format!("{at}.failurePolicy"),
            failure,
            &supported(&["Fail", "Ignore"]),
        ));
    }
    if mutating {
        let reinvocation = &hook["reinvocationPolicy"];
        if !matches!(reinvocation.as_str(), Some("Never" | "IfNeeded")) {
            errors.push(FieldError::not_supported(
                format!("{at}.reinvocationPolicy"),
                reinvocation,
                &supported(&["IfNeeded", "Never"]),
            ));
        }
    }
    match &hook["sideEffects"] {
        Value::Null => errors.push(FieldError::required(
            format!("{at}.sideEffects"),
            "must specify one of None, NoneOnDryRun",
        )),
        Value::String(s) if s == "None" || s == "NoneOnDryRun" => {}
        other => errors.push(FieldError::not_supported(
            format!("{at}.sideEffects"),
            other,
            &supported(&["None", "NoneOnDryRun"]),
        )),
    }
    if let Some(timeout) = hook["timeoutSeconds"].as_i64()
        && !(1..=30).contains(&timeout)
    {
        errors.push(FieldError::invalid(
            format!("{at}.timeoutSeconds"),
            Some(timeout.to_string()),
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
}

fn supported(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// `ValidateMutatingWebhookConfiguration` / `ValidateValidatingWebhookConfiguration`, for
/// the fields multiarch writes, in the real order of checks.
fn webhooks(mutating: bool, object: &mut Value) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut names = BTreeMap::new();
    for (i, hook) in object["webhooks"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("webhooks[{i}]");
        default_webhook(hook, mutating, &at, &mut errors);
        let name = hook["name"].as_str().unwrap_or("");
        if name.split('.').filter(|s| !s.is_empty()).count() < 3 {
            errors.push(FieldError::invalid(
                format!("{at}.name"),
                Some(format!("{name:?}")),
                "should be a domain with at least three segments separated by dots",
            ));
        }
        if names.insert(name.to_owned(), i).is_some() {
            errors.push(FieldError::duplicate(
                format!("{at}.name"),
                Some(format!("{name:?}")),
            ));
        }
        let versions = hook["admissionReviewVersions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !versions.iter().any(|v| v == "v1" || v == "v1beta1") {
            errors.push(FieldError::required(
                format!("{at}.admissionReviewVersions"),
                "must specify one of v1, v1beta1",
            ));
        }
        check_policies(hook, mutating, &at, &mut errors);
        let service = &hook["clientConfig"]["service"];
        let url = &hook["clientConfig"]["url"];
        match (service.is_object(), url.is_string()) {
            (true, true) => errors.push(FieldError::required(
                format!("{at}.clientConfig"),
                "exactly one of url or service is required",
            )),
            (false, false) => errors.push(FieldError::required(
                format!("{at}.clientConfig"),
                "exactly one of url or service is required",
            )),
            (true, false) => {
                if let Some(path) = service["path"].as_str()
                    && !path.starts_with('/')
                {
                    errors.push(FieldError::invalid(
                        format!("{at}.clientConfig.service.path"),
                        Some(format!("{path:?}")),
                        "must start with a '/'",
                    ));
                }
                if let Some(port) = service["port"].as_i64()
                    && !(1..=65535).contains(&port)
                {
                    errors.push(FieldError::invalid(
                        format!("{at}.clientConfig.service.port"),
                        Some(port.to_string()),
                        "port is not valid: must be between 1 and 65535, inclusive",
                    ));
                }
            }
            (false, true) => {}
        }
    }
    errors_or_ok(errors)
}

/// One write, as the validating admission plugin sees it.
pub struct Attributes<'a> {
    /// `group/plural`, or `plural` for the core group.
    pub resource: &'a str,
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
}

/// What policies see of the cluster: objects by `group/plural`, namespace and name.
pub trait Lookup {
    fn find(&self, resource: &str, namespace: &str, name: &str) -> Option<Value>;
    fn all(&self, resource: &str) -> Vec<Value>;
    /// `group/plural` of a kind (`apiVersion` + `kind`), when served, and whether it is
    /// namespaced.
    fn resource_of(&self, api_version: &str, kind: &str) -> Option<(String, bool)>;
}

/// A denial: the HTTP status and its body.
pub struct Denied {
    pub code: u16,
    pub body: Value,
}

fn glob(list: &Value, value: &str) -> bool {
    list.as_array()
        .into_iter()
        .flatten()
        .any(|v| v == "*" || v == value)
}

/// `metav1.LabelSelector` against labels: `matchLabels` and `matchExpressions`.
pub fn selector_matches(selector: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let matched = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    matched
        && selector["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|e| {
                let key = e["key"].as_str().unwrap_or("");
                let values: Vec<&str> = e["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                match e["operator"].as_str() {
                    Some("In") => label(key).is_some_and(|v| values.contains(&v)),
                    Some("NotIn") => label(key).is_none_or(|v| !values.contains(&v)),
                    Some("Exists") => label(key).is_some(),
                    Some("DoesNotExist") => label(key).is_none(),
                    _ => false,
                }
            })
}

fn rules_match(constraints: &Value, attributes: &Attributes<'_>) -> bool {
    let (group, plural) = attributes
        .resource
        .split_once('/')
        .unwrap_or(("", attributes.resource));
    constraints["resourceRules"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|rule| {
            glob(&rule["apiGroups"], group)
                && glob(&rule["resources"], plural)
                && glob(&rule["operations"], attributes.operation)
        })
}

fn selectors_match(resources: &Value, attributes: &Attributes<'_>, lookup: &dyn Lookup) -> bool {
    if resources.is_null() {
        return true;
    }
    let object = attributes.object.or(attributes.old_object);
    let labels = object
        .map(|o| o["metadata"]["labels"].clone())
        .unwrap_or(Value::Null);
    if !selector_matches(&resources["objectSelector"], &labels) {
        return false;
    }
    let namespace_selector = &resources["namespaceSelector"];
    if attributes.namespace.is_empty() || namespace_selector.is_null() {
        return true;
    }
    let namespace_labels = lookup
        .find("namespaces", "", attributes.namespace)
        .map(|ns| ns["metadata"]["labels"].clone())
        .unwrap_or(Value::Null);
    selector_matches(namespace_selector, &namespace_labels)
}

/// Runs every bound policy on the write; the first denial, as the real server answers it.
pub fn validate(attributes: &Attributes<'_>, lookup: &dyn Lookup) -> Option<Denied> {
    let policies: BTreeMap<String, Value> = lookup
        .all(POLICIES)
        .into_iter()
        .filter_map(|p| Some((p["metadata"]["name"].as_str()?.to_owned(), p)))
        .collect();
    for binding in lookup.all(BINDINGS) {
        let Some(policy) = binding["spec"]["policyName"]
            .as_str()
            .and_then(|n| policies.get(n))
        else {
            continue;
        };
        if !binding["spec"]["validationActions"]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v == "Deny"))
        {
            continue;
        }
        let spec = &policy["spec"];
        if !rules_match(&spec["matchConstraints"], attributes)
            || !selectors_match(&spec["matchConstraints"], attributes, lookup)
            || !selectors_match(&binding["spec"]["matchResources"], attributes, lookup)
        {
            continue;
        }
        let policy_name = policy["metadata"]["name"].as_str().unwrap_or("");
        let binding_name = binding["metadata"]["name"].as_str().unwrap_or("");
        let fail = spec["failurePolicy"].as_str() != Some("Ignore");
        let params = match params(spec, &binding["spec"], attributes, lookup) {
            Ok(params) => params,
            Err(error) if fail => {
                return Some(denied(
                    attributes,
                    policy_name,
                    binding_name,
                    &format!("failed to configure binding: {error}"),
                    None,
                ));
            }
            Err(_) => continue,
        };
        for validation in spec["validations"].as_array().into_iter().flatten() {
            match evaluate(validation, attributes, &params) {
                Ok(true) => {}
                Ok(false) => {
                    let message = validation["message"]
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| {
                            format!(
                                "failed expression: {}",
                                validation["expression"].as_str().unwrap_or("")
                            )
                        });
                    return Some(denied(
                        attributes,
                        policy_name,
                        binding_name,
                        &message,
                        validation["reason"].as_str(),
                    ));
                }
                Err(error) if fail => {
                    return Some(denied(
                        attributes,
                        policy_name,
                        binding_name,
                        &format!(
                            "expression '{}' resulted in error: {error}",
                            validation["expression"].as_str().unwrap_or("")
                        ),
                        None,
                    ));
                }
                Err(_) => {}
            }
        }
    }
    None
}

/// The parameter object (`null` without a `paramKind`), or why the binding is misconfigured.
fn params(
    spec: &Value,
    binding: &Value,
    attributes: &Attributes<'_>,
    lookup: &dyn Lookup,
) -> Result<Value, String> {
    let kind = &spec["paramKind"];
    if kind.is_null() {
        return Ok(Value::Null);
    }
    let Some((resource, namespaced)) = lookup.resource_of(
        kind["apiVersion"].as_str().unwrap_or(""),
        kind["kind"].as_str().unwrap_or(""),
    ) else {
        return Err(format!(
            "failed to find resource referenced by paramKind: '{}, Kind={}'",
            kind["apiVersion"].as_str().unwrap_or(""),
            kind["kind"].as_str().unwrap_or("")
        ));
    };
    let reference = &binding["paramRef"];
    let name = reference["name"].as_str().unwrap_or("");
    let namespace = match reference["namespace"].as_str() {
        _ if !namespaced => "",
        Some(namespace) => namespace,
        None => attributes.namespace,
    };
    match lookup.find(&resource, namespace, name) {
        Some(found) => Ok(found),
        None if reference["parameterNotFoundAction"] == "Deny" => {
            Err("no params found for policy binding with `Deny` parameterNotFoundAction".to_owned())
        }
        None => Ok(Value::Null),
    }
}

fn evaluate(
    validation: &Value,
    attributes: &Attributes<'_>,
    params: &Value,
) -> Result<bool, String> {
    let expression = validation["expression"].as_str().unwrap_or("true");
    let program = cel::Program::compile(expression).map_err(|e| e.to_string())?;
    let mut context = cel::Context::default().with_all();
    let object = attributes.object.cloned().unwrap_or(Value::Null);
    let old = attributes.old_object.cloned().unwrap_or(Value::Null);
    let request = json!({"operation": attributes.operation, "namespace": attributes.namespace, "name": attributes.name});
    for (name, value) in [
        ("object", &object),
        ("oldObject", &old),
        ("params", params),
        ("request", &request),
    ] {
        context
            .add_variable(name, value)
            .map_err(|e| e.to_string())?;
    }
    match program.execute(&context) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("expected a bool, got {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// `admission.NewForbidden` with the policy's words; a validation's `reason` sets the
/// status reason and code (the recorded 422 `Invalid`), else 403 `Forbidden`.
fn denied(
    attributes: &Attributes<'_>,
    policy: &str,
    binding: &str,
    message: &str,
    reason: Option<&str>,
) -> Denied {
    let (group, plural) = attributes
        .resource
        .split_once('/')
        .unwrap_or(("", attributes.resource));
    let qualified = if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    };
    let text = format!(
        "ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {message}"
    );
    let full = format!("{qualified} {:?} is forbidden: {text}", attributes.name);
    let mut details = json!({"name": attributes.name, "kind": plural});
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    // A validation's reason sets the status reason and code and adds the message as a
    // cause; without one it is a plain 403.
    let (code, reason) = match reason {
        Some(reason) => {
            details["causes"] = json!([{"message": text}]);
            let code = match reason {
                "Invalid" => 422,
                "Unauthorized" => 401,
                "RequestEntityTooLarge" => 413,
                _ => 403,
            };
            (code, reason)
        }
        None => (403, "Forbidden"),
    };
    Denied {
        code,
        body: json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                     "message": full, "reason": reason, "details": details, "code": code}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_defaults_and_errors_match_the_recording() {
        let mut good = json!({"webhooks": [{"name": "pods.multiarch.openshift.io", "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "failurePolicy": "Ignore", "timeoutSeconds": 5,
            "clientConfig": {"service": {"namespace": "multiarch", "name": "w", "path": "/mutate-pods", "port": 443},
                             "caBundle": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJ="},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}]});
        admit(MUTATING, &mut good).unwrap();
        let hook = &good["webhooks"][0];
        assert_eq!(hook["matchPolicy"], "Equivalent");
        assert_eq!(hook["reinvocationPolicy"], "Never");
        assert_eq!(hook["objectSelector"], json!({}));
        assert_eq!(hook["rules"][0]["scope"], "*");
        assert_eq!(
            hook["clientConfig"]["caBundle"],
            "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUI="
        );

        let mut bad = good.clone();
        bad["webhooks"][0]["sideEffects"] = json!("Unknown");
        bad["webhooks"][0]["clientConfig"]["service"]["path"] = json!("mutate");
        let errors = admit(MUTATING, &mut bad).unwrap_err();
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "webhooks[0].sideEffects: Unsupported value: \"Unknown\": supported values: \"None\", \"NoneOnDryRun\"",
                "webhooks[0].clientConfig.service.path: Invalid value: \"mutate\": must start with a '/'",
            ]
        );
    }
}
