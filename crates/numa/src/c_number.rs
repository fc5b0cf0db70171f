//! Numbers read the way the C tools this crate replaces read them.

/// C's `atoi`: leading blanks, a sign, digits; anything else ends it (0 if none).
pub(crate) fn atoi(text: &str) -> i64 {
    let text = text.trim_start();
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    sign * digits[..end].parse::<i64>().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::atoi;

    #[test]
    fn stops_at_the_first_non_digit() {
        assert_eq!(atoi("  42abc"), 42);
        assert_eq!(atoi("-7"), -7);
        assert_eq!(atoi("+3"), 3);
        assert_eq!(atoi("x1"), 0);
        assert_eq!(atoi(""), 0);
    }
}
