//! HTTPS (`--tls-cert`, `--tls-key`, `--hsts`): curl, a real client, checks the
//! certificate against the test CA file and gets the files byte for byte, under every
//! strategy; bad pairs stop the start naming the file; SIGHUP loads a new pair for new
//! connections while a download in flight completes on the old one. `openssl s_client`
//! is refused TLS 1.1 and gets TLS 1.2 and 1.3, the server's cipher suite order, and
//! the protocol it offers by ALPN.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{
    random_bytes, scrape, wait_for_metric, wait_until, Server, SETTLE, STRATEGIES,
};

/// A certificate for `localhost` and 127.0.0.1 with `name` as its common name, valid
/// from `not_before` to `not_after` (years), and its key, as PEM.
fn certificate(name: &str, years: (i32, i32)) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.not_before = rcgen::date_time_ymd(years.0, 1, 1);
    params.not_after = rcgen::date_time_ymd(years.1, 1, 1);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Valid from 2020 to 2100.
fn valid(name: &str) -> (String, String) {
    certificate(name, (2020, 2100))
}

/// A certificate and key written to `dir` as `cert.pem` and `key.pem`.
struct Pair {
    cert: PathBuf,
    key: PathBuf,
}

impl Pair {
    fn write(dir: &Path, (cert, key): &(String, String)) -> Pair {
        let pair = Pair {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        std::fs::write(&pair.cert, cert).unwrap();
        std::fs::write(&pair.key, key).unwrap();
        pair
    }

    fn flags(&self) -> Vec<&str> {
        vec![
            "--tls-cert",
            self.cert.to_str().unwrap(),
            "--tls-key",
            self.key.to_str().unwrap(),
        ]
    }
}

/// The served tree: a file larger than the strategies' chunks and windows, a small one.
fn tree() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let data = random_bytes((3 << 20) + 12_345, 35);
    std::fs::write(dir.path().join("big.bin"), &data).unwrap();
    std::fs::write(dir.path().join("hello.txt"), b"hello").unwrap();
    (dir, data)
}

/// Runs curl over HTTPS to `https://localhost:PORT` + each of `paths` (one connection
/// when it can), trusting `ca`, with `args` before the URLs; at most a minute. HTTP/1.1,
/// unless `args` hold `--http2` (curl takes the last protocol flag).
pub fn curl(addr: SocketAddr, ca: &Path, args: &[&str], paths: &[&str]) -> Output {
    let curl = testdata::require("curl", "curl");
    let port = addr.port();
    let output = Command::new(curl)
        .args(["--silent", "--show-error", "--max-time", "60", "--http1.1"])
        .arg("--cacert")
        .arg(ca)
        .args(["--resolve", &format!("localhost:{port}:127.0.0.1")])
        .args(args)
        .args(
            paths
                .iter()
                .map(|path| format!("https://localhost:{port}{path}")),
        )
        .output()
        .unwrap();
    output
}

/// The body of `path` over HTTPS, asserting that curl succeeded.
fn fetch(addr: SocketAddr, ca: &Path, args: &[&str], path: &str) -> Vec<u8> {
    let output = curl(addr, ca, args, &[path]);
    assert!(
        output.status.success(),
        "curl {path}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// The common name of the certificate the server presents to a new connection.
fn served_name(addr: SocketAddr, ca: &Path) -> String {
    let output = curl(
        addr,
        ca,
        &["--verbose", "--output", "/dev/null"],
        &["/hello.txt"],
    );
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{log}");
    let subject = log
        .lines()
        .find_map(|line| line.split_once("subject: CN=").map(|(_, name)| name))
        .unwrap_or_else(|| panic!("curl shows no subject: {log}"));
    subject.trim().to_string()
}

#[test]
fn https_serves_files_ranges_and_listings_under_every_strategy() {
    let (dir, data) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &valid("ioserve test"));
    for strategy in STRATEGIES {
        let mut flags = pair.flags();
        flags.extend(["--hsts", "600"]);
        let server = Server::start(strategy, dir.path(), &flags);
        let addr = server.addr;
        assert_eq!(fetch(addr, &pair.cert, &[], "/big.bin"), data, "{strategy}");
        assert_eq!(
            fetch(addr, &pair.cert, &[], "/hello.txt"),
            b"hello",
            "{strategy}"
        );
        // A range, with its status and headers.
        let range = fetch(
            addr,
            &pair.cert,
            &["--include", "--range", "100-200999"],
            "/big.bin",
        );
        let split = range.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&range[..split]).to_lowercase();
        assert!(head.starts_with("http/1.1 206"), "{strategy}: {head}");
        assert!(
            head.contains("strict-transport-security: max-age=600\r\n"),
            "{head}"
        );
        assert_eq!(&range[split..], &data[100..201_000], "{strategy}");
        // Two ranges: multipart/byteranges, with both parts' bytes in it.
        let parts = fetch(
            addr,
            &pair.cert,
            &["--range", "0-9,2000000-2000099"],
            "/big.bin",
        );
        let contains = |needle: &[u8]| parts.windows(needle.len()).any(|w| w == needle);
        assert!(
            contains(&data[..10]) && contains(&data[2_000_000..2_000_100]),
            "{strategy}"
        );
        // A listing.
        let listing = String::from_utf8(fetch(addr, &pair.cert, &[], "/")).unwrap();
        assert!(
            listing.contains("big.bin") && listing.contains("hello.txt"),
            "{listing}"
        );
        // Keep-alive: two requests on one TLS connection.
        let output = curl(
            addr,
            &pair.cert,
            &[
                "--verbose",
                "--output",
                "/dev/null",
                "--output",
                "/dev/null",
            ],
            &["/hello.txt", "/big.bin"],
        );
        let log = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{log}");
        assert!(
            log.contains("Re-using existing connection"),
            "{strategy}: {log}"
        );
        assert_eq!(
            log.matches("TLSv1.3 (OUT), TLS handshake, Client hello")
                .count(),
            1,
            "{log}"
        );
    }
}

#[test]
fn hsts_goes_on_https_responses_only() {
    let (dir, _) = tree();
    let server = Server::start("sendfile", dir.path(), &["--hsts", "600"]);
    let response = crate::support::get(server.addr, "/hello.txt", &[]);
    assert_eq!(response.status, 200);
    assert_eq!(response.header("strict-transport-security"), None);
}

#[test]
fn plain_http_sent_to_the_https_port_is_refused_and_the_server_goes_on() {
    let (dir, _) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &valid("ioserve test"));
    for strategy in STRATEGIES {
        let server = Server::start(strategy, dir.path(), &pair.flags());
        let mut stream = TcpStream::connect(server.addr).unwrap();
        stream.set_read_timeout(Some(SETTLE)).unwrap();
        stream
            .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        // The handshake fails: at most a TLS alert comes back, never the file, and the
        // server closes the connection.
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        assert!(!answer.windows(5).any(|w| w == b"hello"), "{answer:?}");
        assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");
        assert_eq!(fetch(server.addr, &pair.cert, &[], "/hello.txt"), b"hello");
    }
}

/// Starts ioserve with `flags`, expects it to exit with an error within the settle
/// time, and returns what it wrote to stderr.
fn start_fails(root: &Path, flags: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ioserve"))
        .arg(root)
        .args(["--listen", "127.0.0.1:0", "--workers", "1"])
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + SETTLE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("ioserve {flags:?} did not exit within {SETTLE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success(), "{flags:?} started: {stderr}");
    assert!(!stderr.contains("panic"), "{stderr}");
    stderr
}

#[test]
fn a_bad_certificate_or_key_stops_the_start_naming_the_file() {
    let (dir, _) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &valid("ioserve test"));
    let other = certs.path().join("other-key.pem");
    std::fs::write(&other, valid("other").1).unwrap();
    let garbage = certs.path().join("garbage.pem");
    std::fs::write(&garbage, "this is not a certificate\n").unwrap();
    let missing = certs.path().join("missing.pem");
    let path = |path: &Path| path.to_str().unwrap().to_string();
    let cases = [
        (path(&missing), path(&pair.key), path(&missing)),
        (path(&pair.cert), path(&missing), path(&missing)),
        (path(&garbage), path(&pair.key), path(&garbage)),
        (path(&pair.cert), path(&garbage), path(&garbage)),
        (path(&pair.cert), path(&other), path(&other)),
    ];
    for (cert, key, named) in cases {
        let stderr = start_fails(dir.path(), &["--tls-cert", &cert, "--tls-key", &key]);
        assert!(stderr.contains(&named), "{cert} {key}: {stderr}");
    }
    let stderr = start_fails(dir.path(), &["--tls-cert", &path(&pair.cert)]);
    assert!(stderr.contains("--tls-key"), "{stderr}");
}

#[test]
fn an_expired_certificate_is_a_warning_with_its_dates_and_serves() {
    let (dir, _) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &certificate("expired", (2000, 2001)));
    let server = Server::start_with("read", dir.path(), &pair.flags(), true);
    let log = server.wait_for_log("not valid now");
    assert!(log.contains("2000") && log.contains("2001"), "{log}");
    // curl refuses it, as a client should; told to go on, it gets the file.
    let refused = curl(server.addr, &pair.cert, &[], &["/hello.txt"]);
    assert!(!refused.status.success());
    assert_eq!(
        fetch(server.addr, &pair.cert, &["--insecure"], "/hello.txt"),
        b"hello"
    );
}

#[test]
fn sighup_loads_a_new_certificate_and_downloads_in_flight_complete() {
    let (dir, data) = tree();
    let certs = tempfile::tempdir().unwrap();
    let first = valid("first");
    let second = valid("second");
    // The CA file trusts both, so that the in-flight download and new connections
    // verify whichever they were given.
    let ca = certs.path().join("ca.pem");
    std::fs::write(&ca, format!("{}{}", first.0, second.0)).unwrap();
    for strategy in STRATEGIES {
        let pair = Pair::write(certs.path(), &first);
        let server = Server::start_with(strategy, dir.path(), &pair.flags(), true);
        assert_eq!(served_name(server.addr, &ca), "first");
        // A download paced by the client, so that it is in flight across the reload.
        let port = server.addr.port();
        let download = Command::new(testdata::require("curl", "curl"))
            .args([
                "--silent",
                "--show-error",
                "--max-time",
                "120",
                "--limit-rate",
                "1M",
            ])
            .arg("--cacert")
            .arg(&ca)
            .args(["--resolve", &format!("localhost:{port}:127.0.0.1")])
            .arg(format!("https://localhost:{port}/big.bin"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Its first bytes have come: it is in flight on the first certificate.
        let mut download = download;
        let mut received = download.stdout.take().unwrap();
        let mut body = vec![0; 64 << 10];
        received.read_exact(&mut body).unwrap();
        Pair::write(certs.path(), &second);
        server.signal("HUP");
        wait_until(
            "new connections to see the new certificate",
            || served_name(server.addr, &ca),
            |name| name == "second",
        );
        // A bad pair is refused, logged, and the one in force stays.
        std::fs::write(&pair.key, "garbage\n").unwrap();
        server.signal("HUP");
        let log = server.wait_for_log("cannot apply the configuration");
        assert!(log.contains("key.pem"), "{log}");
        assert_eq!(served_name(server.addr, &ca), "second");
        received.read_to_end(&mut body).unwrap();
        let finished = download.wait_with_output().unwrap();
        assert!(
            finished.status.success(),
            "{strategy}: {}",
            String::from_utf8_lossy(&finished.stderr)
        );
        assert!(body == data, "{strategy}: the download in flight differs");
    }
}

#[test]
fn socket_activation_serves_https() {
    let activate = testdata::require("systemd-socket-activate", "systemd");
    let (dir, _) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &valid("activated"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut child = Command::new(activate)
        .args(["-l", &addr.to_string()])
        .arg(env!("CARGO_BIN_EXE_ioserve"))
        .arg(dir.path())
        .args(["--access-log", "off", "--workers", "2"])
        .args(pair.flags())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(
        "systemd-socket-activate to listen",
        || TcpStream::connect(addr).is_ok(),
        |&connected| connected,
    );
    assert_eq!(fetch(addr, &pair.cert, &[], "/hello.txt"), b"hello");
    assert_eq!(served_name(addr, &pair.cert), "activated");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(child.wait().unwrap().success());
}

#[test]
fn redirect_http_answers_308_to_the_https_url() {
    let (dir, data) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &valid("ioserve test"));
    for strategy in STRATEGIES {
        let mut flags = pair.flags();
        flags.extend(["--redirect-http", "127.0.0.1:0"]);
        let server = Server::start(strategy, dir.path(), &flags);
        let redirect = server.redirect.unwrap();
        let https = server.addr.port();
        let ask = |host: &str, target: &str| {
            let request = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n");
            crate::support::raw(redirect, request.as_bytes())
        };
        let response = ask(&format!("localhost:{}", redirect.port()), "/big.bin?x=1&y");
        assert_eq!(response.status, 308, "{strategy}");
        let expected = format!("https://localhost:{https}/big.bin?x=1&y");
        assert_eq!(response.header("location"), Some(expected.as_str()));
        assert_eq!(response.header("strict-transport-security"), None);
        let response = ask("[::1]", "/");
        let expected = format!("https://[::1]:{https}/");
        assert_eq!(response.header("location"), Some(expected.as_str()));
        // No usable Host: 400, never a redirect to a made-up name.
        assert_eq!(ask("evil.example/x", "/").status, 400);
        let response = crate::support::raw(redirect, b"GET / HTTP/1.0\r\nUser-Agent: test\r\n\r\n");
        assert_eq!(response.status, 400);
        // curl follows it to the file over HTTPS.
        let output = Command::new(testdata::require("curl", "curl"))
            .args(["--silent", "--show-error", "--max-time", "60", "--location"])
            .arg("--cacert")
            .arg(&pair.cert)
            .args([
                "--resolve",
                &format!("localhost:{}:127.0.0.1", redirect.port()),
            ])
            .args(["--resolve", &format!("localhost:{https}:127.0.0.1")])
            .arg(format!("http://localhost:{}/big.bin", redirect.port()))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            output.stdout == data,
            "{strategy}: the redirected download differs"
        );
    }
}

#[test]
fn redirect_http_without_tls_stops_the_start() {
    let (dir, _) = tree();
    let stderr = start_fails(dir.path(), &["--redirect-http", "127.0.0.1:0"]);
    assert!(
        stderr.contains("--redirect-http needs TLS, --tls-cert and --tls-key or --acme-domain"),
        "{stderr}"
    );
}

#[test]
fn tar_pacing_and_the_access_log_work_over_https_under_every_strategy() {
    let (dir, data) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &valid("ioserve test"));
    for strategy in STRATEGIES {
        let mut flags = pair.flags();
        flags.extend(["--limit-rate", "1m"]);
        let server = Server::start_with(strategy, dir.path(), &flags, true);
        let started = Instant::now();
        let archive = fetch(server.addr, &pair.cert, &[], "/?download=tar");
        let elapsed = started.elapsed();
        // More than 3 MiB at 1 MiB/s: paced, whatever burst the bucket allows first.
        assert!(
            elapsed >= Duration::from_millis(1500),
            "{strategy}: {elapsed:?}"
        );
        let mut files = std::collections::BTreeMap::new();
        for entry in tar::Archive::new(&archive[..]).entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).unwrap();
            files.insert(path, bytes);
        }
        assert!(
            files.values().any(|bytes| *bytes == data),
            "{strategy}: {:?}",
            files.keys()
        );
        assert!(files.values().any(|bytes| bytes == b"hello"), "{strategy}");
        let log = server.wait_for_log("\"GET /?download=tar HTTP/1.1\" 200 ");
        let bytes = archive.len().to_string();
        assert!(
            log.lines()
                .any(|line| line.contains("download=tar") && line.contains(&bytes)),
            "{strategy}: {log}"
        );
    }
}

#[test]
fn tls_1_2_and_1_3_are_served_and_older_versions_refused() {
    let (dir, _) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &valid("ioserve test"));
    let server = Server::start("sendfile", dir.path(), &pair.flags());
    for (version, args) in [
        ("TLSv1.2", ["--tlsv1.2", "--tls-max", "1.2"]),
        ("TLSv1.3", ["--tlsv1.3", "--tls-max", "1.3"]),
    ] {
        let output = curl(
            server.addr,
            &pair.cert,
            &[&args[..], &["--verbose"]].concat(),
            &["/hello.txt"],
        );
        let log = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{version}: {log}");
        assert!(
            log.contains(&format!("SSL connection using {version}")),
            "{log}"
        );
        assert_eq!(output.stdout, b"hello");
    }
    // The client offers TLS 1.1 only (its security level lowered so that it does): the
    // server answers with an alert.
    let old = curl(
        server.addr,
        &pair.cert,
        &[
            "--tlsv1.1",
            "--tls-max",
            "1.1",
            "--ciphers",
            "DEFAULT:@SECLEVEL=0",
        ],
        &["/hello.txt"],
    );
    let log = String::from_utf8_lossy(&old.stderr);
    assert!(!old.status.success(), "TLS 1.1 was accepted");
    assert!(log.contains("alert"), "the server sent no alert: {log}");
}

#[test]
fn tls_handshakes_are_counted_by_version_and_cipher_and_failures_by_reason() {
    let (dir, _) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &valid("ioserve test"));
    let mut flags = pair.flags();
    flags.extend(["--metrics-listen", "127.0.0.1:0", "--header-timeout", "1s"]);
    let server = Server::start("sendfile", dir.path(), &flags);
    // One connection over TLS 1.3 and one forced to TLS 1.2, each with a chosen suite
    // (the certificate's key is ECDSA).
    for args in [
        [
            "--tlsv1.3",
            "--tls-max",
            "1.3",
            "--tls13-ciphers",
            "TLS_AES_128_GCM_SHA256",
        ],
        [
            "--tlsv1.2",
            "--tls-max",
            "1.2",
            "--ciphers",
            "ECDHE-ECDSA-AES256-GCM-SHA384",
        ],
    ] {
        assert_eq!(
            fetch(server.addr, &pair.cert, &args, "/hello.txt"),
            b"hello"
        );
    }
    for (labels, count) in [
        ("version=\"TLSv1_3\",cipher=\"TLS13_AES_128_GCM_SHA256\"", 1),
        (
            "version=\"TLSv1_2\",cipher=\"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384\"",
            1,
        ),
        ("version=\"TLSv1_3\",cipher=\"TLS13_AES_256_GCM_SHA384\"", 0),
    ] {
        let name = format!("ioserve_tls_connections_total{{mode=\"userspace\",{labels}}}");
        wait_for_metric(&server, &name, |n| n == count);
    }
    // Plain HTTP to the HTTPS port.
    let mut plain = TcpStream::connect(server.addr).unwrap();
    plain.set_read_timeout(Some(SETTLE)).unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let _ = plain.read_to_end(&mut Vec::new());
    let failures =
        |reason: &str| format!("ioserve_tls_handshake_failures_total{{reason=\"{reason}\"}}");
    wait_for_metric(&server, &failures("not_tls"), |n| n == 1);
    // A client that offers TLS 1.1 only.
    let old = curl(
        server.addr,
        &pair.cert,
        &[
            "--tlsv1.1",
            "--tls-max",
            "1.1",
            "--ciphers",
            "DEFAULT:@SECLEVEL=0",
        ],
        &["/hello.txt"],
    );
    assert!(!old.status.success(), "TLS 1.1 was accepted");
    wait_for_metric(&server, &failures("protocol_version"), |n| n == 1);
    // A client that connects and sends nothing: cut at the header timeout.
    let silent = TcpStream::connect(server.addr).unwrap();
    wait_for_metric(&server, &failures("timeout"), |n| n == 1);
    drop(silent);
    let text = scrape(server.metrics.unwrap());
    for reason in ["no_shared_cipher", "bad_certificate", "closed", "other"] {
        assert!(
            text.contains(&format!("{} 0\n", failures(reason))),
            "{reason}: {text}"
        );
    }
    assert!(!text.contains("ktls"), "{text}");
    testdata::assert_promtool_accepts(&text);
}

#[test]
fn a_second_connection_resumes_the_session_under_tls_1_2_and_1_3() {
    let (dir, _) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &valid("ioserve test"));
    let server = Server::start("read", dir.path(), &pair.flags());
    for version in ["1.2", "1.3"] {
        // Two requests, each on a connection of its own (Connection: close).
        let output = curl(
            server.addr,
            &pair.cert,
            &[
                "--verbose",
                "--tls-max",
                version,
                "--header",
                "Connection: close",
            ],
            &["/hello.txt", "/hello.txt"],
        );
        let log = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{log}");
        assert_eq!(output.stdout, b"hellohello");
        let count = |needle: &str| log.matches(needle).count();
        assert_eq!(
            count("(IN), TLS handshake, Server hello"),
            2,
            "{version}: {log}"
        );
        // A resumed handshake sends no certificate.
        assert_eq!(
            count("(IN), TLS handshake, Certificate (11)"),
            1,
            "{version}: {log}"
        );
    }
}

/// A rustls client connection to `addr` (as `localhost`) that trusts the PEM
/// certificates in `ca`.
fn tls_client(
    addr: SocketAddr,
    ca: &str,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let config = crate::support::tls_client_config(ca);
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    rustls::StreamOwned::new(connection, crate::support::connect(addr))
}

#[test]
fn a_client_that_stops_reading_over_tls_is_cut_off_at_the_send_timeout() {
    let dir = tempfile::tempdir().unwrap();
    // More than loopback socket buffers and rustls's buffers hold together.
    const SIZE: usize = 48 << 20;
    std::fs::write(dir.path().join("huge.bin"), random_bytes(SIZE, 36)).unwrap();
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = valid("ioserve test");
    let pair = Pair::write(certs.path(), &(cert.clone(), key));
    for strategy in STRATEGIES {
        let mut flags = pair.flags();
        flags.extend(["--send-timeout", "1s", "--metrics-listen", "127.0.0.1:0"]);
        let server = Server::start(strategy, dir.path(), &flags);
        let mut client = tls_client(server.addr, &cert);
        client
            .write_all(b"GET /huge.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        let mut first = vec![0; 64 << 10];
        client.read_exact(&mut first).unwrap();
        assert!(first.starts_with(b"HTTP/1.1 200 OK\r\n"), "{strategy}");
        // It reads nothing more: the server gives up on it after the send timeout.
        crate::support::wait_for_no_connections(&server);
        let mut rest = Vec::new();
        let _ = client.read_to_end(&mut rest);
        assert!(
            first.len() + rest.len() < SIZE,
            "{strategy}: the whole body came"
        );
    }
}

#[test]
fn the_start_log_says_sendfile_and_mmap_read_the_file_under_tls() {
    let (dir, data) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &valid("ioserve test"));
    for strategy in ["sendfile", "mmap"] {
        let server = Server::start_with(strategy, dir.path(), &pair.flags(), true);
        server.wait_for_log(&format!(
            "TLS in user space: {strategy} serves through reads (kTLS not in use)"
        ));
        assert_eq!(fetch(server.addr, &pair.cert, &[], "/big.bin"), data);
    }
}

/// Whether this kernel has the `tls` upper layer protocol (kTLS): what `--ktls` asks.
fn kernel_has_tls() -> bool {
    use std::os::fd::AsRawFd as _;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let _accepted = listener.accept().unwrap();
    // SAFETY: the socket is open for the call and the value is the 3 bytes of "tls".
    let result = unsafe {
        libc::setsockopt(
            client.as_raw_fd(),
            libc::SOL_TCP,
            libc::TCP_ULP,
            b"tls".as_ptr().cast(),
            3,
        )
    };
    result == 0
}

#[test]
fn ktls_on_refuses_to_start_where_the_kernel_has_no_tls_and_without_tls() {
    let (dir, data) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &valid("ioserve test"));
    let stderr = start_fails(dir.path(), &["--ktls", "on"]);
    assert!(
        stderr.contains("--ktls on needs TLS, --tls-cert and --tls-key or --acme-domain"),
        "{stderr}"
    );
    let mut flags = pair.flags();
    flags.extend(["--ktls", "on"]);
    if kernel_has_tls() {
        // Where the kernel has it, `on` starts and serves through it.
        let server = Server::start_with("sendfile", dir.path(), &flags, true);
        server.wait_for_log("kTLS: the kernel encrypts TLS records");
        assert_eq!(fetch(server.addr, &pair.cert, &[], "/big.bin"), data);
    } else {
        let stderr = start_fails(dir.path(), &flags);
        assert!(
            stderr.contains("--ktls on, but kTLS cannot be had here") && stderr.contains("TCP_ULP"),
            "{stderr}"
        );
    }
}

#[test]
fn ktls_auto_says_once_why_it_is_not_used_and_serves_in_user_space() {
    let (dir, data) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &valid("ioserve test"));
    let mut flags = pair.flags();
    flags.extend(["--metrics-listen", "127.0.0.1:0"]);
    let mut server = Server::start_with("sendfile", dir.path(), &flags, true);
    for args in [&["--tlsv1.3"][..], &["--tls-max", "1.2"][..]] {
        assert_eq!(fetch(server.addr, &pair.cert, args, "/big.bin"), data);
    }
    let has_tls = kernel_has_tls();
    let mode = if has_tls { "ktls" } else { "userspace" };
    let connections = scrape(server.metrics.unwrap())
        .lines()
        .filter(|line| line.starts_with(&format!("ioserve_tls_connections_total{{mode=\"{mode}\"")))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum::<u64>();
    assert_eq!(connections, 2, "{mode}");
    let log = server.stop_and_read_log();
    if has_tls {
        assert_eq!(log.matches("kTLS: the kernel encrypts").count(), 1, "{log}");
    } else {
        assert_eq!(log.matches("kTLS not available").count(), 1, "{log}");
        assert!(log.contains("TCP_ULP"), "{log}");
        assert!(log.contains("(kTLS not in use)"), "{log}");
    }
}

#[test]
fn ktls_off_never_asks_the_kernel() {
    let (dir, data) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &valid("ioserve test"));
    let mut flags = pair.flags();
    flags.extend(["--ktls", "off"]);
    let mut server = Server::start_with("sendfile", dir.path(), &flags, true);
    assert_eq!(fetch(server.addr, &pair.cert, &[], "/big.bin"), data);
    let log = server.stop_and_read_log();
    assert!(log.contains("(kTLS not in use)"), "{log}");
    assert!(
        !log.contains("kTLS not available") && !log.contains("kTLS: the kernel"),
        "{log}"
    );
}

/// What `openssl s_client` printed (stdout, then stderr) and whether it succeeded.
struct SClient {
    success: bool,
    log: String,
}

impl SClient {
    /// The protocol of the handshake, from `New, TLSv1.3, Cipher is ...`: `(NONE)` when
    /// none completed.
    fn protocol(&self) -> Option<&str> {
        self.log
            .lines()
            .find_map(|line| line.strip_prefix("New, "))
            .and_then(|rest| rest.split(',').next())
    }

    /// The protocol chosen by ALPN, from `ALPN protocol: h2`.
    fn alpn(&self) -> Option<&str> {
        self.log
            .lines()
            .find_map(|line| line.strip_prefix("ALPN protocol: "))
            .map(str::trim)
    }
}

/// Runs `openssl s_client` against `addr` (as `localhost`), trusting `ca`, with `args`;
/// its stdin is empty, so that it closes once the handshake is done. At most a minute.
fn s_client(addr: SocketAddr, ca: &Path, args: &[&str]) -> SClient {
    let openssl = testdata::require("openssl", "openssl");
    let mut child = Command::new(openssl)
        .args(["s_client", "-connect", &addr.to_string()])
        .args([
            "-servername",
            "localhost",
            "-verify_return_error",
            "-CAfile",
        ])
        .arg(ca)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Both pipes are drained while it runs, so that a full pipe cannot stall it; the
    // bytes are kept whole, for stdout also carries what the server sent (an HTTP/2
    // SETTINGS frame after ALPN h2), which is not text.
    fn drain(mut pipe: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    }
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("openssl s_client {args:?} did not finish within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    SClient {
        success: status.success(),
        log: out.join().unwrap() + &err.join().unwrap(),
    }
}

#[test]
fn openssl_s_client_is_refused_tls_1_1_and_gets_1_2_1_3_the_server_order_and_alpn() {
    let (dir, _) = tree();
    let certs = tempfile::tempdir().unwrap();
    let pair = Pair::write(certs.path(), &valid("ioserve test"));
    let server = Server::start("sendfile", dir.path(), &pair.flags());
    // Debian's OpenSSL 3 offers TLS 1.1 only at security level 0: the refusal is then
    // the server's, a handshake_failure alert, and no handshake completes.
    let old = s_client(
        server.addr,
        &pair.cert,
        &["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"],
    );
    assert!(!old.success, "TLS 1.1 was accepted: {}", old.log);
    assert!(old.log.contains("alert handshake failure"), "{}", old.log);
    assert_eq!(old.protocol(), Some("(NONE)"), "{}", old.log);
    for (flag, protocol) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
        let session = s_client(server.addr, &pair.cert, &[flag]);
        assert!(session.success, "{flag}: {}", session.log);
        assert_eq!(session.protocol(), Some(protocol), "{}", session.log);
        assert!(
            session.log.contains("Verify return code: 0 (ok)"),
            "{}",
            session.log
        );
    }
    // The server's cipher order, not the client's: AES-256-GCM though offered last.
    for (args, cipher) in [
        (
            [
                "-tls1_3",
                "-ciphersuites",
                "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384",
            ],
            "TLS_AES_256_GCM_SHA384",
        ),
        (
            [
                "-tls1_2",
                "-cipher",
                "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384",
            ],
            "ECDHE-ECDSA-AES256-GCM-SHA384",
        ),
    ] {
        let session = s_client(server.addr, &pair.cert, &args);
        assert!(session.success, "{args:?}: {}", session.log);
        assert!(
            session.log.contains(&format!("Cipher is {cipher}")),
            "{args:?}: {}",
            session.log
        );
    }
    for (offered, chosen) in [("h2,http/1.1", "h2"), ("http/1.1", "http/1.1")] {
        let session = s_client(server.addr, &pair.cert, &["-alpn", offered]);
        assert!(session.success, "{offered}: {}", session.log);
        assert_eq!(session.alpn(), Some(chosen), "{offered}: {}", session.log);
    }
}
