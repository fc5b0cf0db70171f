//! What an operator or an attacker tries: files with times no HTTP-date can carry,
//! dotfiles, a second instance on the same port, `//host` redirects, idle connections
//! holding every slot.

use std::io::{BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use testdata::require;

use crate::support::*;

fn set_mtime(path: &std::path::Path, time: SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(time)
        .unwrap();
}

#[test]
fn times_past_9999_or_before_1970_neither_panic_nor_leak_a_slot() {
    // tmpfs keeps 64-bit seconds (ext4 stops at 2446).
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::write(dir.path().join("hello.txt"), b"hello").unwrap();
    std::fs::write(dir.path().join("future.bin"), b"from the year 11476").unwrap();
    std::fs::write(dir.path().join("past.bin"), b"from 1969").unwrap();
    // `touch -d @300000000000`: tmpfs, ext4 and btrfs hold it; an archive can carry it.
    set_mtime(
        &dir.path().join("future.bin"),
        UNIX_EPOCH + Duration::from_secs(300_000_000_000),
    );
    set_mtime(
        &dir.path().join("past.bin"),
        UNIX_EPOCH - Duration::from_secs(1000),
    );
    for strategy in STRATEGIES {
        let server = Server::start(strategy, dir.path(), &["--max-connections", "3"]);
        // More requests than slots: a leaked slot would turn the last ones into 503.
        for _ in 0..5 {
            let future = get(server.addr, "/future.bin", &[]);
            assert_eq!(future.status, 200, "{strategy}");
            assert_eq!(future.body, b"from the year 11476");
            assert_eq!(future.header("Last-Modified"), None, "{strategy}");
            let etag = future.header("ETag").unwrap();
            assert!(etag.starts_with("\"45d964b800."), "{etag}");
            let past = get(server.addr, "/past.bin", &[]);
            assert_eq!((past.status, past.header("Last-Modified")), (200, None));
            // Date preconditions cannot apply; the tag still does.
            let revalidated = get(
                server.addr,
                "/future.bin",
                &[
                    ("If-Modified-Since", "Fri, 31 Dec 9999 23:59:59 GMT"),
                    ("If-None-Match", etag),
                ],
            );
            assert_eq!(revalidated.status, 304);
            let listing = get(server.addr, "/", &[]);
            assert_eq!(listing.status, 200, "{strategy}");
            assert!(String::from_utf8_lossy(&listing.body).contains("future.bin"));
        }
        assert_eq!(
            get(server.addr, "/hello.txt", &[]).status,
            200,
            "{strategy}"
        );
    }
}

#[test]
fn dotfiles_are_404_and_unlisted_unless_hidden_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".env"), b"SECRET=1").unwrap();
    std::fs::create_dir_all(dir.path().join(".git")).unwrap();
    std::fs::write(dir.path().join(".git/config"), b"[core]").unwrap();
    std::fs::create_dir_all(dir.path().join(".well-known/acme-challenge")).unwrap();
    std::fs::write(dir.path().join(".well-known/acme-challenge/token"), b"ok").unwrap();
    std::fs::create_dir_all(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/.htpasswd"), b"user:hash").unwrap();
    std::fs::write(dir.path().join("visible.txt"), b"v").unwrap();
    for strategy in STRATEGIES {
        let server = Server::start(strategy, dir.path(), &[]);
        for path in [
            "/.env",
            "/.git/config",
            "/.git/",
            "/sub/.htpasswd",
            "/%2eenv",
        ] {
            assert_eq!(get(server.addr, path, &[]).status, 404, "{strategy} {path}");
        }
        let token = get(server.addr, "/.well-known/acme-challenge/token", &[]);
        assert_eq!((token.status, token.body.as_slice()), (200, &b"ok"[..]));
        let root = String::from_utf8(get(server.addr, "/", &[]).body).unwrap();
        assert!(
            root.contains("visible.txt") && root.contains(".well-known/"),
            "{root}"
        );
        assert!(!root.contains(".env") && !root.contains(".git"), "{root}");
        let sub = get(server.addr, "/sub/", &[("Accept", "application/json")]);
        assert_eq!(String::from_utf8(sub.body).unwrap(), "[]");
    }
    let server = Server::start("sendfile", dir.path(), &["--hidden"]);
    assert_eq!(get(server.addr, "/.env", &[]).body, b"SECRET=1");
    assert!(String::from_utf8(get(server.addr, "/", &[]).body)
        .unwrap()
        .contains(".git/"));
    let config = dir.path().join("ioserve.toml");
    std::fs::write(&config, "hidden = true\n").unwrap();
    let server = Server::start(
        "sendfile",
        dir.path(),
        &["--config", config.to_str().unwrap()],
    );
    assert_eq!(get(server.addr, "/.git/config", &[]).body, b"[core]");
}

#[test]
fn a_second_instance_cannot_share_the_port() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), b"hello").unwrap();
    let first = Server::start("sendfile", dir.path(), &["--metrics-listen", "127.0.0.1:0"]);
    let metrics = first.metrics.unwrap();
    for (listen, metrics_listen, taken) in [
        (
            first.addr.to_string(),
            "127.0.0.1:0".to_string(),
            first.addr,
        ),
        ("127.0.0.1:0".to_string(), metrics.to_string(), metrics),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_ioserve"))
            .arg(dir.path())
            .args(["--listen", &listen, "--metrics-listen", &metrics_listen])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("cannot listen on {taken}"))
                && stderr.to_lowercase().contains("address already in use"),
            "{stderr}"
        );
    }
    assert_eq!(get(first.addr, "/hello.txt", &[]).status, 200);
}

#[test]
fn directory_redirects_never_name_another_host() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pub/a b")).unwrap();
    for strategy in STRATEGIES {
        let server = Server::start(strategy, dir.path(), &[]);
        for (target, location) in [
            ("//pub", "/pub/"),
            ("//pub?x=1", "/pub/?x=1"),
            ("/./pub//a%20b", "/pub/a%20b/"),
            ("/pub", "/pub/"),
        ] {
            let response = raw(
                server.addr,
                format!("GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
            );
            assert_eq!(
                (response.status, response.header("Location")),
                (301, Some(location)),
                "{strategy} {target}"
            );
        }
    }
}

/// A keep-alive connection that has asked for `path` and read its 200: the client
/// then idles.
fn kept_alive_after(addr: std::net::SocketAddr, path: &str) -> BufReader<std::net::TcpStream> {
    let mut stream = connect(addr);
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .unwrap();
    let mut reader = BufReader::new(stream);
    assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
    reader
}

#[test]
fn idle_keep_alive_connections_make_room_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), b"hello").unwrap();
    // Waiting in their tasks, and parked (after a second of idling) without one.
    for (strategy, parked) in STRATEGIES.iter().flat_map(|s| [(s, false), (s, true)]) {
        let server = Server::start(
            strategy,
            dir.path(),
            &["--max-connections", "2", "--metrics-listen", "127.0.0.1:0"],
        );
        let keep_alive = |count: u64| {
            let reader = kept_alive_after(server.addr, "/hello.txt");
            // Idle since the server put it on the idle list, which may trail the
            // response: the newer one must go idle after it.
            match parked {
                true => drop(wait_for_metric(
                    &server,
                    "ioserve_connections_parked",
                    |n| n == count,
                )),
                false => wait_until_quiescent(&server),
            }
            reader
        };
        let mut oldest = keep_alive(1);
        let mut newer = keep_alive(2);
        // At the limit: the new client is admitted, the oldest idle one is closed.
        assert_eq!(
            get(server.addr, "/hello.txt", &[]).status,
            200,
            "{strategy}"
        );
        let mut rest = Vec::new();
        assert_eq!(oldest.read_to_end(&mut rest).unwrap(), 0, "{strategy}");
        newer
            .get_mut()
            .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut newer, false).unwrap().status, 200);
        // Counted as the connection is closed, which the client may see first.
        wait_for_metric(&server, "ioserve_idle_connections_closed_total", |n| n == 1);
    }
}

#[test]
fn idle_connections_are_parked_then_served_again_or_timed_out() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), b"hello").unwrap();
    let big = random_bytes(256 << 10, 7);
    std::fs::write(dir.path().join("big.bin"), &big).unwrap();
    for strategy in STRATEGIES {
        let server = Server::start(
            strategy,
            dir.path(),
            &["--idle-timeout", "3", "--metrics-listen", "127.0.0.1:0"],
        );
        let parked =
            |check: fn(u64) -> bool| wait_for_metric(&server, "ioserve_connections_parked", check);
        let keep_alive = || kept_alive_after(server.addr, "/hello.txt");
        let mut asks_again = keep_alive();
        let mut pipelines = keep_alive();
        let waits = keep_alive();
        let closes = keep_alive();
        // Each is parked once it has idled a second.
        parked(|n| n == 4);
        // Woken by a request that arrives in two parts: answered whole.
        let stream = asks_again.get_mut();
        stream.write_all(b"GET /big.bin HTTP/1.1\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        stream.write_all(b"Host: t\r\n\r\n").unwrap();
        let response = read_response(&mut asks_again, false).unwrap();
        assert_eq!(response.status, 200, "{strategy}");
        assert!(response.body == big, "{strategy}: the body differs");
        // Two requests in one write.
        pipelines
            .get_mut()
            .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut pipelines, false).unwrap().body, b"hello");
        assert!(
            read_response(&mut pipelines, false).unwrap().body == big,
            "{strategy}"
        );
        // A client that closes leaves the lot; the woken ones are parked again.
        drop(closes);
        wait_for_metric(&server, "ioserve_connections_open", |n| n == 3);
        parked(|n| n == 3);
        // The idle timeout closes parked connections, 3 s after their last answer.
        for (name, mut client) in [
            ("asks_again", asks_again),
            ("pipelines", pipelines),
            ("waits", waits),
        ] {
            let mut rest = Vec::new();
            assert_eq!(
                client.read_to_end(&mut rest).unwrap(),
                0,
                "{strategy} {name}"
            );
        }
        wait_for_no_connections(&server);
        parked(|n| n == 0);
    }
}

/// Paths the server process holds open (descriptors and mappings) to deleted files.
fn deleted_files_held(server: &Server) -> Vec<String> {
    let pid = server.pid();
    let mut held: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .map(|target| target.to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    held.extend(
        std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned),
    );
    held.retain(|line| line.ends_with("(deleted)"));
    held
}

#[test]
fn deleted_files_are_closed_without_being_asked_for_again() {
    for strategy in STRATEGIES {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("gone.bin"), random_bytes(1 << 20, 4)).unwrap();
        std::fs::write(dir.path().join("replaced.bin"), b"old").unwrap();
        let server = Server::start(strategy, dir.path(), &["--open-file-cache-valid", "200ms"]);
        assert_eq!(get(server.addr, "/gone.bin", &[]).status, 200);
        assert_eq!(get(server.addr, "/replaced.bin", &[]).body, b"old");
        std::fs::remove_file(dir.path().join("gone.bin")).unwrap();
        std::fs::write(dir.path().join("new"), b"new").unwrap();
        std::fs::rename(dir.path().join("new"), dir.path().join("replaced.bin")).unwrap();
        // Within about twice the validity (400 ms) on an idle machine; a loaded one
        // may take longer.
        wait_until(
            &format!("{strategy}: the deleted files closed"),
            || deleted_files_held(&server),
            Vec::is_empty,
        );
        assert_eq!(get(server.addr, "/replaced.bin", &[]).body, b"new");
    }
}

/// HAProxy in the foreground on 127.0.0.1, round-robin over `backends`; killed when
/// dropped.
struct Haproxy {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    fn start(backends: &[std::net::SocketAddr]) -> Haproxy {
        let haproxy = require("haproxy", "haproxy");
        let dir = tempfile::tempdir().unwrap();
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut config = format!(
            "global\n  maxconn 100\n\
             defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             frontend downloads\n  bind {addr}\n  default_backend replicas\n\
             backend replicas\n  balance roundrobin\n"
        );
        for (i, backend) in backends.iter().enumerate() {
            config.push_str(&format!("  server replica{i} {backend}\n"));
        }
        let file = dir.path().join("haproxy.cfg");
        std::fs::write(&file, config).unwrap();
        let child = Command::new(haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_until(
            &format!("haproxy to listen on {addr}"),
            || std::net::TcpStream::connect(addr).is_ok(),
            |&connected| connected,
        );
        Haproxy {
            child,
            addr,
            _dir: dir,
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_download_resumed_on_another_replica_behind_haproxy_is_whole() {
    use sha2::{Digest, Sha256};
    let data = random_bytes(64 << 20, 21);
    let modified = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
    // Two copies of the tree, as rsync -t or cp -p make them: other inodes, same
    // size and mtime.
    let trees: Vec<tempfile::TempDir> = (0..2)
        .map(|_| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("image.iso"), &data).unwrap();
            set_mtime(&dir.path().join("image.iso"), modified);
            dir
        })
        .collect();
    let replicas: Vec<Server> = trees
        .iter()
        .zip(["sendfile", "mmap"])
        .map(|(tree, strategy)| Server::start(strategy, tree.path(), &[]))
        .collect();
    let proxy = Haproxy::start(&[replicas[0].addr, replicas[1].addr]);

    // The first attempt stops after 10 MiB.
    let mut stream = connect(proxy.addr);
    stream
        .write_all(b"GET /image.iso HTTP/1.1\r\nHost: mirror\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    while !head.ends_with("\r\n\r\n") {
        let mut byte = [0u8];
        reader.read_exact(&mut byte).unwrap();
        head.push(byte[0] as char);
    }
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let etag = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("etag: ")
                .or_else(|| l.strip_prefix("ETag: "))
        })
        .unwrap()
        .trim()
        .to_string();
    let mut got = vec![0u8; 10 << 20];
    reader.read_exact(&mut got).unwrap();
    drop(reader);

    // Resumed with If-Range: round-robin sends it to the other replica, whose tag must
    // match for the range to be honoured (else the whole file would come back).
    let range = format!("bytes={}-", got.len());
    let rest = get(
        proxy.addr,
        "/image.iso",
        &[("Range", &range), ("If-Range", &etag)],
    );
    assert_eq!(rest.status, 206, "the other replica's ETag differs: {etag}");
    assert_eq!(rest.header("ETag"), Some(etag.as_str()));
    got.extend_from_slice(&rest.body);
    assert_eq!(Sha256::digest(&got), Sha256::digest(&data));
    // And once more, so that each replica has answered a resumption.
    let again = get(
        proxy.addr,
        "/image.iso",
        &[("Range", &range), ("If-Range", &etag)],
    );
    assert_eq!(again.status, 206);
}

#[test]
fn without_openat2_paths_are_walked_with_the_same_guarantees() {
    let strace = require("strace", "strace");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"secret").unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/inside"), b"inside").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("out")).unwrap();
    std::os::unix::fs::symlink("../sub/inside", dir.path().join("sub/up")).unwrap();
    std::os::unix::fs::symlink("sub", dir.path().join("in")).unwrap();
    // An old kernel (ENOSYS) and an old container seccomp profile (EPERM).
    for error in ["ENOSYS", "EPERM"] {
        for strategy in STRATEGIES {
            let inject = format!("inject=openat2:error={error}");
            let wrapper = [
                strace.to_str().unwrap(),
                "-f",
                "-qq",
                "--seccomp-bpf",
                "-o",
                "/dev/null",
                "-e",
                "trace=openat2",
                "-e",
                &inject,
            ];
            let mut server = Server::launch(&wrapper, strategy, dir.path(), &[], true);
            for (path, status, body) in [
                ("/sub/inside", 200, &b"inside"[..]),
                ("/sub/up", 200, b"inside"),
                ("/in/inside", 200, b"inside"),
                ("/out", 403, b"403 Forbidden\n"),
                ("/missing", 404, b"404 Not Found\n"),
            ] {
                let response = get(server.addr, path, &[]);
                assert_eq!(
                    (response.status, response.body.as_slice()),
                    (status, body),
                    "{error} {strategy} {path}"
                );
            }
            let listing = get(server.addr, "/sub/", &[]);
            assert_eq!(listing.status, 200);
            let log = server.stop_and_read_log();
            assert!(
                log.contains("resolver=\"component walk\"") && log.contains("openat2 is missing"),
                "{error} {strategy}: {log}"
            );
        }
    }
}

#[test]
fn a_small_descriptor_limit_shrinks_the_budget_instead_of_failing_requests() {
    let prlimit = require("prlimit", "util-linux");
    let dir = tempfile::tempdir().unwrap();
    for i in 0..64 {
        std::fs::write(dir.path().join(format!("f{i}")), format!("file {i}")).unwrap();
    }
    for strategy in STRATEGIES {
        let wrapper = [prlimit.to_str().unwrap(), "--nofile=48:48"];
        let mut server = Server::launch(&wrapper, strategy, dir.path(), &[], true);
        let statuses: Vec<u16> = std::thread::scope(|scope| {
            let clients: Vec<_> = (0..24)
                .map(|client| {
                    let addr = server.addr;
                    scope.spawn(move || {
                        (0..8)
                            .map(|i| {
                                let path = format!("/f{}", (client * 8 + i) % 64);
                                let request = request_bytes("GET", &path, &[]);
                                let mut stream = connect(addr);
                                stream.write_all(request.as_bytes()).unwrap();
                                let Ok(response) =
                                    read_response(&mut BufReader::new(stream), false)
                                else {
                                    return 0;
                                };
                                if response.status == 200 {
                                    assert_eq!(
                                        response.body,
                                        format!("file {}", &path[2..]).into_bytes()
                                    );
                                }
                                response.status
                            })
                            .collect::<Vec<u16>>()
                    })
                })
                .collect();
            clients
                .into_iter()
                .flat_map(|c| c.join().unwrap())
                .collect()
        });
        if !statuses.iter().all(|s| matches!(s, 200 | 503)) {
            server.signal("TERM");
            server.wait_exit(SETTLE);
            let log = server.log_after_exit();
            let log: Vec<&str> = log
                .lines()
                .filter(|l| !l.starts_with("127.0.0.1 - - ["))
                .collect();
            panic!("{strategy}: {statuses:?}\n{}", log.join("\n"));
        }
        // 24 clients at once against 6 or 9 admitted connections: some 503, no 500
        // and no connection closed without an answer.
        let served = statuses.iter().filter(|&&s| s == 200).count();
        assert!(served >= 24, "{strategy}: {statuses:?}");
        // The burst's clients have closed their connections; once the server has seen
        // every close (on a busy host, after the clients' threads have ended), its
        // budget is free again and every request is served.
        wait_until_quiescent(&server);
        for i in 0..20 {
            assert_eq!(
                get(server.addr, &format!("/f{i}"), &[]).status,
                200,
                "{strategy}"
            );
        }
        let log = server.stop_and_read_log();
        let admitted = if strategy == "buffered" { 6 } else { 9 };
        assert!(
            log.contains("the open-file limit is 48 descriptors")
                && log.contains(&format!("at most {admitted} connections")),
            "{strategy}: {log}"
        );
        let accept_warnings = log.matches("accept failed").count();
        assert!(
            accept_warnings <= 5,
            "{strategy}: {accept_warnings} accept warnings: {log}"
        );
    }
}

#[test]
fn listings_are_bounded_negotiated_and_link_any_name() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("d")).unwrap();
    for i in 0..30 {
        std::fs::write(dir.path().join(format!("d/f{i:02}")), b"").unwrap();
    }
    let latin1 = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
    std::fs::write(dir.path().join(latin1), b"latin-1 name").unwrap();
    for strategy in STRATEGIES {
        let server = Server::start(strategy, dir.path(), &["--listing-max-entries", "10"]);
        let bounded = get(server.addr, "/d/", &[]);
        let html = String::from_utf8(bounded.body).unwrap();
        assert_eq!(html.matches("<a href=\"f").count(), 10, "{strategy}");
        assert!(html.contains("20 more entries are not listed"), "{html}");
        let json = get(server.addr, "/d/", &[("Accept", "application/json")]);
        assert_eq!(json.header("Ioserve-Listing-Omitted"), Some("20"));
        for (accept, content_type) in [
            ("application/json", "application/json"),
            ("application/json;q=0", "text/html; charset=utf-8"),
            (
                "text/html;q=0.4, application/json;q=0.8",
                "application/json",
            ),
            ("text/html, */*;q=0.8", "text/html; charset=utf-8"),
        ] {
            let response = get(server.addr, "/", &[("Accept", accept)]);
            assert_eq!(
                response.header("Content-Type"),
                Some(content_type),
                "{accept}"
            );
            assert_eq!(response.header("Vary"), Some("Accept"), "{accept}");
        }
        let head = raw(server.addr, request_bytes("HEAD", "/", &[]).as_bytes());
        assert_eq!(head.header("Vary"), Some("Accept"));
        let root = String::from_utf8_lossy(&get(server.addr, "/", &[]).body).into_owned();
        assert!(
            root.contains("<a href=\"caf%E9.txt\">caf\u{fffd}.txt</a>"),
            "{root}"
        );
        assert_eq!(get(server.addr, "/caf%E9.txt", &[]).body, b"latin-1 name");
    }
}

#[test]
fn a_huge_listing_does_not_stall_the_worker() {
    // 100 000 files, one worker: while the listing is built (on the blocking pool),
    // a small file on another connection of the same worker is answered before the
    // listing's head goes out. Built on the event loop, it would wait for the listing.
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::create_dir(dir.path().join("many")).unwrap();
    for i in 0..100_000 {
        std::fs::File::create(dir.path().join(format!("many/{i:06}"))).unwrap();
    }
    std::fs::write(dir.path().join("small.txt"), b"small").unwrap();
    let server = Server::start(
        "sendfile",
        dir.path(),
        &["--workers", "1", "--listing-max-entries", "10000000"],
    );
    // The small request goes out once the server is building the listing (it holds
    // the directory open), not after a fixed delay. A loaded host may still finish the
    // listing before it answers the small file: such a run shows nothing and is tried
    // again; built on the event loop, no run could answer the small file first.
    let many = dir.path().canonicalize().unwrap().join("many");
    let mut orders = Vec::new();
    for _ in 0..5 {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            let listing_done = done_tx.clone();
            let listing = scope.spawn(move || {
                let mut stream = connect(server.addr);
                stream
                    .write_all(request_bytes("GET", "/many/", &[]).as_bytes())
                    .unwrap();
                // The head goes out as soon as the listing is built.
                let mut first = [0u8; 1];
                stream.read_exact(&mut first).unwrap();
                listing_done.send("listing").unwrap();
                let mut rest = Vec::new();
                stream.read_to_end(&mut rest).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&rest).matches("<a href=").count(),
                    100_001
                );
            });
            let building = wait_until(
                "the server to open the directory, or the listing to come",
                || (holds_open(&server, &many), listing.is_finished()),
                |&(open, finished)| open || finished,
            );
            if building.0 {
                assert_eq!(get(server.addr, "/small.txt", &[]).body, b"small");
                done_tx.send("small").unwrap();
            }
        });
        drop(done_tx);
        let order: Vec<&str> = done_rx.iter().collect();
        if order == ["small", "listing"] {
            break;
        }
        orders.push(order);
    }
    assert!(
        orders.len() < 5,
        "the small file never came before the listing: {orders:?}"
    );
    // The default bound keeps the listing to 10 000 entries.
    let server = Server::start("sendfile", dir.path(), &[]);
    let listing = get(server.addr, "/many/", &[]);
    let html = String::from_utf8_lossy(&listing.body);
    assert_eq!(html.matches("<a href=\"0").count(), 10_000);
    assert!(html.contains("90000 more entries are not listed"));
}

/// Whether the server process has `path` open.
fn holds_open(server: &Server, path: &std::path::Path) -> bool {
    std::fs::read_dir(format!("/proc/{}/fd", server.pid()))
        .map(|fds| {
            fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                .any(|target| target == path)
        })
        .unwrap_or(false)
}

#[test]
fn thousands_of_idle_and_slow_clients_cost_little_memory() {
    const CLIENTS: usize = 3000;
    assert!(
        raise_nofile() > CLIENTS as u64 + 100,
        "the test needs {CLIENTS} descriptors"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("small.txt"), b"small").unwrap();
    std::fs::write(dir.path().join("big.bin"), random_bytes(8 << 20, 3)).unwrap();
    for strategy in ["sendfile", "mmap"] {
        let server = Server::start(strategy, dir.path(), &["--metrics-listen", "127.0.0.1:0"]);
        // Warm: the first connections grow the runtime's tables once.
        drop(get(server.addr, "/small.txt", &[]));
        let before = server.anon_kib();
        // Idle keep-alive clients, each after one request.
        let idle: Vec<BufReader<std::net::TcpStream>> = (0..CLIENTS)
            .map(|_| kept_alive_after(server.addr, "/small.txt"))
            .collect();
        wait_for_metric(&server, "ioserve_connections_open", |n| n == CLIENTS as u64);
        let per_idle = (server.anon_kib().saturating_sub(before)) * 1024 / CLIENTS as u64;
        drop(idle);
        wait_for_no_connections(&server);
        let before = server.anon_kib();
        // Clients that asked for 8 MiB and read nothing: each download stays in flight.
        let slow: Vec<std::net::TcpStream> = (0..CLIENTS / 3)
            .map(|_| {
                let mut stream = connect(server.addr);
                stream
                    .write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
                    .unwrap();
                stream
            })
            .collect();
        // Measured once every download is in flight, not while requests still arrive.
        wait_for_metric(&server, "ioserve_downloads_in_flight", |n| {
            n == (CLIENTS / 3) as u64
        });
        let per_download = (server.anon_kib().saturating_sub(before)) * 1024 / (CLIENTS / 3) as u64;
        drop(slow);
        // Anonymous memory: a mapping's page-cache pages are not the server's to
        // spend. The target is 2 KB (release build, 10 000 clients: cargo xtask
        // loadtest reports it beside nginx); this debug build at 3000 may use 2.5 KB
        // idle, and a download in flight adds its response state.
        assert!(
            per_idle <= 2560,
            "{strategy}: {per_idle} bytes per idle connection"
        );
        assert!(
            per_download <= 4096,
            "{strategy}: {per_download} bytes per downloading connection"
        );
    }
}
