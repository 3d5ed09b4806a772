use serde_json::json;

use super::*;

fn checked(rule: &str, schema: serde_json::Value) -> Result<Checked, Vec<CheckError>> {
    let program = kube_cel::cel::Program::compile(rule).unwrap();
    let decl = Arc::new(Decl::of(&schema, false).unwrap());
    check(program.expression(), &decl)
}

fn platforms() -> serde_json::Value {
    json!({"type": "array", "maxItems": 8, "items": {"type": "object", "properties": {
        "architecture": {"type": "string", "maxLength": 16},
        "weight": {"type": "integer"}}}})
}

#[test]
fn types_the_rules_of_the_multiarch_crds() {
    let cases = [
        (
            "self >= 1 && self <= 100",
            json!({"type": "integer"}),
            CelType::Bool,
        ),
        (
            "self in ['amd64', 'arm64']",
            json!({"type": "string"}),
            CelType::Bool,
        ),
        (
            "self.all(p, self.filter(q, q.architecture == p.architecture).size() == 1)",
            platforms(),
            CelType::Bool,
        ),
        (
            "'weight ' + string(self)",
            json!({"type": "integer"}),
            CelType::String,
        ),
        (
            "self.matches('^[a-z]+$')",
            json!({"type": "string"}),
            CelType::Bool,
        ),
        (
            "self.map(p, p.weight)",
            platforms(),
            CelType::List(Box::new(CelType::Int)),
        ),
    ];
    for (rule, schema, want) in cases {
        let checked = checked(rule, schema).unwrap_or_else(|e| panic!("{rule}: {e:?}"));
        assert_eq!(checked.result, want, "{rule}");
    }
}

#[test]
fn string_of_an_integer_resolves_to_the_int_conversion() {
    let checked = checked("string(self)", json!({"type": "integer"})).unwrap();
    assert!(
        checked
            .overloads
            .values()
            .any(|o| o == &["int64_to_string"])
    );
}

#[test]
fn reports_what_cel_go_reports() {
    let cases = [
        (
            "self.nope == 1",
            platforms(),
            "type 'list(object)' does not support field selection",
        ),
        (
            "self.all(p, p.nope == 1)",
            platforms(),
            "undefined field 'nope'",
        ),
        (
            "self + 'x'",
            json!({"type": "integer"}),
            "found no matching overload for '_+_' applied to '(int, string)'",
        ),
        (
            "other == 1",
            json!({"type": "integer"}),
            "undeclared reference to 'other' (in container '')",
        ),
        (
            "self in ['a', 1]",
            json!({"type": "string"}),
            "expected type 'string' but found 'int'",
        ),
    ];
    for (rule, schema, want) in cases {
        let errors = checked(rule, schema).expect_err(rule);
        assert!(
            errors.contains(&CheckError::Invalid(want.into())),
            "{rule}: {errors:?}"
        );
    }
}

#[test]
fn names_functions_it_does_not_model() {
    let errors = checked("self.isSorted()", platforms()).unwrap_err();
    assert_eq!(errors, [CheckError::Unmodelled("isSorted".into())]);
}

#[test]
fn notices_transition_rules() {
    assert!(
        checked("self >= oldSelf", json!({"type": "integer"}))
            .unwrap()
            .uses_old_self
    );
    assert!(
        !checked("self >= 0", json!({"type": "integer"}))
            .unwrap()
            .uses_old_self
    );
}
