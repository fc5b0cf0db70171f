//! Cookies (RFC 8915 §6): the two keys a client agreed in the key exchange, sealed
//! under the server's cookie key, so that the server keeps no state per client and
//! any worker (or any replica that shares the key file) opens them again.
//!
//! The cookie keys rotate: the key of rotation period `n` (`n` = Unix time ÷ the
//! rotation interval) is HKDF-SHA256 of the master secret with `n` in its info, so
//! every worker and every replica with the same secret derives the same key at the
//! same time without talking to the others. A cookie made in period `n` opens in
//! periods `n` to `n + KEPT_PERIODS` (and one period early, for a replica whose clock
//! is a little ahead).
//!
//! A cookie is `period (4 bytes) || nonce (16) || AES-SIV-CMAC-256 tag (16) ||
//! ciphertext (68)`: 104 bytes, a whole number of the 32-bit words NTP's extension
//! fields are made of. Its plaintext is the AEAD algorithm's number (2 bytes), two
//! bytes of zeros, and the client-to-server and server-to-client keys.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aes_siv::siv::Aes128Siv;
use aes_siv::KeyInit as _;

/// The IANA number of AEAD_AES_SIV_CMAC_256 (RFC 5297), the one AEAD algorithm
/// served.
pub const AEAD_AES_SIV_CMAC_256: u16 = 15;

/// The length of each key of AEAD_AES_SIV_CMAC_256 (two AES-128 keys).
pub const KEY_LEN: usize = 32;

/// The length of a cookie.
pub const COOKIE_LEN: usize = 4 + NONCE_LEN + TAG_LEN + PLAINTEXT_LEN;

/// The length of the nonce in a cookie (and of the server's nonces in replies).
pub const NONCE_LEN: usize = 16;

/// The length of an AES-SIV tag.
pub const TAG_LEN: usize = 16;

const PLAINTEXT_LEN: usize = 4 + 2 * KEY_LEN;

/// How many periods after its own a cookie still opens: with the default daily
/// rotation, a client that slept for a week still has working cookies.
pub const KEPT_PERIODS: u32 = 7;

/// The label mixed into each period's key, so that the secret's other uses (none
/// today) never meet these keys.
const KEY_INFO: &[u8] = b"timeserve NTS cookie key v1";

/// The keys of one client's association, as the key exchange exported them.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKeys {
    /// Client to server: authenticates requests.
    pub c2s: [u8; KEY_LEN],
    /// Server to client: authenticates replies and encrypts their cookies.
    pub s2c: [u8; KEY_LEN],
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys { .. }")
    }
}

/// Why a cookie did not open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CookieError {
    /// Not [`COOKIE_LEN`] bytes.
    #[error("a cookie is {COOKIE_LEN} bytes")]
    Length,
    /// Made in a period whose key is no longer (or not yet) kept.
    #[error("the cookie's key period is not kept")]
    Expired,
    /// The tag does not match: not ours, or altered.
    #[error("the cookie does not authenticate")]
    Forged,
    /// Opened, but for another AEAD algorithm.
    #[error("the cookie names an AEAD algorithm this server does not use")]
    Algorithm,
}

/// The master secret and how often the cookie key derived from it changes.
#[derive(Clone)]
pub struct MasterSecret {
    secret: [u8; 32],
    rotation: Duration,
}

impl std::fmt::Debug for MasterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterSecret")
            .field("rotation", &self.rotation)
            .finish_non_exhaustive()
    }
}

impl MasterSecret {
    /// A secret whose cookie key changes every `rotation` (whole seconds, at least
    /// one).
    pub fn new(secret: [u8; 32], rotation: Duration) -> MasterSecret {
        MasterSecret {
            secret,
            rotation: rotation.max(Duration::from_secs(1)),
        }
    }

    /// A secret from the operating system's random numbers.
    pub fn random(rotation: Duration) -> Result<MasterSecret, getrandom::Error> {
        let mut secret = [0; 32];
        getrandom::fill(&mut secret)?;
        Ok(MasterSecret::new(secret, rotation))
    }

    /// Whether `other` has the same secret and rotation (and so makes the same keys).
    pub fn same_secret(&self, other: &MasterSecret) -> bool {
        self.secret == other.secret && self.rotation == other.rotation
    }

    /// The rotation period `now` falls in.
    pub fn period(&self, now: SystemTime) -> u32 {
        let since = now.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        (since.as_secs() / self.rotation.as_secs()) as u32
    }

    /// The cookie key of `period`.
    fn key(&self, period: u32) -> [u8; KEY_LEN] {
        let hkdf = hkdf::Hkdf::<sha2::Sha256>::new(None, &self.secret);
        let mut key = [0; KEY_LEN];
        hkdf.expand_multi_info(&[KEY_INFO, &period.to_be_bytes()], &mut key)
            .expect("32 bytes is a valid HKDF-SHA256 output length");
        key
    }
}

/// One worker's cookie maker and opener: the secret and the ciphers of the periods
/// it met (a key schedule is set up once per period, not per cookie).
pub struct CookieJar {
    secret: std::sync::Arc<MasterSecret>,
    ciphers: Vec<(u32, Aes128Siv)>,
}

impl std::fmt::Debug for CookieJar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CookieJar")
            .field("secret", &self.secret)
            .field("periods", &self.ciphers.len())
            .finish()
    }
}

impl CookieJar {
    /// A jar for `secret`.
    pub fn new(secret: impl Into<std::sync::Arc<MasterSecret>>) -> CookieJar {
        CookieJar {
            secret: secret.into(),
            ciphers: Vec::new(),
        }
    }

    /// Whether the jar uses `secret` (the same one, not an equal one).
    pub fn uses(&self, secret: &std::sync::Arc<MasterSecret>) -> bool {
        std::sync::Arc::ptr_eq(&self.secret, secret)
    }

    /// Seals `keys` into a cookie made under the key of the period of `now`, with
    /// `nonce` (16 random bytes, fresh for each cookie).
    pub fn seal(
        &mut self,
        keys: &SessionKeys,
        now: SystemTime,
        nonce: &[u8; NONCE_LEN],
    ) -> [u8; COOKIE_LEN] {
        let period = self.secret.period(now);
        let mut cookie = [0; COOKIE_LEN];
        cookie[..4].copy_from_slice(&period.to_be_bytes());
        cookie[4..4 + NONCE_LEN].copy_from_slice(nonce);
        let body = &mut cookie[4 + NONCE_LEN + TAG_LEN..];
        body[..2].copy_from_slice(&AEAD_AES_SIV_CMAC_256.to_be_bytes());
        body[4..4 + KEY_LEN].copy_from_slice(&keys.c2s);
        body[4 + KEY_LEN..].copy_from_slice(&keys.s2c);
        let (head, body) = cookie.split_at_mut(4 + NONCE_LEN + TAG_LEN);
        let tag = self
            .cipher(period)
            .encrypt_in_place_detached([&head[..4], &head[4..4 + NONCE_LEN]], body)
            .expect("two headers are within AES-SIV's limit");
        head[4 + NONCE_LEN..].copy_from_slice(&tag);
        cookie
    }

    /// Opens a cookie made by [`CookieJar::seal`] with a secret equal to this one's,
    /// in a period still kept at `now`.
    pub fn open(&mut self, cookie: &[u8], now: SystemTime) -> Result<SessionKeys, CookieError> {
        let cookie: &[u8; COOKIE_LEN] = cookie.try_into().map_err(|_| CookieError::Length)?;
        let period = u32::from_be_bytes(cookie[..4].try_into().expect("4 bytes"));
        let current = self.secret.period(now);
        if period > current.saturating_add(1) || period < current.saturating_sub(KEPT_PERIODS) {
            return Err(CookieError::Expired);
        }
        let (head, body) = cookie.split_at(4 + NONCE_LEN + TAG_LEN);
        let mut plaintext = [0; PLAINTEXT_LEN];
        plaintext.copy_from_slice(body);
        let tag = aes_siv::Tag::clone_from_slice(&head[4 + NONCE_LEN..]);
        self.cipher(period)
            .decrypt_in_place_detached([&head[..4], &head[4..4 + NONCE_LEN]], &mut plaintext, &tag)
            .map_err(|_| CookieError::Forged)?;
        if plaintext[..2] != AEAD_AES_SIV_CMAC_256.to_be_bytes() {
            return Err(CookieError::Algorithm);
        }
        Ok(SessionKeys {
            c2s: plaintext[4..4 + KEY_LEN].try_into().expect("32 bytes"),
            s2c: plaintext[4 + KEY_LEN..].try_into().expect("32 bytes"),
        })
    }

    /// The cipher of `period`'s key, set up on first use; ciphers of periods no
    /// longer kept are dropped.
    fn cipher(&mut self, period: u32) -> &mut Aes128Siv {
        if let Some(i) = self.ciphers.iter().position(|(p, _)| *p == period) {
            return &mut self.ciphers[i].1;
        }
        let oldest = period.saturating_sub(KEPT_PERIODS + 1);
        self.ciphers.retain(|(p, _)| *p >= oldest);
        let key = self.secret.key(period);
        self.ciphers.push((period, Aes128Siv::new((&key).into())));
        &mut self.ciphers.last_mut().expect("just pushed").1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> SessionKeys {
        SessionKeys {
            c2s: [1; KEY_LEN],
            s2c: [2; KEY_LEN],
        }
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn a_cookie_opens_to_its_keys_in_another_jar_with_the_same_secret() {
        let secret = MasterSecret::new([7; 32], DAY);
        let cookie = CookieJar::new(secret.clone()).seal(&keys(), at(1_000_000), &[9; 16]);
        assert_eq!(cookie.len(), 104);
        assert_eq!(cookie.len() % 4, 0);
        let opened = CookieJar::new(secret).open(&cookie, at(1_000_000)).unwrap();
        assert_eq!(opened, keys());
    }

    #[test]
    fn another_secret_a_flipped_bit_or_a_short_cookie_does_not_open() {
        let now = at(1_000_000);
        let cookie = CookieJar::new(MasterSecret::new([7; 32], DAY)).seal(&keys(), now, &[9; 16]);
        let mut other = CookieJar::new(MasterSecret::new([8; 32], DAY));
        assert_eq!(other.open(&cookie, now), Err(CookieError::Forged));
        let mut jar = CookieJar::new(MasterSecret::new([7; 32], DAY));
        for bit in [0, 4 * 8, 20 * 8, 36 * 8, 103 * 8 + 7] {
            let mut flipped = cookie;
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(jar.open(&flipped, now).is_err(), "bit {bit}");
        }
        assert_eq!(jar.open(&cookie[..100], now), Err(CookieError::Length));
        assert_eq!(jar.open(&cookie, now), Ok(keys()));
    }

    #[test]
    fn cookies_open_for_the_kept_periods_then_expire() {
        let secret = MasterSecret::new([7; 32], DAY);
        let made = 86_400 * 20_000;
        let cookie = CookieJar::new(secret.clone()).seal(&keys(), at(made), &[0; 16]);
        let mut jar = CookieJar::new(secret);
        assert!(jar.open(&cookie, at(made - 86_400)).is_ok(), "a day early");
        assert_eq!(
            jar.open(&cookie, at(made - 2 * 86_400)),
            Err(CookieError::Expired)
        );
        let last = made + u64::from(KEPT_PERIODS) * 86_400;
        assert!(jar.open(&cookie, at(last)).is_ok());
        assert_eq!(
            jar.open(&cookie, at(last + 86_400)),
            Err(CookieError::Expired)
        );
    }

    #[test]
    fn each_period_has_its_own_key() {
        let secret = MasterSecret::new([7; 32], DAY);
        assert_ne!(secret.key(1), secret.key(2));
        assert_eq!(secret.key(1), MasterSecret::new([7; 32], DAY).key(1));
        assert_eq!(secret.period(at(86_400 * 3 + 5)), 3);
    }
}
