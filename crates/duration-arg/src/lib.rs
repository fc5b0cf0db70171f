//! One parser for the durations that the toolkit's command lines and config files take
//! (`ioserve --idle-timeout`, `numa stat --interval`, `probe --duration`, timeserve's
//! rate-limit interval), so that all of them accept the same spellings:
//!
//! - a bare number of seconds, whole or decimal: `2`, `0.5`;
//! - a number with a unit, as [`humantime`] reads it: `500ms`, `5s`, `1m`, `1h`,
//!   `1m 30s`.
//!
//! ```
//! use std::time::Duration;
//! assert_eq!(duration_arg::parse("0.5"), Ok(Duration::from_millis(500)));
//! assert_eq!(duration_arg::parse("1m 30s"), Ok(Duration::from_secs(90)));
//! assert!(duration_arg::parse_positive("0").is_err());
//! ```

use std::time::Duration;

/// Why a duration was refused; the message names the text and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Neither seconds nor a number with a unit.
    #[error(
        "'{0}' is not a duration: use seconds (2, 0.5) or a number with a unit (500ms, 5s, 1m)"
    )]
    Syntax(String),
    /// Zero where a positive duration is needed.
    #[error("'{0}' is not a duration above zero")]
    Zero(String),
    /// Past the largest value the option allows.
    #[error("'{text}' is longer than the {max:?} allowed")]
    TooLong {
        /// The text given.
        text: String,
        /// The largest allowed.
        max: Duration,
    },
}

/// Parses seconds (`2`, `0.5`) or a number with a unit (`500ms`, `5s`, `1m`).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    let syntax = || DurationError::Syntax(text.to_owned());
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|_| syntax());
    }
    humantime::parse_duration(text).map_err(|_| syntax())
}

/// As [`parse`], refusing zero.
pub fn parse_positive(text: &str) -> Result<Duration, DurationError> {
    let duration = parse(text)?;
    if duration.is_zero() {
        return Err(DurationError::Zero(text.trim().to_owned()));
    }
    Ok(duration)
}

/// As [`parse_positive`], refusing more than `max`.
pub fn parse_positive_at_most(text: &str, max: Duration) -> Result<Duration, DurationError> {
    let duration = parse_positive(text)?;
    if duration > max {
        return Err(DurationError::TooLong {
            text: text.trim().to_owned(),
            max,
        });
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings() {
        for (text, duration) in [
            ("2", Duration::from_secs(2)),
            ("0.5", Duration::from_millis(500)),
            (" 10 ", Duration::from_secs(10)),
            ("500ms", Duration::from_millis(500)),
            ("5s", Duration::from_secs(5)),
            ("1m", Duration::from_secs(60)),
            ("1h", Duration::from_secs(3600)),
            ("1m 30s", Duration::from_secs(90)),
            ("0", Duration::ZERO),
        ] {
            assert_eq!(parse(text), Ok(duration), "{text}");
        }
    }

    #[test]
    fn refusals_name_the_text() {
        for text in ["ten", "10x", "-1", "", "1e400", "NaN"] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains(&format!("'{}'", text.trim())), "{error}");
            assert!(error.contains("500ms"), "{error}");
        }
        assert_eq!(
            parse_positive("0ms").unwrap_err().to_string(),
            "'0ms' is not a duration above zero"
        );
        assert!(parse_positive_at_most("2d", Duration::from_secs(86_400))
            .unwrap_err()
            .to_string()
            .contains("'2d' is longer than the 86400s allowed"));
    }
}
