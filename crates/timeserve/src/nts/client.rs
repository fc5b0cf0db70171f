//! The client's side of NTS on NTP (RFC 8915 §5), for tests, load generators and
//! proofs: authenticated requests built from the keys and cookies of a key exchange,
//! and replies checked as a client checks them.

use aes_siv::siv::Aes128Siv;
use aes_siv::KeyInit as _;

use crate::nts::cookie::{SessionKeys, NONCE_LEN, TAG_LEN};
use crate::nts::extension::{authenticator, field, fields, push_field, KISS_NTS_NAK};
use crate::packet::HEADER_LEN;

/// A client's side of NTS on NTP (for tests, load generators and proofs): builds
/// authenticated requests and checks replies.
#[derive(Debug)]
pub struct Client {
    keys: SessionKeys,
}

/// What a client finds in a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientReply {
    /// Authenticated, with these fresh cookies.
    Authentic {
        /// The cookies the reply carried.
        cookies: Vec<Vec<u8>>,
    },
    /// An NTS NAK for this request.
    Nak,
    /// Not authentic, or not for this request.
    Rejected,
}

impl Client {
    /// A client holding the keys its key exchange exported.
    pub fn new(keys: SessionKeys) -> Client {
        Client { keys }
    }

    /// An NTPv4 request (transmit timestamp `transmit`) with `unique_id` (32 bytes),
    /// `cookie` and `placeholders` placeholders, authenticated with `nonce`.
    pub fn request(
        &self,
        transmit: crate::packet::NtpTimestamp,
        unique_id: &[u8; 32],
        cookie: &[u8],
        placeholders: usize,
        nonce: &[u8; NONCE_LEN],
    ) -> Vec<u8> {
        let mut packet = crate::packet::client_request(4, transmit).to_vec();
        push_field(&mut packet, field::UNIQUE_IDENTIFIER, unique_id);
        push_field(&mut packet, field::COOKIE, cookie);
        for _ in 0..placeholders {
            push_field(
                &mut packet,
                field::COOKIE_PLACEHOLDER,
                &vec![0; cookie.len()],
            );
        }
        let authenticated_len = packet.len();
        let mut ciphertext = Vec::new();
        let tag = Aes128Siv::new((&self.keys.c2s).into())
            .encrypt_in_place_detached([&packet[..], nonce.as_slice()], &mut ciphertext[..])
            .expect("two headers are within AES-SIV's limit");
        ciphertext.splice(0..0, tag);
        let mut body = Vec::new();
        body.extend_from_slice(&(NONCE_LEN as u16).to_be_bytes());
        body.extend_from_slice(&(ciphertext.len() as u16).to_be_bytes());
        body.extend_from_slice(nonce);
        body.extend_from_slice(&ciphertext);
        push_field(&mut packet, field::AUTHENTICATOR, &body);
        debug_assert_eq!(packet[authenticated_len..].len(), 4 + body.len());
        packet
    }

    /// Checks `reply` against the request that carried `unique_id`.
    pub fn check(&self, reply: &[u8], unique_id: &[u8; 32]) -> ClientReply {
        let mut echoed = false;
        let mut rest = reply.get(HEADER_LEN..).unwrap_or_default();
        let mut at = HEADER_LEN;
        while rest.len() >= 4 {
            let kind = u16::from_be_bytes([rest[0], rest[1]]);
            let length = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
            if length < 4 || length > rest.len() {
                return ClientReply::Rejected;
            }
            let body = &rest[4..length];
            match kind {
                field::UNIQUE_IDENTIFIER => echoed = body == unique_id,
                field::AUTHENTICATOR if echoed => {
                    let Some((nonce, ciphertext)) = authenticator(body) else {
                        return ClientReply::Rejected;
                    };
                    let (tag, encrypted) = ciphertext.split_at(TAG_LEN);
                    let mut plaintext = encrypted.to_vec();
                    let opened = Aes128Siv::new((&self.keys.s2c).into()).decrypt_in_place_detached(
                        [&reply[..at], nonce],
                        &mut plaintext,
                        aes_siv::Tag::from_slice(tag),
                    );
                    if opened.is_err() {
                        return ClientReply::Rejected;
                    }
                    let cookies = fields(&plaintext)
                        .filter(|(kind, _)| *kind == field::COOKIE)
                        .map(|(_, body)| body.to_vec())
                        .collect();
                    return ClientReply::Authentic { cookies };
                }
                _ => {}
            }
            rest = &rest[length..];
            at += length;
        }
        if echoed && reply.len() >= HEADER_LEN && reply[12..16] == KISS_NTS_NAK && reply[1] == 0 {
            ClientReply::Nak
        } else {
            ClientReply::Rejected
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use super::*;
    use crate::nts::cookie::{CookieError, CookieJar, MasterSecret};
    use crate::nts::extension::{
        authenticator, classify, field, push_field, seal_reply, verify, write_nak, Classified,
        Rejection, MAX_COOKIES,
    };
    use crate::packet::NtpTimestamp;

    fn setup() -> (CookieJar, Client, Vec<u8>, SystemTime) {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut jar = CookieJar::new(MasterSecret::new([3; 32], Duration::from_secs(86_400)));
        let keys = SessionKeys {
            c2s: [4; 32],
            s2c: [5; 32],
        };
        let cookie = jar.seal(&keys, now, &[6; 16]).to_vec();
        (jar, Client::new(keys), cookie, now)
    }

    /// The server's whole path for one request: classify, verify, seal.
    fn answer(packet: &[u8], jar: &mut CookieJar, now: SystemTime) -> Result<Vec<u8>, Rejection> {
        let Classified::Nts(request) = classify(packet) else {
            panic!("not an NTS request");
        };
        let verified = verify(packet, &request, jar, now)?;
        let cookies: Vec<_> = (0..verified.cookies)
            .map(|i| jar.seal(&verified.keys, now, &[0x80 + i as u8; 16]))
            .collect();
        let mut out = vec![0u8; 1024];
        out[..HEADER_LEN].copy_from_slice(&packet[..HEADER_LEN]);
        let len = seal_reply(
            &mut out,
            request.unique_id,
            &verified.keys.s2c,
            &cookies,
            &[9; 16],
        )
        .unwrap();
        out.truncate(len);
        Ok(out)
    }

    #[test]
    fn an_authenticated_request_gets_an_authentic_reply_with_a_cookie_per_placeholder() {
        let (mut jar, client, cookie, now) = setup();
        for placeholders in [0, 1, 7, 9] {
            let uid = [placeholders as u8; 32];
            let request = client.request(NtpTimestamp(42), &uid, &cookie, placeholders, &[1; 16]);
            let reply = answer(&request, &mut jar, now).unwrap();
            assert!(reply.len() <= request.len(), "no amplification");
            let ClientReply::Authentic { cookies } = client.check(&reply, &uid) else {
                panic!("not authentic");
            };
            assert_eq!(cookies.len(), (1 + placeholders).min(MAX_COOKIES));
            for fresh in cookies {
                assert_ne!(fresh, cookie);
                assert_eq!(jar.open(&fresh, now).unwrap().c2s, [4; 32]);
            }
            // Another request's identifier does not match it.
            assert_eq!(client.check(&reply, &[0xee; 32]), ClientReply::Rejected);
        }
    }

    #[test]
    fn a_flipped_bit_anywhere_in_a_request_or_a_reply_is_caught() {
        let (mut jar, client, cookie, now) = setup();
        let uid = [1; 32];
        let request = client.request(NtpTimestamp(42), &uid, &cookie, 1, &[1; 16]);
        for bit in 0..request.len() * 8 {
            let mut flipped = request.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            // Either not an NTS request any more, or refused: never answered.
            if let Classified::Nts(parsed) = classify(&flipped) {
                assert!(
                    verify(&flipped, &parsed, &mut jar, now).is_err(),
                    "bit {bit} of the request"
                );
            }
        }
        let reply = answer(&request, &mut jar, now).unwrap();
        for bit in 0..reply.len() * 8 {
            let mut flipped = reply.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(
                !matches!(client.check(&flipped, &uid), ClientReply::Authentic { .. }),
                "bit {bit} of the reply"
            );
        }
    }

    #[test]
    fn a_cookie_from_another_server_is_a_cookie_rejection_and_the_nak_echoes_the_identifier() {
        let (_, client, cookie, now) = setup();
        let mut other = CookieJar::new(MasterSecret::new([8; 32], Duration::from_secs(86_400)));
        let uid = [2; 32];
        let request = client.request(NtpTimestamp(42), &uid, &cookie, 0, &[1; 16]);
        assert_eq!(
            answer(&request, &mut other, now).unwrap_err(),
            Rejection::Cookie(CookieError::Forged)
        );
        let Classified::Nts(parsed) = classify(&request) else {
            panic!()
        };
        let mut out = [0u8; 1024];
        out[12..16].copy_from_slice(&KISS_NTS_NAK);
        let len = write_nak(&mut out, parsed.unique_id).unwrap();
        assert_eq!(client.check(&out[..len], &uid), ClientReply::Nak);
    }

    #[test]
    fn placeholders_shorter_than_a_cookie_buy_nothing() {
        let (_, client, cookie, _) = setup();
        // Seven empty placeholders would buy seven 108-byte cookies: a reply almost
        // four times the request, to a spoofed address.
        let mut packet = crate::packet::client_request(4, NtpTimestamp(1)).to_vec();
        push_field(&mut packet, field::UNIQUE_IDENTIFIER, &[1; 32]);
        push_field(&mut packet, field::COOKIE, &cookie);
        for _ in 0..7 {
            push_field(&mut packet, field::COOKIE_PLACEHOLDER, &[]);
        }
        let signed = client.request(NtpTimestamp(1), &[1; 32], &cookie, 0, &[1; 16]);
        packet.extend_from_slice(&signed[HEADER_LEN + 36 + 108..]);
        assert_eq!(classify(&packet), Classified::Malformed);
    }

    #[test]
    fn short_datagrams_and_huge_ciphertext_lengths_are_read_safely() {
        assert_eq!(classify(&[]), Classified::Plain);
        assert_eq!(classify(&[0x23; 47]), Classified::Plain);
        let mut body = vec![0, 16, 0xff, 0xfc];
        body.resize(4 + 16 + 64, 0);
        assert_eq!(authenticator(&body), None);
    }

    #[test]
    fn plain_requests_and_broken_nts_fields_are_told_apart() {
        let plain = crate::packet::client_request(4, NtpTimestamp(1));
        assert_eq!(classify(&plain), Classified::Plain);
        // A legacy MAC (key id and digest) is not an extension field.
        let mut mac = plain.to_vec();
        mac.extend_from_slice(&[0, 0, 0, 1]);
        mac.extend_from_slice(&[0xab; 16]);
        assert_eq!(classify(&mac), Classified::Plain);
        let (_, client, cookie, _) = setup();
        let request = client.request(NtpTimestamp(1), &[1; 32], &cookie, 0, &[1; 16]);
        // Cut before the authenticator ends, or without it.
        assert_eq!(
            classify(&request[..request.len() - 4]),
            Classified::Malformed
        );
        let without = &request[..HEADER_LEN + 36 + 108];
        assert_eq!(classify(without), Classified::Malformed);
        // A short unique identifier.
        let mut short = plain.to_vec();
        push_field(&mut short, field::UNIQUE_IDENTIFIER, &[0; 8]);
        assert_eq!(classify(&short), Classified::Malformed);
    }
}
