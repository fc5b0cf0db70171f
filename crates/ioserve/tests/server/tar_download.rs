//! `GET /dir/?download=tar`: a directory as one tar, downloaded by real clients (curl,
//! wget, aria2c), unpacked with `tar` and compared with the tree by `diff -r`; hidden
//! files left out unless `--hidden`; a file changed while the tar streams ends it short.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

/// Bytes of the file that the changed-file test's tar sends first: more than loopback
/// socket buffers hold, so the server is still on it when the client stops reading.
const FIRST_FILE: usize = 24 << 20;

/// A root holding `tree/`: nested directories, an empty file, a 1 MiB file, a name over
/// 100 bytes, a symlink inside the tree, and hidden entries.
fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("nested/deeper")).unwrap();
    std::fs::create_dir_all(tree.join(".git")).unwrap();
    std::fs::create_dir_all(tree.join("empty-dir")).unwrap();
    std::fs::write(tree.join("empty"), b"").unwrap();
    std::fs::write(tree.join("big.bin"), random_bytes(1 << 20, 37)).unwrap();
    std::fs::write(
        tree.join("nested/deeper/odd.txt"),
        b"513 bytes\n".repeat(51),
    )
    .unwrap();
    std::fs::write(
        tree.join(format!("nested/{}", "long-name-".repeat(12))),
        b"long\n",
    )
    .unwrap();
    std::fs::write(tree.join(".secret"), b"hidden\n").unwrap();
    std::fs::write(tree.join(".git/config"), b"[core]\n").unwrap();
    std::os::unix::fs::symlink("big.bin", tree.join("link-to-big")).unwrap();
    dir
}

/// Runs `program` with `args`, which must succeed.
fn run(program: &Path, args: &[&str]) {
    let output = Command::new(program).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{} {args:?}: {}{}",
        program.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Unpacks `archive` into a new directory `into` and checks that its `tree/` is the
/// fixture's, hidden entries left out (or, with `hidden`, included).
fn unpack_and_compare(archive: &Path, into: &Path, root: &Path, hidden: bool, what: &str) {
    std::fs::create_dir(into).unwrap();
    let tar = testdata::require("tar", "tar");
    run(
        &tar,
        &[
            "-xf",
            archive.to_str().unwrap(),
            "-C",
            into.to_str().unwrap(),
        ],
    );
    let diff = testdata::require("diff", "diffutils");
    let source = root.join("tree");
    let unpacked = into.join("tree");
    let mut args = vec!["-r", "--no-dereference"];
    if !hidden {
        args.extend(["-x", ".*"]);
    }
    args.extend([source.to_str().unwrap(), unpacked.to_str().unwrap()]);
    run(&diff, &args);
    assert_eq!(unpacked.join(".secret").exists(), hidden, "{what}");
    assert_eq!(unpacked.join(".git/config").exists(), hidden, "{what}");
    let link = std::fs::read_link(unpacked.join("link-to-big")).unwrap();
    assert_eq!(link, Path::new("big.bin"), "{what}: stored as a link");
}

/// The announced length of the tar, from a HEAD.
fn announced_len(server: &Server, path: &str) -> u64 {
    let head = raw(server.addr, request_bytes("HEAD", path, &[]).as_bytes());
    assert_eq!(head.status, 200);
    head.header("Content-Length").unwrap().parse().unwrap()
}

#[test]
fn curl_wget_and_aria2c_download_a_directory_as_a_tar() {
    let root = fixture();
    let work = tempfile::tempdir().unwrap();
    let curl = testdata::require("curl", "curl");
    let wget = testdata::require("wget", "wget");
    let aria2c = testdata::require("aria2c", "aria2");
    for strategy in STRATEGIES {
        let server = Server::start(strategy, root.path(), &[]);
        let url = format!("http://{}/tree/?download=tar", server.addr);
        let len = announced_len(&server, "/tree/?download=tar");
        let place = |client: &str| -> PathBuf { work.path().join(format!("{strategy}-{client}")) };

        let archive = place("curl.tar");
        let headers = place("curl.head");
        run(
            &curl,
            &[
                "-sSf",
                "-D",
                headers.to_str().unwrap(),
                "-o",
                archive.to_str().unwrap(),
                &url,
            ],
        );
        let head = std::fs::read_to_string(&headers).unwrap().to_lowercase();
        assert!(
            head.contains("content-type: application/x-tar\r\n"),
            "{head}"
        );
        assert!(
            head.contains("content-disposition: attachment; filename=\"tree.tar\"\r\n"),
            "{head}"
        );
        assert!(
            head.contains(&format!("content-length: {len}\r\n")),
            "{head}"
        );
        assert!(!head.contains("accept-ranges"), "{head}");

        let wget_archive = place("wget.tar");
        run(&wget, &["-q", "-O", wget_archive.to_str().unwrap(), &url]);

        let aria_name = format!("{strategy}-aria2c.tar");
        run(
            &aria2c,
            &[
                "-q",
                "--allow-overwrite=true",
                "-d",
                work.path().to_str().unwrap(),
                "-o",
                &aria_name,
                &url,
            ],
        );

        for (client, archive) in [
            ("curl", archive),
            ("wget", wget_archive),
            ("aria2c", work.path().join(&aria_name)),
        ] {
            let what = format!("{strategy} {client}");
            assert_eq!(std::fs::metadata(&archive).unwrap().len(), len, "{what}");
            unpack_and_compare(
                &archive,
                &place(&format!("{client}-out")),
                root.path(),
                false,
                &what,
            );
        }
    }
}

#[test]
fn hidden_entries_ranges_and_listing_rules_apply_to_the_tar() {
    let root = fixture();
    let work = tempfile::tempdir().unwrap();
    for (protocol, strategy) in protocols_and_strategies() {
        let server = Server::start_over(protocol, strategy, root.path(), &["--hidden"]);
        let response = server.get("/tree/?download=tar", &[("Range", "bytes=0-9")]);
        assert_eq!(response.status, 200, "{strategy}: Range is ignored");
        assert_eq!(
            response.header("Content-Length").unwrap(),
            response.body.len().to_string()
        );
        let archive = work.path().join(format!("{strategy}-hidden.tar"));
        std::fs::write(&archive, &response.body).unwrap();
        let into = work.path().join(format!("{strategy}-{protocol:?}-hidden"));
        unpack_and_compare(&archive, &into, root.path(), true, strategy);

        let listing = server.get("/tree/", &[]);
        let html = String::from_utf8(listing.body).unwrap();
        assert!(
            html.contains("<a download href=\"?download=tar\">Download as tar</a>"),
            "{html}"
        );
        drop(server);

        let server = Server::start(strategy, root.path(), &["--no-listing"]);
        assert_eq!(
            server.get("/tree/?download=tar", &[]).status,
            403,
            "{strategy}"
        );
        drop(server);

        let server = Server::start(strategy, root.path(), &["--listing-max-entries", "5"]);
        let refused = server.get("/tree/?download=tar", &[]);
        assert_eq!(refused.status, 403, "{strategy}");
        assert_eq!(
            String::from_utf8(refused.body).unwrap(),
            "403 Forbidden: the directory holds more than 5 entries (--listing-max-entries)\n"
        );
    }
}

/// Starts a tar download of `changing/` (a file of [`FIRST_FILE`] bytes, then `later`),
/// waits until the server is stuck on the first file with the client not reading,
/// calls `change`, then reads the rest: the body must end short of its length.
fn changed_while_streaming(strategy: &str, change: impl FnOnce(&Path)) {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("changing");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("first.bin"), random_bytes(FIRST_FILE, 5)).unwrap();
    std::fs::write(dir.join("later.txt"), b"before\n").unwrap();
    let server = Server::start(strategy, root.path(), &[]);
    let (mut reader, len) = start_download(&server, "/changing/?download=tar");
    assert!(len > FIRST_FILE, "{strategy}");
    let queued = wait_until_stalled(reader.get_ref());
    assert!(
        queued < FIRST_FILE as u64,
        "{strategy}: the server is still on the first file"
    );
    change(&dir);
    let mut body = 0;
    let mut chunk = vec![0; 1 << 20];
    loop {
        match reader.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => body += n,
        }
    }
    assert!(
        body < len,
        "{strategy}: {body} of {len} bytes, then the connection closed"
    );
}

#[test]
fn a_file_changed_after_the_walk_ends_the_tar_short() {
    for strategy in STRATEGIES {
        changed_while_streaming(strategy, |dir| {
            let mut later = std::fs::File::create(dir.join("later.txt")).unwrap();
            later.write_all(b"after, and longer\n").unwrap();
        });
    }
}

#[test]
fn a_file_that_shrinks_while_sent_ends_the_tar_short() {
    for strategy in STRATEGIES {
        changed_while_streaming(strategy, |dir| {
            std::fs::File::options()
                .write(true)
                .open(dir.join("first.bin"))
                .unwrap()
                .set_len(FIRST_FILE as u64 / 2)
                .unwrap();
        });
    }
}
