//! Every generated CRD passes what a Kubernetes 1.36 API server checks when it creates a
//! CRD, checked statically so that a CRD the server would refuse cannot ship.
//!
//! `multiarch_fake_apiserver::apiextensions` encodes those checks: names and versions, the
//! structural-schema rules, defaults valid against their own schema and rules, and every
//! `x-kubernetes-validations` rule and `messageExpression` type-checked and costed with the
//! API server's estimator (cel-go's coster with the CRD size estimator: `string()` of a
//! number has no size bound, strings without `maxLength` may fill a 3 MiB request, ...),
//! per expression and for the whole schema. kube-cel's `analyze_rule` is run beside it: it
//! checks variable scope and catches unbounded comprehensions, but it does not see
//! `messageExpression`s, `string()` of numbers, cardinality or the per-CRD total, which is
//! why the API server's estimator rules are encoded for the constructs the CRDs use.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use kube_cel::{ScopeContext, WarningKind, analyze_rule, compile_schema};
use multiarch_crd::render;
use multiarch_fake_apiserver::apiextensions::check_crd;
use serde_json::Value;

fn generated() -> Vec<(String, Value)> {
    render::crds()
        .unwrap()
        .into_iter()
        .map(|crd| (render::file_name(&crd), serde_json::to_value(crd).unwrap()))
        .collect()
}

#[test]
fn the_api_server_creates_every_crd() {
    for (file, crd) in generated() {
        let errors: Vec<String> = check_crd(&crd)
            .errors
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            errors.is_empty(),
            "a Kubernetes 1.36 API server refuses {file}:\n{}",
            errors.join("\n")
        );
    }
}

/// Stricter than the API server, which accepts a rule on an unbounded string while its
/// estimate stays in budget: every string, list and map a rule or message reaches has a
/// declared bound, and no message builds a string of unknown size.
#[test]
fn rules_and_messages_reach_only_bounded_values() {
    for (file, crd) in generated() {
        let reach = check_crd(&crd).reach;
        assert!(
            reach.is_empty(),
            "{file}: add maxLength/maxItems/maxProperties (or drop string() of numbers):\n{reach:#?}"
        );
    }
}

/// `(rule or message expression, the schema node it is declared on)`.
fn expressions(schema: &Value, out: &mut Vec<(String, Value)>) {
    match schema {
        Value::Object(map) => {
            for rule in map
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                for key in ["rule", "messageExpression"] {
                    if let Some(expression) = rule[key].as_str() {
                        out.push((expression.to_owned(), schema.clone()));
                    }
                }
            }
            map.values().for_each(|v| expressions(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| expressions(v, out)),
        _ => {}
    }
}

/// Whether the scope warning is about a variable the expression's own macro binds
/// (`p` in `self.all(p, ..)`), which kube-cel's scope check does not know.
fn binds_itself(expression: &str, warning: &str) -> bool {
    let Some(variable) = warning.split('\'').nth(1) else {
        return false;
    };
    ["all", "exists", "exists_one", "filter", "map"]
        .iter()
        .any(|m| expression.contains(&format!(".{m}({variable},")))
}

#[test]
fn kube_cel_analysis_finds_nothing() {
    let mut all = Vec::new();
    for (_, crd) in generated() {
        for version in crd["spec"]["versions"].as_array().unwrap() {
            expressions(&version["schema"]["openAPIV3Schema"], &mut all);
        }
    }
    assert!(
        all.len() >= 15,
        "expected the API's rules, found {}",
        all.len()
    );
    for (expression, node) in all {
        let warnings: Vec<_> = analyze_rule(
            &expression,
            &compile_schema(&node),
            ScopeContext::CrdValidation,
        )
        .into_iter()
        .filter(|w| !(w.kind == WarningKind::WrongScope && binds_itself(&expression, &w.message)))
        .collect();
        assert!(warnings.is_empty(), "{expression}: {warnings:?}");
    }
}

/// The API server answers a rule whose `reason` is `FieldValueDuplicate` with
/// `Duplicate value: "array"` and drops its message: a message there is never read.
#[test]
fn every_rule_message_reaches_the_user() {
    let mut rules = Vec::new();
    for (_, crd) in generated() {
        collect_rules(&crd, &mut rules);
    }
    for rule in rules {
        let has_message = rule.get("message").is_some() || rule.get("messageExpression").is_some();
        assert!(
            !(has_message && rule["reason"] == "FieldValueDuplicate"),
            "{rule}: the API server would not show this message"
        );
    }
}

fn collect_rules(value: &Value, out: &mut Vec<Value>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Array(list)) = map.get("x-kubernetes-validations") {
                out.extend(list.iter().cloned());
            }
            map.values().for_each(|v| collect_rules(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_rules(v, out)),
        _ => {}
    }
}

#[test]
fn kubectl_finds_the_kinds_by_short_name_and_category() {
    let crds = generated();
    for (plural, short) in [
        ("clusterpodplacementconfigs", "cppc"),
        ("podplacementconfigs", "ppc"),
        ("enoexecevents", "enoexec"),
    ] {
        let (_, crd) = crds
            .iter()
            .find(|(_, c)| c["spec"]["names"]["plural"] == plural)
            .unwrap();
        assert_eq!(
            crd["spec"]["names"]["shortNames"],
            serde_json::json!([short])
        );
        assert_eq!(
            crd["spec"]["names"]["categories"],
            serde_json::json!(["multiarch"])
        );
    }
}
