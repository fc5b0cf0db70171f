//! Operating the daemon: graceful shutdown, the connection limit, metrics, the access
//! log and errors on bad configuration.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;

use crate::support::*;

fn tree() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let data = random_bytes(32 << 20, 9);
    std::fs::write(dir.path().join("big.bin"), &data).unwrap();
    std::fs::write(dir.path().join("hello.txt"), b"hello").unwrap();
    (dir, data)
}

#[test]
fn sigterm_drains_downloads_then_exits_zero() {
    let (dir, data) = tree();
    for strategy in STRATEGIES {
        let mut server = Server::start(strategy, dir.path(), &["--shutdown-timeout", "20s"]);
        let mut download = connect(server.addr);
        download
            .write_all(request_bytes("GET", "/big.bin", &[]).as_bytes())
            .unwrap();
        let mut reader = BufReader::new(download.try_clone().unwrap());
        let mut idle = connect(server.addr);
        idle.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut idle_reader = BufReader::new(idle.try_clone().unwrap());
        assert_eq!(read_response(&mut idle_reader, false).unwrap().status, 200);
        let mut first = [0u8; 4096];
        reader.read_exact(&mut first).unwrap();

        server.signal("TERM");
        // The idle keep-alive connection is closed at once.
        let mut rest = Vec::new();
        idle_reader.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        // No new connections.
        wait_until(
            "the listener to close",
            || TcpStream::connect(server.addr).is_ok(),
            |&connected| !connected,
        );
        // The download in flight completes.
        let mut whole = first.to_vec();
        let response_tail = {
            let mut tail = Vec::new();
            reader.read_to_end(&mut tail).unwrap();
            tail
        };
        whole.extend_from_slice(&response_tail);
        let head_end = whole.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let body = &whole[head_end..];
        assert!(
            body == &data[..],
            "{strategy}: the download finished whole (got {} of {} bytes; first difference at {:?})",
            body.len(),
            data.len(),
            body.iter().zip(&data).position(|(a, b)| a != b)
        );
        let status = server.wait_exit(SETTLE).expect("exits after draining");
        assert!(status.success(), "{strategy}: {status}");
    }
}

#[test]
fn signals_as_soon_as_the_address_is_printed_are_handled() {
    // The address is printed before the workers start: a SIGTERM or SIGHUP sent at
    // once must reach the handlers, not the default action that ends the process.
    let (dir, _) = tree();
    for round in 0..10 {
        let mut server = Server::start("sendfile", dir.path(), &["--workers", "4"]);
        server.signal("TERM");
        let status = server.wait_exit(SETTLE);
        assert!(
            status.is_some_and(|s| s.success()),
            "round {round}: SIGTERM at once: {status:?}, want a drain and exit 0"
        );
        let mut server = Server::start_with("sendfile", dir.path(), &["--workers", "4"], true);
        server.signal("HUP");
        // Handled once the server says so; the default action would have ended it.
        server.wait_for_log("SIGHUP: ");
        let status = server.child.try_wait().unwrap();
        assert_eq!(
            status, None,
            "round {round}: SIGHUP at once ended the server"
        );
        assert_eq!(get(server.addr, "/hello.txt", &[]).status, 200);
        server.signal("TERM");
        let status = server.wait_exit(SETTLE);
        assert!(
            status.is_some_and(|s| s.success()),
            "round {round}: {status:?}"
        );
    }
}

#[test]
fn shutdown_timeout_cuts_stalled_downloads() {
    let (dir, _) = tree();
    // The send timeout is far beyond the wait: only the shutdown timeout can end the
    // stalled download, and so the drain.
    let mut server = Server::start(
        "sendfile",
        dir.path(),
        &["--shutdown-timeout", "1s", "--send-timeout", "1h"],
    );
    // In flight once its head has come; stalled once the buffers are full.
    let (mut stalled, len) = start_download(&server, "/big.bin");
    wait_until_stalled(stalled.get_ref());
    server.signal("INT");
    let status = server.wait_exit(SETTLE).expect("exits after the deadline");
    assert!(status.success());
    let mut body = Vec::new();
    let _ = stalled.read_to_end(&mut body);
    assert!(
        body.len() < len,
        "the stalled download was cut, not drained: {} of {len} bytes",
        body.len()
    );
}

#[test]
fn connection_limit_answers_503() {
    let (dir, _) = tree();
    let server = Server::start("sendfile", dir.path(), &["--max-connections", "2"]);
    // Two downloads that the clients do not read: busy, so nothing can be closed to
    // make room.
    // Each is admitted and in flight once its head has come.
    let held: Vec<_> = (0..2)
        .map(|_| start_download(&server, "/big.bin"))
        .collect();
    let refused = get(server.addr, "/hello.txt", &[]);
    assert_eq!(refused.status, 503);
    drop(held);
    wait_until(
        "a slot freed by the dropped downloads",
        || get(server.addr, "/hello.txt", &[]).status,
        |&status| status == 200,
    );
}

#[test]
fn metrics_count_requests_bytes_and_connections() {
    let (dir, _) = tree();
    for strategy in STRATEGIES {
        let server = Server::start(strategy, dir.path(), &["--metrics-listen", "127.0.0.1:0"]);
        let metrics = server.metrics.unwrap();
        assert_eq!(get(server.addr, "/hello.txt", &[]).status, 200);
        assert_eq!(
            get(server.addr, "/hello.txt", &[("Range", "bytes=0-1")]).status,
            206
        );
        assert_eq!(get(server.addr, "/missing", &[]).status, 404);
        let held = connect(server.addr);
        let response = get(metrics, "/metrics", &[]);
        assert_eq!(response.status, 200);
        assert!(response
            .header("Content-Type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4"));
        // A request is counted once its response is written, which may be just after
        // the client has read it.
        for status in ["200", "206", "404"] {
            let name = format!("ioserve_requests_total{{status=\"{status}\"}}");
            wait_for_metric(&server, &name, |n| n == 1);
        }
        let sent = format!("ioserve_sent_bytes_total{{strategy=\"{strategy}\"}}");
        wait_for_metric(&server, &sent, |bytes| bytes > 5 + 2);
        // The held connection counts once accepted, which can trail the connect.
        wait_for_metric(&server, "ioserve_connections_total", |n| n >= 4);
        wait_for_metric(&server, "ioserve_connections_open", |n| n == 1);
        wait_for_metric(&server, "ioserve_downloads_in_flight", |n| n == 0);
        drop(held);
        assert_eq!(get(metrics, "/other", &[]).status, 404);
    }
}

#[test]
fn access_log_has_one_combined_line_per_request() {
    let (dir, _) = tree();
    let mut server = Server::start_with("read", dir.path(), &[], true);
    assert_eq!(
        get(server.addr, "/hello.txt", &[("User-Agent", "curl/8 \"x\"")]).status,
        200
    );
    assert_eq!(
        get(server.addr, "/nope", &[("Referer", "http://a/")]).status,
        404
    );
    let log = server.stop_and_read_log();
    let found: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("127.0.0.1 - - ["))
        .collect();
    // Each line is written after its response, so two workers may log out of order.
    for expected in [
        "\"GET /hello.txt HTTP/1.1\" 200 5 \"-\" \"curl/8 \\x22x\\x22\"",
        "\"GET /nope HTTP/1.1\" 404 14 \"http://a/\" \"-\"",
    ] {
        assert!(
            found
                .iter()
                .any(|line| line.ends_with(expected) && line.contains(" +0000] ")),
            "no line ending {expected} in {found:?}"
        );
    }
}

#[test]
fn json_access_log_to_a_file() {
    let (dir, _) = tree();
    let logs = tempfile::tempdir().unwrap();
    let file = logs.path().join("access.json");
    let file_arg = file.to_str().unwrap();
    for strategy in STRATEGIES {
        let mut server = Server::start_with(
            strategy,
            dir.path(),
            &["--access-log-format", "json", "--access-log-file", file_arg],
            true,
        );
        assert_eq!(get(server.addr, "/hello.txt", &[]).status, 200);
        server.stop_and_read_log();
    }
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), STRATEGIES.len(), "appended, one per server");
    for (line, strategy) in lines.iter().zip(STRATEGIES) {
        assert_eq!(line["strategy"], strategy);
        assert_eq!(
            (line["path"].as_str(), line["status"].as_u64()),
            (Some("/hello.txt"), Some(200))
        );
        assert_eq!(
            (line["bytes"].as_u64(), line["complete"].as_bool()),
            (Some(5), Some(true))
        );
        assert!(line["time"].as_str().unwrap().ends_with('Z') && line["duration"].is_f64());
    }
    let (code, text) = ioserve(&[
        dir.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--access-log-file",
        "/nonexistent/dir/access.log",
    ]);
    assert_eq!(code, 1);
    assert!(
        text.contains("cannot open the access log /nonexistent/dir/access.log"),
        "{text}"
    );
}

#[test]
fn goaccess_reads_the_combined_log() {
    let goaccess = testdata::require("goaccess", "goaccess");
    let (dir, _) = tree();
    let logs = tempfile::tempdir().unwrap();
    let file = logs.path().join("access.log");
    let mut server = Server::start_with(
        "sendfile",
        dir.path(),
        &["--access-log-file", file.to_str().unwrap()],
        true,
    );
    for path in ["/hello.txt", "/big.bin", "/nope", "/hello.txt"] {
        get(
            server.addr,
            path,
            &[("User-Agent", "Mozilla/5.0 (X11; Linux x86_64)")],
        );
    }
    let range = get(server.addr, "/big.bin", &[("Range", "bytes=0-99")]);
    assert_eq!(range.status, 206);
    server.stop_and_read_log();
    let report = logs.path().join("report.json");
    let output = Command::new(goaccess)
        .arg(&file)
        .args(["--log-format=COMBINED", "--no-global-config", "-o"])
        .arg(&report)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let general = &report["general"];
    assert_eq!(general["total_requests"], 5, "{general}");
    assert_eq!(
        general["failed_requests"], 0,
        "every line parsed: {general}"
    );
    assert_eq!(general["unique_not_found"], 1, "{general}");
    // Body bytes: two hellos, the whole 32 MiB file, the 404 text and a 100-byte range.
    assert_eq!(
        general["bandwidth"],
        5 + (32 << 20) + 14 + 5 + 100,
        "{general}"
    );
}

fn ioserve(args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_ioserve"))
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned()
            + &String::from_utf8_lossy(&output.stdout),
    )
}

#[test]
fn bad_configuration_is_named_and_refused() {
    let (code, text) = ioserve(&["/no/such/dir", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, 1);
    assert!(text.contains("cannot serve /no/such/dir"), "{text}");

    let (code, text) = ioserve(&["--strategy", "zerocopy"]);
    assert_eq!(code, 2);
    assert!(
        text.contains("zerocopy") && text.contains("sendfile"),
        "{text}"
    );

    let (code, text) = ioserve(&["--chunk-size", "3"]);
    assert_eq!(code, 1);
    assert!(
        text.contains("--chunk-size 3") && text.contains("4K to 64M"),
        "{text}"
    );

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ioserve.toml");
    std::fs::write(&config, "workers = \"many\"\n").unwrap();
    let (code, text) = ioserve(&["--config", config.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        text.contains("ioserve.toml") && text.contains("workers"),
        "{text}"
    );

    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let (code, text) = ioserve(&[file.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    assert_eq!(code, 1);
    assert!(
        text.contains("cannot serve") && text.contains("Not a directory"),
        "{text}"
    );

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, text) = ioserve(&[dir.path().to_str().unwrap(), "--listen", &addr]);
    assert_eq!(code, 1);
    assert!(text.contains(&format!("cannot listen on {addr}")), "{text}");

    let (code, text) = ioserve(&["--help"]);
    assert_eq!(code, 0);
    for strategy in STRATEGIES {
        assert!(
            text.contains(&format!("  {strategy} ")),
            "--help explains {strategy}"
        );
    }
}

#[test]
fn config_file_sets_the_strategy() {
    let (dir, _) = tree();
    let config = dir.path().join("ioserve.toml");
    std::fs::write(&config, "strategy = \"mmap\"\naccess-log = false\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ioserve"))
        .args([
            dir.path().to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains("strategy mmap"), "{line}");
}

#[test]
fn multi_runtime_and_pinning_serve_the_same_bytes() {
    let (dir, data) = tree();
    for strategy in STRATEGIES {
        let server = Server::start(
            strategy,
            dir.path(),
            &["--runtime", "multi", "--workers", "3", "--pin"],
        );
        std::thread::scope(|scope| {
            for i in 0..6u64 {
                let (addr, data) = (server.addr, &data);
                scope.spawn(move || {
                    let start = i * 1_000_000;
                    let range = format!("bytes={start}-");
                    let response = get(addr, "/big.bin", &[("Range", &range)]);
                    assert!(response.body == data[start as usize..], "{strategy} {i}");
                });
            }
        });
    }
}

#[test]
fn without_the_open_file_cache_a_rename_is_seen_at_once() {
    let (dir, _) = tree();
    let server = Server::start("sendfile", dir.path(), &["--open-file-cache", "0"]);
    assert_eq!(get(server.addr, "/hello.txt", &[]).body, b"hello");
    let staged = dir.path().join("staged");
    std::fs::write(&staged, b"replaced").unwrap();
    std::fs::rename(&staged, dir.path().join("hello.txt")).unwrap();
    assert_eq!(get(server.addr, "/hello.txt", &[]).body, b"replaced");
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn socket_activation_and_readiness_notification() {
    for runtime in ["per-core", "multi"] {
        socket_activation_under(runtime);
    }
}

/// ioserve started by `systemd-socket-activate` with two sockets and a notify socket.
fn socket_activation_under(runtime: &str) {
    use std::os::unix::net::UnixDatagram;
    let activate = testdata::require("systemd-socket-activate", "systemd");
    let (dir, _) = tree();
    let scratch = tempfile::tempdir().unwrap();
    let notify_path = scratch.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(SETTLE)).unwrap();
    let ports = [free_port(), free_port()];
    // Two sockets, as a unit with two ListenStream= lines passes them.
    let mut child = Command::new(activate)
        .args(["-l", &format!("127.0.0.1:{}", ports[0])])
        .args(["-l", &format!("127.0.0.1:{}", ports[1])])
        // It builds the program's environment from -E alone, as systemd does.
        .args(["-E", "NOTIFY_SOCKET"])
        .arg(env!("CARGO_BIN_EXE_ioserve"))
        .arg(dir.path())
        .args([
            "--access-log",
            "off",
            "--workers",
            "3",
            "--runtime",
            runtime,
        ])
        .env("NOTIFY_SOCKET", &notify_path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let addrs = ports.map(|port| std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    wait_until(
        "systemd-socket-activate to listen",
        || TcpStream::connect(addrs[0]).is_ok(),
        |&connected| connected,
    );
    // The first connection starts ioserve on the passed sockets; both are served.
    for addr in addrs {
        for _ in 0..4 {
            assert_eq!(get(addr, "/hello.txt", &[]).body, b"hello", "{runtime}");
        }
    }
    let mut message = [0u8; 256];
    let n = notify.recv(&mut message).unwrap();
    assert_eq!(&message[..n], b"READY=1\n");
    // A reload says RELOADING=1 with the monotonic time (systemd 253), then READY=1.
    let hup = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    let n = notify.recv(&mut message).unwrap();
    let reloading = String::from_utf8_lossy(&message[..n]).into_owned();
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading}"
    );
    let n = notify.recv(&mut message).unwrap();
    assert_eq!(&message[..n], b"READY=1\n");
    assert_eq!(get(addrs[0], "/hello.txt", &[]).body, b"hello");
    // systemd-socket-activate execs the program: the child is ioserve.
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let n = notify.recv(&mut message).unwrap();
    assert_eq!(&message[..n], b"STOPPING=1\n");
    assert!(child.wait().unwrap().success());
}

#[test]
fn the_shipped_systemd_units_verify() {
    let analyze = testdata::require("systemd-analyze", "systemd");
    let units = tempfile::tempdir().unwrap();
    let contrib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd");
    for name in ["ioserve.service", "ioserve.socket"] {
        let text = std::fs::read_to_string(contrib.join(name)).unwrap();
        // The unit names the binary where the Debian package installs it; verify it
        // against the one built here.
        if name == "ioserve.service" {
            assert!(text.contains("\nExecStart=/usr/bin/ioserve "), "{text}");
        }
        let text = text.replace("/usr/bin/ioserve", env!("CARGO_BIN_EXE_ioserve"));
        std::fs::write(units.path().join(name), text).unwrap();
    }
    let output = Command::new(analyze)
        .args(["verify", "--man=no"])
        .arg(units.path().join("ioserve.service"))
        .arg(units.path().join("ioserve.socket"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stderr).into_owned()
        + &String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && text.trim().is_empty(), "{text}");
}

#[test]
fn sighup_reloads_the_configuration_without_dropping_a_download() {
    let (dir, data) = tree();
    std::fs::write(dir.path().join(".env"), b"SECRET=1").unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let config = scratch.path().join("ioserve.toml");
    for strategy in STRATEGIES {
        std::fs::write(&config, "hidden = false\n").unwrap();
        let mut server = Server::start_with(
            strategy,
            dir.path(),
            &[
                "--config",
                config.to_str().unwrap(),
                "--send-timeout",
                "30s",
            ],
            true,
        );
        assert_eq!(get(server.addr, "/.env", &[]).status, 404);
        // A download in flight across the reload.
        let (mut download, len) = start_download(&server, "/big.bin");
        let mut got = vec![0u8; 1 << 20];
        download.read_exact(&mut got).unwrap();
        std::fs::write(&config, "hidden = true\nmetrics-listen = \"127.0.0.1:0\"\n").unwrap();
        server.signal("HUP");
        wait_until(
            &format!("{strategy}: the reload to apply"),
            || get(server.addr, "/.env", &[]).status,
            |&status| status == 200,
        );
        let mut rest = Vec::new();
        download.read_to_end(&mut rest).unwrap();
        got.extend_from_slice(&rest);
        assert_eq!(got.len(), len);
        assert!(
            got == data,
            "{strategy}: the download across SIGHUP differs"
        );
        // A configuration that does not parse changes nothing and stops nothing.
        std::fs::write(&config, "workers = \"many\"\n").unwrap();
        server.signal("HUP");
        // The refusal is logged once the file has been read: only then does the
        // old configuration staying in force show anything.
        server.wait_for_log("SIGHUP: the configuration is invalid");
        assert_eq!(
            get(server.addr, "/.env", &[]).body,
            b"SECRET=1",
            "{strategy}"
        );
        let log = server.stop_and_read_log();
        for said in [
            "these settings need a restart and keep their old values settings=\"metrics-listen\"",
            "SIGHUP: configuration reloaded",
            "SIGHUP: the configuration is invalid; keeping the one in force",
        ] {
            assert!(log.contains(said), "{strategy}: no {said:?} in {log}");
        }
    }
}

#[test]
fn sigusr1_reopens_the_access_log_after_rotation() {
    let (dir, _) = tree();
    let logs = tempfile::tempdir().unwrap();
    let file = logs.path().join("access.log");
    let rotated = logs.path().join("access.log.1");
    let mut server = Server::start_with(
        "sendfile",
        dir.path(),
        &["--access-log-file", file.to_str().unwrap()],
        true,
    );
    assert_eq!(get(server.addr, "/hello.txt", &[]).status, 200);
    // Written after the response.
    wait_until(
        "the access log line of /hello.txt",
        || std::fs::read_to_string(&file).unwrap_or_default(),
        |log| log.contains("GET /hello.txt"),
    );
    // logrotate: move the file, then postrotate's kill -USR1.
    std::fs::rename(&file, &rotated).unwrap();
    server.signal("USR1");
    // Requests served once the new file is in place log to it (one racing the
    // signal may still reach the old file, as with nginx).
    wait_until(
        "a request logged to the reopened file",
        || {
            assert_eq!(get(server.addr, "/nope", &[]).status, 404);
            let read = |path| std::fs::read_to_string(path).unwrap_or_else(|e| e.to_string());
            (read(&file), read(&rotated))
        },
        |(new, _)| new.contains("GET /nope"),
    );
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert!(old.contains("GET /hello.txt"), "{old}");
    assert!(server
        .stop_and_read_log()
        .contains("SIGUSR1: access log reopened"));
}

#[test]
fn metrics_pass_promtool_and_health_answers() {
    let (dir, _) = tree();
    let server = Server::start(
        "sendfile",
        dir.path(),
        &["--metrics-listen", "127.0.0.1:0", "--max-connections", "1"],
    );
    let metrics = server.metrics.unwrap();
    // One busy connection (the only slot), then a refused one.
    let held = start_download(&server, "/big.bin");
    assert_eq!(get(server.addr, "/hello.txt", &[]).status, 503);
    drop(held);
    // The slot comes back once the server sees the download's client gone.
    wait_until(
        "the slot of the dropped download",
        || get(server.addr, "/hello.txt", &[]).status,
        |&status| status == 200,
    );
    // Counted as the refusal is decided; wait rather than assume it precedes the 503.
    wait_for_metric(&server, "ioserve_connections_refused_total", |n| n >= 1);
    let health = get(metrics, "/healthz", &[]);
    assert_eq!((health.status, health.body.as_slice()), (200, &b"ok\n"[..]));
    let text = String::from_utf8(get(metrics, "/metrics", &[]).body).unwrap();
    for line in [
        "ioserve_connections_refused_total ",
        "ioserve_request_duration_seconds_count ",
        "ioserve_build_info{version=\"",
        "process_open_fds ",
    ] {
        assert!(text.contains(line), "{line:?} missing in\n{text}");
    }
    let refused: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("ioserve_connections_refused_total "))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(refused >= 1, "{text}");
    testdata::assert_promtool_accepts(&text);
}

/// `--send-buffer`: every connection's socket gets the size (`ss -tm` shows the
/// kernel's doubled figure as `tb`, fixed while the client stalls), under every
/// strategy; a size above net.core.wmem_max is capped by the kernel, and the server
/// says so, naming the sysctl.
#[test]
fn send_buffer_sets_every_connections_socket_and_names_the_cap() {
    let ss = testdata::require("ss", "iproute2");
    let (dir, _) = tree();
    let wmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let fits = wmem_max.min(128 << 10);
    let mut cases = STRATEGIES
        .map(|strategy| (strategy, fits, 2 * fits))
        .to_vec();
    // Above the cap (while --send-buffer still allows it): each connection gets the cap.
    if 2 * wmem_max <= 1 << 30 {
        cases.push(("sendfile", 2 * wmem_max, 2 * wmem_max));
    }
    for (strategy, asked, sndbuf) in cases {
        let asked_flag = asked.to_string();
        let mut server =
            Server::start_with(strategy, dir.path(), &["--send-buffer", &asked_flag], true);
        // A 32 MiB download the client does not read: the server fills the buffer.
        let (download, _) = start_download(&server, "/big.bin");
        wait_until_stalled(download.get_ref());
        let filter = format!("( sport = :{} )", server.addr.port());
        let shown = Command::new(&ss)
            .args(["-tmnH", "state", "established", &filter])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&shown.stdout);
        let tb = text
            .split(|c: char| c == ',' || c == '(' || c.is_whitespace())
            .find_map(|field| field.strip_prefix("tb"))
            .unwrap_or_else(|| panic!("{strategy}: no tb in ss's output: {text}"));
        assert_eq!(
            tb,
            sndbuf.to_string(),
            "{strategy}, --send-buffer {asked}: {text}"
        );
        // Closed first: SIGTERM would wait --shutdown-timeout for the download.
        drop(download);
        let log = server.stop_and_read_log();
        if sndbuf < 2 * asked {
            assert!(
                log.contains(&format!(
                    "--send-buffer {asked} is above net.core.wmem_max ({wmem_max})"
                )) && log.contains(&format!("each connection gets {wmem_max}")),
                "{log}"
            );
        } else {
            assert!(
                log.contains(&format!("send buffer per connection: {sndbuf} bytes")),
                "{log}"
            );
        }
    }
}

#[test]
fn each_bad_start_input_says_its_cause_once() {
    let root = tempfile::tempdir().unwrap();
    let missing = root.path().join("missing");
    let missing = missing.to_str().unwrap();
    let in_missing_dir = format!("{missing}/access.log");
    let not_found = "No such file or directory (os error 2)";
    let cases: [(Vec<&str>, String); 6] = [
        (
            vec![missing],
            format!("ioserve: cannot serve {missing}: {not_found}"),
        ),
        (
            vec![".", "--tls-cert", missing, "--tls-key", missing],
            format!("ioserve: cannot read {missing}: {not_found}"),
        ),
        (
            vec![".", "--config", missing],
            format!("ioserve: cannot read config file {missing}: {not_found}"),
        ),
        (
            vec![".", "--access-log-file", &in_missing_dir],
            format!("ioserve: cannot open the access log {in_missing_dir}: {not_found}"),
        ),
        (
            vec![".", "--auth-file", missing],
            format!("ioserve: cannot read auth file {missing}: {not_found}"),
        ),
        (
            vec![".", "--chunk-size", "1K"],
            "ioserve: invalid --chunk-size 1024: allowed: 4K to 64M".to_string(),
        ),
    ];
    for (args, expected) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_ioserve"))
            .current_dir(root.path())
            .args(["--listen", "127.0.0.1:0"])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert_eq!(last, expected, "{args:?}");
    }
}

/// A tmpfs mounted for a test, unmounted when dropped.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    /// A tmpfs of `size` (mount's syntax, `256k`) on a new directory; `None` when this
    /// process may not mount (not root).
    fn mount(size: &str) -> Option<Tmpfs> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: mounting a tmpfs needs root");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "mount -t tmpfs: {status}");
        Some(Tmpfs(dir))
    }

    fn path(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// Fills the filesystem of `dir` with `dir/filler` until it takes no more.
fn fill(dir: &std::path::Path) {
    let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
    let page = [b'x'; 4096];
    loop {
        match filler.write(&page) {
            Ok(0) => break,
            Ok(_) => {}
            Err(error) => {
                assert_eq!(error.raw_os_error(), Some(28), "{error}");
                break;
            }
        }
    }
}

#[test]
fn a_full_disk_under_the_access_log_loses_lines_not_requests() {
    let Some(disk) = Tmpfs::mount("256k") else {
        return;
    };
    let (dir, _) = tree();
    let log = disk.path().join("access.log");
    let server = Server::start_with(
        "sendfile",
        dir.path(),
        &[
            "--access-log-file",
            log.to_str().unwrap(),
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        true,
    );
    let lines = || std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(server.get("/hello.txt?before", &[]).status, 200);
    wait_until("the first access log line", lines, |text| {
        text.contains("?before")
    });
    fill(disk.path());
    // The log file's last page may take a few more lines; requests go on until one is
    // lost, and every one is answered.
    let mut sent = 0;
    wait_until(
        "a lost access log line",
        || {
            sent += 1;
            assert_eq!(
                server.get(&format!("/hello.txt?full={sent}"), &[]).status,
                200
            );
            metric_in(
                &scrape(server.metrics.unwrap()),
                "ioserve_access_log_lines_lost_total",
            )
        },
        |&lost| lost > 0,
    );
    for i in 0..5 {
        assert_eq!(server.get(&format!("/hello.txt?more={i}"), &[]).status, 200);
    }
    wait_for_metric(&server, "ioserve_access_log_lines_lost_total", |lost| {
        lost >= 6
    });
    let said = server.wait_for_log("access log: cannot write");
    assert_eq!(
        said.matches("access log: cannot write").count(),
        1,
        "{said}"
    );
    assert!(said.contains("No space left on device"), "{said}");

    // Space returns: logging resumes by itself, and says how many lines were lost.
    std::fs::remove_file(disk.path().join("filler")).unwrap();
    let lost = metric_in(
        &scrape(server.metrics.unwrap()),
        "ioserve_access_log_lines_lost_total",
    );
    assert_eq!(server.get("/hello.txt?after", &[]).status, 200);
    let said = server.wait_for_log("access log: writing again");
    assert!(said.contains(&format!("{lost} lines were lost")), "{said}");
    let text = wait_until("the line after the full disk", lines, |text| {
        text.contains("?after")
    });
    // No line is glued to a fragment of a lost one.
    for line in text.lines().filter(|line| !line.is_empty()) {
        assert!(line.starts_with("127.0.0.1 - - ["), "{line:?} in\n{text}");
    }
    wait_for_metric(&server, "ioserve_access_log_lines_lost_total", |now| {
        now == lost
    });
}

/// The pid of the process a live upgrade started, from the old one's hand-over line.
fn new_process(log: &str) -> u32 {
    let line = log
        .lines()
        .find(|line| line.contains("SIGUSR2: the new process serves"))
        .unwrap();
    line.rsplit_once("pid=").unwrap().1.trim().parse().unwrap()
}

/// Stops the process `pid` that took `server`'s listeners over, and waits until they
/// are closed.
fn stop_new_process(pid: u32, server: &Server) {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    wait_until(
        "the new process to stop listening",
        || TcpStream::connect(server.addr).is_ok(),
        |&connected| !connected,
    );
}

#[test]
fn sigusr2_hands_the_listeners_over_without_cutting_a_download() {
    let (dir, data) = tree();
    for strategy in STRATEGIES {
        let mut server =
            Server::start_with(strategy, dir.path(), &["--shutdown-timeout", "20s"], true);
        // A download the client does not read yet, which the old process must finish.
        let (mut download, len) = start_download(&server, "/big.bin");
        assert_eq!(len, data.len());
        wait_until_stalled(download.get_ref());
        // A keep-alive connection between two requests.
        let idle = connect(server.addr);
        let mut idle_reader = BufReader::new(idle.try_clone().unwrap());
        (&idle)
            .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut idle_reader, false).unwrap().status, 200);

        server.signal("USR2");
        let log = server.wait_for_log("SIGUSR2: the new process serves");
        let new = new_process(&log);
        assert_ne!(new, server.pid(), "{strategy}");
        // New connections are the new process's; the kept-alive one gets its next
        // request answered, with Connection: close, by the old one.
        assert_eq!(get(server.addr, "/hello.txt", &[]).body, b"hello");
        (&idle)
            .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let answer = read_response(&mut idle_reader, false).unwrap();
        assert_eq!(
            (answer.status, &answer.body[..]),
            (200, &b"hello"[..]),
            "{strategy}"
        );
        assert_eq!(answer.header("Connection"), Some("close"), "{strategy}");
        // The download finishes whole, then the old process exits 0.
        let mut body = Vec::new();
        download.read_to_end(&mut body).unwrap();
        assert!(
            body == data,
            "{strategy}: {} of {} bytes",
            body.len(),
            data.len()
        );
        let status = server.wait_exit(SETTLE).expect("the old process exits");
        assert!(status.success(), "{strategy}: {status}");
        assert_eq!(get(server.addr, "/hello.txt", &[]).body, b"hello");
        // The new process is stopped as any other.
        stop_new_process(new, &server);
    }
}

#[test]
fn sigusr2_with_a_configuration_the_new_binary_refuses_keeps_serving() {
    let (dir, _) = tree();
    let scratch = tempfile::tempdir().unwrap();
    let config = scratch.path().join("ioserve.toml");
    std::fs::write(&config, "hidden = false\n").unwrap();
    let mut server = Server::start_with(
        "sendfile",
        dir.path(),
        &["--config", config.to_str().unwrap()],
        true,
    );
    std::fs::write(&config, "workers = \"many\"\n").unwrap();
    server.signal("USR2");
    let log = server.wait_for_log("SIGUSR2: the new binary ended before it served");
    // The new process said why, in the same log.
    assert!(log.contains("workers"), "{log}");
    assert_eq!(get(server.addr, "/hello.txt", &[]).body, b"hello");
    // A second try, once the file is mended, hands over.
    std::fs::write(&config, "hidden = false\n").unwrap();
    server.signal("USR2");
    let log = server.wait_for_log("SIGUSR2: the new process serves");
    let new = new_process(&log);
    let status = server.wait_exit(SETTLE).expect("the old process exits");
    assert!(status.success(), "{status}");
    assert_eq!(get(server.addr, "/hello.txt", &[]).body, b"hello");
    stop_new_process(new, &server);
}

/// A memory cgroup of its own (v2 where /sys/fs/cgroup is unified, else v1's memory
/// controller), removed when dropped.
struct MemoryCgroup {
    dir: std::path::PathBuf,
    v2: bool,
}

impl MemoryCgroup {
    /// A cgroup limited to `bytes`; `None` when this process may not make one (not
    /// root).
    fn make(bytes: u64) -> Option<MemoryCgroup> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: making a memory cgroup needs root");
            return None;
        }
        let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let parent = match v2 {
            true => std::path::PathBuf::from("/sys/fs/cgroup"),
            false => std::path::PathBuf::from("/sys/fs/cgroup/memory"),
        };
        // One per test of this process (they run at once).
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = parent.join(format!("ioserve-test-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let (file, value) = match v2 {
            true => ("memory.max", bytes.to_string()),
            false => ("memory.limit_in_bytes", bytes.to_string()),
        };
        std::fs::write(dir.join(file), value).unwrap();
        Some(MemoryCgroup { dir, v2 })
    }

    /// ioserve (sendfile) serving `dir` with `extra` flags, started inside the cgroup.
    fn launch(&self, dir: &std::path::Path, extra: &[&str]) -> Server {
        let join = format!("echo $$ > {} && exec \"$@\"", self.procs().display());
        Server::launch(&["sh", "-c", &join, "sh"], "sendfile", dir, extra, true)
    }

    /// The file a process's id is written to, to move it in.
    fn procs(&self) -> std::path::PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Processes the kernel's OOM killer ended in it.
    fn oom_kills(&self) -> u64 {
        let file = match self.v2 {
            true => "memory.events",
            false => "memory.oom_control",
        };
        let text = std::fs::read_to_string(self.dir.join(file)).unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix("oom_kill "))
            .map_or(0, |n| n.trim().parse().unwrap())
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Emptied first: the processes go back to the root cgroup.
        let root = self.dir.parent().unwrap().join("cgroup.procs");
        if let Ok(pids) = std::fs::read_to_string(self.procs()) {
            for pid in pids.lines() {
                let _ = std::fs::write(&root, pid);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The clients' answers: how many got 200 (their streams kept open and unread, so
/// that each download holds its buffers) and how many 503 with `Retry-After: 2`.
async fn tally<S>(clients: Vec<tokio::task::JoinHandle<(String, S)>>) -> (usize, usize, Vec<S>) {
    let (mut ok, mut busy, mut held) = (0, 0, Vec::new());
    for client in clients {
        let (head, stream) = client.await.unwrap();
        if head.starts_with("HTTP/1.1 200 ") {
            ok += 1;
            held.push(stream);
        } else {
            assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
            assert!(head.contains("\r\nRetry-After: 2\r\n"), "{head}");
            busy += 1;
        }
    }
    (ok, busy, held)
}

/// The connections the server says it admits under a 64 MiB memory limit, and the
/// rest of its log line.
fn admitted_under_the_limit(server: &Server) -> (usize, String) {
    let log = server.wait_for_log("the memory limit is 64 MiB");
    let line = log
        .lines()
        .find(|l| l.contains("the memory limit is"))
        .unwrap();
    let (_, line) = line.split_once("the memory limit is").unwrap();
    let admitted = line
        .split_once("at most ")
        .and_then(|(_, rest)| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    (admitted, line.to_string())
}

/// A TLS connection (HTTP/1.1) to `addr` as `localhost`, trusting `ca` (PEM), that
/// asks for `path` and returns the response head.
async fn tls_request_head(
    addr: std::net::SocketAddr,
    ca: &str,
    path: &str,
) -> (String, impl Sized) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let config = tls_client_config(ca);
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    tls.write_all(request_bytes("GET", path, &[("Connection", "keep-alive")]).as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        if tls.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        head.push(byte[0]);
    }
    (String::from_utf8_lossy(&head).into_owned(), tls)
}

#[test]
fn a_memory_limit_caps_connections_instead_of_an_oom_kill() {
    // 600 HTTPS downloads whose clients read nothing hold about 120 MiB in the server
    // (rustls's buffers): in a 64 MiB cgroup, without the memory budget, the OOM
    // killer ends the server.
    const CLIENTS: usize = 600;
    let Some(cgroup) = MemoryCgroup::make(64 << 20) else {
        return;
    };
    let (dir, _) = tree();
    let tls = TestCertificate::new();
    let flags = tls.flags();
    let mut extra: Vec<&str> = flags.iter().map(String::as_str).collect();
    extra.extend(["--metrics-listen", "127.0.0.1:0"]);
    let server = cgroup.launch(dir.path(), &extra);
    let (admitted, line) = admitted_under_the_limit(&server);
    assert!(admitted < CLIENTS, "{line}");

    let runtime = crate::h2_client::runtime();
    let ca = tls.pem.clone();
    let addr = server.addr;
    let (ok, busy, held) = runtime.block_on(async move {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let ca = ca.clone();
                tokio::spawn(async move { tls_request_head(addr, &ca, "/big.bin").await })
            })
            .collect();
        tally(clients).await
    });
    assert_eq!(ok + busy, CLIENTS);
    assert!(ok <= admitted, "{ok} admitted, the budget says {admitted}");
    assert!(ok > 0 && busy > 0, "{ok} served, {busy} refused");
    // The server lives on, and serves once the downloads are gone.
    assert_eq!(cgroup.oom_kills(), 0, "the OOM killer ended a process");
    drop(held);
    wait_for_no_connections(&server);
    let ca = tls.pem.clone();
    let (head, _) =
        runtime.block_on(async move { tls_request_head(addr, &ca, "/hello.txt").await });
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert_eq!(cgroup.oom_kills(), 0);
    eprintln!("{ok} downloads admitted (the budget: {admitted}), {busy} refused with 503");
}

#[test]
fn twenty_thousand_connections_under_a_memory_limit_get_503_not_an_oom_kill() {
    // A flood of 20,000 plain HTTP downloads whose clients read nothing, against a
    // 64 MiB cgroup: the budget admits what the limit allows (each download holds its
    // buffers), every other client gets 503 with Retry-After, and nothing is killed.
    const CLIENTS: usize = 20_000;
    // Connections being opened at once: with the downloads held, within the
    // descriptor limit this process may raise itself to.
    const IN_FLIGHT: usize = 1_000;
    let Some(cgroup) = MemoryCgroup::make(64 << 20) else {
        return;
    };
    let descriptors = raise_nofile();
    let (dir, _) = tree();
    // A small send buffer: the kernel's memory for each unread download stays small
    // (socket buffers are charged to the cgroup under v2).
    let extra = ["--metrics-listen", "127.0.0.1:0", "--send-buffer", "16K"];
    let server = cgroup.launch(dir.path(), &extra);
    let (admitted, _) = admitted_under_the_limit(&server);
    assert!(
        admitted + IN_FLIGHT + 200 < descriptors as usize,
        "{admitted} admitted, {descriptors} descriptors"
    );

    let runtime = crate::h2_client::runtime();
    let addr = server.addr;
    let started = std::time::Instant::now();
    let (ok, busy, held) = runtime.block_on(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let permits = std::sync::Arc::clone(&permits);
                tokio::spawn(async move {
                    let _permit = permits.acquire_owned().await.unwrap();
                    // From 127.0.X.Y, 200 clients per address: the closed connections'
                    // TIME_WAIT entries would otherwise use up one address's ports.
                    let socket = tokio::net::TcpSocket::new_v4().unwrap();
                    let from =
                        std::net::Ipv4Addr::new(127, 0, 1 + (i / 200) as u8, 1 + (i % 200) as u8);
                    socket.bind((from, 0).into()).unwrap();
                    let mut stream = socket.connect(addr).await.unwrap();
                    let request = request_bytes("GET", "/big.bin", &[("Connection", "keep-alive")]);
                    stream.write_all(request.as_bytes()).await.unwrap();
                    // The head, and whatever of the body came with it.
                    let mut head = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await.unwrap() {
                            0 => break,
                            n => head.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    // A refused client goes at once, as a real one would: the server
                    // lingers on a refused connection until its client closes.
                    let stream = head.starts_with("HTTP/1.1 200 ").then_some(stream);
                    (head, stream)
                })
            })
            .collect();
        tally(clients).await
    });
    assert_eq!(ok + busy, CLIENTS);
    assert!(ok <= admitted, "{ok} admitted, the budget says {admitted}");
    assert!(ok > 0 && busy > 0, "{ok} served, {busy} refused");
    assert_eq!(cgroup.oom_kills(), 0, "the OOM killer ended a process");
    drop(held);
    wait_for_no_connections(&server);
    assert_eq!(get(server.addr, "/hello.txt", &[]).body, b"hello");
    assert_eq!(cgroup.oom_kills(), 0);
    eprintln!(
        "{ok} downloads admitted (the budget: {admitted}), {busy} refused with 503, in {:?}",
        started.elapsed()
    );
}
