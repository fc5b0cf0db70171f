//! The NTS key-exchange server (RFC 8915 §4): TLS 1.3 only, ALPN `ntske/1`, on TCP.
//!
//! Each connection gets one request and one answer: the keys are exported from the
//! TLS session (label "EXPORTER-network-time-security"), sealed into eight cookies,
//! and the connection is closed. A connection that has not finished within the
//! timeout is cut, and connections past the limit are closed at once (chrony's
//! `ntsserverconnections` does the same), so that a flood of handshakes cannot hold
//! the server's memory; one address may hold a quarter of the slots at most, so that
//! one host keeping connections open cannot keep everyone else out.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::Error;
use crate::metrics::{KeOutcome, Metrics};
use crate::nts::cookie::{
    CookieJar, SessionKeys, AEAD_AES_SIV_CMAC_256, COOKIE_LEN, KEY_LEN, NONCE_LEN,
};
use crate::nts::records::{self, Choice, ErrorCode, NtpEndpoint, Parsed, PROTOCOL_NTPV4};
use crate::nts::SharedSecret;

/// The ALPN name of NTS-KE.
pub const ALPN: &[u8] = b"ntske/1";

/// The TLS exporter label of NTS (RFC 8915 §5.1).
const EXPORTER_LABEL: &[u8] = b"EXPORTER-network-time-security";

/// Cookies handed out per key exchange, as RFC 8915 recommends.
pub const COOKIES_PER_EXCHANGE: usize = 8;

/// The default port of NTS-KE.
pub const DEFAULT_PORT: u16 = 4460;

/// How the key-exchange server runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeSettings {
    /// Where it listens.
    pub listen: Vec<SocketAddr>,
    /// The certificate chain (PEM).
    pub certificate: PathBuf,
    /// The certificate's private key (PEM).
    pub key: PathBuf,
    /// The NTP server and port named to clients, if not this host's port 123.
    pub endpoint: NtpEndpoint,
    /// Key exchanges served at once; more are closed unanswered.
    pub max_connections: usize,
    /// How long one key exchange may take, handshake included.
    pub timeout: Duration,
}

/// The key-exchange server, bound.
#[derive(Debug)]
pub struct KeServer {
    listeners: Vec<std::net::TcpListener>,
    addresses: Vec<SocketAddr>,
    settings: KeSettings,
    tls: Arc<ArcSwap<ServerConfig>>,
    secret: SharedSecret,
}

impl KeServer {
    /// Reads the certificate and key and binds every address of `settings`.
    pub fn bind(settings: KeSettings, secret: SharedSecret) -> Result<KeServer, Error> {
        let tls = tls_config(&settings.certificate, &settings.key)?;
        let mut listeners = Vec::new();
        let mut addresses = Vec::new();
        for &address in &settings.listen {
            let listener = bind_tcp(address)?;
            listener
                .set_nonblocking(true)
                .map_err(|cause| Error::Bind { address, cause })?;
            addresses.push(listener.local_addr().unwrap_or(address));
            listeners.push(listener);
        }
        Ok(KeServer {
            listeners,
            addresses,
            settings,
            tls: Arc::new(ArcSwap::from_pointee(tls)),
            secret,
        })
    }

    /// The addresses it listens on, with the ports the kernel chose for port 0.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addresses
    }

    /// A handle that reloads the certificate and key (on SIGHUP).
    pub fn reloader(&self) -> CertificateReloader {
        CertificateReloader {
            certificate: self.settings.certificate.clone(),
            key: self.settings.key.clone(),
            tls: Arc::clone(&self.tls),
        }
    }

    /// Serves key exchanges until `shutdown` completes. Call it on a tokio runtime.
    pub async fn serve(
        self,
        metrics: Arc<Metrics>,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), Error> {
        let slots = Arc::new(Slots::new(self.settings.max_connections));
        let session = Arc::new(Session {
            tls: self.tls,
            secret: self.secret,
            endpoint: self.settings.endpoint,
            timeout: self.settings.timeout,
            metrics,
        });
        let mut accepting = tokio::task::JoinSet::new();
        for (listener, address) in self.listeners.into_iter().zip(self.addresses) {
            let listener = tokio::net::TcpListener::from_std(listener)
                .map_err(|cause| Error::Bind { address, cause })?;
            accepting.spawn(accept_loop(
                listener,
                Arc::clone(&slots),
                Arc::clone(&session),
            ));
        }
        shutdown.await;
        accepting.shutdown().await;
        Ok(())
    }
}

/// Accepts connections forever, each served by its own task while a slot is free.
async fn accept_loop(listener: tokio::net::TcpListener, slots: Arc<Slots>, session: Arc<Session>) {
    let mut sessions = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    // Out of descriptors or memory: wait for connections to end.
                    Err(error) if matches!(
                        error.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    ) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                    // One connection's failure (ECONNABORTED...): the next one.
                    Err(_) => continue,
                };
                match Slots::take(&slots, peer.ip()) {
                    Some(slot) => {
                        let session = Arc::clone(&session);
                        sessions.spawn(async move {
                            session.serve(stream).await;
                            drop(slot);
                        });
                    }
                    None => {
                        session.metrics.key_exchange(KeOutcome::Busy);
                        drop(stream);
                    }
                }
            }
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
        }
    }
}

/// The key exchanges served at once: `--nts-ke-max-connections` in all, and a
/// quarter of them (at least one) from any one address.
struct Slots {
    total: Arc<Semaphore>,
    per_address: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// One key exchange's place among the [`Slots`], given back when dropped.
struct Slot {
    slots: Arc<Slots>,
    address: IpAddr,
    _permit: OwnedSemaphorePermit,
}

impl Slots {
    fn new(total: usize) -> Slots {
        let total = total.max(1);
        Slots {
            total: Arc::new(Semaphore::new(total)),
            per_address: (total / 4).max(1),
            held: Mutex::new(HashMap::new()),
        }
    }

    /// A slot for a connection from `address`, unless every slot, or its address's
    /// share, is taken.
    fn take(slots: &Arc<Slots>, address: IpAddr) -> Option<Slot> {
        let permit = Arc::clone(&slots.total).try_acquire_owned().ok()?;
        let mut held = slots.held.lock().unwrap_or_else(|e| e.into_inner());
        let count = held.entry(address).or_insert(0);
        if *count >= slots.per_address {
            return None;
        }
        *count += 1;
        Some(Slot {
            slots: Arc::clone(slots),
            address,
            _permit: permit,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.address);
            }
        }
    }
}

/// What every key exchange shares.
struct Session {
    tls: Arc<ArcSwap<ServerConfig>>,
    secret: SharedSecret,
    endpoint: NtpEndpoint,
    timeout: Duration,
    metrics: Arc<Metrics>,
}

impl Session {
    /// One connection: the handshake, the request, the answer, then close.
    async fn serve(&self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let outcome = tokio::time::timeout(self.timeout, self.exchange(stream))
            .await
            .unwrap_or(KeOutcome::Timeout);
        self.metrics.key_exchange(outcome);
    }

    async fn exchange(&self, stream: TcpStream) -> KeOutcome {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.tls.load_full());
        let Ok(mut tls) = acceptor.accept(stream).await else {
            return KeOutcome::Handshake;
        };
        // rustls refuses a client that offers ALPN without ntske/1; one that offers
        // none is refused here (RFC 8915 §4: the client MUST offer it).
        if tls.get_ref().1.alpn_protocol() != Some(ALPN) {
            let _ = tls.shutdown().await;
            return KeOutcome::Handshake;
        }
        let mut request = Vec::with_capacity(64);
        let mut buffer = [0u8; 512];
        let parsed = loop {
            match records::parse_request(&request) {
                Parsed::Incomplete => {}
                done => break done,
            }
            match tls.read(&mut buffer).await {
                Ok(0) | Err(_) => return KeOutcome::Truncated,
                Ok(n) => request.extend_from_slice(&buffer[..n]),
            }
        };
        let mut answer = Vec::with_capacity(1024);
        let outcome = match parsed {
            Parsed::Complete(request) => {
                let choice = Choice::of(&request);
                if choice.agreed() {
                    match self.cookies(tls.get_ref().1) {
                        Some(cookies) => {
                            records::write_response(&mut answer, choice, &cookies, &self.endpoint);
                            KeOutcome::Served
                        }
                        None => {
                            records::write_error(&mut answer, ErrorCode::InternalServerError);
                            KeOutcome::InternalServerError
                        }
                    }
                } else {
                    let no_cookies: &[[u8; COOKIE_LEN]] = &[];
                    records::write_response(&mut answer, choice, no_cookies, &self.endpoint);
                    KeOutcome::Unsupported
                }
            }
            Parsed::Refused(code) => {
                records::write_error(&mut answer, code);
                match code {
                    ErrorCode::BadRequest => KeOutcome::BadRequest,
                    ErrorCode::UnrecognizedCriticalRecord => KeOutcome::UnrecognizedCriticalRecord,
                    ErrorCode::InternalServerError => KeOutcome::InternalServerError,
                }
            }
            Parsed::Incomplete => unreachable!("the loop ends on a whole request"),
        };
        if tls.write_all(&answer).await.is_err() || tls.shutdown().await.is_err() {
            return KeOutcome::Truncated;
        }
        outcome
    }

    /// The session's keys sealed into [`COOKIES_PER_EXCHANGE`] cookies; `None` when
    /// the keys cannot be exported or no random numbers are to be had.
    fn cookies(&self, connection: &rustls::ServerConnection) -> Option<Vec<[u8; COOKIE_LEN]>> {
        let keys = export_keys(connection)?;
        let mut nonces = [0u8; NONCE_LEN * COOKIES_PER_EXCHANGE];
        getrandom::fill(&mut nonces).ok()?;
        let mut jar = CookieJar::new(self.secret.load());
        let now = SystemTime::now();
        Some(
            nonces
                .chunks_exact(NONCE_LEN)
                .map(|nonce| jar.seal(&keys, now, nonce.try_into().expect("16 bytes")))
                .collect(),
        )
    }
}

/// The client-to-server and server-to-client keys of an NTS-KE session for NTPv4
/// and AEAD_AES_SIV_CMAC_256 (RFC 8915 §5.1).
pub fn export_keys(connection: &rustls::ConnectionCommon<impl Sized>) -> Option<SessionKeys> {
    let key = |direction: u8| {
        let mut context = [0u8; 5];
        context[..2].copy_from_slice(&PROTOCOL_NTPV4.to_be_bytes());
        context[2..4].copy_from_slice(&AEAD_AES_SIV_CMAC_256.to_be_bytes());
        context[4] = direction;
        connection
            .export_keying_material([0u8; KEY_LEN], EXPORTER_LABEL, Some(&context))
            .ok()
    };
    Some(SessionKeys {
        c2s: key(0)?,
        s2c: key(1)?,
    })
}

/// Reloads the certificate and key from their files.
#[derive(Clone, Debug)]
pub struct CertificateReloader {
    certificate: PathBuf,
    key: PathBuf,
    tls: Arc<ArcSwap<ServerConfig>>,
}

impl CertificateReloader {
    /// Reads the files again; on an error the certificate in use stays.
    pub fn reload(&self) -> Result<(), Error> {
        let config = tls_config(&self.certificate, &self.key)?;
        self.tls.store(Arc::new(config));
        Ok(())
    }
}

/// A TLS 1.3 server configuration for NTS-KE from PEM files.
pub fn tls_config(certificate: &Path, key: &Path) -> Result<ServerConfig, Error> {
    let certificate_error = |path: &Path, reason: String| Error::Certificate {
        path: path.to_owned(),
        reason,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certificate)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| certificate_error(certificate, e.to_string()))?;
    if chain.is_empty() {
        return Err(certificate_error(
            certificate,
            "no CERTIFICATE block in it (a PEM certificate chain is expected)".into(),
        ));
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        certificate_error(
            key,
            format!("{e} (a PEM private key: PKCS#8, PKCS#1 or SEC1 is expected)"),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| certificate_error(certificate, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| {
            certificate_error(
                key,
                format!(
                    "does not go with the certificate {}: {e}",
                    certificate.display()
                ),
            )
        })?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    // One exchange per connection: no tickets to resume with.
    config.send_tls13_tickets = 0;
    Ok(config)
}

/// A listening socket for `address`; an IPv6 one serves IPv6 only, so that it can
/// sit beside the IPv4 one on the same port.
fn bind_tcp(address: SocketAddr) -> Result<std::net::TcpListener, Error> {
    use socket2::{Domain, Protocol, Socket, Type};
    let error = |cause| crate::socket::bind_error(address, cause);
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .map_err(error)?;
    socket.set_reuse_address(true).map_err(error)?;
    if address.is_ipv6() {
        socket.set_only_v6(true).map_err(error)?;
    }
    socket.bind(&address.into()).map_err(error)?;
    socket.listen(1024).map_err(error)?;
    Ok(socket.into())
}
