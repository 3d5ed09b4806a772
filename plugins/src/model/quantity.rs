//! Kubernetes resource quantities (`100m`, `500Mi`, `1.5`, `2e3`) as integers.
//!
//! Everything the API server accepts is read, in the forms it stores: its canonical
//! form can have more digits than an `i64` holds (`123456789012345678901`,
//! `12345678901234567890m`, `10e39`, recorded from kube-apiserver 1.36.2 in
//! `tests/fixtures/apiserver/canonical-quantities.json`). The value is computed exactly
//! (big integers) and rounded up as Kubernetes rounds requests; only the syntax can be
//! wrong.

use num_bigint::{BigInt, Sign};
use thiserror::Error;

/// A quantity string that Kubernetes would not accept.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid quantity {0:?}")]
pub struct InvalidQuantity(pub String);

/// The largest amount a quantity counts for, in its scaled unit: 2^50 (a pebibyte of
/// memory, 10^12 cores in millicores). Anything larger is larger than any node, and 8,191
/// such requests on one node still add up without overflowing an `i64`.
pub const QUANTITY_LIMIT: i64 = 1 << 50;

/// Significant digits read exactly; further non-zero digits round the value up (the API
/// server never stores that many: it rounds to milli-units).
const EXACT_DIGITS: usize = 80;

/// Parses a quantity and returns it multiplied by `scale` (1000 for milli-units, 1 for
/// plain units), rounded up as Kubernetes does for requests and held within
/// ±[`QUANTITY_LIMIT`].
pub fn parse_scaled(input: &str, scale: i64) -> Result<i64, InvalidQuantity> {
    let err = || InvalidQuantity(input.to_owned());
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let number = Decimal::parse(number).ok_or_else(err)?;
    let (base10, base2): (i64, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        e if e.starts_with(['e', 'E']) => (parse_exponent(&e[1..]).ok_or_else(err)?, 0),
        _ => return Err(err()),
    };
    Ok(number.scaled(base10, base2, scale))
}

/// A signed integer exponent; one too large for an `i64` is held at ±2^62 (the value
/// then saturates either way).
fn parse_exponent(text: &str) -> Option<i64> {
    let (negative, digits) = split_sign(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let magnitude = digits.parse::<i64>().unwrap_or(1 << 62).min(1 << 62);
    Some(if negative { -magnitude } else { magnitude })
}

/// An optional `+` or `-`: whether it was `-`, and the rest.
fn split_sign(text: &str) -> (bool, &str) {
    match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    }
}

/// `[+-]digits[.digits]` as significant digits and a power of ten.
struct Decimal {
    negative: bool,
    /// Without leading zeros; empty for zero.
    digits: String,
    /// The value is `digits × 10^exponent`.
    exponent: i64,
    /// Non-zero digits were dropped beyond [`EXACT_DIGITS`]: the value is a little more.
    dropped: bool,
}

impl Decimal {
    fn parse(number: &str) -> Option<Self> {
        let (negative, unsigned) = split_sign(number);
        let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        if (int.is_empty() && frac.is_empty())
            || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let exponent = -i64::try_from(frac.len()).ok()?;
        let all = format!("{int}{frac}");
        let significant = all.trim_start_matches('0');
        let (kept, rest) = significant.split_at(significant.len().min(EXACT_DIGITS));
        let dropped = rest.bytes().any(|b| b != b'0');
        Some(Decimal {
            negative,
            digits: kept.to_owned(),
            exponent: exponent + i64::try_from(rest.len()).ok()?,
            dropped,
        })
    }

    /// `self × 10^base10 × 2^base2 × scale`, rounded up, within ±[`QUANTITY_LIMIT`].
    fn scaled(&self, base10: i64, base2: u32, scale: i64) -> i64 {
        if self.digits.is_empty() {
            return 0;
        }
        let saturated = if self.negative {
            -QUANTITY_LIMIT
        } else {
            QUANTITY_LIMIT
        };
        let power = self.exponent.saturating_add(base10);
        let magnitude = i64::try_from(self.digits.len())
            .unwrap_or(i64::MAX)
            .saturating_add(power);
        // At least 10^(magnitude - 1) × scale ≥ 10^17, beyond the limit.
        if magnitude > 17 {
            return saturated;
        }
        // Below 10^-40 × 2^60 × 1000 < 1: rounds up to 1 unit (down to 0 if negative).
        if magnitude < -40 {
            return if self.negative { 0 } else { 1 };
        }
        let Some(mut value) = BigInt::parse_bytes(self.digits.as_bytes(), 10) else {
            return saturated;
        };
        if self.dropped && !self.negative {
            value += 1;
        }
        value *= BigInt::from(scale) << base2;
        let ten = BigInt::from(10);
        if power >= 0 {
            // power <= 17 here (magnitude <= 17 and at least one digit).
            value *= ten.pow(u32::try_from(power).unwrap_or(0));
        } else {
            let divisor = ten.pow(u32::try_from(-power).unwrap_or(u32::MAX));
            // Up (towards +∞), as Kubernetes rounds a request: 0.1m of cpu still counts
            // as 1m; a negative amount's magnitude is truncated.
            value = if self.negative {
                value / divisor
            } else {
                (value + &divisor - 1u8) / divisor
            };
        }
        if self.negative {
            value = -value;
        }
        match i64::try_from(&value) {
            Ok(v) => v.clamp(-QUANTITY_LIMIT, QUANTITY_LIMIT),
            Err(_) if value.sign() == Sign::Minus => -QUANTITY_LIMIT,
            Err(_) => QUANTITY_LIMIT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubernetes_quantities() {
        let cases = [
            ("100m", 1000, 100),
            ("1", 1000, 1000),
            ("1.5", 1000, 1500),
            ("0.1m", 1000, 1),
            ("500Mi", 1, 500 * 1024 * 1024),
            ("32Gi", 1, 32 * 1024 * 1024 * 1024),
            ("1k", 1, 1000),
            ("1e3", 1, 1000),
            ("2E2", 1000, 200_000),
            ("128974848", 1, 128_974_848),
            ("129e6", 1, 129_000_000),
            ("123Mi", 1, 128_974_848),
            ("+4", 1, 4),
            (".5", 1000, 500),
            ("250u", 1000, 1),
            ("1500000n", 1000, 2),
            ("-1.5", 1000, -1500),
            ("-0.0001", 1000, 0),
        ];
        for (input, scale, want) in cases {
            assert_eq!(parse_scaled(input, scale), Ok(want), "{input}");
        }
    }

    #[test]
    fn every_form_the_api_server_stores_is_read_exactly() {
        let recorded: serde_json::Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/apiserver/canonical-quantities.json"
        ))
        .unwrap();
        let quantities = recorded["quantities"].as_array().unwrap();
        assert!(quantities.len() > 40);
        for q in quantities {
            let stored = q["stored"].as_str().unwrap();
            assert_eq!(
                parse_scaled(stored, 1000),
                Ok(q["milli"].as_i64().unwrap()),
                "{stored} (from {}) in milli-units",
                q["input"]
            );
            assert_eq!(
                parse_scaled(stored, 1),
                Ok(q["units"].as_i64().unwrap()),
                "{stored} (from {}) in units",
                q["input"]
            );
        }
    }

    #[test]
    fn amounts_beyond_any_node_are_held_at_the_limit() {
        for input in [
            "99999999999999999999Ei",
            "10e39",
            "1e1000000000000000000000",
            "123456789012345678901",
            "8Ei",
        ] {
            assert_eq!(parse_scaled(input, 1000), Ok(QUANTITY_LIMIT), "{input}");
        }
        assert_eq!(parse_scaled("-8Ei", 1), Ok(-QUANTITY_LIMIT));
        // Tiny amounts round up to one unit, however small.
        assert_eq!(parse_scaled("1e-1000000000000000000000", 1), Ok(1));
        assert_eq!(parse_scaled(&format!("0.{}1", "0".repeat(500)), 1), Ok(1));
        // 8,191 requests at the limit still add up.
        assert!(QUANTITY_LIMIT.checked_mul(8191).is_some());
    }

    #[test]
    fn digits_beyond_the_exact_ones_only_round_up() {
        let long = format!("1.{}1", "0".repeat(200));
        assert_eq!(parse_scaled(&long, 1), Ok(2));
        let zeros = format!("1.{}", "0".repeat(200));
        assert_eq!(parse_scaled(&zeros, 1), Ok(1));
        // A long string of digits is read without cost worth mentioning.
        let huge = "9".repeat(100_000);
        assert_eq!(parse_scaled(&huge, 1), Ok(QUANTITY_LIMIT));
    }

    #[test]
    fn rejects_garbage() {
        for input in [
            "", "m", "1x", "1.2.3", "Mi", "1e", "1e+", "1e1.5", "--1", "1 Mi", ".", "+", "1ki",
        ] {
            assert!(parse_scaled(input, 1).is_err(), "{input}");
        }
    }
}
