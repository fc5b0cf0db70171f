//! One UDP worker's NTS: its cookie jar (following the shared master secret), a
//! pool of random nonces, and the authenticated reply or NAK to each NTS request.

use std::time::SystemTime;

use crate::io::Outgoing;
use crate::metrics::NtsNak;
use crate::nts::cookie::{CookieJar, COOKIE_LEN, NONCE_LEN};
use crate::nts::extension::{self, NtsRequest, Rejection, Verified, MAX_COOKIES};
use crate::nts::SharedSecret;
use crate::packet::NtpTimestamp;

/// Random bytes fetched from the operating system at once: nonces for about 28
/// replies of eight cookies, or 256 of one.
const NONCE_POOL: usize = 4096;

/// A worker's NTS state.
pub struct Responder {
    shared: SharedSecret,
    jar: CookieJar,
    pool: Box<[u8; NONCE_POOL]>,
    used: usize,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("jar", &self.jar)
            .finish_non_exhaustive()
    }
}

impl Responder {
    /// A responder that seals cookies under `shared`'s secret.
    pub fn new(shared: SharedSecret) -> Responder {
        Responder {
            jar: CookieJar::new(shared.load()),
            shared,
            pool: Box::new([0; NONCE_POOL]),
            used: NONCE_POOL,
        }
    }

    /// Follows a secret replaced since the last call (SIGHUP re-read its file).
    pub fn refresh(&mut self) {
        let secret = self.shared.load();
        if !self.jar.uses(&secret) {
            self.jar = CookieJar::new(secret);
        }
    }

    /// Opens the request's cookie and checks its authenticator.
    pub fn verify(
        &mut self,
        packet: &[u8],
        request: &NtsRequest<'_>,
        now: SystemTime,
    ) -> Result<Verified, NtsNak> {
        extension::verify(packet, request, &mut self.jar, now).map_err(
            |rejection| match rejection {
                Rejection::Cookie(_) => NtsNak::Cookie,
                Rejection::Authenticator => NtsNak::Authenticator,
            },
        )
    }

    /// Finishes the authenticated reply whose header (a reply or a Kiss-o'-Death) is
    /// in `out`: stamps its transmit timestamp now (the header is authenticated, so
    /// it cannot be stamped later), then adds the request's identifier and the
    /// fresh cookies under the client's server-to-client key, as many as fit in the
    /// request's length (`request_len`: a reply is never longer). Returns false when
    /// no random numbers were to be had (the reply is then not sent).
    pub fn seal(
        &mut self,
        out: &mut Outgoing,
        request: &NtsRequest<'_>,
        request_len: usize,
        verified: &Verified,
    ) -> bool {
        let now = SystemTime::now();
        out.header_mut()[40..48]
            .copy_from_slice(&NtpTimestamp::from_system_time(now).0.to_be_bytes());
        let mut cookies = [[0u8; COOKIE_LEN]; MAX_COOKIES];
        let mut count = verified.cookies;
        while count > 1 && extension::reply_len(request.unique_id.len(), count) > request_len {
            count -= 1;
        }
        for cookie in &mut cookies[..count] {
            let Some(nonce) = self.nonce() else {
                return false;
            };
            *cookie = self.jar.seal(&verified.keys, now, &nonce);
        }
        let Some(nonce) = self.nonce() else {
            return false;
        };
        match extension::seal_reply(
            out.buffer_mut(),
            request.unique_id,
            &verified.keys.s2c,
            &cookies[..count],
            &nonce,
        ) {
            Some(len) => {
                out.seal(len);
                true
            }
            None => false,
        }
    }

    /// Finishes the NAK whose Kiss-o'-Death header is in `out`.
    pub fn nak(&mut self, out: &mut Outgoing, request: &NtsRequest<'_>) -> bool {
        let now = NtpTimestamp::from_system_time(SystemTime::now());
        out.header_mut()[40..48].copy_from_slice(&now.0.to_be_bytes());
        match extension::write_nak(out.buffer_mut(), request.unique_id) {
            Some(len) => {
                out.seal(len);
                true
            }
            None => false,
        }
    }

    /// 16 random bytes from the pool, refilled from the operating system when empty.
    fn nonce(&mut self) -> Option<[u8; NONCE_LEN]> {
        if self.used + NONCE_LEN > NONCE_POOL {
            getrandom::fill(&mut self.pool[..]).ok()?;
            self.used = 0;
        }
        let nonce = self.pool[self.used..self.used + NONCE_LEN]
            .try_into()
            .expect("16 bytes");
        self.used += NONCE_LEN;
        Some(nonce)
    }
}
