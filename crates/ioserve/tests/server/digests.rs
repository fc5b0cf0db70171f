//! RFC 9530 digests (`--digests`, on by default) under every strategy, with curl, wget
//! and aria2c as the clients and coreutils' `sha256sum`, `sha512sum` and `base64` as
//! the reference: Repr-Digest on 200, 206 and HEAD, Content-Digest on a whole 200,
//! preferences, a precompressed representation, a changed file, persistence across a
//! restart in extended attributes.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::support::*;

/// Large enough that hashing it is not instant (the first answers go without).
const LEN: usize = 3 << 20;

/// A served tree with `big.bin` (random bytes from `seed`).
fn fixture(seed: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.bin"), random_bytes(LEN, seed)).unwrap();
    dir
}

/// `KEY=:BASE64:` of `file` by `program` (`sha256sum` or `sha512sum`), the hex turned
/// into bytes and encoded by coreutils' `base64`.
fn expected(program: &str, key: &str, file: &Path) -> String {
    let out = run(Command::new(program).arg(file));
    let text = String::from_utf8(out.stdout).unwrap();
    let hex = text.split_whitespace().next().unwrap();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let mut base64 = Command::new("base64")
        .arg("-w0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    base64.stdin.take().unwrap().write_all(&bytes).unwrap();
    let encoded = base64.wait_with_output().unwrap();
    assert!(encoded.status.success());
    format!("{key}=:{}:", String::from_utf8(encoded.stdout).unwrap())
}

fn hex_of(program: &str, file: &Path) -> String {
    let out = run(Command::new(program).arg(file));
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

fn run(command: &mut Command) -> Output {
    let out = command.output().unwrap();
    assert!(out.status.success(), "{command:?}: {out:?}");
    out
}

/// The value of `name` in a head printed by curl `-D -` or wget `-S`.
fn field(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|line| {
        let (n, v) = line.trim().split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

/// curl's head for `url` with `args`, the body discarded.
fn curl_head(url: &str, args: &[&str]) -> String {
    let curl = testdata::require("curl", "curl");
    let out = run(Command::new(curl)
        .args(["-sS", "-D", "-", "-o", "/dev/null"])
        .args(args)
        .arg(url));
    String::from_utf8(out.stdout).unwrap()
}

/// Asks until the server has the digest of `path` ready (the first answers may go
/// without it) and returns it; fails with the last response.
fn wait_for_repr_digest(server: &Server, path: &str, want: &str) -> String {
    let response = wait_until(
        &format!("Repr-Digest of {path} for {want}"),
        || server.get(path, &[("Want-Repr-Digest", want)]),
        |response| response.header("Repr-Digest").is_some(),
    );
    response.header("Repr-Digest").unwrap().to_string()
}

#[test]
fn curl_gets_repr_digest_equal_to_sha256sum_and_sha512sum_on_200_206_and_head() {
    let dir = fixture(1);
    let file = dir.path().join("big.bin");
    let sha256 = expected("sha256sum", "sha-256", &file);
    let sha512 = expected("sha512sum", "sha-512", &file);
    for strategy in STRATEGIES {
        let server = Server::start(strategy, dir.path(), &[]);
        let url = format!("http://{}/big.bin", server.addr);
        let want = "Want-Repr-Digest: sha-256=10";
        let head = wait_until(
            &format!("{strategy}: curl sees Repr-Digest"),
            || curl_head(&url, &["-H", want]),
            |head| field(head, "Repr-Digest").is_some(),
        );
        assert!(head.starts_with("HTTP/1.1 200"), "{strategy}: {head}");
        assert_eq!(
            field(&head, "Repr-Digest"),
            Some(sha256.clone()),
            "{strategy}"
        );
        assert_eq!(
            field(&head, "Content-Digest"),
            None,
            "{strategy}: not asked"
        );
        let range = curl_head(&url, &["-H", want, "-r", "1000-1999"]);
        assert!(range.starts_with("HTTP/1.1 206"), "{strategy}: {range}");
        assert_eq!(
            field(&range, "Repr-Digest"),
            Some(sha256.clone()),
            "{strategy}"
        );
        let multipart = curl_head(&url, &["-H", want, "-r", "0-9,100-199"]);
        assert!(
            multipart.starts_with("HTTP/1.1 206"),
            "{strategy}: {multipart}"
        );
        assert_eq!(field(&multipart, "Repr-Digest"), Some(sha256.clone()));
        let head_only = curl_head(&url, &["-H", want, "-I"]);
        assert_eq!(field(&head_only, "Repr-Digest"), Some(sha256.clone()));
        let sha512_head = curl_head(&url, &["-H", "Want-Repr-Digest: sha-256=2, sha-512=9"]);
        assert_eq!(field(&sha512_head, "Repr-Digest"), Some(sha512.clone()));
        // Content-Digest: the content is the whole file only in a 200 to a GET.
        let whole = curl_head(&url, &["-H", "Want-Content-Digest: sha-512=1"]);
        assert_eq!(field(&whole, "Content-Digest"), Some(sha512.clone()));
        assert_eq!(field(&whole, "Repr-Digest"), None, "{strategy}: not asked");
        let part = curl_head(&url, &["-H", "Want-Content-Digest: sha-256=1", "-r", "0-9"]);
        assert_eq!(field(&part, "Content-Digest"), None, "{strategy}: {part}");
        let head_content = curl_head(&url, &["-H", "Want-Content-Digest: sha-256=1", "-I"]);
        assert_eq!(field(&head_content, "Content-Digest"), None);
    }
}

#[test]
fn no_digest_is_sent_unasked_refused_or_unknown_or_with_digests_off() {
    let dir = fixture(2);
    let sha512 = expected("sha512sum", "sha-512", &dir.path().join("big.bin"));
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, dir.path(), &[]);
        wait_for_repr_digest(&server, "/big.bin", "sha-256=10");
        for want in [None, Some("sha-256=0"), Some("md5=10"), Some("sha-256")] {
            let headers: Vec<(&str, &str)> =
                want.map(|w| ("Want-Repr-Digest", w)).into_iter().collect();
            let response = server.get("/big.bin", &headers);
            assert_eq!(response.status, 200);
            assert_eq!(response.header("Repr-Digest"), None, "{strategy}: {want:?}");
        }
        let preferred = server.get("/big.bin", &[("Want-Repr-Digest", "sha-256=0, sha-512=1")]);
        assert_eq!(preferred.header("Repr-Digest"), Some(sha512.as_str()));
        drop(server);
        let off = Server::start(strategy, dir.path(), &["--digests=false"]);
        let response = get(off.addr, "/big.bin", &[("Want-Repr-Digest", "sha-256=10")]);
        assert_eq!(response.status, 200);
        assert_eq!(
            response.header("Repr-Digest"),
            None,
            "{strategy}: --digests=false"
        );
    }
}

#[test]
fn wget_sees_repr_digest_equal_to_sha256sum() {
    let dir = fixture(3);
    let file = dir.path().join("big.bin");
    let sha256 = expected("sha256sum", "sha-256", &file);
    let wget = testdata::require("wget", "wget");
    for strategy in STRATEGIES {
        let server = Server::start(strategy, dir.path(), &[]);
        let url = format!("http://{}/big.bin", server.addr);
        let saved = dir.path().join(format!("wget-{strategy}"));
        let head = wait_until(
            &format!("{strategy}: wget sees Repr-Digest"),
            || {
                let out = run(Command::new(&wget)
                    .args(["-q", "-S", "--header", "Want-Repr-Digest: sha-256=10", "-O"])
                    .arg(&saved)
                    .arg(&url));
                String::from_utf8(out.stderr).unwrap()
            },
            |head| field(head, "Repr-Digest").is_some(),
        );
        assert_eq!(
            field(&head, "Repr-Digest"),
            Some(sha256.clone()),
            "{strategy}"
        );
        assert_eq!(expected("sha256sum", "sha-256", &saved), sha256);
    }
}

#[test]
fn aria2c_checks_the_download_against_the_digest() {
    let dir = fixture(4);
    let file = dir.path().join("big.bin");
    let sha256 = expected("sha256sum", "sha-256", &file);
    let hex = hex_of("sha256sum", &file);
    let aria2c = testdata::require("aria2c", "aria2");
    for strategy in STRATEGIES {
        let server = Server::start(strategy, dir.path(), &[]);
        wait_for_repr_digest(&server, "/big.bin", "sha-256=10");
        let url = format!("http://{}/big.bin", server.addr);
        let out_dir = tempfile::tempdir().unwrap();
        let log = out_dir.path().join("aria2c.log");
        let aria2 = |checksum: &str, name: &str| {
            Command::new(&aria2c)
                .args([
                    "-q",
                    "-x4",
                    "-s4",
                    "--min-split-size=1M",
                    "--allow-overwrite=true",
                ])
                .args(["--header=Want-Repr-Digest: sha-256=10", "--log-level=debug"])
                .arg(format!("--log={}", log.display()))
                .arg(format!("--checksum=sha-256={checksum}"))
                .arg("-d")
                .arg(out_dir.path())
                .args(["-o", name])
                .arg(&url)
                .output()
                .unwrap()
        };
        let good = aria2(&hex, "good");
        assert!(good.status.success(), "{strategy}: {good:?}");
        let seen = std::fs::read_to_string(&log).unwrap();
        let sent = seen
            .lines()
            .find_map(|line| field(line, "Repr-Digest"))
            .unwrap_or_else(|| panic!("{strategy}: no Repr-Digest in aria2c's log"));
        assert_eq!(sent, sha256, "{strategy}");
        let wrong = format!(
            "{}{}",
            if hex.starts_with('0') { "1" } else { "0" },
            &hex[1..]
        );
        let bad = aria2(&wrong, "bad");
        assert!(!bad.status.success(), "{strategy}: a wrong checksum passed");
    }
}

#[test]
fn a_modified_file_gets_the_digest_of_its_new_content() {
    for strategy in STRATEGIES {
        let dir = fixture(5);
        let file = dir.path().join("big.bin");
        let server = Server::start(strategy, dir.path(), &[]);
        let before = wait_for_repr_digest(&server, "/big.bin", "sha-256=10");
        assert_eq!(before, expected("sha256sum", "sha-256", &file));
        std::fs::write(&file, random_bytes(LEN + 1, 6)).unwrap();
        let after = expected("sha256sum", "sha-256", &file);
        assert_ne!(before, after);
        wait_until(
            &format!("{strategy}: the new digest"),
            || {
                get(
                    server.addr,
                    "/big.bin",
                    &[("Want-Repr-Digest", "sha-256=10")],
                )
            },
            |response| response.header("Repr-Digest") == Some(after.as_str()),
        );
    }
}

/// Whether the filesystem under `dir` keeps user extended attributes.
fn keeps_user_xattrs(dir: &Path) -> bool {
    let probe = dir.join("xattr-probe");
    std::fs::write(&probe, b"").unwrap();
    let kept = rustix::fs::setxattr(
        &probe,
        "user.ioserve.probe",
        b"1",
        rustix::fs::XattrFlags::empty(),
    )
    .is_ok();
    std::fs::remove_file(probe).unwrap();
    kept
}

#[test]
fn the_digest_survives_a_restart_through_extended_attributes() {
    for strategy in STRATEGIES {
        let dir = fixture(7);
        if !keeps_user_xattrs(dir.path()) {
            eprintln!(
                "skipped: {} refuses user extended attributes",
                dir.path().display()
            );
            return;
        }
        let sha256 = expected("sha256sum", "sha-256", &dir.path().join("big.bin"));
        let server = Server::start(strategy, dir.path(), &[]);
        assert_eq!(
            wait_for_repr_digest(&server, "/big.bin", "sha-256=10"),
            sha256
        );
        drop(server);
        // A fresh process: only the xattr can give the digest to its first answer.
        let restarted = Server::start(strategy, dir.path(), &[]);
        let first = get(
            restarted.addr,
            "/big.bin",
            &[("Want-Repr-Digest", "sha-256=10")],
        );
        assert_eq!(
            first.header("Repr-Digest"),
            Some(sha256.as_str()),
            "{strategy}"
        );
    }
}

#[test]
fn a_precompressed_reply_carries_the_digest_of_the_encoded_file() {
    let dir = fixture(8);
    let status = Command::new("gzip")
        .current_dir(dir.path())
        .args(["-k", "-1", "big.bin"])
        .status()
        .unwrap();
    assert!(status.success(), "gzip");
    let encoded = expected("sha256sum", "sha-256", &dir.path().join("big.bin.gz"));
    let plain = expected("sha256sum", "sha-256", &dir.path().join("big.bin"));
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, dir.path(), &["--precompressed"]);
        let want = [
            ("Want-Repr-Digest", "sha-256=10"),
            ("Accept-Encoding", "gzip"),
        ];
        let response = wait_until(
            &format!("{strategy}: Repr-Digest of the gzip representation"),
            || server.get("/big.bin", &want),
            |response| response.header("Repr-Digest").is_some(),
        );
        assert_eq!(response.header("Content-Encoding"), Some("gzip"));
        assert_eq!(
            response.header("Repr-Digest"),
            Some(encoded.as_str()),
            "{strategy}"
        );
        let identity = wait_until(
            &format!("{strategy}: Repr-Digest of the unencoded representation"),
            || server.get("/big.bin", &want[..1]),
            |response| response.header("Repr-Digest").is_some(),
        );
        assert_eq!(
            identity.header("Repr-Digest"),
            Some(plain.as_str()),
            "{strategy}"
        );
    }
}
