//! The CEL rules of the generated schemas, evaluated by a CEL interpreter (kube-cel, the
//! engine kube-rs uses for client-side CRD validation) exactly as written in the CRDs.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::{fixtures, read_yaml, schema_for};
use kube_cel::{ScopeContext, Validator, check_rule_scope, compile_schema, estimate_rule_cost};
use serde_json::Value;

/// `# expect FIELD: MESSAGE` on the first line of an invalid fixture.
fn expectation(path: &std::path::Path) -> (String, String) {
    let text = std::fs::read_to_string(path).unwrap();
    let first = text.lines().next().unwrap();
    let rest = first
        .strip_prefix("# expect ")
        .unwrap_or_else(|| panic!("{} lacks an `# expect` line", path.display()));
    let (field, message) = rest.split_once(": ").unwrap();
    (field.to_owned(), message.to_owned())
}

#[test]
fn valid_objects_pass_every_rule() {
    let validator = Validator::new();
    for path in fixtures("valid") {
        let object = read_yaml(&path);
        let result = validator.validate(&schema_for(&object), &object, None);
        assert!(
            result.is_ok(),
            "{} was rejected: {result:?}",
            path.display()
        );
    }
}

#[test]
fn invalid_objects_are_rejected_with_a_readable_message() {
    let validator = Validator::new();
    for path in fixtures("invalid") {
        let object = read_yaml(&path);
        let (field, message) = expectation(&path);
        let errors = validator
            .validate(&schema_for(&object), &object, None)
            .expect_err(&format!("{} was accepted", path.display()))
            .into_vec();
        assert_eq!(errors.len(), 1, "{}: {errors:?}", path.display());
        assert_eq!(errors[0].field_path, field, "{}", path.display());
        assert_eq!(errors[0].message, message, "{}", path.display());
    }
}

#[test]
fn an_update_is_checked_like_a_create() {
    let validator = Validator::new();
    let old = read_yaml(
        &fixtures("valid")
            .into_iter()
            .find(|p| p.ends_with("mto-v1beta1-plugins.yaml"))
            .unwrap(),
    );
    let mut new = old.clone();
    new["spec"]["plugins"]["nodeAffinityScoring"]["platforms"][1]["architecture"] =
        Value::from("ppc64le");
    let errors = validator
        .validate(&schema_for(&new), &new, Some(&old))
        .unwrap_err()
        .into_vec();
    assert_eq!(
        errors[0].message,
        "each architecture may appear only once in platforms: merge the duplicate entries into one"
    );
}

/// Collects `(rule, schema node)` for every `x-kubernetes-validations` entry.
fn rules(schema: &Value, out: &mut Vec<(String, Value)>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Array(list)) = map.get("x-kubernetes-validations") {
                for rule in list {
                    out.push((rule["rule"].as_str().unwrap().to_owned(), schema.clone()));
                }
            }
            map.values().for_each(|v| rules(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| rules(v, out)),
        _ => {}
    }
}

/// Whether the scope warning names a variable that a macro of `rule` binds.
fn binds_itself(rule: &str, warning: &str) -> bool {
    let Some(variable) = warning.split('\'').nth(1) else {
        return false;
    };
    ["all", "exists", "exists_one", "filter", "map"]
        .iter()
        .any(|m| rule.contains(&format!(".{m}({variable},")))
}

/// The API server refuses a CRD whose rules use unknown variables or whose estimated cost
/// is over budget (e.g. a list rule without `maxItems`); check both before it does.
#[test]
fn every_rule_is_in_scope_and_within_the_cost_budget() {
    let mut all = Vec::new();
    for crd in multiarch_crd::render::crds().unwrap() {
        for version in &crd.spec.versions {
            let schema = serde_json::to_value(
                version
                    .schema
                    .as_ref()
                    .unwrap()
                    .open_api_v3_schema
                    .as_ref()
                    .unwrap(),
            )
            .unwrap();
            rules(&schema, &mut all);
        }
    }
    assert!(
        all.len() >= 10,
        "expected the CEL rules of the API, found {}",
        all.len()
    );
    for (rule, node) in all {
        // The scope check does not know comprehension variables (`p` in `self.all(p, ..)`),
        // so a warning about a variable the rule itself binds is not a finding.
        let scope: Vec<_> = check_rule_scope(&rule, ScopeContext::CrdValidation)
            .into_iter()
            .filter(|w| !binds_itself(&rule, &w.message))
            .collect();
        assert!(scope.is_empty(), "{rule}: {scope:?}");
        let cost = estimate_rule_cost(&rule, &compile_schema(&node));
        assert!(cost.is_empty(), "{rule}: {cost:?}");
    }
}
