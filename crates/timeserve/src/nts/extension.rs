//! NTS on the NTP packet (RFC 8915 §5): the extension fields (RFC 7822) of an
//! authenticated request, checking it, and writing the authenticated reply with
//! fresh cookies, or the NTS NAK (a Kiss-o'-Death "NTSN") when its cookie or
//! authenticator fails. Pure functions over bytes, beside [`crate::packet`]; the
//! client's side is [`crate::nts::client`].
//!
//! An extension field is a 16-bit type, a 16-bit length (of the whole field, a
//! multiple of 4) and a body. The Authenticator and Encrypted Extension Fields field
//! holds a nonce and an AES-SIV ciphertext (tag first) whose associated data is every
//! byte of the packet before that field: the header and the fields before it.

use aes_siv::siv::Aes128Siv;
use aes_siv::KeyInit as _;

use crate::nts::cookie::{CookieError, CookieJar, SessionKeys, COOKIE_LEN, NONCE_LEN, TAG_LEN};
use crate::packet::HEADER_LEN;

/// Extension field types (RFC 8915 §7.5).
pub mod field {
    /// Unique Identifier: echoed in the reply.
    pub const UNIQUE_IDENTIFIER: u16 = 0x0104;
    /// NTS Cookie.
    pub const COOKIE: u16 = 0x0204;
    /// NTS Cookie Placeholder: asks for one more cookie.
    pub const COOKIE_PLACEHOLDER: u16 = 0x0304;
    /// NTS Authenticator and Encrypted Extension Fields.
    pub const AUTHENTICATOR: u16 = 0x0404;
}

/// The kiss code of an NTS NAK.
pub const KISS_NTS_NAK: [u8; 4] = *b"NTSN";

/// The most cookies one reply carries (the one used and seven placeholders), as a
/// key exchange hands out.
pub const MAX_COOKIES: usize = 8;

/// The shortest Unique Identifier body a request may carry.
const MIN_UNIQUE_ID: usize = 32;

/// The shortest nonce a request's authenticator may carry.
const MIN_NONCE: usize = 16;

/// An NTS request as it arrived: where its parts are in the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NtsRequest<'a> {
    /// The whole Unique Identifier field (header included), echoed as it came.
    pub unique_id: &'a [u8],
    /// The cookie's bytes.
    pub cookie: &'a [u8],
    /// Cookie placeholders outside the encrypted part.
    pub placeholders: usize,
    /// Where the authenticator field starts: the end of the associated data.
    pub authenticated_len: usize,
    /// The authenticator's nonce.
    pub nonce: &'a [u8],
    /// The authenticator's ciphertext (tag first).
    pub ciphertext: &'a [u8],
}

/// What the extension fields after a request's header say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classified<'a> {
    /// No NTS field: a plain request (or one with other fields, or a legacy MAC).
    Plain,
    /// An NTS request, to be checked.
    Nts(NtsRequest<'a>),
    /// NTS fields that do not make a request (missing, repeated or cut short, or a
    /// placeholder not the length of a cookie): not answered, as no reply could be
    /// authenticated or matched, or it would be longer than the request.
    Malformed,
}

/// Reads the extension fields of `packet` (a whole request, header included).
pub fn classify(packet: &[u8]) -> Classified<'_> {
    if packet.len() < HEADER_LEN {
        return Classified::Plain;
    }
    let mut unique_id = None;
    let mut cookie = None;
    let mut placeholders = 0;
    let mut nts = false;
    let mut at = HEADER_LEN;
    while packet.len() - at >= 4 {
        let kind = u16::from_be_bytes([packet[at], packet[at + 1]]);
        let length = usize::from(u16::from_be_bytes([packet[at + 2], packet[at + 3]]));
        if length < 4 || !length.is_multiple_of(4) || length > packet.len() - at {
            // Not an extension field: a legacy MAC, or garbage.
            return if nts {
                Classified::Malformed
            } else {
                Classified::Plain
            };
        }
        let whole = &packet[at..at + length];
        let body = &whole[4..];
        match kind {
            field::UNIQUE_IDENTIFIER => {
                nts = true;
                if unique_id.is_some() || body.len() < MIN_UNIQUE_ID {
                    return Classified::Malformed;
                }
                unique_id = Some(whole);
            }
            field::COOKIE => {
                nts = true;
                if cookie.is_some() {
                    return Classified::Malformed;
                }
                cookie = Some(body);
            }
            field::COOKIE_PLACEHOLDER => {
                nts = true;
                // RFC 8915 §5.5: a placeholder is as long as the cookie it asks
                // for, so that a reply is never longer than its request.
                if body.len() != COOKIE_LEN {
                    return Classified::Malformed;
                }
                placeholders += 1;
            }
            field::AUTHENTICATOR => {
                let (Some(unique_id), Some(cookie)) = (unique_id, cookie) else {
                    return Classified::Malformed;
                };
                let Some((nonce, ciphertext)) = authenticator(body) else {
                    return Classified::Malformed;
                };
                // Fields after the authenticator are not authenticated: ignored.
                return Classified::Nts(NtsRequest {
                    unique_id,
                    cookie,
                    placeholders,
                    authenticated_len: at,
                    nonce,
                    ciphertext,
                });
            }
            _ => {}
        }
        at += length;
    }
    if nts {
        Classified::Malformed
    } else {
        Classified::Plain
    }
}

/// The nonce and ciphertext of an authenticator field's body.
pub(super) fn authenticator(body: &[u8]) -> Option<(&[u8], &[u8])> {
    let nonce_len = usize::from(u16::from_be_bytes([*body.first()?, *body.get(1)?]));
    let ciphertext_len = usize::from(u16::from_be_bytes([*body.get(2)?, *body.get(3)?]));
    let nonce_at = 4;
    let ciphertext_at = nonce_at + nonce_len.next_multiple_of(4);
    let end = ciphertext_at + ciphertext_len.next_multiple_of(4);
    if nonce_len < MIN_NONCE
        || !(TAG_LEN..=crate::packet::MAX_REQUEST_LEN).contains(&ciphertext_len)
        || end > body.len()
    {
        return None;
    }
    Some((
        &body[nonce_at..nonce_at + nonce_len],
        &body[ciphertext_at..ciphertext_at + ciphertext_len],
    ))
}

/// Why an NTS request gets a NAK.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The cookie did not open.
    #[error("cookie: {0}")]
    Cookie(#[from] CookieError),
    /// The authenticator did not verify under the cookie's client-to-server key.
    #[error("the authenticator does not verify")]
    Authenticator,
}

/// A request that passed: the client's keys and how many cookies it gets.
#[derive(Debug)]
pub struct Verified {
    /// The keys its cookie held.
    pub keys: SessionKeys,
    /// Cookies to send: the one it used and one per placeholder, at most
    /// [`MAX_COOKIES`].
    pub cookies: usize,
}

/// Opens the request's cookie and verifies its authenticator.
pub fn verify(
    packet: &[u8],
    request: &NtsRequest<'_>,
    jar: &mut CookieJar,
    now: std::time::SystemTime,
) -> Result<Verified, Rejection> {
    let keys = jar.open(request.cookie, now)?;
    let mut plaintext = [0u8; crate::packet::MAX_REQUEST_LEN];
    let (tag, ciphertext) = request.ciphertext.split_at(TAG_LEN);
    let plaintext = &mut plaintext[..ciphertext.len()];
    plaintext.copy_from_slice(ciphertext);
    Aes128Siv::new((&keys.c2s).into())
        .decrypt_in_place_detached(
            [&packet[..request.authenticated_len], request.nonce],
            plaintext,
            aes_siv::Tag::from_slice(tag),
        )
        .map_err(|_| Rejection::Authenticator)?;
    // Encrypted placeholders count under the same rule as the others (RFC 8915 §5.5).
    let encrypted_placeholders = fields(plaintext)
        .filter(|(kind, body)| *kind == field::COOKIE_PLACEHOLDER && body.len() == COOKIE_LEN)
        .count();
    Ok(Verified {
        keys,
        cookies: (1 + request.placeholders + encrypted_placeholders).min(MAX_COOKIES),
    })
}

/// The (type, body) of each well-formed extension field in `bytes`, up to the first
/// that is not.
pub(super) fn fields(mut bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if bytes.len() < 4 {
            return None;
        }
        let kind = u16::from_be_bytes([bytes[0], bytes[1]]);
        let length = usize::from(u16::from_be_bytes([bytes[2], bytes[3]]));
        if length < 4 || length > bytes.len() {
            return None;
        }
        let body = &bytes[4..length];
        bytes = &bytes[length..];
        Some((kind, body))
    })
}

/// The length of an authenticated reply carrying `cookies` cookies, after a Unique
/// Identifier field of `unique_id_len` bytes.
pub fn reply_len(unique_id_len: usize, cookies: usize) -> usize {
    HEADER_LEN + unique_id_len + 4 + 4 + NONCE_LEN + TAG_LEN + cookies * (4 + COOKIE_LEN)
}

/// Writes the extension fields of the authenticated reply after the 48-byte header
/// already in `out` (its transmit timestamp set: the header is authenticated): the
/// request's Unique Identifier, then the authenticator with `cookies` encrypted under
/// the server-to-client key with `nonce`. Returns the reply's length, or `None` when
/// `out` is too short for it ([`reply_len`]).
pub fn seal_reply(
    out: &mut [u8],
    unique_id: &[u8],
    s2c: &[u8; crate::nts::cookie::KEY_LEN],
    cookies: &[[u8; COOKIE_LEN]],
    nonce: &[u8; NONCE_LEN],
) -> Option<usize> {
    let len = reply_len(unique_id.len(), cookies.len());
    let out = out.get_mut(..len)?;
    let mut at = HEADER_LEN;
    out[at..at + unique_id.len()].copy_from_slice(unique_id);
    at += unique_id.len();
    let authenticated_len = at;
    let plaintext_len = cookies.len() * (4 + COOKIE_LEN);
    out[at..at + 2].copy_from_slice(&field::AUTHENTICATOR.to_be_bytes());
    out[at + 2..at + 4].copy_from_slice(&((len - at) as u16).to_be_bytes());
    out[at + 4..at + 6].copy_from_slice(&(NONCE_LEN as u16).to_be_bytes());
    out[at + 6..at + 8].copy_from_slice(&((TAG_LEN + plaintext_len) as u16).to_be_bytes());
    at += 8;
    out[at..at + NONCE_LEN].copy_from_slice(nonce);
    at += NONCE_LEN;
    let tag_at = at;
    at += TAG_LEN;
    for cookie in cookies {
        out[at..at + 2].copy_from_slice(&field::COOKIE.to_be_bytes());
        out[at + 2..at + 4].copy_from_slice(&((4 + COOKIE_LEN) as u16).to_be_bytes());
        out[at + 4..at + 4 + COOKIE_LEN].copy_from_slice(cookie);
        at += 4 + COOKIE_LEN;
    }
    let (head, encrypted) = out.split_at_mut(tag_at + TAG_LEN);
    let tag = Aes128Siv::new(s2c.into())
        .encrypt_in_place_detached([&head[..authenticated_len], nonce.as_slice()], encrypted)
        .expect("two headers are within AES-SIV's limit");
    head[tag_at..].copy_from_slice(&tag);
    Some(len)
}

/// Writes the NTS NAK's field after the Kiss-o'-Death header already in `out`: the
/// request's Unique Identifier, so that the client can match it. Returns the length.
pub fn write_nak(out: &mut [u8], unique_id: &[u8]) -> Option<usize> {
    let len = HEADER_LEN + unique_id.len();
    out.get_mut(HEADER_LEN..len)?.copy_from_slice(unique_id);
    Some(len)
}

/// Appends an extension field of `kind` with `body` (padded to a multiple of 4).
pub(super) fn push_field(packet: &mut Vec<u8>, kind: u16, body: &[u8]) {
    let padded = body.len().next_multiple_of(4);
    packet.extend_from_slice(&kind.to_be_bytes());
    packet.extend_from_slice(&((4 + padded) as u16).to_be_bytes());
    packet.extend_from_slice(body);
    packet.resize(packet.len() + padded - body.len(), 0);
}
