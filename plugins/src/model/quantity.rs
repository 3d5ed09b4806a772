//! Kubernetes resource quantities (`100m`, `500Mi`, `1.5`, `2e3`) as integers.

use thiserror::Error;

/// A quantity string that Kubernetes would not accept.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid quantity {0:?}")]
pub struct InvalidQuantity(pub String);

/// Parses a quantity and returns it multiplied by `scale` (1000 for milli-units, 1 for
/// plain units), rounded up as Kubernetes does for requests.
pub fn parse_scaled(input: &str, scale: i64) -> Result<i64, InvalidQuantity> {
    let err = || InvalidQuantity(input.to_owned());
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    if number.is_empty() {
        return Err(err());
    }
    let (mantissa, exponent) = parse_decimal(number).ok_or_else(err)?;
    let (base10, base2): (i32, u32) = match suffix {
        "" => (0, 0),
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
        e if e.starts_with(['e', 'E']) => (e[1..].parse::<i32>().map_err(|_| err())?, 0),
        _ => return Err(err()),
    };
    // value = mantissa * 10^(exponent + base10) * 2^base2 * scale, computed in i128 with
    // every step checked: a hostile quantity is an error, never an overflow.
    let mut value = i128::from(mantissa)
        .checked_mul(i128::from(scale))
        .and_then(|v| v.checked_mul(1i128 << base2))
        .ok_or_else(err)?;
    let power = exponent.checked_add(base10).ok_or_else(err)?;
    if power >= 0 {
        let factor = 10i128
            .checked_pow(u32::try_from(power).map_err(|_| err())?)
            .ok_or_else(err)?;
        value = value.checked_mul(factor).ok_or_else(err)?;
    } else {
        let divisor = 10i128
            .checked_pow(u32::try_from(-power).map_err(|_| err())?)
            .ok_or_else(err)?;
        // Round up, so 0.1m of cpu still counts as 1m.
        value = value
            .checked_add(divisor - 1)
            .ok_or_else(err)?
            .div_euclid(divisor);
    }
    i64::try_from(value).map_err(|_| err())
}

/// `"1.25"` → `(125, -2)`.
fn parse_decimal(number: &str) -> Option<(i64, i32)> {
    let (sign, digits) = match number.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, number.strip_prefix('+').unwrap_or(number)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let all: String = format!("{int}{frac}");
    if !all.bytes().all(|b| b.is_ascii_digit()) || all.len() > 18 {
        return None;
    }
    let mantissa: i64 = if all.is_empty() { 0 } else { all.parse().ok()? };
    Some((sign * mantissa, -i32::try_from(frac.len()).ok()?))
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
        ];
        for (input, scale, want) in cases {
            assert_eq!(parse_scaled(input, scale), Ok(want), "{input}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for input in ["", "m", "1x", "1.2.3", "Mi", "1e", "99999999999999999999Ei"] {
            assert!(parse_scaled(input, 1).is_err(), "{input}");
        }
    }
}
