//! What the operator asks of ACME (`--acme-*`), each value checked with a message that
//! names the flag and what it allows.

use std::path::PathBuf;

use serde::Deserialize;

/// Let's Encrypt's production directory, the default `--acme-ca`.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// Where the account, certificates and locks are kept unless `--acme-state` says.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/ioserve/acme";

/// How the CA validates that the server answers for a name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
pub enum ChallengeKind {
    /// TLS-ALPN-01 (RFC 8737): the CA connects to port 443 with ALPN `acme-tls/1` and
    /// reads a certificate made for the challenge; answered on the TLS listener.
    #[default]
    #[value(name = "tls-alpn-01")]
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
    /// HTTP-01 (RFC 8555 section 8.3): the CA fetches
    /// `http://NAME/.well-known/acme-challenge/TOKEN` on port 80; answered on the
    /// `--redirect-http` listener.
    #[value(name = "http-01")]
    #[serde(rename = "http-01")]
    Http01,
}

impl ChallengeKind {
    /// The name the CA and the flag use.
    pub fn name(self) -> &'static str {
        match self {
            ChallengeKind::TlsAlpn01 => "tls-alpn-01",
            ChallengeKind::Http01 => "http-01",
        }
    }
}

/// The ACME settings of a server that gets its certificate itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcmeSettings {
    /// The names of the certificate (its subject alternative names), lowercase.
    pub domains: Vec<String>,
    /// The contact address given to the CA, if any.
    pub email: Option<String>,
    /// The CA's directory URL.
    pub directory: String,
    /// A PEM file of extra roots to trust for the CA's own HTTPS (a private or test CA).
    pub ca_root: Option<PathBuf>,
    /// The state directory.
    pub state: PathBuf,
    /// The challenge answered.
    pub challenge: ChallengeKind,
    /// The CA's certificate profile to ask for (ACME profiles extension), if any.
    pub profile: Option<String>,
}

/// `name` checked as a certificate name: a DNS name of letters, digits and hyphens in
/// dot-separated labels, lowercase in the result. Wildcards and IP addresses are
/// refused: a wildcard needs the DNS-01 challenge, which the server cannot answer.
pub fn domain(name: &str) -> Result<String, String> {
    let lower = name.trim_end_matches('.').to_ascii_lowercase();
    if lower.starts_with("*.") {
        return Err(
            "a wildcard needs the DNS-01 challenge, which ioserve cannot answer; name each host"
                .to_string(),
        );
    }
    if lower.parse::<std::net::IpAddr>().is_ok() {
        return Err("an IP address; name a DNS name that points at this server".to_string());
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if lower.is_empty() || lower.len() > 253 || !lower.split('.').all(label_ok) {
        return Err(
            "a DNS name of letters, digits and hyphens in labels of 1 to 63 characters, \
             separated by dots (punycode for other scripts)"
                .to_string(),
        );
    }
    Ok(lower)
}

/// `address` checked as a contact e-mail address: one `@` between a local part and a
/// domain, no spaces, commas or colons (it becomes a `mailto:` URL).
pub fn email(address: &str) -> Result<String, String> {
    let valid = match address.split_once('@') {
        Some((local, domain)) => {
            !local.is_empty()
                && !domain.is_empty()
                && domain.contains('.')
                && !domain.contains('@')
                && !address.chars().any(|c| {
                    c.is_whitespace() || c.is_control() || matches!(c, ',' | ':' | '<' | '>')
                })
        }
        None => false,
    };
    match valid {
        true => Ok(address.to_string()),
        false => Err("an e-mail address such as admin@example.org".to_string()),
    }
}

/// `url` checked as a CA directory URL: HTTPS (RFC 8555 requires it) with a host.
pub fn directory(url: &str) -> Result<String, String> {
    let allowed = || "an https:// URL of the CA's ACME directory".to_string();
    let uri: hyper::Uri = url.parse().map_err(|_| allowed())?;
    match (uri.scheme_str(), uri.host()) {
        (Some("https"), Some(host)) if !host.is_empty() => Ok(url.to_string()),
        _ => Err(allowed()),
    }
}

/// `name` checked as a profile name: 1 to 64 letters, digits, `.`, `_` or `-`.
pub fn profile(name: &str) -> Result<String, String> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    match valid {
        true => Ok(name.to_string()),
        false => Err(
            "a profile name the CA lists (letters, digits, '.', '_', '-'), e.g. shortlived"
                .to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_lowercased() {
        assert_eq!(domain("Example.ORG.").unwrap(), "example.org");
        assert_eq!(domain("a-b.c1.test").unwrap(), "a-b.c1.test");
        assert_eq!(domain("localhost").unwrap(), "localhost");
        for bad in [
            "",
            "*.example.org",
            "-a.org",
            "a-.org",
            "a..org",
            "a_b.org",
            "10.0.0.1",
            "::1",
            "é.org",
        ] {
            assert!(domain(bad).is_err(), "{bad}");
        }
        assert!(domain("*.example.org").unwrap_err().contains("DNS-01"));
        assert!(domain(&"a".repeat(64)).is_err());
    }

    #[test]
    fn contacts_urls_and_profiles_are_checked() {
        assert!(email("admin@example.org").is_ok());
        for bad in [
            "",
            "admin",
            "@example.org",
            "admin@",
            "a b@example.org",
            "a@b@c.org",
            "a@b,c@d.org",
            "a@localhost",
        ] {
            assert!(email(bad).is_err(), "{bad}");
        }
        assert!(directory(LETS_ENCRYPT).is_ok());
        assert!(directory("https://127.0.0.1:14000/dir").is_ok());
        for bad in ["http://example.org/dir", "example.org", "", "https:///dir"] {
            assert!(directory(bad).is_err(), "{bad}");
        }
        assert!(profile("shortlived").is_ok());
        for bad in ["", "short lived", "a/b", &"p".repeat(65)] {
            assert!(profile(bad).is_err(), "{bad}");
        }
    }
}
