//! Content negotiation (RFC 9110 §12.5): the quality a request's `Accept` lines give a
//! media type (directory listings: HTML or JSON), and the content codings its
//! `Accept-Encoding` lines allow (precompressed files: `NAME.br`, `NAME.gz`).
//! Qualities are in thousandths: `q=0.5` is 500, no `q` is 1000, 0 refuses.

/// A content coding served from a precompressed file beside the original.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    /// Brotli, from `NAME.br`.
    Brotli,
    /// gzip, from `NAME.gz`.
    Gzip,
}

impl Coding {
    /// Every coding, in the order preferred when the client likes them equally:
    /// brotli's files are the smaller.
    pub const ALL: [Coding; 2] = [Coding::Brotli, Coding::Gzip];

    /// The token in `Accept-Encoding` and `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Brotli => "br",
            Coding::Gzip => "gzip",
        }
    }

    /// The suffix of the precompressed file (`NAME.br`, as nginx's gzip_static and
    /// static-web-server name them).
    pub fn suffix(self) -> &'static str {
        match self {
            Coding::Brotli => ".br",
            Coding::Gzip => ".gz",
        }
    }
}

/// What `Accept-Encoding` allows: the codings to try, best first, and whether the
/// unencoded file may be sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodingPreference {
    /// Codings with a quality above 0, by quality, ties in [`Coding::ALL`] order.
    pub codings: Vec<Coding>,
    /// Whether `identity` is acceptable (it is unless refused with `identity;q=0`, or
    /// with `*;q=0` without naming identity).
    pub identity: bool,
}

impl EncodingPreference {
    /// Reads the request's `Accept-Encoding` lines. Without any, only the unencoded
    /// file is sent, as nginx's gzip_static does: RFC 9110 allows any coding then,
    /// but clients that say nothing may not decode.
    pub fn from_lines(lines: &[&[u8]]) -> EncodingPreference {
        if lines.is_empty() {
            return EncodingPreference {
                codings: Vec::new(),
                identity: true,
            };
        }
        let mut wildcard = None;
        let mut named: Vec<(&[u8], u16)> = Vec::new();
        for element in lines.iter().flat_map(|line| line.split(|&b| b == b',')) {
            let mut params = element.split(|&b| b == b';');
            let token = params.next().unwrap_or_default().trim_ascii();
            if token.is_empty() {
                continue;
            }
            let q = params
                .filter_map(|p| {
                    let p = p.trim_ascii();
                    let value = p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q="))?;
                    parse_quality(value.trim_ascii())
                })
                .next()
                .unwrap_or(1000);
            if token == b"*" {
                wildcard = Some(q);
            } else {
                named.push((token, q));
            }
        }
        // RFC 9110 §8.4.1.3: x-gzip is gzip.
        let quality_of = |names: &[&[u8]]| -> Option<u16> {
            named
                .iter()
                .filter(|(token, _)| names.iter().any(|n| token.eq_ignore_ascii_case(n)))
                .map(|&(_, q)| q)
                .max()
        };
        let mut ranked: Vec<(u16, usize, Coding)> = Coding::ALL
            .iter()
            .enumerate()
            .filter_map(|(order, &coding)| {
                let names: &[&[u8]] = match coding {
                    Coding::Brotli => &[b"br"],
                    Coding::Gzip => &[b"gzip", b"x-gzip"],
                };
                let q = quality_of(names).or(wildcard).unwrap_or(0);
                (q > 0).then_some((q, order, coding))
            })
            .collect();
        ranked.sort_by_key(|&(q, order, _)| (std::cmp::Reverse(q), order));
        let identity = match quality_of(&[b"identity"]) {
            Some(q) => q > 0,
            None => wildcard != Some(0),
        };
        EncodingPreference {
            codings: ranked.into_iter().map(|(_, _, coding)| coding).collect(),
            identity,
        }
    }
}

/// The quality, in thousandths, that `Accept` gives `kind/subtype`: that of the most
/// specific matching range; 1000 without an `Accept` field, 0 when nothing matches.
pub(crate) fn media_quality(accept: &[&[u8]], kind: &[u8], subtype: &[u8]) -> u16 {
    if accept.is_empty() {
        return 1000;
    }
    let mut best: Option<(u8, u16)> = None;
    for element in accept.iter().flat_map(|line| line.split(|&b| b == b',')) {
        let mut params = element.split(|&b| b == b';');
        let range = params.next().unwrap_or_default().trim_ascii();
        let Some((range_kind, range_subtype)) = range
            .iter()
            .position(|&b| b == b'/')
            .map(|slash| (&range[..slash], &range[slash + 1..]))
        else {
            continue;
        };
        let specificity = match (range_kind, range_subtype) {
            (b"*", b"*") => 1,
            (k, b"*") if k.eq_ignore_ascii_case(kind) => 2,
            (k, s) if k.eq_ignore_ascii_case(kind) && s.eq_ignore_ascii_case(subtype) => 3,
            _ => continue,
        };
        let q = params
            .filter_map(|p| {
                let p = p.trim_ascii();
                let value = p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q="))?;
                parse_quality(value)
            })
            .next()
            .unwrap_or(1000);
        if best.is_none_or(|(s, _)| specificity > s) {
            best = Some((specificity, q));
        }
    }
    best.map_or(0, |(_, q)| q)
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in thousandths.
fn parse_quality(value: &[u8]) -> Option<u16> {
    let (whole, fraction) = match value.iter().position(|&b| b == b'.') {
        Some(dot) => (&value[..dot], &value[dot + 1..]),
        None => (value, &b""[..]),
    };
    if fraction.len() > 3 || !fraction.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + fraction.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match whole {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefer(line: &str) -> (Vec<&'static str>, bool) {
        let lines: Vec<&[u8]> = if line.is_empty() {
            Vec::new()
        } else {
            vec![line.as_bytes()]
        };
        let p = EncodingPreference::from_lines(&lines);
        (p.codings.iter().map(|c| c.token()).collect(), p.identity)
    }

    #[test]
    fn accept_encoding_with_qualities() {
        assert_eq!(prefer(""), (vec![], true));
        assert_eq!(prefer("gzip, deflate, br"), (vec!["br", "gzip"], true));
        assert_eq!(prefer("gzip;q=1.0, br;q=0.8"), (vec!["gzip", "br"], true));
        assert_eq!(prefer("br;q=0, gzip"), (vec!["gzip"], true));
        assert_eq!(prefer("X-GZIP"), (vec!["gzip"], true));
        assert_eq!(prefer("*"), (vec!["br", "gzip"], true));
        assert_eq!(prefer("*;q=0.5, gzip"), (vec!["gzip", "br"], true));
        assert_eq!(prefer("identity"), (vec![], true));
        assert_eq!(prefer("gzip, identity;q=0"), (vec!["gzip"], false));
        assert_eq!(prefer("*;q=0"), (vec![], false));
        assert_eq!(prefer("*;q=0, identity"), (vec![], true));
        // A malformed quality is ignored, as if absent.
        assert_eq!(prefer("gzip;q=2"), (vec!["gzip"], true));
        assert_eq!(prefer(" , ;q=1"), (vec![], true));
    }

    #[test]
    fn qualities_parse_as_the_grammar_says() {
        assert_eq!(parse_quality(b"0.5"), Some(500));
        assert_eq!(parse_quality(b"0.125"), Some(125));
        assert_eq!(parse_quality(b"1.000"), Some(1000));
        assert_eq!(parse_quality(b"1.5"), None);
        assert_eq!(parse_quality(b"0.1234"), None);
        assert_eq!(
            media_quality(&[b"application/json;q=0.9, */*;q=0.1"], b"text", b"html"),
            100
        );
    }
}
