//! What a TLS handshake came to, as the closed label sets of the TLS metrics: the
//! mode, version and cipher suite of a completed one, or why one failed.
//!
//! Each set is a fixed list (`ALL`), so the metrics keep one counter per value in
//! arrays: no allocation and no lock per connection.

use std::io;

use rustls::{AlertDescription, CipherSuite, PeerIncompatible, ProtocolVersion};

/// Where a TLS connection's records are encrypted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// By rustls, in the server process.
    Userspace,
    /// By the kernel (kTLS), which took the keys after rustls's handshake.
    Ktls,
}

impl TlsMode {
    /// Every mode, in the metrics' order.
    pub const ALL: [TlsMode; 2] = [TlsMode::Userspace, TlsMode::Ktls];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            TlsMode::Userspace => "userspace",
            TlsMode::Ktls => "ktls",
        }
    }
}

/// The negotiated protocol version (the server offers TLS 1.2 and 1.3 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    /// TLS 1.2.
    Tls12,
    /// TLS 1.3.
    Tls13,
    /// Any other (none today).
    Other,
}

impl TlsVersion {
    /// Every version, in the metrics' order.
    pub const ALL: [TlsVersion; 3] = [TlsVersion::Tls12, TlsVersion::Tls13, TlsVersion::Other];

    /// The version rustls reports.
    pub fn of(version: Option<ProtocolVersion>) -> TlsVersion {
        match version {
            Some(ProtocolVersion::TLSv1_2) => TlsVersion::Tls12,
            Some(ProtocolVersion::TLSv1_3) => TlsVersion::Tls13,
            _ => TlsVersion::Other,
        }
    }

    /// The label value, as rustls names it.
    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "TLSv1_2",
            TlsVersion::Tls13 => "TLSv1_3",
            TlsVersion::Other => "other",
        }
    }
}

/// The negotiated cipher suite: those of rustls's ring provider, or another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsCipher {
    /// A suite of the provider, by its index in [`TlsCipher::SUITES`].
    Known(usize),
    /// Any other (none today).
    Other,
}

impl TlsCipher {
    /// The ring provider's suites, each with its protocol version.
    pub const SUITES: [(CipherSuite, TlsVersion); 9] = [
        (CipherSuite::TLS13_AES_256_GCM_SHA384, TlsVersion::Tls13),
        (CipherSuite::TLS13_AES_128_GCM_SHA256, TlsVersion::Tls13),
        (
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
            TlsVersion::Tls13,
        ),
        (
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            TlsVersion::Tls12,
        ),
        (
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            TlsVersion::Tls12,
        ),
        (
            CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            TlsVersion::Tls12,
        ),
        (
            CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            TlsVersion::Tls12,
        ),
        (
            CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            TlsVersion::Tls12,
        ),
        (
            CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
            TlsVersion::Tls12,
        ),
    ];

    /// How many values there are: the suites and `other`.
    pub const COUNT: usize = TlsCipher::SUITES.len() + 1;

    /// The suite rustls reports.
    pub fn of(suite: Option<CipherSuite>) -> TlsCipher {
        suite
            .and_then(|suite| TlsCipher::SUITES.iter().position(|&(s, _)| s == suite))
            .map_or(TlsCipher::Other, TlsCipher::Known)
    }

    /// Its place in the metrics' arrays: the suites' order, then `other`.
    pub fn slot(self) -> usize {
        match self {
            TlsCipher::Known(slot) => slot,
            TlsCipher::Other => TlsCipher::SUITES.len(),
        }
    }

    /// The value at `slot` (the inverse of [`TlsCipher::slot`]).
    pub fn at(slot: usize) -> TlsCipher {
        match slot < TlsCipher::SUITES.len() {
            true => TlsCipher::Known(slot),
            false => TlsCipher::Other,
        }
    }

    /// The version a known suite belongs to.
    pub fn version(self) -> Option<TlsVersion> {
        match self {
            TlsCipher::Known(slot) => Some(TlsCipher::SUITES[slot].1),
            TlsCipher::Other => None,
        }
    }

    /// The label value: the suite's IANA name, as rustls spells it.
    pub fn name(self) -> &'static str {
        match self {
            TlsCipher::Known(slot) => TlsCipher::SUITES[slot].0.as_str().unwrap_or("other"),
            TlsCipher::Other => "other",
        }
    }
}

/// Why a TLS handshake failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// The client sent no TLS: plain HTTP or garbage.
    NotTls,
    /// The client offers no version the server has (TLS 1.1 or older).
    ProtocolVersion,
    /// The client offers no cipher suite the server has.
    NoSharedCipher,
    /// The client refused the server's certificate (an alert about it).
    BadCertificate,
    /// The handshake did not end within the header timeout.
    Timeout,
    /// The client closed or reset the connection during the handshake.
    Closed,
    /// Anything else.
    Other,
}

impl HandshakeFailure {
    /// Every reason, in the metrics' order.
    pub const ALL: [HandshakeFailure; 7] = [
        HandshakeFailure::NotTls,
        HandshakeFailure::ProtocolVersion,
        HandshakeFailure::NoSharedCipher,
        HandshakeFailure::BadCertificate,
        HandshakeFailure::Timeout,
        HandshakeFailure::Closed,
        HandshakeFailure::Other,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            HandshakeFailure::NotTls => "not_tls",
            HandshakeFailure::ProtocolVersion => "protocol_version",
            HandshakeFailure::NoSharedCipher => "no_shared_cipher",
            HandshakeFailure::BadCertificate => "bad_certificate",
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::Closed => "closed",
            HandshakeFailure::Other => "other",
        }
    }

    /// The reason of a failed handshake's error: tokio-rustls carries rustls's error
    /// inside the `io::Error`, or the socket's own error when the client went away.
    pub fn of(error: &io::Error) -> HandshakeFailure {
        if let Some(tls) = error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return HandshakeFailure::of_tls(tls);
        }
        match error.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe => HandshakeFailure::Closed,
            _ => HandshakeFailure::Other,
        }
    }

    /// The reason of a rustls error.
    fn of_tls(error: &rustls::Error) -> HandshakeFailure {
        use AlertDescription as Alert;
        match error {
            rustls::Error::InvalidMessage(_) => HandshakeFailure::NotTls,
            // A hello without signature_algorithms is from a client older than TLS
            // 1.2 (rustls checks for it before the versions).
            rustls::Error::PeerIncompatible(
                PeerIncompatible::SignatureAlgorithmsExtensionRequired
                | PeerIncompatible::Tls12NotOffered
                | PeerIncompatible::Tls12NotOfferedOrEnabled
                | PeerIncompatible::SupportedVersionsExtensionRequired
                | PeerIncompatible::ServerDoesNotSupportTls12Or13,
            )
            | rustls::Error::AlertReceived(Alert::ProtocolVersion) => {
                HandshakeFailure::ProtocolVersion
            }
            rustls::Error::PeerIncompatible(PeerIncompatible::NoCipherSuitesInCommon) => {
                HandshakeFailure::NoSharedCipher
            }
            rustls::Error::AlertReceived(
                Alert::BadCertificate
                | Alert::UnsupportedCertificate
                | Alert::CertificateRevoked
                | Alert::CertificateExpired
                | Alert::CertificateUnknown
                | Alert::UnknownCA,
            ) => HandshakeFailure::BadCertificate,
            _ => HandshakeFailure::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `io::Error` as tokio-rustls makes of a rustls error.
    fn wrapped(error: rustls::Error) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, error)
    }

    #[test]
    fn handshake_errors_map_to_their_reasons() {
        use rustls::InvalidMessage;
        for (error, reason) in [
            (
                wrapped(rustls::Error::InvalidMessage(
                    InvalidMessage::InvalidContentType,
                )),
                HandshakeFailure::NotTls,
            ),
            (
                wrapped(rustls::Error::InvalidMessage(
                    InvalidMessage::MessageTooLarge,
                )),
                HandshakeFailure::NotTls,
            ),
            (
                wrapped(PeerIncompatible::Tls12NotOffered.into()),
                HandshakeFailure::ProtocolVersion,
            ),
            (
                wrapped(PeerIncompatible::SignatureAlgorithmsExtensionRequired.into()),
                HandshakeFailure::ProtocolVersion,
            ),
            (
                wrapped(PeerIncompatible::SupportedVersionsExtensionRequired.into()),
                HandshakeFailure::ProtocolVersion,
            ),
            (
                wrapped(PeerIncompatible::NoCipherSuitesInCommon.into()),
                HandshakeFailure::NoSharedCipher,
            ),
            (
                wrapped(rustls::Error::AlertReceived(AlertDescription::UnknownCA)),
                HandshakeFailure::BadCertificate,
            ),
            (
                wrapped(rustls::Error::AlertReceived(
                    AlertDescription::BadCertificate,
                )),
                HandshakeFailure::BadCertificate,
            ),
            (
                wrapped(PeerIncompatible::NoKxGroupsInCommon.into()),
                HandshakeFailure::Other,
            ),
            (
                wrapped(rustls::Error::DecryptError),
                HandshakeFailure::Other,
            ),
            (
                io::ErrorKind::UnexpectedEof.into(),
                HandshakeFailure::Closed,
            ),
            (
                io::ErrorKind::ConnectionReset.into(),
                HandshakeFailure::Closed,
            ),
            (io::Error::other("something else"), HandshakeFailure::Other),
        ] {
            assert_eq!(HandshakeFailure::of(&error), reason, "{error:?}");
        }
    }

    #[test]
    fn versions_and_suites_take_rustls_names() {
        assert_eq!(
            TlsVersion::of(Some(ProtocolVersion::TLSv1_3)).name(),
            "TLSv1_3"
        );
        assert_eq!(
            TlsVersion::of(Some(ProtocolVersion::TLSv1_2)).name(),
            "TLSv1_2"
        );
        assert_eq!(
            TlsVersion::of(Some(ProtocolVersion::TLSv1_1)).name(),
            "other"
        );
        let suite = TlsCipher::of(Some(CipherSuite::TLS13_AES_128_GCM_SHA256));
        assert_eq!(suite.name(), "TLS13_AES_128_GCM_SHA256");
        assert_eq!(suite.version(), Some(TlsVersion::Tls13));
        assert_eq!(TlsCipher::at(suite.slot()), suite);
        let suite = TlsCipher::of(Some(CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384));
        assert_eq!(suite.name(), "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384");
        assert_eq!(suite.version(), Some(TlsVersion::Tls12));
        assert_eq!(TlsCipher::of(None), TlsCipher::Other);
        assert_eq!(TlsCipher::at(TlsCipher::Other.slot()), TlsCipher::Other);
    }

    #[test]
    fn the_suites_are_the_ring_providers() {
        let provider = rustls::crypto::ring::default_provider();
        let offered: Vec<CipherSuite> = provider.cipher_suites.iter().map(|s| s.suite()).collect();
        let known: Vec<CipherSuite> = TlsCipher::SUITES.iter().map(|&(s, _)| s).collect();
        assert_eq!(offered, known);
        for (slot, &(suite, version)) in TlsCipher::SUITES.iter().enumerate() {
            let name = TlsCipher::Known(slot).name();
            assert_ne!(name, "other", "{suite:?}");
            assert_eq!(name.starts_with("TLS13_"), version == TlsVersion::Tls13);
        }
    }
}
