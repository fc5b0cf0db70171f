//! The answers to the CA's validation while an order is pending: HTTP-01 (the key
//! authorization at `/.well-known/acme-challenge/TOKEN` on the plain listener) and
//! TLS-ALPN-01 (RFC 8737: a self-signed certificate for the name with the critical
//! `acmeIdentifier` extension holding the SHA-256 of the key authorization, presented
//! to a client that offers only ALPN `acme-tls/1`).
//!
//! The process that orders keeps its answers in memory and publishes them in the state
//! directory, where replicas sharing it find them: the CA's validation may reach any
//! replica behind the address.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rustls::pki_types::PrivateKeyDer;
use rustls::sign::CertifiedKey;
use sha2::{Digest as _, Sha256};

use crate::acme::store::{AnswerKind, Store};

/// The ALPN protocol of TLS-ALPN-01.
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The path prefix of HTTP-01 answers.
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// The answers being validated now.
#[derive(Debug, Default)]
pub struct Challenges {
    /// HTTP-01: token → key authorization.
    http01: Mutex<HashMap<String, String>>,
    /// TLS-ALPN-01: name → (key authorization, its certificate).
    tls_alpn01: Mutex<HashMap<String, (String, Arc<CertifiedKey>)>>,
    /// The certificates made for replicas' published TLS-ALPN-01 answers, by name.
    replicas_tls_alpn01: Mutex<HashMap<String, (String, Arc<CertifiedKey>)>>,
    /// Where replicas publish theirs.
    store: Option<Store>,
}

impl Challenges {
    /// Answers that are also published in (and looked up from) `store`.
    pub fn with_store(store: Option<Store>) -> Challenges {
        Challenges {
            store,
            ..Challenges::default()
        }
    }

    /// The key authorization for an HTTP-01 `token`, if an order of this process or a
    /// replica's is waiting for it.
    pub fn http01_answer(&self, token: &str) -> Option<String> {
        let mine = lock(&self.http01).get(token).cloned();
        mine.or_else(|| self.store.as_ref()?.answer(AnswerKind::Http01, token))
    }

    /// The TLS-ALPN-01 certificate for `name`, if an order of this process or a
    /// replica's is waiting for it.
    pub fn tls_alpn01_certificate(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let name = name.to_ascii_lowercase();
        if let Some((_, certificate)) = lock(&self.tls_alpn01).get(&name) {
            return Some(Arc::clone(certificate));
        }
        let mut made = lock(&self.replicas_tls_alpn01);
        let Some(published) = self.store.as_ref()?.answer(AnswerKind::TlsAlpn01, &name) else {
            made.remove(&name);
            return None;
        };
        match made.get(&name) {
            Some((key_authorization, certificate)) if *key_authorization == published => {
                Some(Arc::clone(certificate))
            }
            _ => {
                let certificate = tls_alpn01_certificate(&name, &published).ok()?;
                made.insert(name, (published, Arc::clone(&certificate)));
                Some(certificate)
            }
        }
    }

    /// Answers HTTP-01 `token` with `key_authorization` until withdrawn.
    pub fn publish_http01(&self, token: &str, key_authorization: &str) -> Result<(), String> {
        if let Some(store) = &self.store {
            store
                .put_answer(AnswerKind::Http01, token, key_authorization)
                .map_err(|error| error.to_string())?;
        }
        lock(&self.http01).insert(token.to_string(), key_authorization.to_string());
        Ok(())
    }

    /// Answers TLS-ALPN-01 for `name` with `key_authorization` until withdrawn.
    pub fn publish_tls_alpn01(&self, name: &str, key_authorization: &str) -> Result<(), String> {
        let certificate = tls_alpn01_certificate(name, key_authorization)?;
        if let Some(store) = &self.store {
            store
                .put_answer(AnswerKind::TlsAlpn01, name, key_authorization)
                .map_err(|error| error.to_string())?;
        }
        lock(&self.tls_alpn01).insert(
            name.to_string(),
            (key_authorization.to_string(), certificate),
        );
        Ok(())
    }

    /// Stops answering HTTP-01 `token` and TLS-ALPN-01 for `name`.
    pub fn withdraw(&self, kind: AnswerKind, key: &str) {
        match kind {
            AnswerKind::Http01 => lock(&self.http01).remove(key).map(drop),
            AnswerKind::TlsAlpn01 => lock(&self.tls_alpn01).remove(key).map(drop),
        };
        if let Some(store) = &self.store {
            store.remove_answer(kind, key);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The TLS-ALPN-01 certificate for `name` and `key_authorization` (RFC 8737 section
/// 3): self-signed, the name as its only subject alternative name, and the critical
/// `id-pe-acmeIdentifier` extension with the SHA-256 digest of the key authorization.
pub fn tls_alpn01_certificate(
    name: &str,
    key_authorization: &str,
) -> Result<Arc<CertifiedKey>, String> {
    let digest = Sha256::digest(key_authorization.as_bytes());
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params =
        rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(&digest)];
    let certificate = params.self_signed(&key).map_err(|e| e.to_string())?;
    let private_key = PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| e.to_string())?;
    let signing_key = rustls::crypto::ring::default_provider()
        .key_provider
        .load_private_key(private_key)
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(CertifiedKey::new(
        vec![certificate.der().clone()],
        signing_key,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_certificate_carries_the_digest_as_a_critical_extension() {
        let certified = tls_alpn01_certificate("a.test", "token.thumbprint").unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(&certified.cert[0]).unwrap();
        let oid = x509_parser::der_parser::oid!(1.3.6 .1 .5 .5 .7 .1 .31);
        let extension = parsed
            .extensions()
            .iter()
            .find(|e| e.oid == oid)
            .expect("acmeIdentifier");
        assert!(extension.critical);
        // An OCTET STRING of the 32-byte digest.
        let digest = Sha256::digest(b"token.thumbprint");
        assert_eq!(&extension.value[..2], &[0x04, 0x20]);
        assert_eq!(&extension.value[2..], digest.as_slice());
        let names: Vec<String> = parsed
            .subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(names, ["DNSName(a.test)"]);
    }

    #[test]
    fn a_replicas_answers_are_found_in_the_state_directory() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path(), "https://ca.test/dir");
        store.prepare().unwrap();
        let ordering = Challenges::with_store(Some(store.clone()));
        let replica = Challenges::with_store(Some(store));
        assert_eq!(replica.http01_answer("tok"), None);
        ordering.publish_http01("tok", "tok.thumb").unwrap();
        assert_eq!(replica.http01_answer("tok").as_deref(), Some("tok.thumb"));
        assert!(replica.tls_alpn01_certificate("a.test").is_none());
        ordering.publish_tls_alpn01("a.test", "k1").unwrap();
        let first = replica.tls_alpn01_certificate("A.test").unwrap();
        assert!(Arc::ptr_eq(
            &first,
            &replica.tls_alpn01_certificate("a.test").unwrap()
        ));
        // A new order's answer replaces the one the replica made a certificate for.
        ordering.publish_tls_alpn01("a.test", "k2").unwrap();
        let second = replica.tls_alpn01_certificate("a.test").unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        ordering.withdraw(AnswerKind::Http01, "tok");
        ordering.withdraw(AnswerKind::TlsAlpn01, "a.test");
        assert_eq!(replica.http01_answer("tok"), None);
        assert!(ordering.tls_alpn01_certificate("a.test").is_none());
        assert!(replica.tls_alpn01_certificate("a.test").is_none());
    }
}
