//! A certificate as the state directory keeps it (its private key, then its chain, in
//! one PEM file), read into what rustls serves and what renewal needs: the names, the
//! validity, the serial, and the identifier the CA's renewal information takes.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::CertificateIdentifier;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use x509_parser::extensions::GeneralName;

/// Why a PEM bundle is not a usable certificate.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    /// No private key, or one rustls cannot sign with.
    #[error("no usable private key: {0}")]
    Key(String),
    /// No certificate, or a broken one.
    #[error("no usable certificate: {0}")]
    Certificate(String),
    /// The key is not the certificate's.
    #[error("the private key does not match the certificate")]
    Mismatch,
}

/// A certificate with its key, ready to serve.
#[derive(Clone)]
pub struct Certificate {
    /// The chain and signing key, for rustls.
    pub certified: Arc<CertifiedKey>,
    /// The DNS names it is valid for, lowercase.
    pub names: Vec<String>,
    /// Valid from.
    pub not_before: SystemTime,
    /// Valid until.
    pub not_after: SystemTime,
    /// The serial number, hex.
    pub serial: String,
    /// Its identifier for ACME Renewal Information (RFC 9773), when it has an authority
    /// key identifier.
    pub identifier: Option<CertificateIdentifier<'static>>,
}

impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate")
            .field("names", &self.names)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("serial", &self.serial)
            .finish_non_exhaustive()
    }
}

impl Certificate {
    /// Reads a bundle: a private key and the chain (leaf first), PEM, in any order.
    pub fn from_pem(bundle: &[u8]) -> Result<Certificate, CertificateError> {
        let chain = CertificateDer::pem_slice_iter(bundle)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| CertificateError::Certificate(error.to_string()))?;
        let Some(leaf) = chain.first() else {
            return Err(CertificateError::Certificate(
                "no CERTIFICATE block".to_string(),
            ));
        };
        let key = PrivateKeyDer::from_pem_slice(bundle)
            .map_err(|error| CertificateError::Key(error.to_string()))?;
        let signing_key = rustls::crypto::ring::default_provider()
            .key_provider
            .load_private_key(key)
            .map_err(|error| CertificateError::Key(error.to_string()))?;
        let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|error| CertificateError::Certificate(error.to_string()))?;
        let validity = parsed.validity();
        let at = |time: x509_parser::time::ASN1Time| {
            let seconds = time.timestamp();
            match u64::try_from(seconds) {
                Ok(seconds) => SystemTime::UNIX_EPOCH + Duration::from_secs(seconds),
                Err(_) => SystemTime::UNIX_EPOCH,
            }
        };
        let names = match parsed.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some(dns.to_ascii_lowercase()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        let serial = parsed.raw_serial_as_string().replace(':', "");
        let identifier = CertificateIdentifier::try_from(leaf)
            .ok()
            .map(CertificateIdentifier::into_owned);
        let not_before = at(validity.not_before);
        let not_after = at(validity.not_after);
        let certified = CertifiedKey::new(chain, signing_key);
        if certified.keys_match().is_err() {
            return Err(CertificateError::Mismatch);
        }
        Ok(Certificate {
            certified: Arc::new(certified),
            names,
            not_before,
            not_after,
            serial,
            identifier,
        })
    }

    /// Whether it names every one of `names`.
    pub fn covers(&self, names: &[String]) -> bool {
        names.iter().all(|name| self.names.contains(name))
    }

    /// Whether it is valid at `now`.
    pub fn valid_at(&self, now: SystemTime) -> bool {
        self.not_before <= now && now < self.not_after
    }

    /// How long it is valid in all.
    pub fn lifetime(&self) -> Duration {
        self.not_after
            .duration_since(self.not_before)
            .unwrap_or_default()
    }

    /// Seconds since the Unix epoch at which it expires.
    pub fn expiry_timestamp(&self) -> i64 {
        self.not_after
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
    }
}

/// `time` as RFC 3339 in UTC, as the log and `--check-config` say it.
pub fn rfc3339(time: SystemTime) -> String {
    time::OffsetDateTime::from(time)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A bundle (key, then certificate) for `names`, valid for `lifetime` from now,
    /// issued by a fresh CA so that it has an authority key identifier.
    pub(crate) fn bundle(names: &[&str], lifetime: Duration) -> String {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::default();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::seconds(1);
        params.not_after = now + lifetime;
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &issuer).unwrap();
        format!("{}{}", key.serialize_pem(), cert.pem())
    }

    #[test]
    fn a_bundle_reads_with_its_names_dates_and_identifier() {
        let pem = bundle(&["a.test", "www.a.test"], Duration::from_secs(3600));
        let certificate = Certificate::from_pem(pem.as_bytes()).unwrap();
        assert_eq!(certificate.names, ["a.test", "www.a.test"]);
        assert!(certificate.covers(&["www.a.test".to_string()]));
        assert!(!certificate.covers(&["b.test".to_string()]));
        assert!(certificate.valid_at(SystemTime::now()));
        assert!(!certificate.valid_at(SystemTime::now() + Duration::from_secs(3601)));
        let lifetime = certificate.lifetime().as_secs();
        assert!((3600..=3602).contains(&lifetime), "{lifetime}");
        assert!(certificate.identifier.is_some());
        assert!(!certificate.serial.is_empty() && !certificate.serial.contains(':'));
    }

    #[test]
    fn broken_bundles_are_refused() {
        let pem = bundle(&["a.test"], Duration::from_secs(60));
        let other = bundle(&["b.test"], Duration::from_secs(60));
        let key_only = &pem[..pem.find("-----BEGIN CERTIFICATE").unwrap()];
        let cert_only = &pem[pem.find("-----BEGIN CERTIFICATE").unwrap()..];
        assert!(matches!(
            Certificate::from_pem(key_only.as_bytes()),
            Err(CertificateError::Certificate(_))
        ));
        assert!(matches!(
            Certificate::from_pem(cert_only.as_bytes()),
            Err(CertificateError::Key(_))
        ));
        let other_key = &other[..other.find("-----BEGIN CERTIFICATE").unwrap()];
        let mismatched = format!("{other_key}{cert_only}");
        assert!(matches!(
            Certificate::from_pem(mismatched.as_bytes()),
            Err(CertificateError::Mismatch)
        ));
        // Half a file, as a crash mid-write would leave without the atomic rename.
        assert!(Certificate::from_pem(&pem.as_bytes()[..pem.len() / 2]).is_err());
    }
}
