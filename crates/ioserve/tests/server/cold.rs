//! Cold disks: file data that is not in the page cache is read on the blocking pool
//! (`--cold-reads pool`, the default) and paths the open-file cache does not hold are
//! opened there, so the event loop never waits for the disk. The metrics count both;
//! `--cold-reads inline` does neither. Bodies stay byte for byte the files'.
//!
//! How much this keeps other connections fast is measured, not tested:
//! `cargo xtask loadtest --cold` (crates/ioserve/README.md, "Cold disks").

use std::os::fd::AsFd as _;

use crate::support::*;

/// A file of `len` bytes whose pages are dropped from the page cache, in a directory on
/// the disk that holds the build (tmpfs would keep every page).
fn cold_tree(len: usize) -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let data = random_bytes(len, 4242);
    std::fs::write(dir.path().join("cold.bin"), &data).unwrap();
    (dir, data)
}

fn drop_from_page_cache(path: &std::path::Path) {
    let file = std::fs::File::open(path).unwrap();
    file.sync_all().unwrap();
    rustix::fs::fadvise(file.as_fd(), 0, None, rustix::fs::Advice::DontNeed).unwrap();
}

#[test]
fn cold_data_and_uncached_paths_go_to_the_pool_under_every_strategy() {
    let (dir, data) = cold_tree(9 << 20);
    let path = dir.path().join("cold.bin");
    for strategy in STRATEGIES {
        for cold_reads in ["pool", "inline"] {
            let server = Server::start(
                strategy,
                dir.path(),
                &[
                    "--metrics-listen",
                    "127.0.0.1:0",
                    "--cold-reads",
                    cold_reads,
                    "--open-file-cache-valid",
                    "60s",
                    "--workers",
                    "1",
                ],
            );
            drop_from_page_cache(&path);
            let whole = get(server.addr, "/cold.bin", &[]);
            assert_eq!(whole.status, 200, "{strategy} {cold_reads}");
            assert!(whole.body == data, "{strategy} {cold_reads}: body differs");
            drop_from_page_cache(&path);
            let range = get(
                server.addr,
                "/cold.bin",
                &[("Range", "bytes=3000000-7999999")],
            );
            assert_eq!(range.status, 206);
            assert!(
                range.body == data[3_000_000..8_000_000],
                "{strategy} {cold_reads}"
            );

            // Counted once the response is written, which may trail the client: wait
            // for every request to be counted, then read the settled counters.
            wait_for_metric(&server, "ioserve_requests_total{status=\"200\"}", |n| {
                n == 1
            });
            wait_for_metric(&server, "ioserve_requests_total{status=\"206\"}", |n| {
                n == 1
            });
            wait_for_metric(&server, "ioserve_downloads_in_flight", |n| n == 0);
            let text = scrape(server.metrics.unwrap());
            let windows = metric_in(&text, "ioserve_cold_windows_total");
            let opens = metric_in(&text, "ioserve_offloaded_opens_total");
            match (strategy, cold_reads) {
                // buffered reads on the pool anyway: it has no read-ahead of its own.
                ("buffered", "pool") => assert_eq!(windows, 0),
                (_, "pool") => assert!(
                    windows >= 2,
                    "{strategy}: each cold download reads at least one window on the pool: {windows}"
                ),
                _ => assert_eq!(windows, 0, "{strategy} inline"),
            }
            // The first request opened the path on the pool; the second found it in the
            // open-file cache (one worker: one shard).
            let expected = if cold_reads == "pool" { 1 } else { 0 };
            assert_eq!(opens, expected, "{strategy} {cold_reads}");
        }
    }
}

#[test]
fn paths_that_are_not_files_are_answered_off_the_loop() {
    let (dir, _) = cold_tree(10);
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let server = Server::start(
        "sendfile",
        dir.path(),
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--open-file-cache-valid",
            "60s",
            "--workers",
            "1",
        ],
    );
    assert_eq!(get(server.addr, "/missing", &[]).status, 404);
    assert_eq!(get(server.addr, "/sub", &[]).status, 301);
    assert_eq!(get(server.addr, "/sub/", &[]).status, 200);
    assert_eq!(get(server.addr, "/cold.bin", &[]).status, 200);
    assert_eq!(get(server.addr, "/cold.bin", &[]).status, 200);
    // 4 paths opened off the loop, the fifth request from the cache.
    wait_for_metric(&server, "ioserve_offloaded_opens_total", |n| n == 4);
}

#[test]
fn a_client_that_reads_late_gets_every_byte_of_a_cold_download() {
    // More than loopback's socket buffers hold while the client does not read, so the
    // server meets a full buffer (EAGAIN) mid-body, on the pool under sendfile.
    let (dir, data) = cold_tree(24 << 20);
    let path = dir.path().join("cold.bin");
    for strategy in STRATEGIES {
        let server = Server::start(strategy, dir.path(), &["--workers", "1"]);
        drop_from_page_cache(&path);
        let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
        std::io::Write::write_all(
            &mut stream,
            b"GET /cold.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        wait_until_stalled(&stream);
        let mut response = Vec::new();
        std::io::Read::read_to_end(&mut stream, &mut response).unwrap();
        let head_end = response
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("{strategy}: no response head"))
            + 4;
        assert!(response.starts_with(b"HTTP/1.1 200"), "{strategy}");
        assert!(
            response[head_end..] == data[..],
            "{strategy}: body differs ({} bytes)",
            response.len() - head_end
        );
    }
}

#[test]
fn a_stalled_cold_download_does_not_hold_up_the_others() {
    // With one pool sendfile at a time, a download whose client stops reading must give
    // its turn back at each full buffer; held across the wait, the other download would
    // stand still until the send timeout (60 s), past the client's read timeout (30 s).
    let (dir, stalled_data) = cold_tree(24 << 20);
    let other_data = random_bytes(8 << 20, 77);
    std::fs::write(dir.path().join("other.bin"), &other_data).unwrap();
    let server = Server::start(
        "sendfile",
        dir.path(),
        &[
            "--workers",
            "1",
            "--cold-threads",
            "1",
            "--send-timeout",
            "60s",
        ],
    );
    drop_from_page_cache(&dir.path().join("cold.bin"));
    drop_from_page_cache(&dir.path().join("other.bin"));
    let (mut stalled, len) = start_download(&server, "/cold.bin");
    assert_eq!(len, stalled_data.len());
    // The server has filled the socket buffers and met EAGAIN.
    wait_until_stalled(stalled.get_ref());
    let other = get(server.addr, "/other.bin", &[]);
    assert_eq!(other.status, 200);
    assert!(
        other.body == other_data,
        "the other download's body differs"
    );
    let mut body = vec![0u8; len];
    std::io::Read::read_exact(&mut stalled, &mut body).unwrap();
    assert!(body == stalled_data, "the stalled download's body differs");
}
