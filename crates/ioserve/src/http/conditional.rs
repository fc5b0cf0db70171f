//! Validators and conditional requests (RFC 9110 §8.8 and §13).
//!
//! Every file response carries a strong `ETag` made from the size and the modification
//! time (nanoseconds included) of the open file, as nginx makes it from size and
//! seconds: so a rewritten file gets a new one, and replicas holding the same file
//! (rsync -t, cp -p, one container image) give the same one, which a download resumed
//! with `If-Range` on another replica needs. `Last-Modified` has one-second resolution
//! and is left out when the time cannot be written as an HTTP-date (before 1970 or
//! after 9999: tmpfs and extracted archives hold such times). [`evaluate`] applies the
//! request's preconditions in the order of RFC 9110 §13.2.2.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The first second that an IMF-fixdate cannot carry: 10000-01-01T00:00:00Z.
const YEAR_10000: i64 = 253_402_300_800;

/// The validators of one file, taken from its `fstat`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validators {
    /// The strong entity tag, quotes included: `"6553f100.1dcd6500-3e8"` (seconds and
    /// nanoseconds of the modification time, then the size, in hex).
    pub etag: String,
    /// Modification time truncated to whole seconds, as `Last-Modified` carries it;
    /// `None` when it is not representable as an HTTP-date.
    pub last_modified: Option<SystemTime>,
}

impl Validators {
    /// Validators of a file with this size and modification time (`st_mtime` seconds,
    /// which may be negative, and `st_mtime_nsec`).
    ///
    /// The tag is written digit by digit: `format!` took 1.3 % of a hot small file's
    /// request (its formatting machinery, for three numbers).
    pub fn new(size: u64, mtime_secs: i64, mtime_nsec: i64) -> Self {
        // Quotes, a sign, three numbers of up to 16 digits and two separators.
        let mut etag = String::with_capacity(53);
        etag.push('"');
        if mtime_secs < 0 {
            etag.push('-');
        }
        push_hex(&mut etag, mtime_secs.unsigned_abs());
        etag.push('.');
        push_hex(&mut etag, mtime_nsec.clamp(0, 999_999_999) as u64);
        etag.push('-');
        push_hex(&mut etag, size);
        etag.push('"');
        Validators {
            etag,
            last_modified: http_date_time(mtime_secs),
        }
    }

    /// The validators of a content-coded representation of the file (a precompressed
    /// sibling): the entity tag names the coding, so that it never equals the tag of
    /// another representation (`"6553f100.0-3e8-br"`).
    pub fn for_coding(mut self, token: &str) -> Self {
        self.etag.pop();
        self.etag.push('-');
        self.etag.push_str(token);
        self.etag.push('"');
        self
    }

    /// `Last-Modified` as an IMF-fixdate, when the time has one (its `Display`, written
    /// straight into the head).
    pub fn last_modified_header(&self) -> Option<httpdate::HttpDate> {
        self.last_modified.map(httpdate::HttpDate::from)
    }
}

/// Appends `value` in lowercase hexadecimal without leading zeros, as `{:x}` writes it.
fn push_hex(out: &mut String, value: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut start = digits.len();
    let mut rest = value;
    loop {
        start -= 1;
        digits[start] = DIGITS[(rest & 0xF) as usize];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    out.extend(digits[start..].iter().map(|&digit| char::from(digit)));
}

/// Seconds since the epoch as a `SystemTime` that an HTTP-date can carry (1970 to
/// 9999), else `None`.
pub fn http_date_time(secs: i64) -> Option<SystemTime> {
    (0..YEAR_10000)
        .contains(&secs)
        .then(|| UNIX_EPOCH + Duration::from_secs(secs as u64))
}

/// Seconds since the epoch as an IMF-fixdate, when it has one.
pub fn http_date(secs: i64) -> Option<String> {
    http_date_time(secs).map(httpdate::fmt_http_date)
}

/// The precondition header fields of a request, as received.
///
/// List-valued fields may arrive on several lines; each line is one element of the vector.
#[derive(Clone, Debug, Default)]
pub struct Preconditions<'a> {
    /// `If-Match` lines.
    pub if_match: Vec<&'a [u8]>,
    /// `If-None-Match` lines.
    pub if_none_match: Vec<&'a [u8]>,
    /// `If-Modified-Since`.
    pub if_modified_since: Option<&'a [u8]>,
    /// `If-Unmodified-Since`.
    pub if_unmodified_since: Option<&'a [u8]>,
    /// `If-Range`.
    pub if_range: Option<&'a [u8]>,
}

impl Preconditions<'_> {
    /// The same fields, owned.
    pub fn owned(&self) -> OwnedPreconditions {
        let lines = |lines: &[&[u8]]| lines.iter().map(|line| line.to_vec()).collect();
        OwnedPreconditions {
            if_match: lines(&self.if_match),
            if_none_match: lines(&self.if_none_match),
            if_modified_since: self.if_modified_since.map(<[u8]>::to_vec),
            if_unmodified_since: self.if_unmodified_since.map(<[u8]>::to_vec),
            if_range: self.if_range.map(<[u8]>::to_vec),
        }
    }
}

/// The precondition fields of a request, owned, so that a reply completed off the
/// event loop (where the read buffer is gone) can evaluate them.
#[derive(Clone, Debug, Default)]
pub struct OwnedPreconditions {
    if_match: Vec<Vec<u8>>,
    if_none_match: Vec<Vec<u8>>,
    if_modified_since: Option<Vec<u8>>,
    if_unmodified_since: Option<Vec<u8>>,
    if_range: Option<Vec<u8>>,
}

impl OwnedPreconditions {
    /// The fields as [`evaluate`] takes them.
    pub fn borrowed(&self) -> Preconditions<'_> {
        Preconditions {
            if_match: self.if_match.iter().map(Vec::as_slice).collect(),
            if_none_match: self.if_none_match.iter().map(Vec::as_slice).collect(),
            if_modified_since: self.if_modified_since.as_deref(),
            if_unmodified_since: self.if_unmodified_since.as_deref(),
            if_range: self.if_range.as_deref(),
        }
    }
}

/// The outcome of evaluating preconditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Go on with the request; `honor_range` is false when `If-Range` did not match, in
    /// which case the `Range` header must be ignored and the whole file sent.
    Proceed {
        /// Whether a `Range` header may be applied.
        honor_range: bool,
    },
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    PreconditionFailed,
}

/// Evaluates the preconditions of a GET or HEAD request against a file's validators,
/// in the order of RFC 9110 §13.2.2.
pub fn evaluate(pre: &Preconditions<'_>, validators: &Validators) -> Outcome {
    // Step 1 and 2: If-Match, else If-Unmodified-Since.
    if !pre.if_match.is_empty() {
        if !any_tag_matches(&pre.if_match, &validators.etag, Comparison::Strong) {
            return Outcome::PreconditionFailed;
        }
    } else if let (Some(date), Some(modified)) = (
        pre.if_unmodified_since.and_then(parse_date),
        validators.last_modified,
    ) {
        // Without a modification date the field is ignored (RFC 9110 §13.1.4).
        if modified > date {
            return Outcome::PreconditionFailed;
        }
    }
    // Step 3 and 4: If-None-Match, else If-Modified-Since (GET and HEAD only, which is
    // all this server answers with a file).
    if !pre.if_none_match.is_empty() {
        if any_tag_matches(&pre.if_none_match, &validators.etag, Comparison::Weak) {
            return Outcome::NotModified;
        }
    } else if let (Some(date), Some(modified)) = (
        pre.if_modified_since.and_then(parse_date),
        validators.last_modified,
    ) {
        // Without a modification date the field is ignored (RFC 9110 §13.1.3).
        if modified <= date {
            return Outcome::NotModified;
        }
    }
    // Step 5: If-Range.
    let honor_range = match pre.if_range {
        None => true,
        Some(value) => if_range_matches(value, validators),
    };
    Outcome::Proceed { honor_range }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Comparison {
    Strong,
    Weak,
}

/// Whether a list of entity-tags (or `*`) matches our tag.
///
/// A malformed list matches nothing, except that `If-Match`/`If-None-Match: *` matches
/// any existing file.
fn any_tag_matches(lines: &[&[u8]], etag: &str, comparison: Comparison) -> bool {
    lines.iter().any(|line| {
        let line = line.trim_ascii();
        if line == b"*" {
            return true;
        }
        EntityTags(line).any(|tag| match tag {
            Some((weak, opaque)) => {
                (comparison == Comparison::Weak || !weak) && opaque == etag.as_bytes()
            }
            None => false,
        })
    })
}

/// `If-Range`: an entity-tag compared strongly, or an HTTP-date equal to Last-Modified.
fn if_range_matches(value: &[u8], validators: &Validators) -> bool {
    let value = value.trim_ascii();
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        let mut tags = EntityTags(value);
        match (tags.next(), tags.next()) {
            (Some(Some((false, opaque))), None) => opaque == validators.etag.as_bytes(),
            _ => false,
        }
    } else {
        // A date never matches a file without one.
        validators.last_modified.is_some() && parse_date(value) == validators.last_modified
    }
}

/// Iterates over a comma-separated list of entity-tags, yielding `(weak, "opaque")`
/// with the quotes kept, or `None` once for a malformed element (then stops).
struct EntityTags<'a>(&'a [u8]);

impl<'a> Iterator for EntityTags<'a> {
    type Item = Option<(bool, &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut rest = self.0.trim_ascii();
        while let [b',', tail @ ..] = rest {
            rest = tail.trim_ascii();
        }
        if rest.is_empty() {
            return None;
        }
        let (weak, tagged) = match rest.strip_prefix(b"W/") {
            Some(tail) => (true, tail),
            None => (false, rest),
        };
        let closing = match tagged {
            [b'"', tail @ ..] => tail.iter().position(|&b| b == b'"'),
            _ => None,
        };
        let Some(closing) = closing else {
            self.0 = b"";
            return Some(None);
        };
        let (opaque, tail) = tagged.split_at(closing + 2);
        let tail = tail.trim_ascii();
        if !(tail.is_empty() || tail.starts_with(b",")) {
            self.0 = b"";
            return Some(None);
        }
        self.0 = tail;
        Some(Some((weak, opaque)))
    }
}

fn parse_date(value: &[u8]) -> Option<SystemTime> {
    httpdate::parse_http_date(std::str::from_utf8(value.trim_ascii()).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validators() -> Validators {
        Validators::new(1000, 1_700_000_000, 500_000_000)
    }

    proptest::proptest! {
        /// The tag written digit by digit is the one `format!` writes.
        #[test]
        fn the_etag_is_the_hex_of_time_and_size(size: u64, secs: i64, nsec: i64) {
            let sign = if secs < 0 { "-" } else { "" };
            let expected = format!(
                "\"{sign}{:x}.{:x}-{size:x}\"",
                secs.unsigned_abs(),
                nsec.clamp(0, 999_999_999)
            );
            proptest::prop_assert_eq!(Validators::new(size, secs, nsec).etag, expected);
        }
    }

    const MODIFIED: &[u8] = b"Tue, 14 Nov 2023 22:13:20 GMT"; // 1_700_000_000
    const EARLIER: &[u8] = b"Tue, 14 Nov 2023 22:13:19 GMT";
    const LATER: &[u8] = b"Tue, 14 Nov 2023 22:13:21 GMT";

    fn proceed(honor_range: bool) -> Outcome {
        Outcome::Proceed { honor_range }
    }

    #[test]
    fn validators_from_stat() {
        let v = validators();
        assert_eq!(v.etag, "\"6553f100.1dcd6500-3e8\"");
        assert_eq!(
            v.last_modified_header().unwrap().to_string().as_bytes(),
            MODIFIED
        );
    }

    #[test]
    fn times_an_http_date_cannot_carry() {
        // Before 1970, after 9999, and the edges.
        for (secs, header) in [
            (-1, None),
            (i64::MIN, None),
            (0, Some("Thu, 01 Jan 1970 00:00:00 GMT")),
            (YEAR_10000 - 1, Some("Fri, 31 Dec 9999 23:59:59 GMT")),
            (YEAR_10000, None),
            (300_000_000_000, None),
            (i64::MAX, None),
        ] {
            let v = Validators::new(7, secs, 0);
            let written = v.last_modified_header().map(|date| date.to_string());
            assert_eq!(written.as_deref(), header, "{secs}");
        }
        assert_eq!(Validators::new(7, -5, 1).etag, "\"-5.1-7\"");
        assert_eq!(
            Validators::new(0, i64::MIN, -1).etag,
            "\"-8000000000000000.0-0\""
        );
        // Date preconditions are ignored without a date; If-Range by date fails.
        let v = Validators::new(7, 300_000_000_000, 0);
        let pre = Preconditions {
            if_modified_since: Some(MODIFIED),
            if_unmodified_since: Some(MODIFIED),
            if_range: Some(MODIFIED),
            ..Default::default()
        };
        assert_eq!(evaluate(&pre, &v), proceed(false));
    }

    #[test]
    fn replicas_agree() {
        // Same size and mtime, whatever the inode or device: the same tag.
        assert_eq!(
            Validators::new(1000, 1_700_000_000, 5),
            Validators::new(1000, 1_700_000_000, 5)
        );
        assert_ne!(
            Validators::new(1000, 1_700_000_000, 5).etag,
            Validators::new(1000, 1_700_000_000, 6).etag
        );
        assert_ne!(
            Validators::new(1000, 1_700_000_000, 5).etag,
            Validators::new(1001, 1_700_000_000, 5).etag
        );
    }

    #[test]
    fn if_none_match() {
        let v = validators();
        let tag = v.etag.clone();
        let weak = format!("W/{tag}");
        let listed = format!("\"other\", {tag}");
        for (value, expected) in [
            (tag.as_str(), Outcome::NotModified),
            (weak.as_str(), Outcome::NotModified),
            (listed.as_str(), Outcome::NotModified),
            ("*", Outcome::NotModified),
            ("\"other\"", proceed(true)),
            ("garbage", proceed(true)),
        ] {
            let pre = Preconditions {
                if_none_match: vec![value.as_bytes()],
                ..Default::default()
            };
            assert_eq!(evaluate(&pre, &v), expected, "{value}");
        }
    }

    #[test]
    fn if_none_match_takes_precedence_over_if_modified_since() {
        let v = validators();
        let pre = Preconditions {
            if_none_match: vec![b"\"other\""],
            if_modified_since: Some(LATER),
            ..Default::default()
        };
        assert_eq!(evaluate(&pre, &v), proceed(true));
    }

    #[test]
    fn if_modified_since() {
        let v = validators();
        for (date, expected) in [
            (MODIFIED, Outcome::NotModified),
            (LATER, Outcome::NotModified),
            (EARLIER, proceed(true)),
            (&b"not a date"[..], proceed(true)),
        ] {
            let pre = Preconditions {
                if_modified_since: Some(date),
                ..Default::default()
            };
            assert_eq!(evaluate(&pre, &v), expected);
        }
    }

    #[test]
    fn if_match_and_if_unmodified_since() {
        let v = validators();
        let weak = format!("W/{}", v.etag);
        for (value, expected) in [
            (v.etag.as_str(), proceed(true)),
            ("*", proceed(true)),
            (weak.as_str(), Outcome::PreconditionFailed),
            ("\"other\"", Outcome::PreconditionFailed),
        ] {
            let pre = Preconditions {
                if_match: vec![value.as_bytes()],
                // Ignored when If-Match is present.
                if_unmodified_since: Some(EARLIER),
                ..Default::default()
            };
            assert_eq!(evaluate(&pre, &v), expected, "{value}");
        }
        for (date, expected) in [
            (EARLIER, Outcome::PreconditionFailed),
            (MODIFIED, proceed(true)),
            (&b"bad date"[..], proceed(true)),
        ] {
            let pre = Preconditions {
                if_unmodified_since: Some(date),
                ..Default::default()
            };
            assert_eq!(evaluate(&pre, &v), expected);
        }
    }

    #[test]
    fn precondition_failed_wins_over_not_modified() {
        let v = validators();
        let pre = Preconditions {
            if_match: vec![b"\"other\""],
            if_none_match: vec![b"*"],
            ..Default::default()
        };
        assert_eq!(evaluate(&pre, &v), Outcome::PreconditionFailed);
    }

    #[test]
    fn if_range() {
        let v = validators();
        let weak = format!("W/{}", v.etag);
        let two = format!("{0}, {0}", v.etag);
        for (value, honor) in [
            (v.etag.as_bytes(), true),
            (weak.as_bytes(), false),
            (two.as_bytes(), false),
            (b"\"other\"", false),
            (MODIFIED, true),
            (LATER, false),
            (EARLIER, false),
            (b"junk", false),
        ] {
            let pre = Preconditions {
                if_range: Some(value),
                ..Default::default()
            };
            assert_eq!(
                evaluate(&pre, &v),
                proceed(honor),
                "{}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn entity_tag_lists() {
        let tags: Vec<_> = EntityTags(b" \"a\" ,W/\"b\",,\"c,d\"").collect();
        assert_eq!(
            tags,
            vec![
                Some((false, &b"\"a\""[..])),
                Some((true, &b"\"b\""[..])),
                Some((false, &b"\"c,d\""[..]))
            ]
        );
        let bad: Vec<_> = EntityTags(b"\"a\" x, \"b\"").collect();
        assert_eq!(bad, vec![None]);
    }
}
