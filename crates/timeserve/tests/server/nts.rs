//! Network Time Security: the key exchange over TLS with a rustls client and with
//! chronyd, authenticated NTP with the crate's client side and with chronyd, NAKs,
//! refusals, shared key files, reloads, and replies tampered with or replayed on the
//! way (a proxy), which chronyd must reject.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use timeserve::nts::client::{Client, ClientReply};
use timeserve::nts::cookie::SessionKeys;
use timeserve::nts::ke::{export_keys, ALPN};
use timeserve::nts::records::{self, Response};

use super::*;

/// A test CA and a certificate it issued for 127.0.0.1, in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = issue(dir.path(), "");
        Pki { dir, ca, cert, key }
    }
}

/// Writes a new CA (`ca{suffix}.pem`) and a certificate for 127.0.0.1 it issued with
/// its key (`cert{suffix}.pem`, `key{suffix}.pem`) to `dir`.
fn issue(dir: &Path, suffix: &str) -> (PathBuf, PathBuf, PathBuf) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("timeserve test CA{suffix}"),
    );
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "127.0.0.1");
    let cert = params
        .signed_by(&key, &rcgen::Issuer::new(ca_params, ca_key))
        .unwrap();
    let paths = (
        dir.join(format!("ca{suffix}.pem")),
        dir.join(format!("cert{suffix}.pem")),
        dir.join(format!("key{suffix}.pem")),
    );
    std::fs::write(&paths.0, ca_cert.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

/// A server on 127.0.0.1 serving NTS with `pki`'s certificate, its key exchange on a
/// free port, metrics on, and `extra` arguments.
fn nts_server(pki: &Pki, extra: &[&str]) -> Server {
    nts_server_on("127.0.0.1:0", pki, &[&["--stratum", "2"], extra].concat())
}

/// As [`nts_server`], serving NTP on `listen`, without a declared stratum.
fn nts_server_on(listen: &str, pki: &Pki, extra: &[&str]) -> Server {
    let mut args = vec![
        "--listen",
        listen,
        "--workers",
        "2",
        "--nts-cert",
        pki.cert.to_str().unwrap(),
        "--nts-key",
        pki.key.to_str().unwrap(),
        "--nts-ke-listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// A TLS client configuration trusting `ca`, offering `alpn`, TLS 1.3 only unless
/// `tls12_only`.
fn tls_client(ca: &Path, alpn: &[&[u8]], tls12_only: bool) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject as _;
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = if tls12_only {
        &[&rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS13]
    };
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// What a key exchange got: the answer and the keys exported from its session.
struct Exchanged {
    response: Response,
    keys: SessionKeys,
}

/// Runs one key exchange with `config`, sending `request`; the error says where it
/// failed.
fn exchange_with(
    server: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    request: &[u8],
) -> Result<Exchanged, String> {
    let tcp = TcpStream::connect(server).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(SETTLE)).unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let connection = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    tls.write_all(request).map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    let response =
        Response::parse(&answer).ok_or_else(|| format!("no whole answer: {answer:?}"))?;
    let keys = export_keys(&tls.conn).ok_or("no keys exported")?;
    Ok(Exchanged { response, keys })
}

/// A key exchange as a well-behaved client does it.
fn exchange(server: &Server, pki: &Pki) -> Exchanged {
    let config = tls_client(&pki.ca, &[ALPN], false);
    exchange_with(
        server.key_exchange[0],
        config,
        &records::client_request(&[timeserve::nts::AEAD_AES_SIV_CMAC_256]),
    )
    .unwrap()
}

/// Sends an authenticated request with `cookie` and `placeholders` placeholders and
/// returns the reply's bytes (waiting at most [`SETTLE`]).
fn ask(
    socket: &UdpSocket,
    client: &Client,
    cookie: &[u8],
    placeholders: usize,
) -> (Vec<u8>, [u8; 32], NtpTimestamp) {
    let unique_id: [u8; 32] = std::array::from_fn(|i| i as u8 ^ now().0 as u8);
    let sent = now();
    let request = client.request(sent, &unique_id, cookie, placeholders, &[7; 16]);
    socket.send(&request).unwrap();
    let mut buf = [0u8; 2048];
    let n = socket.recv(&mut buf).expect("a reply");
    (buf[..n].to_vec(), unique_id, sent)
}

/// Whether an authenticated request with `cookie` gets an authentic reply.
fn authentic(socket: &UdpSocket, client: &Client, cookie: &[u8]) -> bool {
    let (reply, unique_id, _) = ask(socket, client, cookie, 0);
    matches!(
        client.check(&reply, &unique_id),
        ClientReply::Authentic { .. }
    )
}

#[test]
fn a_key_exchange_hands_out_eight_cookies_that_buy_authenticated_time() {
    let pki = Pki::new();
    let server = nts_server(&pki, &[]);
    let exchanged = exchange(&server, &pki);
    let response = &exchanged.response;
    assert_eq!(response.protocols, [0], "NTPv4");
    assert_eq!(response.algorithms, Some(vec![15]), "AEAD_AES_SIV_CMAC_256");
    assert_eq!(response.cookies.len(), 8);
    assert!(response.cookies.iter().all(|c| c.len() == 104));
    assert_eq!((&response.server, response.port), (&None, None));
    let client = Client::new(exchanged.keys.clone());
    let socket = super::client(server.address());
    let mut cookie = response.cookies[0].clone();
    for placeholders in [0, 1, 7] {
        let (reply, unique_id, sent) = ask(&socket, &client, &cookie, placeholders);
        let ClientReply::Authentic { cookies } = client.check(&reply, &unique_id) else {
            panic!("not authentic: {reply:?}");
        };
        assert_eq!(
            cookies.len(),
            1 + placeholders,
            "one cookie per placeholder, and one"
        );
        let header = Reply::parse(&reply).unwrap();
        assert_eq!((header.mode, header.stratum, header.origin), (4, 2, sent));
        assert!(header.receive <= header.transmit);
        // A fresh cookie from the reply buys the next one.
        cookie = cookies[0].clone();
    }
    server.wait_for_metric("timeserve_nts_authenticated_total ", |n| n == 3);
    server.wait_for_metric(
        "timeserve_nts_key_exchanges_total{outcome=\"served\"} ",
        |n| n == 1,
    );
    // Plain NTP goes on beside it.
    socket.send(&client_request(4, now())).unwrap();
    let mut buf = [0u8; 512];
    assert_eq!(socket.recv(&mut buf).unwrap(), HEADER_LEN);
}

#[test]
fn forged_cookies_and_bad_authenticators_get_a_nak_and_broken_requests_no_answer() {
    let pki = Pki::new();
    let server = nts_server(&pki, &[]);
    let exchanged = exchange(&server, &pki);
    let socket = super::client(server.address());
    let client = Client::new(exchanged.keys.clone());
    let mut forged = exchanged.response.cookies[0].clone();
    forged[50] ^= 1;
    let (reply, unique_id, _) = ask(&socket, &client, &forged, 0);
    assert_eq!(client.check(&reply, &unique_id), ClientReply::Nak);
    let header = Reply::parse(&reply).unwrap();
    assert_eq!(
        (header.stratum, header.leap, &header.reference_id),
        (0, 3, b"NTSN")
    );
    // A genuine cookie, but a request authenticated with other keys.
    let impostor = Client::new(SessionKeys {
        c2s: [1; 32],
        s2c: [2; 32],
    });
    let (reply, unique_id, _) = ask(&socket, &impostor, &exchanged.response.cookies[1], 0);
    assert_eq!(impostor.check(&reply, &unique_id), ClientReply::Nak);
    server.wait_for_metric("timeserve_nts_naks_total{reason=\"cookie\"} ", |n| n == 1);
    server.wait_for_metric("timeserve_nts_naks_total{reason=\"authenticator\"} ", |n| {
        n == 1
    });
    // A request cut before its authenticator is not answered at all.
    let whole = client.request(now(), &[3; 32], &exchanged.response.cookies[2], 0, &[1; 16]);
    socket.send(&whole[..HEADER_LEN + 36 + 108]).unwrap();
    server.wait_for_metric("timeserve_dropped_total{reason=\"nts_malformed\"} ", |n| {
        n == 1
    });
    assert!(queued(&socket).is_none());
}

#[test]
fn the_key_exchange_refuses_what_rfc_8915_forbids_and_names_the_ntp_endpoint() {
    let pki = Pki::new();
    let server = nts_server(
        &pki,
        &[
            "--nts-ntp-server",
            "time.example.net",
            "--nts-ntp-port",
            "1123",
        ],
    );
    let ke = server.key_exchange[0];
    let good = records::client_request(&[15]);
    // No ALPN, or TLS 1.2: no exchange.
    assert!(exchange_with(ke, tls_client(&pki.ca, &[], false), &good).is_err());
    assert!(exchange_with(ke, tls_client(&pki.ca, &[ALPN], true), &good).is_err());
    let config = tls_client(&pki.ca, &[ALPN], false);
    // An algorithm this server lacks: an empty AEAD record and no cookies.
    let other = exchange_with(ke, config.clone(), &records::client_request(&[17])).unwrap();
    assert_eq!(other.response.algorithms, Some(vec![]));
    assert!(other.response.cookies.is_empty());
    // A request without NTS Next Protocol Negotiation: Bad Request (1).
    let aead_only = [0x80, 4, 0, 2, 0, 15, 0x80, 0, 0, 0];
    let refused = exchange_with(ke, config.clone(), &aead_only).unwrap();
    assert_eq!(refused.response.error, Some(1));
    // An unknown critical record: Unrecognized Critical Record (0).
    let mut unknown = vec![0xc0, 0x01, 0, 0];
    unknown.extend_from_slice(&good);
    assert_eq!(
        exchange_with(ke, config.clone(), &unknown)
            .unwrap()
            .response
            .error,
        Some(0)
    );
    let named = exchange_with(ke, config, &good).unwrap().response;
    assert_eq!(named.server.as_deref(), Some("time.example.net"));
    assert_eq!(named.port, Some(1123));
    assert_eq!(named.cookies.len(), 8);
    server.wait_for_metric(
        "timeserve_nts_key_exchanges_total{outcome=\"handshake_failed\"} ",
        |n| n == 2,
    );
    server.wait_for_metric(
        "timeserve_nts_key_exchanges_total{outcome=\"bad_request\"} ",
        |n| n == 1,
    );
}

#[test]
fn idle_key_exchanges_are_cut_at_the_timeout_and_those_past_the_limits_closed() {
    let pki = Pki::new();
    // Four slots in all, one per address.
    let server = nts_server(
        &pki,
        &["--nts-ke-timeout", "1s", "--nts-ke-max-connections", "4"],
    );
    let ke = server.key_exchange[0];
    let mut byte = [0u8; 1];
    let closed_unanswered = |mut stream: TcpStream| {
        stream.set_read_timeout(Some(SETTLE)).unwrap();
        let mut byte = [0u8; 1];
        stream.read(&mut byte).unwrap_or(0) == 0
    };
    let mut idle = vec![connect_from(2, ke)];
    // A second from the same address is past its share.
    assert!(closed_unanswered(connect_from(2, ke)));
    idle.extend((3..=5).map(|host| connect_from(host, ke)));
    // Every slot is taken: another address is closed too.
    assert!(closed_unanswered(connect_from(6, ke)));
    server.wait_for_metric(
        "timeserve_nts_key_exchanges_total{outcome=\"busy\"} ",
        |n| n == 2,
    );
    // The idle ones are cut after a second, and the slots are free again.
    for mut stream in idle {
        stream.set_read_timeout(Some(SETTLE)).unwrap();
        assert_eq!(stream.read(&mut byte).unwrap_or(0), 0);
    }
    server.wait_for_metric(
        "timeserve_nts_key_exchanges_total{outcome=\"timeout\"} ",
        |n| n == 4,
    );
    assert_eq!(exchange(&server, &pki).response.cookies.len(), 8);
}

/// A TCP connection to `server` from 127.0.0.`host`.
fn connect_from(host: u8, server: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&SocketAddr::from(([127, 0, 0, host], 0)).into())
        .unwrap();
    socket.connect(&server.into()).unwrap();
    socket.into()
}

#[test]
fn replicas_sharing_a_key_file_open_each_others_cookies_and_sighup_reloads_it_and_the_certificate()
{
    let pki = Pki::new();
    let key_file = pki.dir.path().join("nts.key");
    let key_file_arg = key_file.to_str().unwrap();
    let first = nts_server(&pki, &["--nts-key-file", key_file_arg]);
    let second = nts_server(&pki, &["--nts-key-file", key_file_arg]);
    let exchanged = exchange(&first, &pki);
    let client = Client::new(exchanged.keys.clone());
    let socket = super::client(second.address());
    assert!(
        authentic(&socket, &client, &exchanged.response.cookies[0]),
        "the second replica opens the first one's cookie"
    );

    // A new secret and a certificate from another CA, then SIGHUP to the second.
    std::fs::write(&key_file, format!("{}\n", "ab".repeat(32))).unwrap();
    let (new_ca, new_cert, new_key) = issue(pki.dir.path(), "-new");
    std::fs::rename(&new_cert, &pki.cert).unwrap();
    std::fs::rename(&new_key, &pki.key).unwrap();
    second.signal(libc::SIGHUP);
    second.wait_for_signals_taken();
    let old_cookie = &exchanged.response.cookies[1];
    let naked = wait_until(
        "the second replica to use the new secret",
        || {
            let (reply, unique_id, _) = ask(&socket, &client, old_cookie, 0);
            client.check(&reply, &unique_id)
        },
        |reply| *reply == ClientReply::Nak,
    );
    assert_eq!(naked, ClientReply::Nak);
    let old_trust = tls_client(&pki.ca, &[ALPN], false);
    let good = records::client_request(&[15]);
    assert!(exchange_with(second.key_exchange[0], old_trust, &good).is_err());
    let new_trust = tls_client(&new_ca, &[ALPN], false);
    let renewed = exchange_with(second.key_exchange[0], new_trust, &good).unwrap();
    let client = Client::new(renewed.keys);
    assert!(authentic(&socket, &client, &renewed.response.cookies[0]));
    let (code, stderr) = second.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("new master secret from"), "{stderr}");
}

#[test]
fn a_reload_that_finds_no_key_file_changes_nothing_and_makes_none() {
    let pki = Pki::new();
    let key_file = pki.dir.path().join("nts.key");
    let server = nts_server(&pki, &["--nts-key-file", key_file.to_str().unwrap()]);
    let exchanged = exchange(&server, &pki);
    std::fs::remove_file(&key_file).unwrap();
    server.signal(libc::SIGHUP);
    server.wait_for_signals_taken();
    let client = Client::new(exchanged.keys.clone());
    let socket = super::client(server.address());
    assert!(
        authentic(&socket, &client, &exchanged.response.cookies[0]),
        "the secret in use stays"
    );
    assert!(!key_file.exists(), "a reload never makes a new secret");
    let (code, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("SIGHUP: NTS key file") && stderr.contains("nts.key"),
        "{stderr}"
    );
}

#[test]
fn bad_nts_files_name_the_file_and_what_is_expected() {
    let pki = Pki::new();
    let missing = pki.dir.path().join("missing.pem");
    let (cert, key) = (pki.cert.to_str().unwrap(), pki.key.to_str().unwrap());
    let with_files = |extra: &[&'static str]| {
        let mut args = vec!["--nts-cert", cert, "--nts-key", key];
        args.extend_from_slice(extra);
        args
    };
    let cases: [(Vec<&str>, &str); 5] = [
        (
            vec!["--nts-cert", missing.to_str().unwrap(), "--nts-key", key],
            "missing.pem",
        ),
        (vec!["--nts-cert", cert, "--nts-key", cert], "private key"),
        (vec!["--nts-cert", cert], "--nts-key"),
        (
            with_files(&["--nts-ntp-server", "tíme.example"]),
            "not a host name or IP address in ASCII",
        ),
        (
            with_files(&["--nts-key-rotation", "1.5s"]),
            "not a whole number of seconds",
        ),
    ];
    for (args, expected) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_timeserve"))
            .args(["--listen", "127.0.0.1:0", "--nts-ke-listen", "127.0.0.1:0"])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let bad_secret = pki.dir.path().join("bad.key");
    std::fs::write(&bad_secret, "short\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_timeserve"))
        .args(["--listen", "127.0.0.1:0", "--nts-ke-listen", "127.0.0.1:0"])
        .args([
            "--nts-cert",
            pki.cert.to_str().unwrap(),
            "--nts-key",
            pki.key.to_str().unwrap(),
        ])
        .args(["--nts-key-file", bad_secret.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("bad.key") && stderr.contains("64 hexadecimal"),
        "{stderr}"
    );
}

/// Runs `chronyd -Q` (measure once, never touch the clock) against an NTS server:
/// the key exchange at `ke`, NTP at `ntp`; returns the measured offset, or chronyd's
/// output when it got no measurement within `timeout` seconds.
fn chronyd_measures(
    ke: SocketAddr,
    ntp: SocketAddr,
    ca: &Path,
    timeout: u32,
) -> Result<f64, String> {
    let chronyd = require("chronyd", "chrony");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("chrony.conf");
    std::fs::write(
        &config,
        format!(
            "server {} port {} nts ntsport {} iburst maxsamples 1\nntstrustedcerts {}\nntsdumpdir {}\n",
            ntp.ip(),
            ntp.port(),
            ke.port(),
            ca.display(),
            dir.path().display()
        ),
    )
    .unwrap();
    let output = Command::new(chronyd)
        .args([
            "-Q",
            "-f",
            config.to_str().unwrap(),
            "-t",
            &timeout.to_string(),
        ])
        .output()
        .unwrap();
    super::chronyd_offset(&output)
}

/// A chronyd daemon (not touching the clock: -x) using one NTS source, with its
/// command socket in a private directory; killed when dropped.
struct Chronyd {
    child: Child,
    dir: tempfile::TempDir,
}

impl Chronyd {
    fn start(ke: SocketAddr, ntp: SocketAddr, ca: &Path) -> Chronyd {
        let chronyd = require("chronyd", "chrony");
        let dir = tempfile::tempdir().unwrap();
        // chronyd opens its command socket only in a directory closed to others.
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let path = dir.path().display();
        let config = dir.path().join("chrony.conf");
        std::fs::write(
            &config,
            format!(
                "server {} port {} nts ntsport {} iburst\nntstrustedcerts {}\n\
                 ntsdumpdir {path}\nbindcmdaddress {path}/chronyd.sock\ncmdport 0\n\
                 pidfile {path}/chronyd.pid\n",
                ntp.ip(),
                ntp.port(),
                ke.port(),
                ca.display(),
            ),
        )
        .unwrap();
        // -d: in the foreground; -x: never adjust the clock; -u root: no user switch
        // (the command socket's directory is ours).
        let child = Command::new(chronyd)
            .args(["-d", "-x", "-u", "root", "-f", config.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("chronyd.log")).unwrap())
            .spawn()
            .unwrap();
        Chronyd { child, dir }
    }

    /// What chronyd logged.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("chronyd.log")).unwrap_or_default()
    }

    /// `chronyc -n -N COMMAND` against this daemon.
    fn chronyc(&self, command: &str) -> String {
        let socket = self.dir.path().join("chronyd.sock");
        let output = Command::new(require("chronyc", "chrony"))
            .args(["-h", socket.to_str().unwrap(), "-n", "-N", command])
            .output()
            .unwrap();
        format!(
            "{}{}\nchronyd's log:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            self.log()
        )
    }
}

impl Drop for Chronyd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn chronyd_synchronises_over_nts_and_its_authdata_says_so() {
    let pki = Pki::new();
    let server = nts_server(&pki, &[]);
    let chronyd = Chronyd::start(server.key_exchange[0], server.address(), &pki.ca);
    // `^*`: the source chronyd synchronises to.
    wait_until(
        "chronyd to select timeserve",
        || chronyd.chronyc("sources"),
        |sources| sources.lines().any(|l| l.starts_with("^* 127.0.0.1")),
    );
    // Name Mode KeyID Type KLen Last Atmp NAK Cook CLen: NTS, one key exchange,
    // AEAD 15 with 256-bit keys, no NAK, cookies of 104 bytes.
    let authdata = chronyd.chronyc("authdata");
    let row: Vec<&str> = authdata
        .lines()
        .find(|l| l.starts_with("127.0.0.1"))
        .unwrap_or_else(|| panic!("no row for the source:\n{authdata}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        (row[1], row[2], row[3], row[4]),
        ("NTS", "1", "15", "256"),
        "{authdata}"
    );
    assert_eq!(
        (row[7], row[9]),
        ("0", "104"),
        "no NAK, our cookies: {authdata}"
    );
    assert!(
        row[8].parse::<u32>().unwrap() >= 1,
        "cookies held: {authdata}"
    );
    server.wait_for_metric(
        "timeserve_nts_key_exchanges_total{outcome=\"served\"} ",
        |n| n == 1,
    );
    server.wait_for_metric("timeserve_nts_authenticated_total ", |n| n >= 1);
    assert_eq!(
        server.metric("timeserve_nts_naks_total{reason=\"cookie\"} "),
        0
    );
}

/// What the proxy does to replies on their way back to the client.
#[derive(Clone, Copy, Debug)]
enum Tamper {
    /// Passes replies unchanged: the control, which chronyd must accept.
    Nothing,
    /// Flips one bit of the authenticator's ciphertext.
    FlipBit,
    /// Holds back the first reply, then sends it again in place of each later one
    /// (so that the client never sees a reply to the request it just sent).
    Replay,
    /// Holds back the client's first request, then sends it in place of each later
    /// one: the server answers a reused cookie, with replies to that old request.
    ReuseCookie,
}

/// A UDP proxy in front of `server` on 127.0.0.1, doing `tamper` to its replies;
/// stops when the returned flag is set.
fn tampering_proxy(server: SocketAddr, tamper: Tamper) -> (SocketAddr, Arc<AtomicBool>) {
    let front = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let address = front.local_addr().unwrap();
    (address, proxy(front, server, tamper))
}

/// As [`tampering_proxy`], on 127.0.0.1:`port`.
fn tampering_proxy_on(port: u16, server: SocketAddr, tamper: Tamper) -> Arc<AtomicBool> {
    proxy(
        UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).unwrap(),
        server,
        tamper,
    )
}

/// Forwards what arrives on `front` to `server` and its replies back, doing `tamper`
/// to them, until the returned flag is set.
fn proxy(front: UdpSocket, server: SocketAddr, tamper: Tamper) -> Arc<AtomicBool> {
    let back = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    back.connect(server).unwrap();
    front
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    back.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    std::thread::spawn(move || {
        let mut first: Option<Vec<u8>> = None;
        let mut first_request: Option<Vec<u8>> = None;
        let mut buf = [0u8; 2048];
        while !stopping.load(Ordering::Relaxed) {
            let Ok((n, client)) = front.recv_from(&mut buf) else {
                continue;
            };
            let request = match (tamper, &first_request) {
                (Tamper::ReuseCookie, None) => {
                    first_request = Some(buf[..n].to_vec());
                    continue;
                }
                (Tamper::ReuseCookie, Some(held)) => held.clone(),
                _ => buf[..n].to_vec(),
            };
            back.send(&request).unwrap();
            let Ok(n) = back.recv(&mut buf) else { continue };
            let mut reply = buf[..n].to_vec();
            match tamper {
                Tamper::Nothing | Tamper::ReuseCookie => {}
                Tamper::FlipBit => {
                    let last = reply.len() - 1;
                    reply[last - 20] ^= 0x10;
                }
                Tamper::Replay => match &first {
                    None => {
                        first = Some(reply);
                        continue;
                    }
                    Some(held) => reply = held.clone(),
                },
            }
            let _ = front.send_to(&reply, client);
        }
    });
    stop
}

#[test]
fn chronyd_rejects_replies_tampered_with_replayed_or_to_a_reused_cookie() {
    let pki = Pki::new();
    let server = nts_server(&pki, &[]);
    let runs: Vec<_> = [
        Tamper::Nothing,
        Tamper::FlipBit,
        Tamper::Replay,
        Tamper::ReuseCookie,
    ]
    .into_iter()
    .map(|tamper| {
        let (proxy, stop) = tampering_proxy(server.address(), tamper);
        let ke = server.key_exchange[0];
        let ca = pki.ca.clone();
        std::thread::spawn(move || {
            let measured = chronyd_measures(ke, proxy, &ca, 10);
            stop.store(true, Ordering::Relaxed);
            (tamper, measured)
        })
    })
    .collect();
    for run in runs {
        match run.join().unwrap() {
            (Tamper::Nothing, measured) => assert!(
                measured.is_ok(),
                "through an honest proxy chronyd measures: {measured:?}"
            ),
            (tamper, measured) => {
                assert!(
                    measured.is_err(),
                    "{tamper:?}: chronyd accepted {measured:?}"
                )
            }
        }
    }
    // The server answered them all, authenticated: the client is what refused.
    assert!(server.metric("timeserve_nts_authenticated_total ") >= 4);
}

/// How `cargo xtask ci` installs ntpd-rs (its daemon is `ntp-daemon`).
const NTPD_RS_INSTALL: &str =
    "cargo install --locked ntpd@1.9.0 --no-default-features --features openssl,rustcrypto";

/// The kernel's clock discipline (frequency, status, error estimates) as it was, put
/// back when dropped: ntpd-rs cannot run without steering the clock, and this host's
/// clock must be left as the test found it.
struct SavedKernelClock(libc::timex);

impl SavedKernelClock {
    fn save() -> SavedKernelClock {
        // SAFETY: all-zero is a valid timex; modes 0 only reads.
        let mut state: libc::timex = unsafe { std::mem::zeroed() };
        // SAFETY: adjtimex writes into the timex it is given, which lives here.
        assert!(unsafe { libc::adjtimex(&mut state) } >= 0);
        SavedKernelClock(state)
    }
}

impl Drop for SavedKernelClock {
    fn drop(&mut self) {
        let mut restore = self.0;
        restore.modes = libc::ADJ_OFFSET
            | libc::ADJ_FREQUENCY
            | libc::ADJ_MAXERROR
            | libc::ADJ_ESTERROR
            | libc::ADJ_STATUS;
        restore.offset = 0;
        // SAFETY: as in `save`, now setting the fields the modes name.
        let rc = unsafe { libc::adjtimex(&mut restore) };
        assert!(rc >= 0, "restoring the kernel clock state failed");
    }
}

/// An ntp-daemon (ntpd-rs) with one NTS source, polling every second; killed when
/// dropped.
struct NtpdRs {
    child: Child,
    dir: tempfile::TempDir,
}

impl NtpdRs {
    fn start(key_exchange: SocketAddr, ca: &Path) -> NtpdRs {
        let daemon = testdata::require_crate("ntp-daemon", NTPD_RS_INSTALL);
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("ntp.toml");
        std::fs::write(
            &config,
            format!(
                "[observability]\nobservation-path = \"{}\"\n\n\
                 [[source]]\nmode = \"nts\"\naddress = \"{key_exchange}\"\n\
                 certificate-authority = \"{}\"\n\n\
                 [source-defaults]\npoll-interval-limits = {{ min = 0, max = 1 }}\n\
                 initial-poll-interval = 0\n\n\
                 [synchronization]\nminimum-agreeing-sources = 1\n",
                dir.path().join("observe").display(),
                ca.display()
            ),
        )
        .unwrap();
        let child = Command::new(daemon)
            .args(["-c", config.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("ntp-daemon.log")).unwrap())
            .spawn()
            .unwrap();
        NtpdRs { child, dir }
    }

    /// `ntp-ctl status`, with the daemon's log when it has ended.
    fn status(&mut self) -> String {
        let ctl = testdata::require_crate("ntp-ctl", NTPD_RS_INSTALL);
        let config = self.dir.path().join("ntp.toml");
        let output = Command::new(ctl)
            .args(["-c", config.to_str().unwrap(), "status"])
            .output()
            .unwrap();
        let mut text = String::from_utf8_lossy(&output.stdout).to_string();
        if let Ok(Some(status)) = self.child.try_wait() {
            let log = std::fs::read_to_string(self.dir.path().join("ntp-daemon.log"));
            text += &format!(
                "\nntp-daemon exited ({status}): {}",
                log.unwrap_or_default()
            );
        }
        text
    }
}

impl Drop for NtpdRs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The stratum ntpd-rs says it has (16 until it synchronises).
fn ntpd_rs_stratum(status: &str) -> Option<u8> {
    status
        .lines()
        .find_map(|l| l.trim().strip_prefix("Stratum:")?.trim().parse().ok())
}

/// A free UDP port on 127.0.0.1 (for a server whose key exchange must name its NTP
/// port before it starts).
fn free_udp_port() -> u16 {
    UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn ntpd_rs_synchronises_over_nts_and_rejects_tampered_replayed_and_reused_cookie_replies() {
    let _clock = KERNEL_CLOCK.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        rustix::process::geteuid().is_root(),
        "ntp-daemon steers the clock: this test runs as root (as `cargo xtask ci` does)"
    );
    let _restore = SavedKernelClock::save();
    let pki = Pki::new();
    // Stratum 1: ntpd-rs takes any other source on one of its own addresses
    // (127.0.0.1) for a loop.
    let port = free_udp_port();
    let listen = format!("127.0.0.1:{port}");
    let stratum_one = ["--stratum", "1", "--refid", "GPS", "--nts-ntp-port"];
    let honest = nts_server_on(
        &listen,
        &pki,
        &[&stratum_one[..], &[&port.to_string()]].concat(),
    );
    // The others name a tampering proxy's port as their NTP port.
    let tampered: Vec<_> = [Tamper::FlipBit, Tamper::Replay, Tamper::ReuseCookie]
        .into_iter()
        .map(|tamper| {
            let port = free_udp_port();
            let listen = format!("127.0.0.1:{port}");
            let probe = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            let proxy_port = probe.local_addr().unwrap().port();
            drop(probe);
            let server = nts_server_on(
                &listen,
                &pki,
                &[&stratum_one[..], &[&proxy_port.to_string()]].concat(),
            );
            let stop = tampering_proxy_on(proxy_port, server.address(), tamper);
            (tamper, server, stop)
        })
        .collect();
    let mut clients: Vec<(Option<Tamper>, NtpdRs)> =
        vec![(None, NtpdRs::start(honest.key_exchange[0], &pki.ca))];
    for (tamper, server, _) in &tampered {
        clients.push((
            Some(*tamper),
            NtpdRs::start(server.key_exchange[0], &pki.ca),
        ));
    }
    // The honest one synchronises (stratum 2, below timeserve's 1) over NTS, holding
    // a full set of cookies.
    let status = wait_until(
        "ntpd-rs to synchronise from timeserve",
        || clients[0].1.status(),
        |status| ntpd_rs_stratum(status) == Some(2),
    );
    assert!(
        status.contains("[NTS]") && status.contains("NTS cookies:\t\t8/8"),
        "{status}"
    );
    // The tampered ones get as many authenticated replies, altered on the way, and
    // refuse them all.
    for (_, server, stop) in &tampered {
        server.wait_for_metric("timeserve_nts_authenticated_total ", |n| n >= 3);
        stop.store(true, Ordering::Relaxed);
    }
    for (tamper, ntpd) in &mut clients[1..] {
        let status = ntpd.status();
        assert_eq!(ntpd_rs_stratum(&status), Some(16), "{tamper:?}: {status}");
    }
}
