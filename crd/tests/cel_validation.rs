//! The CEL rules of the generated schemas, evaluated by a CEL interpreter (kube-cel, the
//! engine kube-rs uses for client-side CRD validation) exactly as written in the CRDs.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::{fixtures, read_yaml, schema_for};
use kube_cel::Validator;
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
