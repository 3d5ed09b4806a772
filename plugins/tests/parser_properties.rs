//! Property tests for what the plugins read from untrusted objects: resource quantities
//! (any tenant can write any string into a pod's requests) and label and node selectors
//! (any operator, key and values a user can put in an affinity term).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use k8s_openapi::{api::core::v1 as core, apimachinery::pkg::apis::meta::v1 as meta};
use multiarch_plugins::model::quantity::{QUANTITY_LIMIT, parse_scaled};
use multiarch_policy::selectors::{LabelSelector, NodeSelector};
use proptest::prelude::*;

const SUFFIXES: [(&str, i32, u32); 16] = [
    ("", 0, 0),
    ("n", -9, 0),
    ("u", -6, 0),
    ("m", -3, 0),
    ("k", 3, 0),
    ("M", 6, 0),
    ("G", 9, 0),
    ("T", 12, 0),
    ("P", 15, 0),
    ("E", 18, 0),
    ("Ki", 0, 10),
    ("Mi", 0, 20),
    ("Gi", 0, 30),
    ("Ti", 0, 40),
    ("Pi", 0, 50),
    ("Ei", 0, 60),
];

/// The value by a different route (i128 on the parts), held within ±2^50 as the parser
/// holds it (anything that overflows an i128 is far beyond it).
fn expected(mantissa: i64, frac_digits: u32, suffix: usize, scale: i64) -> i64 {
    let exact = || -> Option<i128> {
        let (_, base10, base2) = SUFFIXES[suffix];
        let power = base10 - i32::try_from(frac_digits).ok()?;
        let value = i128::from(mantissa)
            .checked_mul(i128::from(scale))?
            .checked_mul(1i128 << base2)?;
        if power >= 0 {
            value.checked_mul(10i128.checked_pow(power.unsigned_abs())?)
        } else {
            let d = 10i128.checked_pow(power.unsigned_abs())?;
            // Rounded up (ceiling), as requests are.
            Some((value + d - 1).div_euclid(d))
        }
    };
    let limit = i128::from(QUANTITY_LIMIT);
    i64::try_from(exact().map_or(limit, |v| v.clamp(-limit, limit))).unwrap()
}

fn format_decimal(mantissa: i64, frac_digits: u32) -> String {
    let digits = mantissa.unsigned_abs().to_string();
    let frac = frac_digits as usize;
    if frac == 0 {
        return digits;
    }
    let padded = format!("{digits:0>width$}", width = frac + 1);
    let (int, fraction) = padded.split_at(padded.len() - frac);
    format!("{int}.{fraction}")
}

fn labels(pairs: &[(String, String)]) -> BTreeMap<String, String> {
    pairs.iter().cloned().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Whatever a tenant writes, parsing answers (a value or an error) and never panics.
    #[test]
    fn any_string_parses_or_is_refused(input in ".{0,40}", scale in prop_oneof![Just(1i64), Just(1000)]) {
        let _ = parse_scaled(&input, scale);
    }

    /// Hostile but well-formed (the API server accepts them): huge mantissas, exponents
    /// and binary suffixes are values, never errors or overflows.
    #[test]
    fn extreme_numbers_never_overflow(
        mantissa in "[0-9]{1,40}",
        exponent in any::<i32>(),
        suffix in 0usize..16,
        scale in prop_oneof![Just(1i64), Just(1000)],
    ) {
        // Well-formed: always a value, within the limit.
        for text in [
            format!("{mantissa}e{exponent}"),
            format!("-{mantissa}{}", SUFFIXES[suffix].0),
            format!("{mantissa}.{mantissa}{}", SUFFIXES[suffix].0),
        ] {
            let value = parse_scaled(&text, scale);
            prop_assert!(value.as_ref().is_ok_and(|v| v.abs() <= QUANTITY_LIMIT), "{}: {:?}", text, value);
        }
    }

    /// Valid quantities have the value arithmetic gives them, held within the limit.
    #[test]
    fn valid_quantities_have_their_value(
        mantissa in 0i64..1_000_000_000_000,
        frac_digits in 0u32..6,
        suffix in 0usize..16,
        scale in prop_oneof![Just(1i64), Just(1000)],
    ) {
        let text = format!("{}{}", format_decimal(mantissa, frac_digits), SUFFIXES[suffix].0);
        prop_assert_eq!(parse_scaled(&text, scale), Ok(expected(mantissa, frac_digits, suffix, scale)), "{}", text);
    }

    /// Any operator, key and values: a selector answers, never panics; `In` and `NotIn`
    /// on a present key are each other's negation; an unknown operator matches nothing.
    #[test]
    fn label_selectors_follow_apimachinery(
        key in "[a-z]{1,3}",
        operator in prop_oneof![Just("In".to_owned()), Just("NotIn".to_owned()), Just("Exists".to_owned()), Just("DoesNotExist".to_owned()), ".{0,8}"],
        values in proptest::collection::vec("[a-z]{0,2}", 0..4),
        present in proptest::collection::vec(("[a-z]{1,3}", "[a-z]{0,2}"), 0..4),
    ) {
        let labels = labels(&present);
        let selector = |op: &str| LabelSelector::from(&meta::LabelSelector {
            match_expressions: Some(vec![meta::LabelSelectorRequirement {
                key: key.clone(),
                operator: op.to_owned(),
                values: Some(values.clone()),
            }]),
            match_labels: None,
        });
        let matched = selector(&operator).matches(&labels);
        match operator.as_str() {
            "In" | "NotIn" if values.is_empty() => prop_assert!(!matched),
            "In" => prop_assert_eq!(matched, labels.get(&key).is_some_and(|v| values.contains(v))),
            "NotIn" => prop_assert_eq!(matched, labels.get(&key).is_none_or(|v| !values.contains(v))),
            "Exists" | "DoesNotExist" if !values.is_empty() => prop_assert!(!matched),
            "Exists" => prop_assert_eq!(matched, labels.contains_key(&key)),
            "DoesNotExist" => prop_assert_eq!(matched, !labels.contains_key(&key)),
            _ => prop_assert!(!matched, "unknown operator {:?} matched", operator),
        }
        if !values.is_empty() && labels.contains_key(&key) {
            prop_assert_ne!(selector("In").matches(&labels), selector("NotIn").matches(&labels));
        }
    }

    /// `Gt`/`Lt` with any values and labels: integers compare, anything else matches nothing.
    #[test]
    fn node_selector_gt_lt_never_panic(
        operator in prop_oneof![Just("Gt"), Just("Lt")],
        values in proptest::collection::vec(".{0,22}", 0..3),
        label in ".{0,22}",
    ) {
        let selector = NodeSelector::from(&core::NodeSelector {
            node_selector_terms: vec![core::NodeSelectorTerm {
                match_expressions: Some(vec![core::NodeSelectorRequirement {
                    key: "k".into(),
                    operator: operator.to_owned(),
                    values: Some(values.clone()),
                }]),
                match_fields: None,
            }],
        });
        let labels = BTreeMap::from([("k".to_owned(), label.clone())]);
        let matched = selector.matches(&labels, "node-1");
        let bound = (values.len() == 1).then(|| values[0].parse::<i64>().ok()).flatten();
        let value = label.parse::<i64>().ok();
        let want = match (bound, value) {
            (Some(b), Some(v)) => if operator == "Gt" { v > b } else { v < b },
            _ => false,
        };
        prop_assert_eq!(matched, want);
    }
}
