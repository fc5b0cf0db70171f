//! `--precompressed`: NAME.br / NAME.gz made by the real gzip and brotli tools, served
//! under every strategy to curl --compressed and to hand-written requests: the
//! coding negotiated with Accept-Encoding q-values, Content-Encoding and Vary, an
//! entity tag per representation, ranges over the encoded bytes.

use std::path::Path;
use std::process::Command;

use crate::support::*;

/// A served tree: `app.js` with `.gz` and `.br` siblings made by gzip and brotli,
/// `only-gz.css` with a `.gz` sibling, `plain.txt` without any, and a directory whose
/// index.html has a `.gz` sibling.
fn fixture() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let mut js = Vec::new();
    for i in 0..20_000 {
        js.extend_from_slice(format!("export const value{i} = {};\n", i * 7919 % 1000).as_bytes());
    }
    std::fs::write(dir.path().join("app.js"), &js).unwrap();
    std::fs::write(
        dir.path().join("only-gz.css"),
        b"body { color: red }\n".repeat(500),
    )
    .unwrap();
    std::fs::write(dir.path().join("plain.txt"), b"plain\n").unwrap();
    std::fs::create_dir(dir.path().join("site")).unwrap();
    std::fs::write(
        dir.path().join("site/index.html"),
        b"<p>index</p>\n".repeat(100),
    )
    .unwrap();
    compress(
        dir.path(),
        "gzip",
        &["-k", "-9", "app.js", "only-gz.css", "site/index.html"],
    );
    let brotli = testdata::require("brotli", "brotli");
    compress(dir.path(), brotli.to_str().unwrap(), &["-k", "app.js"]);
    (dir, js)
}

fn compress(dir: &Path, program: &str, args: &[&str]) {
    let status = Command::new(program)
        .current_dir(dir)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(status.success(), "{program} {args:?}");
}

fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap()
}

#[test]
fn curl_compressed_gets_the_original_bytes_through_a_coding() {
    let (dir, js) = fixture();
    let curl = testdata::require("curl", "curl");
    for strategy in STRATEGIES {
        let server = Server::start(strategy, dir.path(), &["--precompressed"]);
        let url = format!("http://{}/app.js", server.addr);
        let out = Command::new(&curl)
            .args(["-sS", "--compressed", "-D", "-", "-o"])
            .arg(dir.path().join("decoded"))
            .arg(&url)
            .output()
            .unwrap();
        let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
        assert!(out.status.success(), "{strategy}: {head}");
        // curl 7.88 offers "deflate, gzip, br, zstd": brotli wins the tie.
        assert!(
            head.contains("content-encoding: br\r\n"),
            "{strategy}: {head}"
        );
        assert!(
            head.contains("vary: accept-encoding\r\n"),
            "{strategy}: {head}"
        );
        assert!(
            read(dir.path(), "decoded") == js,
            "{strategy}: decoded body differs"
        );
    }
}

#[test]
fn the_coding_follows_accept_encoding_qualities() {
    let (dir, js) = fixture();
    let (gz, br) = (read(dir.path(), "app.js.gz"), read(dir.path(), "app.js.br"));
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, dir.path(), &["--precompressed"]);
        let fetch = |accept: Option<&str>| {
            let headers: Vec<(&str, &str)> =
                accept.map(|a| ("Accept-Encoding", a)).into_iter().collect();
            server.get("/app.js", &headers)
        };
        for (accept, coding, body) in [
            (Some("gzip"), Some("gzip"), &gz),
            (Some("gzip, br"), Some("br"), &br),
            (Some("br;q=0.5, gzip"), Some("gzip"), &gz),
            (Some("br, gzip;q=0"), Some("br"), &br),
            (Some("x-gzip"), Some("gzip"), &gz),
            (Some("identity"), None, &js),
            (Some("deflate"), None, &js),
            (None, None, &js),
        ] {
            let response = fetch(accept);
            assert_eq!(response.status, 200, "{strategy} {accept:?}");
            assert_eq!(
                response.header("Content-Encoding"),
                coding,
                "{strategy} {accept:?}"
            );
            assert_eq!(response.header("Vary"), Some("Accept-Encoding"));
            assert_eq!(
                response.header("Content-Type"),
                Some("text/javascript"),
                "{strategy} {accept:?}: the original's type"
            );
            assert!(response.body == *body, "{strategy} {accept:?}: body");
        }
        // A file with only a .gz sibling, asked for brotli first.
        let css = server.get("/only-gz.css", &[("Accept-Encoding", "br, gzip")]);
        assert_eq!(css.header("Content-Encoding"), Some("gzip"), "{strategy}");
        assert!(css.body == read(dir.path(), "only-gz.css.gz"));
        // Identity refused and no sibling: nothing acceptable.
        let refused = server.get("/plain.txt", &[("Accept-Encoding", "gzip, identity;q=0")]);
        assert_eq!(
            (refused.status, refused.header("Vary")),
            (406, Some("Accept-Encoding"))
        );
        // A directory's index.html.gz.
        let index = server.get("/site/", &[("Accept-Encoding", "gzip")]);
        assert_eq!(index.header("Content-Encoding"), Some("gzip"), "{strategy}");
        assert_eq!(index.header("Content-Type"), Some("text/html"));
        // The sibling itself, asked for by name, is a gzip file, not a coding.
        let raw = server.get("/app.js.gz", &[("Accept-Encoding", "gzip")]);
        assert_eq!(raw.header("Content-Encoding"), None, "{strategy}");
        assert!(raw.body == gz);
    }
}

#[test]
fn each_representation_has_its_tag_and_its_ranges() {
    let (dir, _) = fixture();
    let gz = read(dir.path(), "app.js.gz");
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, dir.path(), &["--precompressed"]);
        let tag = |accept: &str| {
            server
                .get("/app.js", &[("Accept-Encoding", accept)])
                .header("ETag")
                .unwrap()
                .to_string()
        };
        let (identity, gzip, brotli) = (tag("identity"), tag("gzip"), tag("br"));
        assert!(
            gzip.ends_with("-gzip\"") && brotli.ends_with("-br\""),
            "{gzip} {brotli}"
        );
        assert!(identity != gzip && gzip != brotli && identity != brotli);
        let revalidated = server.get(
            "/app.js",
            &[("Accept-Encoding", "gzip"), ("If-None-Match", &gzip)],
        );
        assert_eq!(revalidated.status, 304, "{strategy}");
        assert_eq!(revalidated.header("Vary"), Some("Accept-Encoding"));
        // The gzip tag does not validate the brotli representation.
        let other = server.get(
            "/app.js",
            &[("Accept-Encoding", "br"), ("If-None-Match", &gzip)],
        );
        assert_eq!(other.status, 200, "{strategy}");

        let part = server.get(
            "/app.js",
            &[("Accept-Encoding", "gzip"), ("Range", "bytes=10-99")],
        );
        assert_eq!(part.status, 206, "{strategy}");
        assert_eq!(part.header("Content-Encoding"), Some("gzip"));
        assert_eq!(
            part.header("Content-Range"),
            Some(format!("bytes 10-99/{}", gz.len()).as_str())
        );
        assert!(
            part.body == gz[10..100],
            "{strategy}: range of the encoded bytes"
        );
        // If-Range with the gzip tag resumes the gzip download.
        let resumed = server.get(
            "/app.js",
            &[
                ("Accept-Encoding", "gzip"),
                ("Range", "bytes=100-"),
                ("If-Range", &gzip),
            ],
        );
        assert_eq!(resumed.status, 206, "{strategy}");
        assert!(resumed.body == gz[100..]);
    }
}

#[test]
fn without_the_flag_codings_are_not_served() {
    let (dir, js) = fixture();
    let server = Server::start("sendfile", dir.path(), &[]);
    let response = get(server.addr, "/app.js", &[("Accept-Encoding", "gzip, br")]);
    assert_eq!(response.header("Content-Encoding"), None);
    assert_eq!(response.header("Vary"), None);
    assert!(response.body == js);
}
