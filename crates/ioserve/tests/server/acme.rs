//! ACME's settings as an operator meets them without a CA: `--check-config` reporting
//! them and the state directory, the refusals at start, and a server whose CA cannot
//! be reached going on serving (its plain listener redirecting, HTTP-01 paths nobody
//! published included). The conversation with a real CA, and the handshakes waiting
//! for a first certificate, are `cargo xtask acme`'s (pebble).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::support::*;

/// `ioserve ROOT --check-config ARGS...`, run to its end.
fn check_config(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ioserve"))
        .arg(root)
        .arg("--check-config")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A certificate and key bundle for `name`, as the state directory keeps them.
fn bundle(name: &str, days: i64) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(days);
    let cert = params.self_signed(&key).unwrap();
    format!("{}{}", key.serialize_pem(), cert.pem())
}

#[test]
fn check_config_reports_the_acme_settings_and_the_state() {
    let root = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().join("acme");
    let args = [
        "--acme-domain",
        "Downloads.Example.org",
        "--acme-domain",
        "www.example.org",
        "--acme-email",
        "admin@example.org",
        "--acme-state",
        state_dir.to_str().unwrap(),
        "--acme-profile",
        "shortlived",
    ];
    let output = check_config(root.path(), &args);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    for line in [
        "listen      https://127.0.0.1:8080/",
        "acme        downloads.example.org, www.example.org",
        "  ca        https://acme-v02.api.letsencrypt.org/directory",
        "  challenge tls-alpn-01",
        "  profile   shortlived",
        "  contact   admin@example.org",
        "(made at start)",
        "  account   none yet: made at the first order",
        "  cert      none yet: ordered at start",
        "ioserve: the configuration is valid",
    ] {
        assert!(stdout.contains(line), "{line:?} missing from:\n{stdout}");
    }
    // A check binds, makes and orders nothing.
    assert!(!state_dir.exists());

    // A stored certificate is read: its expiry and when it is renewed.
    let certificates = state_dir.join("acme-v02.api.letsencrypt.org-directory/certificates");
    let stored = certificates.join("downloads.example.org");
    std::fs::create_dir_all(&stored).unwrap();
    std::fs::write(
        stored.join("certificate-and-key.pem"),
        bundle("downloads.example.org", 89),
    )
    .unwrap();
    let stdout = text(&check_config(root.path(), &args).stdout);
    assert!(
        stdout.contains("(writable)") && stdout.contains("not every name"),
        "{stdout}"
    );
    let one_name = [
        "--acme-domain",
        "downloads.example.org",
        "--acme-state",
        state_dir.to_str().unwrap(),
    ];
    let stdout = text(&check_config(root.path(), &one_name).stdout);
    assert!(
        stdout.contains("  cert      valid until") && stdout.contains("renewed in the CA's window"),
        "{stdout}"
    );
}

#[test]
fn check_config_and_the_start_refuse_what_cannot_work() {
    let root = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("a-file");
    std::fs::write(&file, "not a directory\n").unwrap();
    let under_file = file.join("acme");
    let bad_root = scratch.path().join("root.pem");
    std::fs::write(&bad_root, "not pem\n").unwrap();
    let cases: [(Vec<&str>, &str); 6] = [
        (
            vec![
                "--acme-domain",
                "a.test",
                "--acme-state",
                under_file.to_str().unwrap(),
            ],
            "a-file is not a directory",
        ),
        (
            vec![
                "--acme-domain",
                "a.test",
                "--acme-ca-root",
                bad_root.to_str().unwrap(),
            ],
            "root.pem holds no usable certificate",
        ),
        (
            vec!["--acme-domain", "*.a.test"],
            "invalid --acme-domain \"*.a.test\": allowed: a wildcard needs the DNS-01 challenge",
        ),
        (
            vec![
                "--acme-domain",
                "a.test",
                "--tls-cert",
                "c.pem",
                "--tls-key",
                "k.pem",
            ],
            "invalid --acme-domain a.test: not with --tls-cert or --tls-key",
        ),
        (
            vec!["--acme-domain", "a.test", "--acme-challenge", "http-01"],
            "invalid --acme-challenge http-01: needs --redirect-http ADDR",
        ),
        (
            vec!["--acme-domain", "a.test", "--acme-ca", "http://ca.test/dir"],
            "invalid --acme-ca \"http://ca.test/dir\": allowed: an https:// URL",
        ),
    ];
    for (args, expected) in cases {
        let output = check_config(root.path(), &args);
        let stderr = text(&output.stderr);
        assert!(!output.status.success(), "{args:?} passed");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // The same at start: an unusable --acme-ca-root stops it with the file's name.
    let output = Command::new(env!("CARGO_BIN_EXE_ioserve"))
        .arg(root.path())
        .args(["--listen", "127.0.0.1:0", "--acme-domain", "a.test"])
        .args(["--acme-ca-root", bad_root.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("--acme-domain: --acme-ca-root"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn with_the_ca_unreachable_the_plain_listener_still_redirects() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("a.txt"), "a\n").unwrap();
    let state = tempfile::tempdir().unwrap();
    // Nothing listens on port 1: every order fails, and the server goes on.
    let mut server = Server::start_with(
        "sendfile",
        root.path(),
        &[
            "--acme-domain",
            "a.test",
            "--acme-ca",
            "https://127.0.0.1:1/dir",
            "--acme-state",
            state.path().to_str().unwrap(),
            "--redirect-http",
            "127.0.0.1:0",
            "--header-timeout",
            "1s",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        true,
    );
    let redirect = server.redirect.unwrap();
    let mut stream = std::net::TcpStream::connect(redirect).unwrap();
    std::io::Write::write_all(&mut stream, b"GET /a.txt HTTP/1.1\r\nHost: a.test\r\n\r\n").unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut stream, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 308"), "{answer}");
    // An HTTP-01 path nobody published redirects too.
    let mut stream = std::net::TcpStream::connect(redirect).unwrap();
    std::io::Write::write_all(
        &mut stream,
        b"GET /.well-known/acme-challenge/unknown HTTP/1.1\r\nHost: a.test\r\n\r\n",
    )
    .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut stream, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 308"), "{answer}");
    let failed = server.wait_for_log("acme: order failed");
    assert!(failed.contains("https://127.0.0.1:1/dir"), "{failed}");
    // The failure is counted; no certificate has an expiry yet; promtool accepts both.
    let metrics = server.metrics.unwrap();
    wait_for_metric(
        &server,
        "ioserve_acme_orders_total{result=\"failed\"}",
        |n| n >= 1,
    );
    let text = scrape(metrics);
    assert!(
        text.contains("ioserve_acme_orders_total{result=\"issued\"} 0")
            && !text.contains("ioserve_tls_certificate_expiry_timestamp_seconds{"),
        "{text}"
    );
    testdata::assert_promtool_accepts(&text);
    assert!(server.child.try_wait().unwrap().is_none(), "ioserve exited");
    let log = server.stop_and_read_log();
    assert!(!log.contains("panic"), "{log}");
}
