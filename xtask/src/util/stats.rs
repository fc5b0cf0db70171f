//! The statistics every report uses, defined once.

/// The median of the finite values: the middle one, or the mean of the two middle ones
/// for an even count; `None` when there is no finite value.
pub(crate) fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut values: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

/// The value at quantile `q` (0 to 1) of `sorted` (ascending): the one at index
/// `round((len - 1) * q)`; `None` when empty.
pub(crate) fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    let last = sorted.len().checked_sub(1)?;
    sorted
        .get((last as f64 * q.clamp(0.0, 1.0)).round() as usize)
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_index() {
        let values: Vec<u64> = (1..=101).collect();
        assert_eq!(quantile(&values, 0.5), Some(51));
        assert_eq!(quantile(&values, 0.99), Some(100));
        assert_eq!(quantile(&values, 1.0), Some(101));
        assert_eq!(quantile::<u64>(&[], 0.5), None);
    }

    #[test]
    fn odd_even_and_empty() {
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median([f64::NAN, 5.0]), Some(5.0));
        assert_eq!(median([]), None);
    }
}
