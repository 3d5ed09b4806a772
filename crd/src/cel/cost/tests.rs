use serde_json::{Value, json};

use super::{super::check::check, range::multiply_by_cost_factor, *};

fn estimated(rule: &str, schema: Value) -> Estimate {
    let program = kube_cel::cel::Program::compile(rule).unwrap();
    let decl = Arc::new(Decl::of(&schema, false).unwrap());
    let checked = check(program.expression(), &decl).unwrap();
    estimate(program.expression(), &checked, &decl)
}

#[test]
fn matches_cel_go_on_small_expressions() {
    // Worked through cel-go's coster by hand.
    let cases = [
        // size(): 1 + self 1; <=: 1 + args
        (
            "self.size() <= 10",
            json!({"type": "string", "maxLength": 16}),
            3,
        ),
        // ==: min(64, 7) * 0.1 rounded up, + self 1
        (
            "self == 'cluster'",
            json!({"type": "string", "maxLength": 16}),
            2,
        ),
        // matches: ceil((252 + 1) * 0.1) * ceil(8 * 0.25) + self 1
        (
            "self.matches('^[a-z]+$')",
            json!({"type": "string", "maxLength": 63}),
            53,
        ),
        // in_list: 4 items + self 1 + list literal 10
        (
            "self in ['a', 'b', 'c', 'd']",
            json!({"type": "string", "maxLength": 16}),
            15,
        ),
        // &&: lhs + rhs, each 1 + self 1 (int sizes are 0: equality-free)
        ("self >= 1 && self <= 100", json!({"type": "integer"}), 4),
    ];
    for (rule, schema, want) in cases {
        assert_eq!(estimated(rule, schema).cost.max, want, "{rule}");
    }
}

#[test]
fn a_comprehension_costs_its_body_times_the_list_size() {
    let schema = json!({"type": "array", "maxItems": 25,
        "items": {"type": "string", "maxLength": 10}});
    // Per item: @not_strictly_false(@result) 2, then && of @result (1) and
    // contains (x 1 + ceil(40 * 0.1) * ceil(8 * 0.1) = 4), so 2 + 6 = 8.
    // Plus self 1, the result 1 and the init literal 0.
    let estimate = estimated("self.all(x, x.contains('a string'))", schema);
    assert_eq!(estimate.cost.max, 25 * 8 + 2);
    assert!(estimate.reach.is_empty(), "{:?}", estimate.reach);
}

#[test]
fn unbounded_lists_of_unbounded_strings_blow_the_budget() {
    // The Kubernetes documentation's example of a rule refused at CRD creation.
    let schema = json!({"type": "array", "items": {"type": "string"}});
    let estimate = estimated("self.all(x, x.contains('a string'))", schema);
    assert!(estimate.cost.max > 100 * 10_000_000, "{:?}", estimate.cost);
    assert_eq!(
        estimate.reach,
        [
            Reach::Unbounded("self".into()),
            Reach::Unbounded("self[*]".into())
        ]
    );
}

#[test]
fn string_of_a_number_has_no_size_bound() {
    let estimate = estimated(
        "'weight ' + string(self) + ' is out of range'",
        json!({"type": "integer"}),
    );
    assert!(
        estimate.cost.max > 1_000_000_000_000_000_000,
        "{:?}",
        estimate.cost
    );
    assert_eq!(estimate.reach, [Reach::UnknownSize("string(self)".into())]);
    // A bounded string in the same place is cheap.
    let bounded = estimated(
        "'architecture \"' + self + '\" is not supported'",
        json!({"type": "string", "maxLength": 16}),
    );
    assert!(bounded.cost.max < 100, "{:?}", bounded.cost);
}

#[test]
fn nested_comprehensions_multiply() {
    let schema = json!({"type": "array", "maxItems": 8, "items": {"type": "object",
        "properties": {"architecture": {"type": "string", "maxLength": 16}}}});
    let estimate = estimated(
        "self.all(p, self.filter(q, q.architecture == p.architecture).size() == 1)",
        schema,
    );
    assert!(estimate.cost.max > 8 * 8, "{:?}", estimate.cost);
    assert!(estimate.cost.max < 10_000, "{:?}", estimate.cost);
    assert!(estimate.reach.is_empty(), "{:?}", estimate.reach);
}

#[test]
fn saturates_instead_of_overflowing() {
    assert_eq!(multiply_by_cost_factor(u64::MAX, 2.0), u64::MAX);
    assert_eq!(
        multiply_by_cost_factor(u64::MAX, 0.1),
        1_844_674_407_370_955_264
    );
    assert_eq!(multiply_by_cost_factor(7, 0.1), 1);
    assert_eq!(Range::UNKNOWN.add(Range::fixed(9)).max, u64::MAX);
}
