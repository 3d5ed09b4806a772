//! A cost or size as the API server's estimator keeps it: a minimum and a maximum, with
//! cel-go's saturating arithmetic.

/// A range of costs or sizes, with cel-go's saturating arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub min: u64,
    pub max: u64,
}

impl Range {
    pub const UNKNOWN: Range = Range {
        min: 0,
        max: u64::MAX,
    };

    pub const fn fixed(n: u64) -> Range {
        Range { min: n, max: n }
    }

    pub(super) fn add(self, other: Range) -> Range {
        Range {
            min: self.min.saturating_add(other.min),
            max: self.max.saturating_add(other.max),
        }
    }

    pub(super) fn multiply(self, other: Range) -> Range {
        Range {
            min: self.min.saturating_mul(other.min),
            max: self.max.saturating_mul(other.max),
        }
    }

    pub(super) fn factor(self, factor: f64) -> Range {
        Range {
            min: multiply_by_cost_factor(self.min, factor),
            max: multiply_by_cost_factor(self.max, factor),
        }
    }

    pub(super) fn union(self, other: Range) -> Range {
        Range {
            min: self.min.min(other.min),
            max: self.max.max(other.max),
        }
    }
}

/// `multiplyByCostFactor`: the product rounded up, saturating at `u64::MAX`.
#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]
pub(super) fn multiply_by_cost_factor(x: u64, factor: f64) -> u64 {
    let x = x as f64;
    if x > 0.0 && factor > 0.0 && x > u64::MAX as f64 / factor {
        return u64::MAX;
    }
    let ceil = (x * factor).ceil();
    if ceil >= 2f64.powi(64) {
        u64::MAX
    } else {
        ceil as u64
    }
}
