//! `--auth-file`: Basic authentication against htpasswd files made by Debian's
//! `htpasswd` (bcrypt, SHA-256 and SHA-512 crypt), with curl, wget and aria2c as the
//! clients, under every strategy: files and listings behind the check, 401 with the
//! challenge, weak files refused at start, the file re-read on SIGHUP, failures counted.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::support::*;

/// Users of the test file: name, password, `htpasswd` hash flag.
const USERS: [(&str, &str, &str); 3] = [
    ("alice", "open sesame", "-B"),
    ("bob", "hunter2", "-2"),
    ("carol", "pa:ss wörd", "-5"),
];

/// Runs a client or tool, failing the test when it cannot start.
fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (see SYSTEM_PACKAGES): {e}"))
}

/// Adds (or replaces) `user` in the htpasswd `file` with Debian's htpasswd and `flag`
/// (`-B` bcrypt, `-2` SHA-256, `-5` SHA-512, `-m` MD5, ...).
fn htpasswd(file: &Path, flag: &str, user: &str, password: &str) {
    let mut args = vec!["-b", flag];
    if !file.exists() {
        args.push("-c");
    }
    let file = file.to_str().unwrap();
    args.extend([file, user, password]);
    let output = run("htpasswd", &args);
    assert!(output.status.success(), "htpasswd {args:?}: {output:?}");
}

/// A served tree (`big.bin`, `dir/small.txt`) and an htpasswd file with [`USERS`].
fn fixture() -> (tempfile::TempDir, tempfile::TempDir, Vec<u8>) {
    let root = tempfile::tempdir().unwrap();
    let data = random_bytes(3 << 20, 37);
    std::fs::write(root.path().join("big.bin"), &data).unwrap();
    std::fs::create_dir(root.path().join("dir")).unwrap();
    std::fs::write(root.path().join("dir/small.txt"), b"small\n").unwrap();
    let secrets = tempfile::tempdir().unwrap();
    for (user, password, flag) in USERS {
        htpasswd(&secrets.path().join("htpasswd"), flag, user, password);
    }
    (root, secrets, data)
}

/// `Authorization: Basic` for `user:password`.
fn basic(user: &str, password: &str) -> String {
    let pair = format!("{user}:{password}");
    format!("Basic {}", ioserve_simd::base64::STANDARD.encode(pair))
}

fn assert_challenged(response: &Response, what: &str) {
    assert_eq!(response.status, 401, "{what}: {response:?}");
    assert_eq!(
        response.header("WWW-Authenticate"),
        Some("Basic realm=\"files\", charset=\"UTF-8\""),
        "{what}"
    );
}

#[test]
fn every_path_needs_the_right_credentials_under_every_strategy() {
    let (root, secrets, data) = fixture();
    let file = secrets.path().join("htpasswd");
    let text = std::fs::read_to_string(&file).unwrap();
    for (prefix, (user, _, _)) in ["$2y$", "$5$", "$6$"].iter().zip(USERS) {
        assert!(text.contains(&format!("{user}:{prefix}")), "{text}");
    }
    for strategy in STRATEGIES {
        let server = Server::start(
            strategy,
            root.path(),
            &[
                "--auth-file",
                file.to_str().unwrap(),
                "--auth-realm",
                "files",
            ],
        );
        let addr = server.addr;
        for path in ["/big.bin", "/dir/small.txt", "/dir/", "/", "/missing"] {
            assert_challenged(&get(addr, path, &[]), &format!("{strategy} {path}"));
            let head = raw(addr, request_bytes("HEAD", path, &[]).as_bytes());
            assert_challenged(&head, &format!("{strategy} HEAD {path}"));
            for (user, password) in [("alice", "open sesame "), ("mallory", "open sesame")] {
                let wrong = get(addr, path, &[("Authorization", &basic(user, password))]);
                assert_challenged(&wrong, &format!("{strategy} {path} {user}"));
            }
        }
        let body = get(addr, "/big.bin", &[]).body;
        assert_eq!(
            body, b"401 Unauthorized\n",
            "{strategy}: no detail in the body"
        );
        for (user, password, _) in USERS {
            let authorization = basic(user, password);
            let file = get(addr, "/big.bin", &[("Authorization", &authorization)]);
            assert!(file.status == 200 && file.body == data, "{strategy} {user}");
            let listing = get(addr, "/dir/", &[("Authorization", &authorization)]);
            let listed = String::from_utf8_lossy(&listing.body);
            assert!(
                listing.status == 200 && listed.contains("small.txt"),
                "{strategy} {user}: {listing:?}"
            );
        }

        let url = format!("http://{addr}/big.bin");
        let out = tempfile::tempdir().unwrap();
        let saved = out.path().join("big.bin");
        for (user, password, _) in USERS {
            let _ = std::fs::remove_file(&saved);
            let credentials = format!("{user}:{password}");
            let saved_arg = saved.to_str().unwrap();
            let curl = run("curl", &["-sSf", "-u", &credentials, "-o", saved_arg, &url]);
            assert!(curl.status.success(), "{strategy} curl {user}: {curl:?}");
            assert!(
                std::fs::read(&saved).unwrap() == data,
                "{strategy} curl {user}"
            );
            std::fs::remove_file(&saved).unwrap();
            let wget = run(
                "wget",
                &[
                    "-q",
                    "--user",
                    user,
                    "--password",
                    password,
                    "-O",
                    saved_arg,
                    &url,
                ],
            );
            assert!(wget.status.success(), "{strategy} wget {user}: {wget:?}");
            assert!(
                std::fs::read(&saved).unwrap() == data,
                "{strategy} wget {user}"
            );
            std::fs::remove_file(&saved).unwrap();
            let aria2c = run(
                "aria2c",
                &[
                    "-q",
                    "--http-user",
                    user,
                    "--http-passwd",
                    password,
                    "-d",
                    out.path().to_str().unwrap(),
                    "-o",
                    "big.bin",
                    &url,
                ],
            );
            assert!(
                aria2c.status.success(),
                "{strategy} aria2c {user}: {aria2c:?}"
            );
            assert!(
                std::fs::read(&saved).unwrap() == data,
                "{strategy} aria2c {user}"
            );
        }
        // The clients see the refusal of a wrong password.
        let _ = std::fs::remove_file(&saved);
        let curl = run(
            "curl",
            &[
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-u",
                "alice:wrong",
                &url,
            ],
        );
        assert_eq!(String::from_utf8_lossy(&curl.stdout), "401", "{strategy}");
        let saved_arg = saved.to_str().unwrap();
        let wget = run(
            "wget",
            &[
                "-q",
                "--user",
                "alice",
                "--password",
                "wrong",
                "-O",
                saved_arg,
                &url,
            ],
        );
        // wget's exit status 6: "Username/password authentication failure".
        assert_eq!(wget.status.code(), Some(6), "{strategy}: {wget:?}");
        let aria2c = run(
            "aria2c",
            &[
                "-q",
                "--http-user",
                "alice",
                "--http-passwd",
                "wrong",
                "-d",
                out.path().to_str().unwrap(),
                "-o",
                "refused.bin",
                &url,
            ],
        );
        // aria2c's exit status 24: "HTTP authorization failed".
        assert_eq!(aria2c.status.code(), Some(24), "{strategy}: {aria2c:?}");
    }
}

#[test]
fn weak_or_malformed_auth_files_are_refused_at_start() {
    let root = tempfile::tempdir().unwrap();
    let secrets = tempfile::tempdir().unwrap();
    for (flag, kind) in [
        ("-m", "MD5-crypt"),
        ("-s", "SHA-1"),
        ("-p", "plain"),
        ("-d", "DES"),
    ] {
        let file = secrets.path().join(format!("htpasswd{flag}"));
        htpasswd(&file, "-B", "alice", "secret");
        htpasswd(&file, flag, "bob", "secret");
        let output = run(
            env!("CARGO_BIN_EXE_ioserve"),
            &[
                root.path().to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
                "--auth-file",
                file.to_str().unwrap(),
            ],
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{flag}: {stderr}");
        let named = format!("auth file {} line 2: user \"bob\"", file.display());
        assert!(
            stderr.contains(&named) && stderr.contains(kind) && stderr.contains("allowed:"),
            "{flag}: {stderr}"
        );
    }
}

#[test]
fn sighup_rereads_the_auth_file_and_keeps_it_when_the_new_one_is_refused() {
    let (root, secrets, data) = fixture();
    let file = secrets.path().join("htpasswd");
    let mut server = Server::start_with(
        "sendfile",
        root.path(),
        &["--auth-file", file.to_str().unwrap()],
        true,
    );
    let addr = server.addr;
    let status = |user: &str, password: &str| {
        get(
            addr,
            "/big.bin",
            &[("Authorization", &basic(user, password))],
        )
        .status
    };
    assert_eq!(status("alice", "open sesame"), 200);
    // A new password for alice: the old one, verified and remembered before, stops
    // working with the reload.
    htpasswd(&file, "-B", "alice", "new password");
    server.signal("HUP");
    wait_until(
        "the reload to take alice's new password",
        || status("alice", "new password"),
        |&status| status == 200,
    );
    assert_eq!(status("alice", "open sesame"), 401);
    // A file now refused keeps the one in force.
    htpasswd(&file, "-m", "dave", "md5");
    server.signal("HUP");
    server.wait_for_log("SIGHUP: cannot apply the configuration");
    assert_eq!(status("alice", "new password"), 200);
    assert_eq!(status("dave", "md5"), 401);
    let body = get(
        addr,
        "/big.bin",
        &[("Authorization", &basic("bob", "hunter2"))],
    )
    .body;
    assert!(body == data);
    let log = server.stop_and_read_log();
    assert!(log.contains("line 4: user \"dave\": MD5-crypt"), "{log}");
    assert!(!log.contains("clear text"), "loopback: no warning\n{log}");
}

#[test]
fn a_non_loopback_address_warns_that_credentials_are_clear_text() {
    let (root, secrets, _) = fixture();
    let file = secrets.path().join("htpasswd");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ioserve"))
        .arg(root.path())
        .args(["--listen", "0.0.0.0:0", "--workers", "1"])
        .args(["--auth-file", file.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("serving"), "{line}");
    // SIGTERM, not SIGKILL: the log's writer thread flushes every line on the way out,
    // where a kill loses those it has not written yet.
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(child.wait().unwrap().success());
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(
        log.contains("credentials cross the network in clear text"),
        "{log}"
    );
}

#[test]
fn refused_credentials_are_counted_by_reason() {
    let (root, secrets, _) = fixture();
    let file = secrets.path().join("htpasswd");
    let server = Server::start(
        "sendfile",
        root.path(),
        &[
            "--auth-file",
            file.to_str().unwrap(),
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let addr = server.addr;
    for _ in 0..2 {
        assert_eq!(get(addr, "/big.bin", &[]).status, 401);
    }
    for authorization in [
        basic("alice", "wrong"),
        basic("nobody", "x"),
        "Basic !!".into(),
    ] {
        let response = get(addr, "/dir/", &[("Authorization", &authorization)]);
        assert_eq!(response.status, 401, "{authorization}");
    }
    assert_eq!(
        get(addr, "/", &[("Authorization", &basic("bob", "hunter2"))]).status,
        200
    );
    wait_for_metric(
        &server,
        "ioserve_auth_failures_total{reason=\"missing\"}",
        |n| n == 2,
    );
    wait_for_metric(
        &server,
        "ioserve_auth_failures_total{reason=\"wrong\"}",
        |n| n == 3,
    );
    let text = scrape(server.metrics.unwrap());
    assert_eq!(
        metric_in(&text, "ioserve_requests_total{status=\"401\"}"),
        5
    );
    testdata::assert_promtool_accepts(&text);
}
