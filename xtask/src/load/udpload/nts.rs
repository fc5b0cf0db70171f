//! `cargo xtask udpload --nts`: authenticated load. Each client socket runs one key
//! exchange (rustls, as any NTS client) and then sends requests carrying its cookies,
//! built before the step (so that the generator spends its CPU on sending, not on
//! AES-SIV); a reply counts when it is authenticated, a NAK is counted apart. The key
//! exchange itself is measured as key exchanges per second from a few threads.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use timeserve::nts::client::{Client, ClientReply};
use timeserve::nts::extension::KISS_NTS_NAK;
use timeserve::nts::ke::{export_keys, ALPN};
use timeserve::nts::records::{self, Response};
use timeserve::nts::AEAD_AES_SIV_CMAC_256;
use timeserve::packet::NtpTimestamp;

/// Requests prepared per client socket, sent round-robin: each carries its index in
/// its transmit timestamp, which the reply returns as its origin.
pub(super) const REQUESTS_PER_SOCKET: usize = 1024;

/// A TLS client configuration for NTS-KE trusting the CA in `ca`.
pub(super) fn tls_client(ca: &Path) -> Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca)
        .with_context(|| format!("reading {}", ca.display()))?
    {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN.to_vec()];
    // Each exchange is a full handshake, as a client with no session to resume makes.
    config.resumption = rustls::client::Resumption::disabled();
    Ok(Arc::new(config))
}

/// One key exchange with the server at `address`: its cookies and the client side of
/// its keys.
pub(super) fn key_exchange(
    address: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
) -> Result<(Client, Vec<Vec<u8>>)> {
    let tcp = TcpStream::connect(address).with_context(|| format!("connecting to {address}"))?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
    let connection = rustls::ClientConnection::new(Arc::clone(config), name)?;
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    tls.write_all(&records::client_request(&[AEAD_AES_SIV_CMAC_256]))?;
    let mut answer = Vec::new();
    // chrony closes without close_notify once it has answered: what arrived counts.
    let _ = tls.read_to_end(&mut answer);
    let response = Response::parse(&answer)
        .with_context(|| format!("no whole NTS-KE answer from {address}"))?;
    if response.cookies.is_empty() {
        bail!("{address} handed out no cookies: {response:?}");
    }
    let keys = export_keys(&tls.conn).context("exporting the NTS keys")?;
    Ok((Client::new(keys), response.cookies))
}

/// The requests one client socket sends, numbered `socket << 16 | index` in their
/// transmit timestamps.
pub(super) fn prepared_requests(
    socket: usize,
    client: &Client,
    cookies: &[Vec<u8>],
) -> Vec<Vec<u8>> {
    (0..REQUESTS_PER_SOCKET)
        .map(|index| {
            let number = (socket << 16 | index) as u64;
            let mut unique_id = [0u8; 32];
            unique_id[..8].copy_from_slice(&number.to_be_bytes());
            let mut nonce = [0u8; 16];
            nonce[..8].copy_from_slice(&number.to_be_bytes());
            client.request(
                NtpTimestamp(number),
                &unique_id,
                &cookies[index % cookies.len()],
                0,
                &nonce,
            )
        })
        .collect()
}

/// Whether `reply` is an NTS NAK.
pub(super) fn is_nak(reply: &[u8]) -> bool {
    reply.len() >= 16 && reply[1] == 0 && reply[12..16] == KISS_NTS_NAK
}

/// Checks that the server's reply to the first prepared request of socket 0 is
/// authentic: the load counts replies without opening each one.
pub(super) fn check_authentic(address: SocketAddr, client: &Client, request: &[u8]) -> Result<()> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    socket.set_read_timeout(Some(Duration::from_secs(5)))?;
    socket.send_to(request, address)?;
    let mut buf = [0u8; 2048];
    let n = socket
        .recv(&mut buf)
        .with_context(|| format!("no reply from {address} to an NTS request"))?;
    let unique_id: [u8; 32] = request[52..84].try_into().expect("32 bytes");
    match client.check(&buf[..n], &unique_id) {
        ClientReply::Authentic { cookies } if !cookies.is_empty() => Ok(()),
        other => bail!("{address} did not authenticate an NTS request: {other:?}"),
    }
}

/// Key exchanges per second against `address` from `threads` threads for `seconds`,
/// and how many failed.
pub(super) fn key_exchange_rate(
    address: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    threads: usize,
    seconds: f64,
) -> (f64, u64) {
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (done, failed, stop, config) = (
                Arc::clone(&done),
                Arc::clone(&failed),
                Arc::clone(&stop),
                Arc::clone(config),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match key_exchange(address, &config) {
                        Ok(_) => done.fetch_add(1, Ordering::Relaxed),
                        Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        let _ = worker.join();
    }
    let elapsed = start.elapsed().as_secs_f64();
    (
        done.load(Ordering::Relaxed) as f64 / elapsed,
        failed.load(Ordering::Relaxed),
    )
}
