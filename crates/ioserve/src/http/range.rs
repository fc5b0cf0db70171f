//! Byte ranges (RFC 9110 §14): parsing a `Range` header and planning the response.
//!
//! The plan is computed once per request and is the same for every IO strategy: a
//! strategy only ever sees the `(offset, len)` pairs decided here.
//!
//! Rules, with the reasons peers taught us:
//! - A header that is not `bytes=...`, or that has a syntax error anywhere, is ignored
//!   (the whole representation is served with 200), as RFC 9110 §14.2 allows.
//! - A last-byte-pos past the end is clamped, never answered with 416 (crawlers send
//!   `bytes=0-99999999`).
//! - At most [`MAX_RANGES`] range-specs are considered; a longer header is ignored before
//!   any of it is validated, so a hostile header costs O(length) and nothing more.
//! - Overlapping ranges are coalesced, so `bytes=0-,0-,0-` sends the file once, not three
//!   times: the bytes of a 206 never exceed the length of the file.
//! - Ranges that do not overlap keep the order the client asked for (§14.2's SHOULD).

pub use crate::io::byte_range::ByteRange;

/// Most range-specs honoured in one `Range` header; a header with more is ignored and the
/// whole file is served. nginx's `max_ranges` has the same role.
pub const MAX_RANGES: usize = 64;

impl ByteRange {
    /// The value of a `Content-Range` header for this range of a `complete_len`-byte
    /// representation: `bytes 0-99/1000`.
    pub fn content_range(&self, complete_len: u64) -> String {
        format!("bytes {}-{}/{}", self.start, self.last(), complete_len)
    }
}

/// What to answer to a request, as far as ranges go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangePlan {
    /// 200 with the whole representation: no `Range`, a malformed one, another unit, or
    /// more than [`MAX_RANGES`] range-specs.
    Full,
    /// 206 with one range.
    Single(ByteRange),
    /// 206 `multipart/byteranges` with at least two disjoint ranges.
    Multi(Vec<ByteRange>),
    /// 416 with `Content-Range: bytes */LEN`: well-formed, but no range overlaps the
    /// representation.
    Unsatisfiable,
}

/// One range-spec as the client wrote it, before it meets the length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RangeSpec {
    /// `first-last`
    Bounded { first: u64, last: u64 },
    /// `first-`
    From(u64),
    /// `-suffix`
    Suffix(u64),
}

/// Plans the answer to a `Range` header value for a representation of `len` bytes.
///
/// `header` is the raw field value (`None` when the request had no `Range`).
///
/// ```
/// use ioserve::http::range::{plan, ByteRange, RangePlan};
/// assert_eq!(plan(Some(b"bytes=-10"), 100), RangePlan::Single(ByteRange { start: 90, len: 10 }));
/// assert_eq!(plan(Some(b"bytes=200-"), 100), RangePlan::Unsatisfiable);
/// assert_eq!(plan(Some(b"items=0-9"), 100), RangePlan::Full);
/// ```
pub fn plan(header: Option<&[u8]>, len: u64) -> RangePlan {
    let Some(header) = header else {
        return RangePlan::Full;
    };
    let Some(specs) = parse(header) else {
        return RangePlan::Full;
    };
    let ranges: Vec<ByteRange> = specs.iter().filter_map(|s| resolve(*s, len)).collect();
    match ranges.len() {
        0 => RangePlan::Unsatisfiable,
        1 => RangePlan::Single(ranges[0]),
        _ => {
            let ranges = coalesce(ranges);
            if ranges.len() == 1 {
                RangePlan::Single(ranges[0])
            } else {
                RangePlan::Multi(ranges)
            }
        }
    }
}

/// Parses `bytes=spec, spec, ...`; `None` for anything the server must ignore.
fn parse(header: &[u8]) -> Option<Vec<RangeSpec>> {
    let header = header.trim_ascii();
    let (unit, set) = split_once(header, b'=')?;
    if !unit.trim_ascii().eq_ignore_ascii_case(b"bytes") {
        return None;
    }
    // Count first, so that a huge header is refused before any of it is validated.
    if set.iter().filter(|&&b| b == b',').count() >= MAX_RANGES {
        return None;
    }
    let mut specs = Vec::new();
    for element in set.split(|&b| b == b',') {
        let element = element.trim_ascii();
        if element.is_empty() {
            // RFC 9110 §5.6.1: empty list elements are allowed and do not count.
            continue;
        }
        specs.push(parse_spec(element)?);
    }
    if specs.is_empty() {
        return None;
    }
    Some(specs)
}

fn parse_spec(spec: &[u8]) -> Option<RangeSpec> {
    let (first, last) = split_once(spec, b'-')?;
    match (first.is_empty(), last.is_empty()) {
        (true, true) => None,
        (true, false) => Some(RangeSpec::Suffix(parse_digits(last)?)),
        (false, true) => Some(RangeSpec::From(parse_digits(first)?)),
        (false, false) => {
            let (first, last) = (parse_digits(first)?, parse_digits(last)?);
            // RFC 9110 §14.1.1: a last-pos below the first-pos makes the header invalid.
            (first <= last).then_some(RangeSpec::Bounded { first, last })
        }
    }
}

/// ASCII digits only; values past `u64::MAX` saturate (they are past any file's end).
fn parse_digits(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0u64, |acc, d| {
        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

/// The satisfiable part of a spec, if any.
fn resolve(spec: RangeSpec, len: u64) -> Option<ByteRange> {
    let (start, last) = match spec {
        RangeSpec::Bounded { first, last } => (first, last.min(len.checked_sub(1)?)),
        RangeSpec::From(first) => (first, len.checked_sub(1)?),
        RangeSpec::Suffix(0) => return None,
        RangeSpec::Suffix(n) => (len - n.min(len), len.checked_sub(1)?),
    };
    (start <= last).then(|| ByteRange {
        start,
        len: last - start + 1,
    })
}

/// Merges overlapping ranges. Without overlaps the client's order is kept; with them
/// the result is sorted (the ranges the client asked for no longer exist as such).
fn coalesce(ranges: Vec<ByteRange>) -> Vec<ByteRange> {
    let mut sorted = ranges.clone();
    sorted.sort_unstable();
    let overlapping = sorted.windows(2).any(|w| w[1].start < w[0].end());
    if !overlapping {
        return ranges;
    }
    let mut merged: Vec<ByteRange> = Vec::with_capacity(sorted.len());
    for range in sorted {
        match merged.last_mut() {
            Some(prev) if range.start <= prev.end() => {
                prev.len = prev.end().max(range.end()) - prev.start;
            }
            _ => merged.push(range),
        }
    }
    merged
}

fn split_once(bytes: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|&b| b == sep)?;
    Some((&bytes[..at], &bytes[at + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, len: u64) -> ByteRange {
        ByteRange { start, len }
    }

    #[test]
    fn single_forms() {
        assert_eq!(plan(Some(b"bytes=0-9"), 100), RangePlan::Single(r(0, 10)));
        assert_eq!(plan(Some(b"bytes=90-"), 100), RangePlan::Single(r(90, 10)));
        assert_eq!(plan(Some(b"bytes=-10"), 100), RangePlan::Single(r(90, 10)));
        assert_eq!(
            plan(Some(b"bytes=-1000"), 100),
            RangePlan::Single(r(0, 100))
        );
        assert_eq!(plan(Some(b"bytes=99-99"), 100), RangePlan::Single(r(99, 1)));
        assert_eq!(plan(Some(b"BYTES = 5-6 "), 100), RangePlan::Single(r(5, 2)));
    }

    #[test]
    fn last_past_end_is_clamped() {
        assert_eq!(
            plan(Some(b"bytes=10-99999999999999999999999"), 100),
            RangePlan::Single(r(10, 90))
        );
    }

    #[test]
    fn unsatisfiable() {
        assert_eq!(plan(Some(b"bytes=100-"), 100), RangePlan::Unsatisfiable);
        assert_eq!(plan(Some(b"bytes=100-200"), 100), RangePlan::Unsatisfiable);
        assert_eq!(plan(Some(b"bytes=-0"), 100), RangePlan::Unsatisfiable);
        assert_eq!(plan(Some(b"bytes=0-"), 0), RangePlan::Unsatisfiable);
        assert_eq!(plan(Some(b"bytes=-5"), 0), RangePlan::Unsatisfiable);
        assert_eq!(
            plan(Some(b"bytes=200-300,400-"), 100),
            RangePlan::Unsatisfiable
        );
    }

    #[test]
    fn malformed_is_ignored() {
        for header in [
            &b"bytes=5-1"[..],
            b"bytes=",
            b"bytes=-",
            b"bytes=a-b",
            b"bytes=1-2-3",
            b"bytes 0-1",
            b"items=0-9",
            b"bytes=0x1-2",
            b"bytes=+1-2",
            b"bytes=0-1,x",
            b"bytes=,,",
        ] {
            assert_eq!(
                plan(Some(header), 100),
                RangePlan::Full,
                "{}",
                String::from_utf8_lossy(header)
            );
        }
        assert_eq!(plan(None, 100), RangePlan::Full);
    }

    #[test]
    fn multi_keeps_order_without_overlap() {
        assert_eq!(
            plan(Some(b"bytes=50-59, 0-9"), 100),
            RangePlan::Multi(vec![r(50, 10), r(0, 10)])
        );
        // Adjacent ranges do not overlap: kept apart, in order.
        assert_eq!(
            plan(Some(b"bytes=0-9,10-19"), 100),
            RangePlan::Multi(vec![r(0, 10), r(10, 10)])
        );
        // Unsatisfiable members are dropped.
        assert_eq!(
            plan(Some(b"bytes=0-0,500-600,-1"), 100),
            RangePlan::Multi(vec![r(0, 1), r(99, 1)])
        );
    }

    #[test]
    fn overlaps_are_coalesced() {
        assert_eq!(
            plan(Some(b"bytes=0-,0-,0-"), 100),
            RangePlan::Single(r(0, 100))
        );
        assert_eq!(
            plan(Some(b"bytes=50-60,0-9,55-70"), 100),
            RangePlan::Multi(vec![r(0, 10), r(50, 21)])
        );
    }

    #[test]
    fn too_many_ranges_are_ignored() {
        let many = format!("bytes={}", vec!["0-"; MAX_RANGES + 1].join(","));
        assert_eq!(plan(Some(many.as_bytes()), 100), RangePlan::Full);
        let most = format!("bytes={}", vec!["0-0"; MAX_RANGES].join(","));
        assert_eq!(plan(Some(most.as_bytes()), 100), RangePlan::Single(r(0, 1)));
    }

    #[test]
    fn content_range_format() {
        assert_eq!(r(0, 10).content_range(100), "bytes 0-9/100");
    }
}
