//! Directory listings as people and programs use them, under every strategy: the order
//! from `?sort=…&order=…` in HTML and JSON, a clear 400 for a value that is not
//! allowed, and the HTML page's Content-Security-Policy allowing its inline style by
//! hash and nothing else.

use ioserve_simd::base64::STANDARD;
use sha2::{Digest as _, Sha256};

use crate::support::*;

/// A root with a directory and files whose sizes, names and times all order
/// differently.
fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    for (name, size, modified) in [
        ("b-medium.txt", 3000, 300),
        ("a-large.bin", 2 << 20, 100),
        ("c-small <&>.txt", 10, 200),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, vec![b'x'; size]).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(modified))
            .unwrap();
    }
    dir
}

/// The hrefs of the listed entries, in order (the parent link left out).
fn html_order(html: &str) -> Vec<&str> {
    html.split("<tr><td><a href=\"")
        .skip(1)
        .map(|row| row.split('"').next().unwrap())
        .filter(|href| *href != "../")
        .collect()
}

fn json_order(body: &[u8]) -> Vec<String> {
    let entries: Vec<serde_json::Value> = serde_json::from_slice(body).unwrap();
    entries
        .iter()
        .map(|entry| entry["href"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_query_orders_both_forms() {
    let root = fixture();
    let json = [("Accept", "application/json")];
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, root.path(), &[]);
        for (query, expected) in [
            (
                "",
                [
                    "sub",
                    "a-large.bin",
                    "b-medium.txt",
                    "c-small%20%3C%26%3E.txt",
                ],
            ),
            (
                "?sort=size&order=desc",
                [
                    "sub",
                    "a-large.bin",
                    "b-medium.txt",
                    "c-small%20%3C%26%3E.txt",
                ],
            ),
            (
                "?sort=size&order=asc",
                [
                    "sub",
                    "c-small%20%3C%26%3E.txt",
                    "b-medium.txt",
                    "a-large.bin",
                ],
            ),
            (
                "?sort=time&order=desc",
                [
                    "sub",
                    "b-medium.txt",
                    "c-small%20%3C%26%3E.txt",
                    "a-large.bin",
                ],
            ),
            (
                "?order=desc",
                [
                    "sub",
                    "c-small%20%3C%26%3E.txt",
                    "b-medium.txt",
                    "a-large.bin",
                ],
            ),
        ] {
            let html = server.get(&format!("/{query}"), &[]);
            assert_eq!(html.status, 200, "{strategy} {query}");
            let html = String::from_utf8(html.body).unwrap();
            let mut dir_first = expected.map(String::from).to_vec();
            dir_first[0] = "sub/".to_owned();
            assert_eq!(html_order(&html), dir_first, "{strategy} {query}");
            let listed = server.get(&format!("/{query}"), &json);
            assert_eq!(json_order(&listed.body), expected, "{strategy} {query}");
        }
        let html = String::from_utf8(server.get("/?sort=size", &[]).body).unwrap();
        assert!(
            html.contains(
                "<td class=\"size\" title=\"2097152 bytes\" data-bytes=\"2097152\">2.0 MiB</td>"
            ),
            "{html}"
        );
        assert!(html.contains("<time datetime=\"1970-01-01T00:05:00Z\"><span>1970-01-01</span> <span>00:05</span></time>"));
        // The Size header toggles its own order.
        assert!(html.contains("<a class=\"sort\" href=\"?sort=size&amp;order=desc\">Size"));
    }
}

#[test]
fn names_go_in_natural_order_without_case_in_both_forms() {
    let root = tempfile::tempdir().unwrap();
    for name in [
        "Zeta notes.txt",
        "file10",
        "a.txt",
        "file2",
        "B.txt",
        "File1",
    ] {
        std::fs::write(root.path().join(name), b"x").unwrap();
    }
    std::fs::create_dir(root.path().join("dir10")).unwrap();
    std::fs::create_dir(root.path().join("Dir9")).unwrap();
    let expected = [
        "Dir9",
        "dir10",
        "a.txt",
        "B.txt",
        "File1",
        "file2",
        "file10",
        "Zeta%20notes.txt",
    ];
    let json = [("Accept", "application/json")];
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, root.path(), &[]);
        for (query, expected) in [
            ("", expected.to_vec()),
            ("?order=desc", {
                let mut reversed = expected[2..].to_vec();
                reversed.reverse();
                [vec!["dir10", "Dir9"], reversed].concat()
            }),
        ] {
            let listed = server.get(&format!("/{query}"), &json);
            assert_eq!(json_order(&listed.body), expected, "{strategy} {query}");
            let html = String::from_utf8(server.get(&format!("/{query}"), &[]).body).unwrap();
            let with_slashes: Vec<String> = expected
                .iter()
                .map(|href| match href.starts_with(['D', 'd']) {
                    true => format!("{href}/"),
                    false => href.to_string(),
                })
                .collect();
            assert_eq!(html_order(&html), with_slashes, "{strategy} {query}");
        }
    }
}

#[test]
fn values_that_are_not_allowed_are_refused_by_name() {
    let root = fixture();
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, root.path(), &[]);
        for (query, message) in [
            (
                "?sort=colour",
                "400 Bad Request: the query parameter sort must be name, size or time\n",
            ),
            (
                "?sort=size&order=up",
                "400 Bad Request: the query parameter order must be asc or desc\n",
            ),
        ] {
            for accept in ["text/html", "application/json"] {
                let refused = server.get(&format!("/sub/{query}"), &[("Accept", accept)]);
                assert_eq!(
                    (
                        refused.status,
                        String::from_utf8_lossy(&refused.body).as_ref()
                    ),
                    (400, message),
                    "{strategy} {query} {accept}"
                );
            }
        }
        // A file is not a listing: its query is not ours to judge.
        assert_eq!(server.get("/b-medium.txt?sort=colour", &[]).status, 200);
    }
}

#[test]
fn the_policy_allows_exactly_the_inline_style() {
    let root = fixture();
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, root.path(), &[]);
        let page = server.get("/sub/", &[]);
        let html = String::from_utf8(page.body.clone()).unwrap();
        let style = html
            .split_once("<style>")
            .and_then(|(_, rest)| rest.split_once("</style>"))
            .map(|(style, _)| style)
            .expect("an inline style");
        let hash = STANDARD.encode(Sha256::digest(style.as_bytes()));
        assert_eq!(
            page.header("Content-Security-Policy"),
            Some(format!("default-src 'none'; style-src 'sha256-{hash}'").as_str()),
            "{strategy}"
        );
        assert_eq!(page.header("X-Content-Type-Options"), Some("nosniff"));
        assert_eq!(html.matches("<style>").count(), 1);
        assert!(!html.contains("<script") && !html.contains(" style="));
        let json = server.get("/sub/", &[("Accept", "application/json")]);
        assert_eq!(json.header("Content-Security-Policy"), None);
        assert_eq!(json.header("X-Content-Type-Options"), Some("nosniff"));
    }
}
