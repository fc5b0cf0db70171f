//! The certificate served now, and the rustls resolvers that present it (or a
//! challenge's certificate) in each handshake.
//!
//! A renewal swaps the certificate in one atomic store: handshakes that start after it
//! get the new one, connections already open keep theirs. A certificate that has
//! expired is never presented: until a valid one is there, handshakes wait for it
//! ([`Certificates::wait_until_valid`], bounded by the caller) as they do at the first
//! start, and are refused with an alert after the bound.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::Notify;

use crate::acme::certificate::Certificate;
use crate::acme::challenge::Challenges;

/// The served certificate and the challenge answers, shared by the manager and every
/// handshake.
#[derive(Debug)]
pub struct Certificates {
    current: ArcSwapOption<Certificate>,
    /// Woken when a certificate is swapped in.
    swapped: Notify,
    /// The answers to pending validations.
    pub challenges: Challenges,
}

impl Certificates {
    /// No certificate yet; `challenges` answers the CA.
    pub fn new(challenges: Challenges) -> Certificates {
        Certificates {
            current: ArcSwapOption::empty(),
            swapped: Notify::new(),
            challenges,
        }
    }

    /// The certificate served now, valid or not.
    pub fn current(&self) -> Option<Arc<Certificate>> {
        self.current.load_full()
    }

    /// The certificate served now, if it is valid now.
    pub fn valid_now(&self) -> Option<Arc<Certificate>> {
        self.current
            .load_full()
            .filter(|certificate| certificate.valid_at(SystemTime::now()))
    }

    /// Serves `certificate` in new handshakes from now on, and wakes those waiting.
    pub fn serve(&self, certificate: Certificate) {
        self.current.store(Some(Arc::new(certificate)));
        self.swapped.notify_waiters();
    }

    /// Waits at most `bound` for a valid certificate; whether there is one.
    pub async fn wait_until_valid(&self, bound: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            // Registered before the check, so a swap between the two is not missed.
            let swapped = self.swapped.notified();
            if self.valid_now().is_some() {
                return true;
            }
            // An expired certificate may be replaced without a swap being near: look
            // again at least every second.
            let wake = deadline.min(tokio::time::Instant::now() + Duration::from_secs(1));
            if tokio::time::timeout_at(wake, swapped).await.is_err()
                && tokio::time::Instant::now() >= deadline
            {
                return self.valid_now().is_some();
            }
        }
    }
}

/// Presents the served certificate, while it is valid, whatever name the client asks
/// for (a client asking for another name refuses it, as it would any other server's).
#[derive(Debug)]
pub struct ServingResolver(pub Arc<Certificates>);

impl ResolvesServerCert for ServingResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0
            .valid_now()
            .map(|certificate| Arc::clone(&certificate.certified))
    }
}

/// Presents the TLS-ALPN-01 certificate for the name the CA asks for (by SNI).
#[derive(Debug)]
pub struct ChallengeResolver(pub Arc<Certificates>);

impl ResolvesServerCert for ChallengeResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name()?;
        self.0.challenges.tls_alpn01_certificate(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acme::certificate::tests::bundle;

    #[tokio::test(start_paused = true)]
    async fn a_waiting_handshake_wakes_when_a_certificate_comes() {
        let certificates = Arc::new(Certificates::new(Challenges::default()));
        assert!(!certificates.wait_until_valid(Duration::from_secs(3)).await);
        let serving = Arc::clone(&certificates);
        let waiter =
            tokio::spawn(async move { serving.wait_until_valid(Duration::from_secs(60)).await });
        tokio::time::sleep(Duration::from_secs(5)).await;
        let pem = bundle(&["a.test"], Duration::from_secs(3600));
        certificates.serve(Certificate::from_pem(pem.as_bytes()).unwrap());
        assert!(waiter.await.unwrap());
        assert!(certificates.valid_now().is_some());
    }
}
