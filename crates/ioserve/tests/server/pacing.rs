//! `--limit-rate`, `--limit-rate-after` and `--max-conns-per-ip`, under every strategy:
//! timed downloads by curl, wget and aria2c under a rate (the bytes intact, the time
//! no shorter than the rate allows), the first bytes at full speed, and a third
//! connection from one address refused with 503 while two are open.

use std::io::{BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

/// The size of the paced downloads.
const BIG: usize = 2 << 20;

/// A served tree with one file of [`BIG`] random bytes, `big.bin`.
fn fixture() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let bytes = random_bytes(BIG, 37);
    std::fs::write(dir.path().join("big.bin"), &bytes).unwrap();
    (dir, bytes)
}

/// Runs `client` (its program and arguments) to download into `out`; returns how long
/// it took and the bytes it wrote.
fn timed_download(client: &[&str], out: &Path) -> (Duration, Vec<u8>) {
    let started = Instant::now();
    let status = Command::new(client[0]).args(&client[1..]).status().unwrap();
    let took = started.elapsed();
    assert!(status.success(), "{client:?} failed: {status}");
    (took, std::fs::read(out).unwrap())
}

#[test]
fn a_rate_paces_curl_wget_and_aria2c_under_every_strategy() {
    let curl = testdata::require("curl", "curl");
    let wget = testdata::require("wget", "wget");
    let aria2c = testdata::require("aria2c", "aria2");
    let (dir, bytes) = fixture();
    std::thread::scope(|scope| {
        for strategy in STRATEGIES {
            let (dir, bytes) = (dir.path(), &bytes);
            let (curl, wget, aria2c) = (&curl, &wget, &aria2c);
            scope.spawn(move || {
                let server = Server::start(
                    strategy,
                    dir,
                    &["--limit-rate", "512k", "--metrics-listen", "127.0.0.1:0"],
                );
                let url = format!("http://{}/big.bin", server.addr);
                let into = tempfile::tempdir().unwrap();
                let out = |name: &str| into.path().join(name);
                let (curl_out, wget_out) = (out("curl.bin"), out("wget.bin"));
                let aria_dir = into.path().to_str().unwrap();
                let clients: [(Vec<&str>, _); 3] = [
                    (
                        vec![
                            curl.to_str().unwrap(),
                            "-sS",
                            "--fail",
                            "-o",
                            curl_out.to_str().unwrap(),
                            &url,
                        ],
                        curl_out.clone(),
                    ),
                    (
                        vec![
                            wget.to_str().unwrap(),
                            "-q",
                            "-O",
                            wget_out.to_str().unwrap(),
                            &url,
                        ],
                        wget_out.clone(),
                    ),
                    (
                        vec![
                            aria2c.to_str().unwrap(),
                            "-q",
                            "-x1",
                            "-s1",
                            "--file-allocation=none",
                            "--allow-overwrite=true",
                            "-d",
                            aria_dir,
                            "-o",
                            "aria2c.bin",
                            &url,
                        ],
                        out("aria2c.bin"),
                    ),
                ];
                // Each client on a connection of its own, all three at once: the rate is
                // per connection.
                std::thread::scope(|clients_scope| {
                    for (client, out) in &clients {
                        clients_scope.spawn(move || {
                            let (took, got) = timed_download(client, out);
                            assert!(got == *bytes, "{strategy}: {} got other bytes", client[0]);
                            // 2 MiB at 512 KiB/s, less the first eighth of a second's
                            // bucket, is 3.875 s: it cannot be faster.
                            assert!(
                                took >= Duration::from_millis(3500),
                                "{strategy}: {} took only {took:?}",
                                client[0]
                            );
                            assert!(
                                took < Duration::from_secs(60),
                                "{strategy}: {} took {took:?}",
                                client[0]
                            );
                        });
                    }
                });
                wait_for_metric(&server, "ioserve_paced_responses_total", |n| n == 3);
            });
        }
    });
}

#[test]
fn the_first_bytes_after_go_at_full_speed_under_every_strategy() {
    let (dir, bytes) = fixture();
    std::thread::scope(|scope| {
        for strategy in STRATEGIES {
            let (dir, bytes) = (dir.path(), &bytes);
            scope.spawn(move || {
                let server = Server::start(
                    strategy,
                    dir,
                    &["--limit-rate", "256k", "--limit-rate-after", "1m"],
                );
                let started = Instant::now();
                let (mut body, len) = start_download(&server, "/big.bin");
                assert_eq!(len, BIG);
                let mut got = vec![0u8; BIG];
                body.read_exact(&mut got[..1 << 20]).unwrap();
                let first = started.elapsed();
                body.read_exact(&mut got[1 << 20..]).unwrap();
                let all = started.elapsed();
                assert!(got == *bytes, "{strategy}: other bytes");
                // At the rate, the first MiB alone would take 4 s.
                assert!(
                    first < Duration::from_millis(1500),
                    "{strategy}: the first MiB took {first:?}"
                );
                // The second MiB, at 256 KiB/s less a bucket, cannot take under 3.875 s.
                assert!(
                    all - first >= Duration::from_millis(3500),
                    "{strategy}: the paced MiB took only {:?}",
                    all - first
                );
            });
        }
    });
}

/// Sends a GET for the first ten bytes of `/big.bin` on `stream` and reads the response.
fn get_on(stream: &std::net::TcpStream) -> Response {
    let mut writer = stream;
    writer
        .write_all(request_bytes("GET", "/big.bin", &[("Range", "bytes=0-9")]).as_bytes())
        .unwrap();
    read_response(&mut BufReader::new(stream), false).unwrap()
}

#[test]
fn a_third_connection_from_one_address_gets_503_until_one_closes() {
    let (dir, _) = fixture();
    for strategy in STRATEGIES {
        let server = Server::start(
            strategy,
            dir.path(),
            &["--max-conns-per-ip", "2", "--metrics-listen", "127.0.0.1:0"],
        );
        // Two connections, answered (so the server has them), held open.
        let first = connect(server.addr);
        let second = connect(server.addr);
        assert_eq!(get_on(&first).status, 206, "{strategy}");
        assert_eq!(get_on(&second).status, 206, "{strategy}");
        let third = get_on(&connect(server.addr));
        assert_eq!(third.status, 503, "{strategy}");
        assert_eq!(third.header("Retry-After"), Some("1"), "{strategy}");
        assert_eq!(third.header("Connection"), Some("close"), "{strategy}");
        wait_for_metric(&server, "ioserve_connections_open", |open| open == 2);
        drop(first);
        wait_for_metric(&server, "ioserve_connections_open", |open| open == 1);
        let fourth = connect(server.addr);
        assert_eq!(get_on(&fourth).status, 206, "{strategy}");
        let metrics = scrape(server.metrics.unwrap());
        assert_eq!(
            metric_in(&metrics, "ioserve_connections_refused_per_ip_total"),
            1,
            "{strategy}"
        );
        assert_eq!(metric_in(&metrics, "ioserve_connections_refused_total"), 0);
        drop(second);
    }
}
