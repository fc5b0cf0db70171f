//! From a parsed request to what it asks for, owned: no IO, and nothing in it borrows
//! the read buffer, so an answer completed on the blocking pool takes it along and
//! nothing is parsed twice.

use crate::http::conditional::OwnedPreconditions;
use crate::http::digest_fields::DigestWant;
use crate::http::listing;
use crate::http::negotiation::EncodingPreference;
use crate::http::path::{self, PathError, SafePath};
use crate::http::request::{Method, Request};
use crate::http::response::{Body, Reply};
use crate::http::site::Site;

/// A GET or HEAD of a path beneath the root, with everything its reply depends on.
#[derive(Debug)]
pub struct Resolved {
    /// HEAD: the same head, no body.
    pub head_only: bool,
    /// The request target as sent (a directory's redirect keeps its query).
    pub target: String,
    /// The sanitized path beneath the root.
    pub path: SafePath,
    /// The precondition fields.
    pub preconditions: OwnedPreconditions,
    /// The `Range` field, if exactly one was sent.
    pub range: Option<Vec<u8>>,
    /// The codings `Accept-Encoding` allows, best first (with `--precompressed`; else
    /// the unencoded file only).
    pub encodings: EncodingPreference,
    /// A directory listing's form, negotiated with `Accept`.
    pub listing_format: listing::Format,
    /// A directory listing's order, from the query (`sort`, `order`); an error is
    /// answered only where the target is a listing.
    pub listing_sort: Result<listing::sort::Sort, listing::sort::SortError>,
    /// The query asks for a directory as one tar (`?download=tar`).
    pub download_tar: bool,
    /// The RFC 9530 digests asked for (with `--digests`; else none).
    pub digests: DigestWant,
}

/// Resolves `request` for `site`: what it asks for, or the reply that refuses it (a
/// method other than GET and HEAD, a path that is malformed, leaves the root, or is
/// hidden).
pub fn resolve(site: &Site, request: &Request<'_>) -> Result<Resolved, Reply> {
    let head_only = match request.method {
        Method::Get => false,
        Method::Head => true,
        Method::Other(_) => return Err(Reply::error(405).header("Allow", "GET, HEAD")),
    };
    let refuse = |mut reply: Reply| {
        if head_only {
            reply.body = Body::Empty;
        }
        Err(reply)
    };
    let safe = match path::sanitize(request.target) {
        Ok(safe) => safe,
        Err(PathError::Malformed) => return refuse(Reply::error(400)),
        Err(PathError::Forbidden(_)) => return refuse(Reply::error(403)),
    };
    if safe.hidden && !site.hidden {
        // As if it were not there: a 403 would confirm that `.git/config` exists.
        return refuse(Reply::error(404));
    }
    let encodings = match site.precompressed {
        true => EncodingPreference::from_lines(&request.accept_encoding),
        false => EncodingPreference::from_lines(&[]),
    };
    Ok(Resolved {
        head_only,
        target: request.target.to_owned(),
        path: safe,
        preconditions: request.preconditions.owned(),
        range: request.range.map(<[u8]>::to_vec),
        encodings,
        listing_format: listing::Format::negotiate(&request.accept),
        listing_sort: listing::sort::Sort::from_target(request.target),
        download_tar: asks_for_tar(request.target),
        digests: match site.digests {
            Some(_) => {
                DigestWant::from_lines(&request.want_repr_digest, &request.want_content_digest)
            }
            None => DigestWant::default(),
        },
    })
}

/// Whether the query of `target` has the pair `download=tar` (miniserve's spelling).
fn asks_for_tar(target: &str) -> bool {
    let query = target.split('#').next().unwrap_or_default();
    query
        .split_once('?')
        .is_some_and(|(_, query)| query.split('&').any(|pair| pair == "download=tar"))
}

#[cfg(test)]
mod tests {
    use super::asks_for_tar;

    #[test]
    fn tar_is_asked_for_by_the_query_pair() {
        assert!(asks_for_tar("/dir/?download=tar"));
        assert!(asks_for_tar("/dir/?a=1&download=tar#top"));
        assert!(!asks_for_tar("/dir/download=tar"));
        assert!(!asks_for_tar("/dir/?download=zip"));
        assert!(!asks_for_tar("/dir/#?download=tar"));
        assert!(!asks_for_tar("/dir/?download=tarball"));
    }
}
