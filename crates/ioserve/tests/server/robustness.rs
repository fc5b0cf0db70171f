//! A server survives every client and every change to its files, under every strategy.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;

use crate::support::*;

fn assert_alive(server: &mut Server) {
    assert!(server.child.try_wait().unwrap().is_none(), "server died");
    assert_eq!(get(server.addr, "/alive.txt", &[]).body, b"alive");
}

#[test]
fn truncation_mid_download_cuts_the_connection_not_the_server() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("alive.txt"), b"alive").unwrap();
    let data = random_bytes(48 << 20, 7);
    for strategy in STRATEGIES {
        let path = dir.path().join("shrinking.bin");
        std::fs::write(&path, &data).unwrap();
        let mut server = Server::start(strategy, dir.path(), &[]);
        let (mut reader, len) = start_download(&server, "/shrinking.bin");
        assert_eq!(len, data.len());
        let mut body = vec![0u8; 1 << 20];
        reader.read_exact(&mut body).unwrap();
        // Page-aligned, so that no page the kernel still holds for the socket is zeroed.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(8 << 20)
            .unwrap();
        reader.read_to_end(&mut body).unwrap();
        assert!(
            body.len() < data.len(),
            "{strategy}: the body must be cut short"
        );
        assert!(
            body == data[..body.len()],
            "{strategy}: wrong bytes before the cut"
        );
        assert_alive(&mut server);
    }
}

#[test]
fn truncation_before_a_later_part_of_a_multipart_body_cuts_the_connection() {
    // The first part outgrows every socket buffer, so the file shrinks while it is
    // sent, and the second part starts past the new end: its first chunk (sent by the
    // size the response's fstat gave, without another) must fail, not wait.
    const MIB: usize = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("alive.txt"), b"alive").unwrap();
    let data = random_bytes(80 * MIB, 11);
    let ranges = format!("bytes=0-{},{}-{}", 48 * MIB - 1, 64 * MIB, 72 * MIB - 1);
    let request = request_bytes("GET", "/parts.bin", &[("Range", &ranges)]);
    for strategy in STRATEGIES {
        let path = dir.path().join("parts.bin");
        std::fs::write(&path, &data).unwrap();
        let mut server = Server::start(strategy, dir.path(), &[]);
        let mut whole = Vec::new();
        let mut stream = connect(server.addr);
        stream.write_all(request.as_bytes()).unwrap();
        stream.read_to_end(&mut whole).unwrap();
        let split = whole.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let (head, expected) = whole.split_at(split);
        assert!(
            String::from_utf8_lossy(head).starts_with("HTTP/1.1 206 "),
            "{strategy}: {}",
            String::from_utf8_lossy(head)
        );
        // Where the first part's bytes end in the body.
        let part_one = expected.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let part_one_end = part_one + 48 * MIB;
        assert!(expected[part_one..part_one_end] == data[..48 * MIB]);

        let mut stream = connect(server.addr);
        stream.write_all(request.as_bytes()).unwrap();
        let mut reader = BufReader::new(stream);
        // The same head but for its Date, which may have turned a second.
        let second_head = read_head(&mut reader);
        let without_date = |head: &[u8]| -> Vec<String> {
            String::from_utf8_lossy(head)
                .lines()
                .filter(|line| !line.starts_with("Date:"))
                .map(str::to_owned)
                .collect()
        };
        assert_eq!(without_date(&second_head), without_date(head), "{strategy}");
        let mut received = vec![0u8; MIB];
        reader.read_exact(&mut received).unwrap();
        // Page-aligned, between the parts.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(56 * MIB as u64)
            .unwrap();
        reader
            .read_to_end(&mut received)
            .unwrap_or_else(|e| panic!("{strategy}: the cut body must end, not stall: {e}"));
        let body = &received[..];
        assert!(
            body.len() < expected.len(),
            "{strategy}: the body must be cut short"
        );
        assert!(
            body.len() >= part_one_end,
            "{strategy}: the first part whole, {} of {part_one_end} bytes",
            body.len()
        );
        assert!(
            *body == expected[..body.len()],
            "{strategy}: wrong bytes before the cut"
        );
        assert_alive(&mut server);
    }
}

#[test]
fn rename_mid_download_keeps_sending_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("alive.txt"), b"alive").unwrap();
    let old = random_bytes(24 << 20, 1);
    let new = random_bytes(24 << 20, 2);
    for strategy in STRATEGIES {
        let path = dir.path().join("release.bin");
        std::fs::write(&path, &old).unwrap();
        let mut server = Server::start(strategy, dir.path(), &[]);
        let (mut reader, _) = start_download(&server, "/release.bin");
        let mut body = vec![0u8; 1 << 20];
        reader.read_exact(&mut body).unwrap();
        let staged = dir.path().join("release.bin.new");
        std::fs::write(&staged, &new).unwrap();
        std::fs::rename(&staged, &path).unwrap();
        reader.read_to_end(&mut body).unwrap();
        assert!(body == old, "{strategy}: the old file, whole");
        // New requests see the new file once the open-file cache re-resolves the path
        // (--open-file-cache-valid, 1 s by default).
        wait_until(
            &format!("{strategy}: the new file at the renamed path"),
            || {
                let response = get(server.addr, "/release.bin", &[]);
                (response.status, response.body == new)
            },
            |&(_, is_new)| is_new,
        );
        assert_alive(&mut server);
    }
}

#[test]
fn aborted_downloads_release_fds_and_memory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("alive.txt"), b"alive").unwrap();
    std::fs::write(dir.path().join("big.bin"), random_bytes(16 << 20, 3)).unwrap();
    for strategy in STRATEGIES {
        let mut server = Server::start(strategy, dir.path(), &["--metrics-listen", "127.0.0.1:0"]);
        let abort = |server: &Server, count: usize| {
            std::thread::scope(|scope| {
                for _ in 0..8 {
                    scope.spawn(|| {
                        for _ in 0..count / 8 {
                            let (mut reader, _) = start_download(server, "/big.bin");
                            let mut some = vec![0u8; 64 * 1024];
                            reader.read_exact(&mut some).unwrap();
                        }
                    });
                }
            });
        };
        abort(&server, 40);
        // Warm-up done once the server has closed the aborted connections: what is
        // open then is the baseline (listeners, runtime, log).
        wait_for_no_connections(&server);
        let fds = server.open_fds();
        let rss = server.rss_kib();
        abort(&server, 1000);
        wait_for_no_connections(&server);
        wait_until(
            &format!("{strategy}: descriptors back to the baseline {fds}"),
            || server.open_fds(),
            |&open| open <= fds,
        );
        let grown = server.rss_kib().saturating_sub(rss);
        assert!(
            grown < 8 * 1024,
            "{strategy}: RSS grew by {grown} KiB over {rss} KiB"
        );
        assert_alive(&mut server);
    }
}

#[test]
fn malformed_heads_get_their_status() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("alive.txt"), b"alive").unwrap();
    let huge_header = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100_000)
    );
    let huge_target = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(20_000));
    let many_headers = format!(
        "GET / HTTP/1.1\r\nHost: t\r\n{}\r\n",
        (0..200)
            .map(|i| format!("X-{i}: v\r\n"))
            .collect::<String>()
    );
    let cases: Vec<(&[u8], u16)> = vec![
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\nHost: t\r\n\r\n", 505),
        (b"GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n", 400),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
        (
            b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (b"GET %zz HTTP/1.1\r\nHost: t\r\n\r\n", 400),
        (huge_header.as_bytes(), 431),
        (huge_target.as_bytes(), 431),
        (many_headers.as_bytes(), 431),
    ];
    for strategy in STRATEGIES {
        let mut server = Server::start(strategy, dir.path(), &[]);
        for (request, status) in &cases {
            let response = raw(server.addr, request);
            let shown = String::from_utf8_lossy(&request[..request.len().min(40)]);
            assert_eq!(response.status, *status, "{strategy}: {shown}");
            assert_eq!(response.header("Connection"), Some("close"));
        }
        assert_alive(&mut server);
    }
}

#[test]
fn slow_and_stalled_clients_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("alive.txt"), b"alive").unwrap();
    std::fs::write(dir.path().join("big.bin"), random_bytes(32 << 20, 5)).unwrap();
    let timeouts = [
        "--header-timeout",
        "1s",
        "--idle-timeout",
        "1s",
        "--send-timeout",
        "1s",
    ];
    for strategy in STRATEGIES {
        let mut server = Server::start(
            strategy,
            dir.path(),
            &[&timeouts[..], &["--metrics-listen", "127.0.0.1:0"]].concat(),
        );
        // A head that never completes: 408.
        let mut slow = connect(server.addr);
        slow.write_all(b"GET /alive.txt HT").unwrap();
        // Slowloris: a byte at a time, never finishing.
        let loris: Vec<TcpStream> = (0..20).map(|_| connect(server.addr)).collect();
        for _ in 0..4 {
            for stream in &loris {
                let _ = (&*stream).write_all(b"X");
            }
            // Others are served meanwhile.
            assert_alive(&mut server);
            // Pacing the dribble across the header timeout, not waiting for a state.
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        // The header timeout (1 s) answers long before the client's read timeout
        // (30 s): a 408 at all shows it fired.
        let response = read_response(&mut BufReader::new(&mut slow), false).unwrap();
        assert_eq!(response.status, 408, "{strategy}");
        for stream in loris {
            let mut rest = Vec::new();
            let _ = (&stream).read_to_end(&mut rest);
            assert!(
                String::from_utf8_lossy(&rest).starts_with("HTTP/1.1 408"),
                "{strategy}"
            );
        }

        // An idle keep-alive connection is closed after the idle timeout.
        let mut idle = connect(server.addr);
        idle.write_all(b"GET /alive.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut reader = BufReader::new(idle);
        assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());

        // A download nobody reads is cut after the send timeout.
        let (mut reader, len) = start_download(&server, "/big.bin");
        // Cut once the server has closed it (no connection open); only then read.
        wait_for_no_connections(&server);
        let mut body = Vec::new();
        let _ = reader.read_to_end(&mut body);
        assert!(body.len() < len, "{strategy}: stalled download cut");
        assert_alive(&mut server);
    }
}
