//! RFC 9530 integrity fields: which digest `Want-Repr-Digest` and `Want-Content-Digest`
//! ask for, and the `Repr-Digest` / `Content-Digest` values.
//!
//! A Want-* field is a Structured Field Dictionary (RFC 8941) of algorithm keys with
//! integer preferences 0 to 10 (0: not acceptable). ioserve offers `sha-256` and
//! `sha-512`; other keys are ignored, and a field that is not a valid dictionary is
//! ignored as a whole (RFC 8941 §4.2). The digest field is a dictionary too:
//! `sha-256=:BASE64:`, the base64 made by `ioserve-simd`.

use ioserve_simd::base64::STANDARD;

use crate::io::file_digests::Digests;

/// A digest algorithm ioserve offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// SHA-256.
    Sha256,
    /// SHA-512.
    Sha512,
}

impl Algorithm {
    /// The key of the IANA Hash Algorithms for HTTP Digest Fields registry.
    pub fn key(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "sha-256",
            Algorithm::Sha512 => "sha-512",
        }
    }
}

/// The digests a request wants, owned (it goes with the resolved request).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DigestWant {
    /// The algorithm for `Repr-Digest`, if `Want-Repr-Digest` accepts one.
    pub repr: Option<Algorithm>,
    /// The algorithm for `Content-Digest`, if `Want-Content-Digest` accepts one.
    pub content: Option<Algorithm>,
}

impl DigestWant {
    /// From the lines of `Want-Repr-Digest` and `Want-Content-Digest`.
    pub fn from_lines(repr: &[&[u8]], content: &[&[u8]]) -> DigestWant {
        DigestWant {
            repr: preferred(repr),
            content: preferred(content),
        }
    }

    /// Whether any digest is wanted.
    pub fn any(&self) -> bool {
        self.repr.is_some() || self.content.is_some()
    }
}

/// A digest field's value: `KEY=:BASE64:`.
pub fn field_value(algorithm: Algorithm, digests: &Digests) -> String {
    let encoded = match algorithm {
        Algorithm::Sha256 => STANDARD.encode(digests.sha256),
        Algorithm::Sha512 => STANDARD.encode(digests.sha512),
    };
    format!("{}=:{encoded}:", algorithm.key())
}

/// The offered algorithm with the highest non-zero preference in the field made of
/// `lines` (combined with commas, as RFC 9110 §5.3 allows); SHA-256 on a tie.
fn preferred(lines: &[&[u8]]) -> Option<Algorithm> {
    let mut best: Option<(i64, Algorithm)> = None;
    for line in lines {
        let members = dictionary(line)?;
        for (key, preference) in members {
            let algorithm = match key {
                b"sha-256" => Algorithm::Sha256,
                b"sha-512" => Algorithm::Sha512,
                _ => continue,
            };
            let Some(preference) = preference.filter(|p| (1..=10).contains(p)) else {
                continue;
            };
            if best.is_none_or(|(seen, _)| preference > seen) {
                best = Some((preference, algorithm));
            }
        }
    }
    best.map(|(_, algorithm)| algorithm)
}

/// The members of an RFC 8941 dictionary whose values are Integers or Tokens or
/// Booleans (what a Want-* field holds), as `(key, integer value if it is one)`;
/// parameters are skipped. `None` when the text is not such a dictionary.
fn dictionary(text: &[u8]) -> Option<Vec<(&[u8], Option<i64>)>> {
    let mut members = Vec::new();
    let text = text.trim_ascii();
    if text.is_empty() {
        return Some(members);
    }
    for member in text.split(|&b| b == b',') {
        let member = member.trim_ascii();
        let mut pieces = member.split(|&b| b == b';');
        let item = pieces.next()?;
        for parameter in pieces {
            let (key, value) = match parameter.iter().position(|&b| b == b'=') {
                Some(at) => (&parameter[..at], Some(&parameter[at + 1..])),
                None => (parameter, None),
            };
            if !is_key(key.trim_ascii_start()) || value.is_some_and(|v| bare_item(v).is_none()) {
                return None;
            }
        }
        let (key, value) = match item.iter().position(|&b| b == b'=') {
            Some(at) => (&item[..at], bare_item(&item[at + 1..])?),
            None => (item, None),
        };
        if !is_key(key) {
            return None;
        }
        members.push((key, value));
    }
    Some(members)
}

/// RFC 8941 §3.1.2 key: `( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`.
fn is_key(key: &[u8]) -> bool {
    let Some((&first, rest)) = key.split_first() else {
        return false;
    };
    (first.is_ascii_lowercase() || first == b'*')
        && rest
            .iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.*".contains(&b))
}

/// An Integer (`Some(Some(n))`), a Token or Boolean (`Some(None)`), else `None`.
fn bare_item(item: &[u8]) -> Option<Option<i64>> {
    match item {
        b"?0" | b"?1" => Some(None),
        [b'-', digits @ ..] => integer(digits).map(|n| Some(-n)),
        [first, ..] if first.is_ascii_digit() => integer(item).map(Some),
        [first, rest @ ..] if first.is_ascii_alphabetic() || *first == b'*' => rest
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&b))
            .then_some(None),
        _ => None,
    }
}

/// 1 to 15 digits (RFC 8941 §3.3.1).
fn integer(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want(line: &str) -> Option<Algorithm> {
        preferred(&[line.as_bytes()])
    }

    #[test]
    fn the_highest_accepted_offered_algorithm_wins() {
        assert_eq!(want("sha-256=1"), Some(Algorithm::Sha256));
        assert_eq!(want("sha-512=3, sha-256=10"), Some(Algorithm::Sha256));
        assert_eq!(want("sha-256=3,sha-512=10"), Some(Algorithm::Sha512));
        assert_eq!(want("sha-256=5, sha-512=5"), Some(Algorithm::Sha256));
        assert_eq!(want("unixsum=10, sha-512=2"), Some(Algorithm::Sha512));
        assert_eq!(want("sha-256=10;x=1, md5"), Some(Algorithm::Sha256));
        assert_eq!(
            preferred(&[b"sha-256=0".as_slice(), b"sha-512=4".as_slice()]),
            Some(Algorithm::Sha512)
        );
    }

    #[test]
    fn refused_unknown_and_malformed_fields_want_nothing() {
        for line in [
            "",
            "sha-256=0",
            "sha-256=11",
            "sha-256=-1",
            "sha-256",
            "sha-256=?1",
            "md5=10",
            "SHA-256=10",
            "sha-256=10, =3",
            "sha-256=10, sha-512=\"x\"",
            "sha-256=1000000000000000",
        ] {
            assert_eq!(want(line), None, "{line:?}");
        }
    }

    #[test]
    fn the_field_value_is_a_byte_sequence_of_the_digest() {
        let digests = Digests {
            sha256: [0xff; 32],
            sha512: [0; 64],
        };
        assert_eq!(
            field_value(Algorithm::Sha256, &digests),
            format!("sha-256=:{}=:", "/".repeat(42) + "8")
        );
        assert!(field_value(Algorithm::Sha512, &digests).starts_with("sha-512=:AAAA"));
    }
}
