//! HTTP semantics, identical under every strategy: full bodies, ranges, multipart,
//! conditionals, methods, path safety, directories, keep-alive and pipelining.

use std::io::{BufReader, Write};
use std::os::unix::fs::symlink;

use crate::support::*;

/// A served tree: a random multi-MiB file, a small text file, an empty file, a
/// directory with an index, one without.
fn fixture() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let data = random_bytes(3 * 1024 * 1024 + 12345, 42);
    std::fs::write(dir.path().join("data.bin"), &data).unwrap();
    std::fs::write(dir.path().join("hello.txt"), b"hello, world\n").unwrap();
    std::fs::write(dir.path().join("empty"), b"").unwrap();
    std::fs::create_dir(dir.path().join("site")).unwrap();
    std::fs::write(dir.path().join("site/index.html"), b"<p>index</p>").unwrap();
    std::fs::create_dir(dir.path().join("files")).unwrap();
    std::fs::write(dir.path().join("files/a & b.txt"), b"ab").unwrap();
    std::fs::write(dir.path().join("with space.txt"), b"spaced").unwrap();
    (dir, data)
}

#[test]
fn full_bodies_match_the_files() {
    let (dir, data) = fixture();
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, dir.path(), &[]);
        // ureq speaks HTTP/1.1 in clear (curl checks HTTP/2: http2.rs).
        if protocol == Protocol::Http1 {
            // A real client first.
            let response = ureq::get(&format!("http://{}/data.bin", server.addr))
                .call()
                .unwrap();
            assert_eq!(response.status(), 200);
            assert_eq!(response.header("Accept-Ranges"), Some("bytes"));
            assert_eq!(
                response.header("Content-Type"),
                Some("application/octet-stream")
            );
            let mut body = Vec::new();
            std::io::Read::read_to_end(&mut response.into_reader(), &mut body).unwrap();
            assert!(body == data, "{strategy}: body differs");
        }

        let response = server.get("/data.bin", &[]);
        assert_eq!(
            response.header("Content-Length"),
            Some(data.len().to_string().as_str())
        );
        assert!(response.header("ETag").unwrap().starts_with('"'));
        assert!(response.header("Last-Modified").unwrap().ends_with(" GMT"));
        assert!(response.header("Date").is_some());

        let hello = server.get("/hello.txt", &[]);
        assert_eq!(hello.body, b"hello, world\n");
        assert_eq!(hello.header("Content-Type"), Some("text/plain"));

        let empty = server.get("/empty", &[]);
        assert_eq!(
            (empty.status, empty.header("Content-Length")),
            (200, Some("0"))
        );
        assert!(empty.body.is_empty());

        let spaced = server.get("/with%20space.txt", &[]);
        assert_eq!(spaced.body, b"spaced", "{strategy}");
    }
}

#[test]
fn single_ranges_at_random_offsets() {
    let (dir, data) = fixture();
    let len = data.len() as u64;
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, dir.path(), &[]);
        let mut rng = fastrand::Rng::with_seed(0x5eed ^ strategy.len() as u64);
        for _ in 0..40 {
            let start = rng.u64(..len);
            let last = start + rng.u64(..len - start);
            let response = server.get("/data.bin", &[("Range", &format!("bytes={start}-{last}"))]);
            assert_eq!(response.status, 206, "{strategy}");
            assert_eq!(
                response.header("Content-Range").unwrap(),
                format!("bytes {start}-{last}/{len}")
            );
            assert!(
                response.body == data[start as usize..=last as usize],
                "{strategy} {start}-{last}"
            );
        }
        // Suffix, open-ended, and a last-byte-pos past the end (clamped, not 416).
        let suffix = server.get("/data.bin", &[("Range", "bytes=-1000")]);
        assert_eq!(suffix.body, &data[data.len() - 1000..]);
        let open = server.get("/data.bin", &[("Range", "bytes=3000000-")]);
        assert_eq!(open.body, &data[3_000_000..]);
        let clamped = server.get("/hello.txt", &[("Range", "bytes=7-999999")]);
        assert_eq!(
            (clamped.status, clamped.body.as_slice()),
            (206, &b"world\n"[..])
        );
        assert_eq!(clamped.header("Content-Range"), Some("bytes 7-12/13"));
        // ureq speaks HTTP/1.1 in clear (curl resumes over HTTP/2: http2.rs).
        if protocol == Protocol::Http1 {
            // A real client resuming a download.
            let resumed = ureq::get(&format!("http://{}/data.bin", server.addr))
                .set("Range", "bytes=1048576-")
                .call()
                .unwrap();
            assert_eq!(resumed.status(), 206);
            let mut body = Vec::new();
            std::io::Read::read_to_end(&mut resumed.into_reader(), &mut body).unwrap();
            assert!(
                body == data[1_048_576..],
                "{strategy}: resumed body differs"
            );
        }
    }
}

#[test]
fn multiple_ranges_are_multipart() {
    let (dir, data) = fixture();
    let len = data.len();
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, dir.path(), &[]);
        let response = server.get("/data.bin", &[("Range", "bytes=2000000-2099999, 0-9, -5")]);
        assert_eq!(response.status, 206, "{strategy}");
        assert_eq!(
            response.header("Content-Length").unwrap(),
            response.body.len().to_string()
        );
        let parts = parse_multipart(&response);
        let expected = [(2_000_000, 2_099_999), (0, 9), (len - 5, len - 1)];
        assert_eq!(parts.len(), 3);
        for (part, (first, last)) in parts.iter().zip(expected) {
            assert_eq!(part.content_range, format!("bytes {first}-{last}/{len}"));
            assert_eq!(part.content_type, "application/octet-stream");
            assert!(
                part.data == data[first..=last],
                "{strategy}: part {first}-{last}"
            );
        }

        // Overlapping ranges are coalesced, sorted.
        let response = server.get("/data.bin", &[("Range", "bytes=100-199,150-299,0-9")]);
        let parts = parse_multipart(&response);
        let ranges: Vec<_> = parts.iter().map(|p| p.content_range.as_str()).collect();
        assert_eq!(
            ranges,
            [format!("bytes 0-9/{len}"), format!("bytes 100-299/{len}")]
        );
        assert_eq!(parts[1].data, &data[100..300]);

        // No amplification: the same range many times is sent once.
        let response = server.get("/data.bin", &[("Range", "bytes=0-,0-,0-")]);
        assert_eq!(response.status, 206);
        assert_eq!(response.body.len(), len);
        let thousand = vec!["0-"; 1000].join(",");
        let response = server.get("/data.bin", &[("Range", &format!("bytes={thousand}"))]);
        assert_eq!(response.status, 200, "too many ranges: served whole");
        assert_eq!(response.body.len(), len);
    }
}

#[test]
fn unsatisfiable_and_malformed_ranges() {
    let (dir, data) = fixture();
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, dir.path(), &[]);
        let response = server.get("/hello.txt", &[("Range", "bytes=13-")]);
        assert_eq!(response.status, 416);
        assert_eq!(response.header("Content-Range"), Some("bytes */13"));
        let response = server.get("/empty", &[("Range", "bytes=-1")]);
        assert_eq!(response.status, 416);
        assert_eq!(response.header("Content-Range"), Some("bytes */0"));
        for malformed in ["bytes=5-1", "items=0-9", "bytes=abc", "bytes=0-1;x"] {
            let response = server.get("/data.bin", &[("Range", malformed)]);
            assert_eq!(response.status, 200, "{strategy}: {malformed}");
            assert!(response.body == data);
        }
        // HEAD ignores Range (RFC 9110 §14.2) and sends no body.
        let head = server.request("HEAD", "/data.bin", &[("Range", "bytes=0-9")]);
        assert_eq!(head.status, 200);
        assert_eq!(
            head.header("Content-Length"),
            Some(data.len().to_string().as_str())
        );
    }
}

#[test]
fn conditional_requests() {
    let (dir, data) = fixture();
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, dir.path(), &[]);
        let first = server.get("/data.bin", &[]);
        let etag = first.header("ETag").unwrap().to_string();
        let modified = first.header("Last-Modified").unwrap().to_string();
        let weak = format!("W/{etag}");

        let cases: Vec<(Vec<(&str, &str)>, u16)> = vec![
            (vec![("If-None-Match", &etag)], 304),
            (vec![("If-None-Match", &weak)], 304),
            (vec![("If-None-Match", "*")], 304),
            // `*` must stand alone: in a list it is malformed and matches nothing.
            (vec![("If-None-Match", "\"other\", *")], 200),
            (vec![("If-None-Match", "\"other\"")], 200),
            (vec![("If-Modified-Since", &modified)], 304),
            (
                vec![("If-Modified-Since", "Sat, 01 Jan 2000 00:00:00 GMT")],
                200,
            ),
            (
                vec![
                    ("If-None-Match", "\"other\""),
                    ("If-Modified-Since", &modified),
                ],
                200,
            ),
            (vec![("If-Match", &etag)], 200),
            (vec![("If-Match", &weak)], 412),
            (vec![("If-Match", "\"other\"")], 412),
            (
                vec![("If-Unmodified-Since", "Sat, 01 Jan 2000 00:00:00 GMT")],
                412,
            ),
            (vec![("If-Unmodified-Since", &modified)], 200),
            (vec![("Range", "bytes=0-9"), ("If-Range", &etag)], 206),
            (vec![("Range", "bytes=0-9"), ("If-Range", &modified)], 206),
            (vec![("Range", "bytes=0-9"), ("If-Range", "\"stale\"")], 200),
            (vec![("Range", "bytes=0-9"), ("If-Range", &weak)], 200),
            (
                vec![
                    ("Range", "bytes=0-9"),
                    ("If-Range", "Sat, 01 Jan 2000 00:00:00 GMT"),
                ],
                200,
            ),
        ];
        for (headers, status) in cases {
            let response = server.get("/data.bin", &headers);
            assert_eq!(response.status, status, "{strategy}: {headers:?}");
            match status {
                304 => {
                    assert!(response.body.is_empty());
                    assert_eq!(response.header("ETag"), Some(etag.as_str()));
                }
                200 => assert!(response.body == data),
                206 => assert_eq!(response.body, &data[..10]),
                _ => {}
            }
        }
    }
}

#[test]
fn rewritten_file_gets_a_new_etag() {
    let (dir, _) = fixture();
    let server = Server::start("sendfile", dir.path(), &[]);
    let before = get(server.addr, "/hello.txt", &[])
        .header("ETag")
        .unwrap()
        .to_string();
    std::fs::write(dir.path().join("hello.txt"), b"hello, again\n").unwrap();
    let response = get(server.addr, "/hello.txt", &[("If-None-Match", &before)]);
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"hello, again\n");
    assert_ne!(response.header("ETag").unwrap(), before);
}

/// A small file of the open-file cache is sent from its bytes kept in memory by the
/// sendfile strategy (full bodies and ranges alike), and read again at once when it is
/// rewritten in place with its size and mtime restored: the ctime tells.
#[test]
fn small_files_are_sent_from_memory_until_they_change() {
    let (dir, _) = fixture();
    let cases: Vec<_> = protocols_and_strategies()
        .map(|case| (case, None))
        .chain([((Protocol::Http1, "sendfile"), Some("0"))])
        .collect();
    let data = random_bytes(4096, 7);
    for i in 0..cases.len() {
        std::fs::write(dir.path().join(format!("small-{i}.bin")), &data).unwrap();
    }
    // Kept only once the last change is 3 s old (coarse file-system clocks).
    std::thread::sleep(std::time::Duration::from_millis(3200));
    let other = random_bytes(4096, 8);
    for (i, ((protocol, strategy), budget)) in cases.into_iter().enumerate() {
        let mut extra = vec!["--workers", "1", "--metrics-listen", "127.0.0.1:0"];
        if let Some(budget) = budget {
            extra.extend(["--small-file-cache", budget]);
        }
        let server = Server::start_over(protocol, strategy, dir.path(), &extra);
        let path = format!("/small-{i}.bin");
        let case = format!("{protocol:?} {strategy} budget {budget:?}");
        for _ in 0..2 {
            let response = server.get(&path, &[]);
            assert_eq!(response.status, 200, "{case}");
            assert!(response.body == data, "{case}: body differs");
        }
        let range = server.get(&path, &[("Range", "bytes=100-1099")]);
        assert_eq!(range.status, 206, "{case}");
        assert!(range.body == data[100..1100], "{case}: range differs");
        // The first response read the file and kept it; the next two were written from
        // memory.
        let kept = strategy == "sendfile" && budget.is_none();
        let hits = if kept { 2 } else { 0 };
        // Once the last response of `status` is counted, so are the hits before it.
        let hits_once_counted = |status: &str, responses: u64| {
            let counted = format!("ioserve_requests_total{{status=\"{status}\"}}");
            wait_for_metric(&server, &counted, |n| n == responses);
            let text = scrape(server.metrics.unwrap());
            metric_in(&text, "ioserve_small_file_cache_hits_total")
        };
        assert_eq!(hits_once_counted("206", 1), hits, "{case}");
        // Rewritten in place: the same size, the same mtime, other bytes.
        let file_path = dir.path().join(format!("small-{i}.bin"));
        let mtime = std::fs::metadata(&file_path).unwrap().modified().unwrap();
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(&file_path)
            .unwrap();
        file.write_all(&other).unwrap();
        file.set_modified(mtime).unwrap();
        drop(file);
        let response = server.get(&path, &[]);
        assert_eq!(response.status, 200, "{case}");
        assert!(response.body == other, "{case}: the old bytes were sent");
        assert_eq!(hits_once_counted("200", 3), hits, "{case}");
    }
}

#[test]
fn methods_and_missing_files() {
    let (dir, _) = fixture();
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, dir.path(), &[]);
        for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
            let response = server.request(method, "/hello.txt", &[]);
            assert_eq!(response.status, 405, "{method}");
            assert_eq!(response.header("Allow"), Some("GET, HEAD"));
        }
        // HTTP/1.1's framing: HTTP/2 has no Connection, and ends a stream by its frames.
        if protocol == Protocol::Http1 {
            // A POST with a body is answered and the connection closed (the body is not read).
            let response = raw(
                server.addr,
                b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
            );
            assert_eq!(response.status, 405);
            assert_eq!(response.header("Connection"), Some("close"));
        }
        assert_eq!(server.get("/nope", &[]).status, 404);
        assert_eq!(server.get("/hello.txt/x", &[]).status, 404);
        let head = server.request("HEAD", "/hello.txt", &[]);
        assert_eq!(
            (head.status, head.header("Content-Length")),
            (200, Some("13"))
        );
    }
}

#[test]
fn nothing_outside_the_root_is_served() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"secret").unwrap();
    let (dir, _) = fixture();
    symlink(outside.path().join("secret"), dir.path().join("link-out")).unwrap();
    symlink(outside.path(), dir.path().join("dir-out")).unwrap();
    symlink("hello.txt", dir.path().join("link-in")).unwrap();
    let name = outside.path().file_name().unwrap().to_str().unwrap();
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, dir.path(), &[]);
        let attempts = [
            "/../etc/passwd".to_string(),
            format!("/../{name}/secret"),
            "/%2e%2e/%2e%2e/etc/passwd".to_string(),
            "/%2e%2e%2f%2e%2e%2fetc%2fpasswd".to_string(),
            "/files%2f..%2f..%2fetc%2fpasswd".to_string(),
            "/..%5c..%5cetc%5cpasswd".to_string(),
            "/files\\..\\..\\etc\\passwd".to_string(),
            "/hello.txt%00.html".to_string(),
            "//etc/passwd".to_string(),
            "http://evil/../../etc/passwd".to_string(),
            "/link-out".to_string(),
            "/dir-out/secret".to_string(),
        ];
        // HTTP/2 carries the targets that are a URI's path (`:path`); the others
        // (backslashes, absolute-form) are HTTP/1.1 request lines only.
        let sendable = |attempt: &&String| {
            protocol == Protocol::Http1
                || format!("https://localhost{attempt}")
                    .parse::<hyper::http::Uri>()
                    .is_ok()
        };
        for attempt in attempts.iter().filter(sendable) {
            let response = server.get(attempt, &[]);
            assert!(
                matches!(response.status, 400 | 403 | 404),
                "{strategy}: {attempt} answered {}",
                response.status
            );
            assert!(!String::from_utf8_lossy(&response.body).contains("secret"));
            assert!(!String::from_utf8_lossy(&response.body).contains("root:"));
        }
        assert_eq!(server.get("/link-in", &[]).body, b"hello, world\n");
    }
    let server = Server::start("sendfile", dir.path(), &["--follow-symlinks"]);
    assert_eq!(get(server.addr, "/link-out", &[]).body, b"secret");
}

#[test]
fn directories() {
    let (dir, _) = fixture();
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, dir.path(), &[]);
        let redirect = server.get("/site?x=1", &[]);
        assert_eq!(
            (redirect.status, redirect.header("Location")),
            (301, Some("/site/?x=1"))
        );
        let index = server.get("/site/", &[]);
        assert_eq!(
            (index.status, index.body.as_slice()),
            (200, &b"<p>index</p>"[..])
        );
        assert_eq!(index.header("Content-Type"), Some("text/html"));

        let listing = server.get("/files/", &[]);
        assert_eq!(
            listing.header("Content-Type"),
            Some("text/html; charset=utf-8")
        );
        let html = String::from_utf8(listing.body).unwrap();
        assert!(
            html.contains("<a href=\"a%20%26%20b.txt\">a &amp; b.txt</a>"),
            "{html}"
        );

        let json = server.get("/", &[("Accept", "application/json")]);
        assert_eq!(json.header("Content-Type"), Some("application/json"));
        let entries: serde_json::Value = serde_json::from_slice(&json.body).unwrap();
        let names: Vec<&str> = entries
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "files",
                "site",
                "data.bin",
                "empty",
                "hello.txt",
                "with space.txt"
            ]
        );
    }
    let server = Server::start("sendfile", dir.path(), &["--no-listing"]);
    assert_eq!(server.get("/files/", &[]).status, 403);
    assert_eq!(server.get("/site/", &[]).status, 200);
}

#[test]
fn keep_alive_and_pipelining() {
    let (dir, data) = fixture();
    for strategy in STRATEGIES {
        let server = Server::start(strategy, dir.path(), &[]);
        let mut stream = connect(server.addr);
        // Three requests in one write, the last one closing.
        let pipelined = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n\
            GET /data.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=10-19,30-39\r\n\r\n\
            HEAD /data.bin HTTP/1.1\r\nHost: t\r\n\r\n\
            GET /data.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
        stream.write_all(pipelined).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let first = read_response(&mut reader, false).unwrap();
        assert_eq!(first.body, b"hello, world\n", "{strategy}");
        assert_eq!(first.header("Connection"), None);
        let second = read_response(&mut reader, false).unwrap();
        let parts = parse_multipart(&second);
        assert_eq!(parts[1].data, &data[30..40]);
        let third = read_response(&mut reader, true).unwrap();
        assert_eq!(third.status, 200);
        let fourth = read_response(&mut reader, false).unwrap();
        assert!(fourth.body == data, "{strategy}");
        assert_eq!(fourth.header("Connection"), Some("close"));
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut reader, &mut rest).unwrap();
        assert!(rest.is_empty(), "closed after Connection: close");

        // HTTP/1.0 closes unless asked to keep alive.
        let old = raw(server.addr, b"GET /hello.txt HTTP/1.0\r\n\r\n");
        assert_eq!((old.status, old.header("Connection")), (200, Some("close")));
        let mut stream = connect(server.addr);
        stream
            .write_all(b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let kept = read_response(&mut reader, false).unwrap();
        assert_eq!(kept.header("Connection"), Some("keep-alive"));
        stream.write_all(b"GET /empty HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
    }
}

#[test]
fn sparse_file_of_one_gib() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse.img");
    let len: u64 = (1 << 30) + 4097;
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(len).unwrap();
    // A few written islands in the holes, so that offsets really matter.
    let islands = [(0u64, 11u64), (512 << 20, 22), (len - 4096, 33)];
    for &(offset, seed) in &islands {
        std::os::unix::fs::FileExt::write_all_at(&file, &random_bytes(4096, seed), offset).unwrap();
    }
    drop(file);
    let expected = |start: u64, end: u64| -> Vec<u8> {
        let mut out = vec![0u8; (end - start) as usize];
        for &(offset, seed) in &islands {
            let island = random_bytes(4096, seed);
            for (i, byte) in island.iter().enumerate() {
                let at = offset + i as u64;
                if (start..end).contains(&at) {
                    out[(at - start) as usize] = *byte;
                }
            }
        }
        out
    };
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, dir.path(), &[]);
        let head = server.request("HEAD", "/sparse.img", &[]);
        assert_eq!(
            head.header("Content-Length"),
            Some(len.to_string().as_str())
        );
        for (start, end) in [
            (0, 8192),
            ((512 << 20) - 100, (512 << 20) + 5000),
            (len - (16 << 20), len),
        ] {
            let response = server.get(
                "/sparse.img",
                &[("Range", &format!("bytes={start}-{}", end - 1))],
            );
            assert_eq!(response.status, 206);
            assert!(
                response.body == expected(start, end),
                "{strategy}: {start}-{end}"
            );
        }
        let tail = server.get("/sparse.img", &[("Range", "bytes=-10, 0-3")]);
        let parts = parse_multipart(&tail);
        assert_eq!(parts[0].data, expected(len - 10, len));
        assert_eq!(parts[1].data, expected(0, 4));
    }
}
