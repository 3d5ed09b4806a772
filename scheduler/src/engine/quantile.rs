//! The value at a quantile of sorted samples: the cycle times and the placement-quality
//! ratios `simulate` reports read it alike.

/// The sample at quantile `q` (0.5: the median; clamped to 0..=1) of `sorted`, by the
/// nearest index; `None` without samples.
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    let last = sorted.len().checked_sub(1)?;
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let index = (last as f64 * q.clamp(0.0, 1.0)).round() as usize;
    sorted.get(index).copied()
}

#[cfg(test)]
mod tests {
    use super::quantile;

    #[test]
    fn the_nearest_sample_to_the_quantile() {
        let sorted = [1, 2, 3, 4, 5];
        assert_eq!(quantile(&sorted, 0.0), Some(1));
        assert_eq!(quantile(&sorted, 0.5), Some(3));
        assert_eq!(quantile(&sorted, 0.99), Some(5));
        assert_eq!(quantile(&sorted, 0.6), Some(3), "2.4 rounds to index 2");
        assert_eq!(quantile(&sorted, 7.0), Some(5), "clamped");
        assert_eq!(quantile::<u32>(&[], 0.5), None);
    }
}
