//! HTTP Basic authentication (RFC 7617) against an htpasswd file ([`Htpasswd`]).
//!
//! Every request passes [`Auth::check`] before it is resolved, so files, listings and
//! every other answer are behind it. Checking a password is slow by design (bcrypt's
//! cost, SHA-crypt's rounds), so it never runs on the event loop: a request whose
//! credentials are not known yet gets a [`Pending`] check that the connection runs on
//! the blocking pool. Credentials that verified are remembered per user as a keyed
//! SHA-256 digest, compared in constant time: the next requests with the same password
//! are granted on the loop, a different password goes to the pool again (so the cache
//! never accepts a wrong one). A reload builds a new [`Auth`] and with it an empty
//! cache.

use std::collections::HashMap;
use std::hash::{BuildHasher as _, Hasher as _};
use std::path::Path;
use std::sync::{Arc, Mutex};

use ioserve_simd::base64::STANDARD;
use ioserve_simd::hash::RandomState;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::http::htpasswd::{Htpasswd, HtpasswdError};
use crate::http::response::{Body, Reply};

/// Longest decoded `user:password` read; longer credentials are wrong.
const MAX_CREDENTIALS: usize = 1024;

/// Why a request was refused with 401.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No `Authorization: Basic` field (or one of another scheme, or repeated).
    Missing,
    /// Basic credentials that are malformed, of an unknown user, or a wrong password.
    Wrong,
}

impl Failure {
    /// Every failure, in the order metrics list them.
    pub const ALL: [Failure; 2] = [Failure::Missing, Failure::Wrong];

    /// The metrics label.
    pub fn name(self) -> &'static str {
        match self {
            Failure::Missing => "missing",
            Failure::Wrong => "wrong",
        }
    }
}

/// What [`Auth::check`] decided on the event loop.
#[derive(Debug)]
pub enum Check {
    /// The credentials verified before: serve the request.
    Granted,
    /// Refused at once: answer [`Auth::challenge`].
    Refused(Failure),
    /// A password to verify, slowly: run [`Pending::verify`] off the event loop.
    Verify(Pending),
}

/// Basic authentication with the users of one htpasswd file.
#[derive(Debug)]
pub struct Auth {
    users: Htpasswd,
    /// The `WWW-Authenticate` value.
    challenge: String,
    /// The key of the cached digests, random for each [`Auth`].
    key: [u8; 16],
    /// Per user, the keyed digest of the last password that verified.
    verified: Mutex<HashMap<Vec<u8>, [u8; 32], RandomState>>,
}

impl Auth {
    /// Reads the htpasswd file at `path`; 401 answers name `realm`, which has no `"`
    /// or `\`.
    pub fn load(path: &Path, realm: &str) -> Result<Auth, HtpasswdError> {
        Ok(Auth::new(Htpasswd::load(path)?, realm))
    }

    /// Authentication with `users`; 401 answers name `realm`.
    pub fn new(users: Htpasswd, realm: &str) -> Auth {
        // std seeds each RandomState from the operating system's random source.
        let random = || {
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        };
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&random().to_le_bytes());
        key[8..].copy_from_slice(&random().to_le_bytes());
        Auth {
            users,
            challenge: format!("Basic realm=\"{realm}\", charset=\"UTF-8\""),
            key,
            verified: Mutex::new(HashMap::with_hasher(RandomState::new())),
        }
    }

    /// Checks a request's `Authorization` field, without waiting for anything.
    pub fn check(self: &Arc<Self>, authorization: Option<&[u8]>) -> Check {
        let Some(encoded) = authorization.and_then(basic_credentials) else {
            return Check::Refused(Failure::Missing);
        };
        let mut decoded = [0u8; MAX_CREDENTIALS];
        let credentials = match encoded.len() <= MAX_CREDENTIALS / 3 * 4 {
            true => match STANDARD.decode_to_slice(encoded, &mut decoded) {
                Ok(len) => &decoded[..len],
                Err(_) => return Check::Refused(Failure::Wrong),
            },
            false => return Check::Refused(Failure::Wrong),
        };
        let Some(colon) = credentials.iter().position(|&b| b == b':') else {
            return Check::Refused(Failure::Wrong);
        };
        let (user, password) = (&credentials[..colon], &credentials[colon + 1..]);
        let digest = self.digest(user, password);
        let cached = self
            .verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(user)
            .is_some_and(|known| bool::from(known.ct_eq(&digest)));
        if cached {
            return Check::Granted;
        }
        Check::Verify(Pending {
            auth: Arc::clone(self),
            user: user.to_vec(),
            password: password.to_vec(),
        })
    }

    /// The 401 answer: the challenge and a short text (no body for HEAD).
    pub fn challenge(&self, head_only: bool) -> Reply {
        let mut reply = Reply::error(401).header("WWW-Authenticate", &self.challenge);
        if head_only {
            reply.body = Body::Empty;
        }
        reply
    }

    /// The keyed digest of a user's credentials, as the cache holds it.
    fn digest(&self, user: &[u8], password: &[u8]) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(self.key);
        hasher.update((user.len() as u64).to_le_bytes());
        hasher.update(user);
        hasher.update(password);
        hasher.finalize().into()
    }
}

/// The credentials of an `Authorization: Basic` value (the scheme is
/// case-insensitive), still encoded.
fn basic_credentials(value: &[u8]) -> Option<&[u8]> {
    let value = value.trim_ascii();
    let (scheme, rest) = value.split_at_checked(6)?;
    scheme
        .eq_ignore_ascii_case(b"basic ")
        .then(|| rest.trim_ascii_start())
}

/// Credentials to verify against the file, off the event loop.
#[derive(Debug)]
pub struct Pending {
    auth: Arc<Auth>,
    user: Vec<u8>,
    password: Vec<u8>,
}

impl Pending {
    /// The authentication it belongs to (its [`Auth::challenge`] answers a refusal).
    pub fn auth(&self) -> Arc<Auth> {
        Arc::clone(&self.auth)
    }

    /// Verifies the password (slow: on the blocking pool) and remembers it when right.
    /// An unknown user costs the same work as a known one, so the time taken does not
    /// tell which user names exist.
    pub fn verify(self) -> Result<(), Failure> {
        let Pending {
            auth,
            user,
            password,
        } = self;
        let (hash, known) = match auth.users.hash_of(&user) {
            Some(hash) => (hash, true),
            None => (auth.users.any_hash(), false),
        };
        if !(hash.verify(&password) && known) {
            return Err(Failure::Wrong);
        }
        let digest = auth.digest(&user, &password);
        auth.verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(user, digest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `htpasswd -nbB alice secret`.
    const FILE: &str = "alice:$2y$05$W6zeqDpoW/Zw8O8ifqJ3oOTEpmMSBQVBQNFnRkmqqpqArpwakErVC\n";

    fn auth() -> Arc<Auth> {
        let users = Htpasswd::parse(Path::new("htpasswd"), FILE).unwrap();
        Arc::new(Auth::new(users, "files"))
    }

    fn basic(credentials: &str) -> Vec<u8> {
        format!("Basic {}", STANDARD.encode(credentials)).into_bytes()
    }

    fn verified(auth: &Arc<Auth>, value: &[u8]) -> Result<(), Failure> {
        match auth.check(Some(value)) {
            Check::Granted => Ok(()),
            Check::Refused(failure) => Err(failure),
            Check::Verify(pending) => pending.verify(),
        }
    }

    #[test]
    fn missing_and_malformed_credentials_are_refused_on_the_loop() {
        let auth = auth();
        for (value, failure) in [
            (None, Failure::Missing),
            (Some(&b"Bearer abc"[..]), Failure::Missing),
            (Some(b"Basic"), Failure::Missing),
            (Some(b"Basic !!!!"), Failure::Wrong),
            (Some(b"Basic YWxpY2U="), Failure::Wrong),
        ] {
            assert!(
                matches!(auth.check(value), Check::Refused(f) if f == failure),
                "{value:?}"
            );
        }
        let long = basic(&format!("alice:{}", "x".repeat(MAX_CREDENTIALS)));
        assert!(matches!(
            auth.check(Some(&long)),
            Check::Refused(Failure::Wrong)
        ));
    }

    #[test]
    fn a_verified_password_is_granted_from_the_cache_and_no_other() {
        let auth = auth();
        let right = basic("alice:secret");
        assert!(matches!(auth.check(Some(&right)), Check::Verify(_)));
        assert_eq!(verified(&auth, b"bAsIc   YWxpY2U6c2VjcmV0"), Ok(()));
        assert!(matches!(auth.check(Some(&right)), Check::Granted));
        for wrong in [
            "alice:Secret",
            "alice:secret ",
            "alice:",
            "bob:secret",
            "Alice:secret",
        ] {
            let value = basic(wrong);
            assert!(
                matches!(auth.check(Some(&value)), Check::Verify(_)),
                "{wrong}"
            );
            assert_eq!(verified(&auth, &value), Err(Failure::Wrong), "{wrong}");
        }
        // A new Auth (a reload) starts with no cache.
        assert!(matches!(self::auth().check(Some(&right)), Check::Verify(_)));
    }

    #[test]
    fn the_challenge_names_the_realm_and_charset() {
        let reply = auth().challenge(false);
        assert_eq!(reply.status, 401);
        assert!(reply
            .headers
            .contains("WWW-Authenticate: Basic realm=\"files\", charset=\"UTF-8\"\r\n"));
        assert!(matches!(reply.body, Body::Bytes(_)));
        assert!(matches!(auth().challenge(true).body, Body::Empty));
    }
}
