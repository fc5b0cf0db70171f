//! HTTP/2 by ALPN on the HTTPS port: curl over HTTP/2 and HTTP/1.1 on the same port
//! (byte-exact downloads, a range, a resume) under every strategy, and the limits that
//! protect the server: rapid reset (CVE-2023-44487), a request that never ends its
//! HEADERS (slowloris), a stream nobody reads.
//!
//! The semantics cases run over HTTP/2 too: see `Protocol` in support.rs.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::h2_client;
use crate::support::{
    random_bytes, wait_for_metric, wait_until_quiescent, Protocol, Server, TestCertificate,
    STRATEGIES,
};
use crate::tls::curl;

/// A served tree: a file larger than the flow-control windows and the strategies'
/// chunks, and a small one.
fn tree() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let data = random_bytes((5 << 20) + 4321, 2);
    std::fs::write(dir.path().join("big.bin"), &data).unwrap();
    std::fs::write(dir.path().join("hello.txt"), b"hello").unwrap();
    (dir, data)
}

/// curl's output of `path`, with `args`, asserting that it succeeded.
fn curl_ok(addr: SocketAddr, ca: &Path, args: &[&str], path: &str) -> Vec<u8> {
    let output = curl(addr, ca, args, &[path]);
    assert!(
        output.status.success(),
        "curl {args:?} {path}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

#[test]
fn curl_downloads_ranges_and_resumes_over_http2_and_http1_on_one_port() {
    let (dir, data) = tree();
    for strategy in STRATEGIES {
        let server = Server::start_over(Protocol::Http2, strategy, dir.path(), &[]);
        let ca = server.tls.as_ref().unwrap().cert();
        let addr = server.addr;
        for protocol in ["--http2", "--http1.1"] {
            let version = curl_ok(
                addr,
                &ca,
                &[
                    protocol,
                    "--output",
                    "/dev/null",
                    "--write-out",
                    "%{http_version}",
                ],
                "/hello.txt",
            );
            let expected: &[u8] = if protocol == "--http2" { b"2" } else { b"1.1" };
            assert_eq!(version, expected, "{strategy}: {protocol}");
            let body = curl_ok(addr, &ca, &[protocol], "/big.bin");
            assert!(body == data, "{strategy} {protocol}: the download differs");
            let range = curl_ok(
                addr,
                &ca,
                &[protocol, "--range", "1000-1048575"],
                "/big.bin",
            );
            assert!(
                range == data[1000..1_048_576],
                "{strategy} {protocol}: the range differs"
            );
            // A download cut short, then resumed with `-C -` (a Range from its size).
            let partial = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(partial.path(), &data[..777_777]).unwrap();
            let file = partial.path().to_str().unwrap();
            curl_ok(
                addr,
                &ca,
                &[protocol, "--continue-at", "-", "--output", file],
                "/big.bin",
            );
            let resumed = std::fs::read(partial.path()).unwrap();
            assert!(
                resumed == data,
                "{strategy} {protocol}: the resumed download differs"
            );
        }
    }
}

/// Sends `bytes` right after an HTTP/2 connection preface and an empty SETTINGS frame
/// on a new TLS connection, then waits for the server to close it; returns how long
/// that took and what the server sent.
fn frames_then_wait_for_close(addr: SocketAddr, ca: &str, bytes: &[u8]) -> (Duration, Vec<u8>) {
    h2_client::runtime().block_on(async {
        let mut tls = h2_client::connect_tls(addr, ca).await;
        let started = Instant::now();
        tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        tls.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap();
        tls.write_all(bytes).await.unwrap();
        tls.flush().await.unwrap();
        let mut received = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(60), tls.read_to_end(&mut received));
        // A reset after GOAWAY counts as closed too.
        let _ = read.await.expect("the server closes the connection");
        (started.elapsed(), received)
    })
}

#[test]
fn a_request_that_never_ends_its_headers_is_closed_at_the_header_timeout() {
    let (dir, _) = tree();
    let server = Server::start_over(
        Protocol::Http2,
        "sendfile",
        dir.path(),
        &["--header-timeout", "1s"],
    );
    let ca = &server.tls.as_ref().unwrap().pem;
    // HEADERS on stream 1 with END_STREAM but without END_HEADERS: the block is never
    // complete (no CONTINUATION follows).
    let headers = [0, 0, 1, 1, 0x1, 0, 0, 0, 1, 0x82];
    let (took, received) = frames_then_wait_for_close(server.addr, ca, &headers);
    assert!(took >= Duration::from_millis(900), "closed after {took:?}");
    assert!(took < Duration::from_secs(30), "closed after {took:?}");
    assert!(goaway_code(&received).is_some(), "GOAWAY before the close");
    // The server goes on.
    assert_eq!(server.get("/hello.txt", &[]).body, b"hello");
}

/// Where a GOAWAY frame (type 7) is in `received` (server frames), its error code.
fn goaway_code(received: &[u8]) -> Option<u32> {
    let mut at = 0;
    while at + 9 <= received.len() {
        let len =
            u32::from_be_bytes([0, received[at], received[at + 1], received[at + 2]]) as usize;
        if received[at + 3] == 7 && at + 9 + 8 <= received.len() {
            let code = &received[at + 9 + 4..at + 9 + 8];
            return Some(u32::from_be_bytes(code.try_into().unwrap()));
        }
        at += 9 + len;
    }
    None
}

#[test]
fn rapid_reset_closes_that_connection_with_goaway_and_others_are_served() {
    let (dir, data) = tree();
    let server = Server::start_over(Protocol::Http2, "read", dir.path(), &[]);
    let ca = &server.tls.as_ref().unwrap().pem;
    // 100 streams, each opened (a GET of /big.bin) and reset (CANCEL) at once, in one
    // write: the server has not taken them yet when their resets come.
    let mut burst = Vec::new();
    let block: Vec<u8> = [0x82, 0x87, 0x84, 0x01, 0x09]
        .into_iter()
        .chain(*b"localhost")
        .collect();
    for stream in (1u32..200).step_by(2) {
        let id = stream.to_be_bytes();
        burst.extend([0, 0, block.len() as u8, 1, 0x5]);
        burst.extend(id);
        burst.extend(&block);
        burst.extend([0, 0, 4, 3, 0]);
        burst.extend(id);
        burst.extend(8u32.to_be_bytes());
    }
    let (took, received) = frames_then_wait_for_close(server.addr, ca, &burst);
    /// RFC 9113 §7: ENHANCE_YOUR_CALM.
    const ENHANCE_YOUR_CALM: u32 = 0xb;
    assert_eq!(
        goaway_code(&received),
        Some(ENHANCE_YOUR_CALM),
        "after {took:?}"
    );
    // Other clients are served.
    assert!(server.get("/big.bin", &[]).body == data);
}

#[test]
fn a_stream_nobody_reads_ends_its_connection_at_the_send_timeout() {
    let (dir, _) = tree();
    for strategy in STRATEGIES {
        let server = Server::start_over(
            Protocol::Http2,
            strategy,
            dir.path(),
            &["--send-timeout", "1s"],
        );
        let ca = server.tls.as_ref().unwrap().pem.clone();
        let addr = server.addr;
        let (took, ended) = h2_client::runtime().block_on(async {
            let tls = h2_client::connect_tls(addr, &ca).await;
            // Windows of 64 KiB that the client never opens further.
            let (client, connection) = h2::client::Builder::new()
                .initial_window_size(65_535)
                .handshake::<_, bytes::Bytes>(tls)
                .await
                .unwrap();
            let connection = tokio::spawn(connection);
            let mut client = client.ready().await.unwrap();
            let request = h2_client::request_of("GET", "/big.bin", &[]);
            let (response, _) = client.send_request(request, true).unwrap();
            let response = response.await.unwrap();
            assert_eq!(response.status(), 200);
            let started = Instant::now();
            let ended = tokio::time::timeout(Duration::from_secs(60), connection)
                .await
                .expect("the server ends the connection");
            (started.elapsed(), ended)
        });
        assert!(ended.is_ok(), "{strategy}: the connection task ran");
        assert!(took < Duration::from_secs(30), "{strategy}: after {took:?}");
        // The server goes on.
        assert_eq!(server.get("/hello.txt", &[]).body, b"hello", "{strategy}");
    }
}

#[test]
fn clients_without_h2_get_http1_and_h2_gets_every_response_field_http1_gets() {
    let (dir, _) = tree();
    let tls = TestCertificate::new();
    let flags = tls.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start("sendfile", dir.path(), &flags);
    let http1 = curl(
        server.addr,
        &tls.cert(),
        &["--no-alpn", "--include"],
        &["/hello.txt"],
    );
    let head = String::from_utf8_lossy(&http1.stdout).to_lowercase();
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    let http2 = h2_client::request(server.addr, &tls.pem, "GET", "/hello.txt", &[]);
    for field in [
        "server",
        "date",
        "etag",
        "last-modified",
        "content-type",
        "content-length",
        "accept-ranges",
    ] {
        assert!(head.contains(&format!("\r\n{field}: ")), "{field}: {head}");
        assert!(
            http2.header(field).is_some(),
            "{field}: {:?}",
            http2.headers
        );
    }
    assert_eq!(http2.header("connection"), None);
}

#[test]
fn a_connection_over_the_per_address_limit_gets_503_over_http2() {
    let (dir, _) = tree();
    let flags = ["--max-conns-per-ip", "1"];
    let server = Server::start_over(Protocol::Http2, "sendfile", dir.path(), &flags);
    let ca = server.tls.as_ref().unwrap().pem.clone();
    let addr = server.addr;
    h2_client::runtime().block_on(async {
        // The first connection is served and stays open.
        let mut first = h2_client::connect(addr, &ca).await;
        let request = h2_client::request_of("GET", "/hello.txt", &[]);
        let served = h2_client::exchange(&mut first, request).await.unwrap();
        assert_eq!(served.status, 200);
        // A second one from the same address gets 503 in HTTP/2, not HTTP/1.1 bytes.
        let mut second = h2_client::connect(addr, &ca).await;
        let request = h2_client::request_of("GET", "/hello.txt", &[]);
        let refused = h2_client::exchange(&mut second, request).await.unwrap();
        assert_eq!(refused.status, 503);
        assert_eq!(refused.header("retry-after"), Some("1"));
        // The first is still served.
        let request = h2_client::request_of("GET", "/hello.txt", &[]);
        let again = h2_client::exchange(&mut first, request).await.unwrap();
        assert_eq!(again.body, b"hello");
    });
}

#[test]
fn http2_responses_are_in_the_access_log_and_the_metrics() {
    let (dir, _) = tree();
    let tls = TestCertificate::new();
    let flags = tls.flags();
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    flags.extend(["--metrics-listen", "127.0.0.1:0"]);
    let server = Server::start_with("read", dir.path(), &flags, true);
    let response = h2_client::request(server.addr, &tls.pem, "GET", "/hello.txt", &[]);
    assert_eq!(response.body, b"hello");
    let missing = h2_client::request(server.addr, &tls.pem, "GET", "/missing", &[]);
    assert_eq!(missing.status, 404);
    server.wait_for_log("\"GET /hello.txt HTTP/2.0\" 200 5 ");
    server.wait_for_log("\"GET /missing HTTP/2.0\" 404 ");
    wait_for_metric(&server, "ioserve_requests_total{status=\"200\"}", |n| {
        n == 1
    });
    wait_for_metric(&server, "ioserve_requests_total{status=\"404\"}", |n| {
        n == 1
    });
}

#[test]
fn an_idle_http2_connection_is_closed_with_goaway_to_admit_a_new_client() {
    let (dir, _) = tree();
    let flags = ["--max-connections", "1", "--metrics-listen", "127.0.0.1:0"];
    let server = Server::start_over(Protocol::Http2, "sendfile", dir.path(), &flags);
    let ca = server.tls.as_ref().unwrap().pem.clone();
    let addr = server.addr;
    let runtime = h2_client::runtime();
    let tls = runtime.block_on(h2_client::connect_tls(addr, &ca));
    let (mut first, connection) = runtime.block_on(h2::client::handshake(tls)).unwrap();
    let connection = runtime.spawn(connection);
    let request = h2_client::request_of("GET", "/hello.txt", &[]);
    let served = runtime
        .block_on(h2_client::exchange(&mut first, request))
        .unwrap();
    assert_eq!(served.status, 200);
    // Idle since the server registered it, which may trail the response.
    wait_until_quiescent(&server);
    // At the limit: the new client is admitted, the idle one told to go (GOAWAY).
    assert_eq!(server.get("/hello.txt", &[]).body, b"hello");
    let ended = runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), connection)
            .await
            .expect("the idle connection is closed")
            .unwrap()
    });
    // A graceful GOAWAY (NO_ERROR) ends the client's connection without an error.
    assert!(ended.is_ok(), "{ended:?}");
    wait_for_metric(&server, "ioserve_idle_connections_closed_total", |n| n == 1);
}
