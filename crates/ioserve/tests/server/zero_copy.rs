//! Zero-copy, proven with a syscall trace: under `sendfile` the file's bytes leave
//! through sendfile(2) and are never read into the process, except bodies and parts of
//! at most 16 KiB, which are copied on purpose (sent with the head in one write). The
//! same trace under `read` shows the preads, so the check can tell the difference.

use std::time::Duration;

use crate::support::*;

/// The syscalls that could move file bytes in or out of the process.
const TRACE: &str = "trace=read,pread64,readv,preadv,preadv2,sendfile,splice,copy_file_range,\
                     write,writev,sendto,sendmsg";

/// One traced syscall on the file: its name and return value.
#[derive(Debug)]
struct Call {
    name: String,
    result: i64,
}

/// Downloads `file.bin` whole and as ranges under `strategy` while tracing the server;
/// returns the syscalls that touched the file and the body bytes the client got.
fn trace_downloads(strategy: &str) -> (Vec<Call>, u64) {
    assert!(
        std::process::Command::new("strace")
            .arg("-V")
            .output()
            .is_ok(),
        "strace is not installed: `cargo xtask ci` installs it (apt-get install strace)"
    );
    let dir = tempfile::tempdir().unwrap();
    let data = random_bytes(6 << 20, 77);
    std::fs::write(dir.path().join("file.bin"), &data).unwrap();
    let log = dir.path().join("strace.log");
    let mut server = Server::start_traced(strategy, dir.path(), TRACE, &log);
    let mut received = 0;
    for range in [None, Some("bytes=1000-2000999"), Some("bytes=0-99,-100")] {
        let headers: Vec<(&str, &str)> = range.iter().map(|r| ("Range", *r)).collect();
        let response = get(server.addr, "/file.bin", &headers);
        assert!(matches!(response.status, 200 | 206));
        received += response.body.len() as u64;
    }
    server.signal("TERM");
    assert!(
        server.wait_exit(Duration::from_secs(20)).is_some(),
        "server exits on SIGTERM"
    );

    // strace -ff wrote one file per thread: strace.log.TID.
    let mut text = String::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("strace.log."))
        {
            text.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    let marker = format!("{}/file.bin>", dir.path().canonicalize().unwrap().display());
    let calls = text
        .lines()
        .filter(|line| line.contains(&marker))
        .filter_map(|line| {
            // "name(args...) = RESULT"
            let call = line;
            let name = call.split('(').next()?.to_string();
            let result = call
                .rsplit_once(" = ")?
                .1
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some(Call { name, result })
        })
        .collect();
    (calls, received)
}

/// A call that copies file bytes into the process. One-byte `preadv2`s are the
/// strategy's page-cache probes (`RWF_NOWAIT` on a window's first and last page, see
/// `SharedFile::residency`), not copies of the body.
fn is_read(call: &Call) -> bool {
    match call.name.as_str() {
        "preadv2" => call.result != 1,
        name => matches!(name, "read" | "pread64" | "readv" | "preadv"),
    }
}

#[test]
fn sendfile_never_reads_the_file_into_the_process() {
    let (calls, received) = trace_downloads("sendfile");
    // Only the two 100-byte parts of the multipart response are small enough to copy.
    let read: i64 = calls
        .iter()
        .filter(|c| is_read(c))
        .map(|c| c.result.max(0))
        .sum();
    assert_eq!(read, 200, "only the small parts were read: {calls:?}");
    let sent: i64 = calls
        .iter()
        .filter(|c| c.name == "sendfile")
        .map(|c| c.result.max(0))
        .sum();
    let large_bodies = (6 << 20) + 2_000_000;
    assert_eq!(
        sent as u64, large_bodies,
        "the large bodies went through sendfile"
    );
    assert!(
        received > large_bodies + 200,
        "the client also got the multipart delimiters"
    );
}

#[test]
fn the_trace_sees_copies_when_there_are_some() {
    let (calls, _) = trace_downloads("read");
    let read: i64 = calls
        .iter()
        .filter(|c| is_read(c))
        .map(|c| c.result.max(0))
        .sum();
    assert_eq!(read, (6 << 20) + 2_000_000 + 200);
    assert!(calls.iter().all(|c| c.name != "sendfile"));
}
