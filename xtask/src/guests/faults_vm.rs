//! `cargo xtask faults-vm`: ioserve on a disk that fails under a file, in an x86_64
//! guest on Debian's stock 6.1 kernel.
//!
//! The guest makes a RAM disk (`brd`) behind a device-mapper device, puts an ext4 file
//! system on it and writes three files: `bad` (8 MiB), `small` (12 KiB) and `good`
//! (4 MiB). It finds where the file system placed them (`filefrag`), then reloads the
//! device's table so that device-mapper's `error` target answers every read of 64 KiB
//! of `bad` from byte 3 MiB, and of the second 4 KiB of `small`, with EIO, and drops
//! the page cache: the disk now fails under those bytes as a bad sector would.
//!
//! Under each strategy ioserve serves the files over HTTP/1.1, HTTPS and HTTP/2, and
//! curl downloads `bad` and `small`, each beside a download of `good` (in the same
//! HTTP/2 connection). The checks: the failing downloads end short with exactly the
//! file's first bytes (never other bytes in place of the unreadable ones), the good
//! download beside them is whole, the error log names the file, the byte and the error
//! once per response, with the file dropped from the open-file cache, the metric counts
//! each, and the server (mmap's included: a fault on a mapped page must not kill it)
//! still serves and exits 0 when stopped.

use std::time::Duration;

use anyhow::{Context as _, Result};

use crate::guests::{self as guest, expect, Arch, Checks, Initramfs, Machine, Outcome, Script};
use crate::util::ioserve_process::IoserveBinary;
use crate::util::{ensure_packages, which};

/// The RAM disk's driver, device-mapper with its `error` target (linear is built in),
/// and ext4 with the checksum its metadata needs (the crypto API asks for it by name).
const MODULES: &[&str] = &["brd", "dm-mod", "ext4", "crc32c_generic"];

/// Sectors (512 bytes) of the RAM disk: 128 MiB.
const DISK_SECTORS: u64 = 128 << 11;

/// Each file that fails to read: its name, size, and the bytes that fail (start,
/// length), all multiples of 4 KiB (ext4's block).
const FAILING: &[(&str, u64, (u64, u64))] = &[
    ("bad", 8 << 20, (3 << 20, 64 << 10)),
    ("small", 12 << 10, (4 << 10, 4 << 10)),
];

/// MiB of the good file downloaded beside each failing one (at 4 MB/s: it is still
/// being sent when the failing one ends, 3 MiB in).
const GOOD_MIB: u64 = 4;

/// The strategies (and sendfile without the read-ahead pool, which reads the disk
/// from the event loop's own calls): the name of each, its arguments, and the number
/// that sets the ports of its plain and its TLS server.
const STRATEGIES: &[(&str, &str, u16)] = &[
    ("sendfile", "--strategy sendfile", 1),
    (
        "sendfile-inline",
        "--strategy sendfile --cold-reads inline",
        2,
    ),
    ("mmap", "--strategy mmap", 3),
    ("read", "--strategy read", 4),
    ("buffered", "--strategy buffered", 5),
];

/// How each download is made: its name, the scheme and port base, curl's arguments,
/// and the HTTP version curl reports.
const PROTOCOLS: &[(&str, bool, &str, &str)] = &[
    ("http1", false, "--http1.1", "1.1"),
    ("https1", true, "--http1.1", "1.1"),
    ("http2", true, "--http2", "2"),
];

/// The guest's download script (see its header).
const FETCH: &str = include_str!("fetch_failing.sh");

/// Boots the guest and checks ioserve on the failing disk, with `binary`'s ioserve.
pub(crate) fn run(binary: &IoserveBinary) -> Result<()> {
    anyhow::ensure!(
        cfg!(target_arch = "x86_64"),
        "faults-vm boots an x86_64 guest with x86_64 binaries: run it on x86_64"
    );
    let arch = Arch::X86_64;
    arch.ensure_tools()?;
    ensure_packages(&[
        ("curl", "curl"),
        ("openssl", "openssl"),
        ("dmsetup", "dmsetup"),
        ("e2fsprogs", "mke2fs"),
        ("e2fsprogs", "filefrag"),
    ])?;
    let kernel = guest::debian_kernel(arch)?;
    let modules = guest::debian_modules(arch, MODULES)?;
    let ioserve = binary.get()?;
    let (cert, key) = guest::tls_vm::certificate()?;
    let mut initramfs = Initramfs::new(arch)?;
    initramfs.host_program("ioserve", &ioserve)?;
    // Under /usr/sbin, named by that path: busybox's shell runs its own applets (a
    // mke2fs without ext4) before any program of the same name on PATH.
    initramfs.directory("usr/sbin");
    for program in ["curl", "dmsetup", "mke2fs", "filefrag"] {
        let path = which(program).with_context(|| format!("{program} is not on PATH"))?;
        initramfs.program_with_libraries(&path, &format!("usr/sbin/{program}"))?;
    }
    initramfs
        .directory("etc")
        .directory("lib")
        .directory("lib/modules")
        .data("srv/cert.pem", &cert)
        .data("srv/key.pem", &key)
        .data("srv/fetch.sh", FETCH.as_bytes());
    if let Ok(conf) = std::fs::read("/etc/mke2fs.conf") {
        initramfs.data("etc/mke2fs.conf", &conf);
    }
    for (file, bytes) in &modules {
        initramfs.data(&format!("lib/modules/{file}"), bytes);
    }
    let machine = Machine {
        arch,
        name: "faults".into(),
        // One CPU: CI runs it beside the other guests, on the core they leave.
        nodes: vec![(1, 1536)],
        append: String::new(),
        timeout: Duration::from_secs(900),
        single_threaded: false,
    };
    let sections = machine.boot("faults-vm", &kernel, &initramfs.finish(&script(&modules)))?;
    let mut checks = Checks::new("faults-vm");
    checks.add("x86_64 6.1", results(&sections));
    checks.finish()
}

/// The guest's commands: the failing disk, then each strategy's servers and downloads.
fn script(modules: &[(String, Vec<u8>)]) -> Script {
    let insmod: Vec<String> = modules
        .iter()
        .map(|(file, _)| match file.as_str() {
            "brd.ko" => format!(
                "insmod /lib/modules/{file} rd_nr=1 rd_size={}",
                DISK_SECTORS / 2
            ),
            _ => format!("insmod /lib/modules/{file}"),
        })
        .collect();
    let mut script = Script::default();
    script
        .run("modules", &format!("sh -c '{}'", insmod.join(" && ")))
        .run(
            "file-system",
            &format!(
                "sh -c '/usr/sbin/dmsetup create disk --table \"0 {DISK_SECTORS} linear /dev/ram0 0\" \
                 && /usr/sbin/mke2fs -q -t ext4 -F /dev/dm-0 && mkdir -p /srv/www \
                 && mount -t ext4 /dev/dm-0 /srv/www'"
            ),
        );
    for (name, size, _) in FAILING {
        script.shell(&format!(
            "head -c {size} /dev/urandom > /tmp/{name}.orig; cp /tmp/{name}.orig /srv/www/{name}"
        ));
    }
    script
        .shell(&format!(
            "head -c {} /dev/urandom > /srv/www/good; sync",
            GOOD_MIB << 20
        ))
        // Each failing span: where its first and last sectors lie on the disk (both
        // must be in one extent, so that the span is contiguous there).
        .shell(
            "physical() { /usr/sbin/filefrag -v -b512 \"$1\" | awk -v want=\"$2\" \
             '$1 ~ /^[0-9]+:$/ { gsub(/\\.\\./, \" \"); gsub(/:/, \" \"); \
             if (want >= $2 && want <= $3) print $4 + want - $2 }'; }",
        )
        .shell(": > /tmp/spans; : > /tmp/errors");
    for (name, _, (start, len)) in FAILING {
        let (first, last) = (start / 512, (start + len) / 512 - 1);
        script.shell(&format!(
            "a=$(physical /srv/www/{name} {first}); b=$(physical /srv/www/{name} {last}); \
             echo \"{name} $a $b {}\" >> /tmp/spans; echo \"$a {}\" >> /tmp/errors",
            len / 512,
            len / 512
        ));
    }
    script
        .run("spans", "cat /tmp/spans")
        // The table: linear everywhere but the failing spans, which go to `error`.
        .shell(&format!(
            "sort -n /tmp/errors | awk -v size={DISK_SECTORS} \
             'BEGIN {{ at = 0 }} {{ if ($1 > at) print at, $1 - at, \"linear /dev/ram0\", at; \
             print $1, $2, \"error\"; at = $1 + $2 }} \
             END {{ if (at < size) print at, size - at, \"linear /dev/ram0\", at }}' > /tmp/table"
        ))
        .run(
            "failing-disk",
            "sh -c '/usr/sbin/dmsetup suspend disk && /usr/sbin/dmsetup reload disk /tmp/table \
             && /usr/sbin/dmsetup resume disk && echo 3 > /proc/sys/vm/drop_caches \
             && /usr/sbin/dmsetup table disk'",
        );
    for (name, _, (start, len)) in FAILING {
        // The disk fails where it should, and only there.
        script.run(
            &format!("read-{name}"),
            &format!(
                "sh -c 'dd if=/srv/www/{name} of=/dev/null bs=4k count={} 2>/dev/null && echo before ok; \
                 dd if=/srv/www/{name} of=/dev/null bs=4k skip={} count=1 2>/dev/null || echo failing fails'",
                start / 4096,
                start / 4096 + (len / 4096) / 2
            ),
        );
    }
    for (strategy, arguments, n) in STRATEGIES {
        let (plain, tls) = (8000 + n, 8400 + n);
        script
            .shell(&format!(
                "ioserve /srv/www --listen 127.0.0.1:{plain} --workers 1 {arguments} \
                 --metrics-listen 127.0.0.1:{} --access-log off \
                 >/dev/null 2>/tmp/{strategy}-plain.log & plain=$!",
                plain + 1000
            ))
            .shell(&format!(
                "ioserve /srv/www --listen 127.0.0.1:{tls} --workers 1 {arguments} \
                 --tls-cert /srv/cert.pem --tls-key /srv/key.pem --ktls off \
                 --metrics-listen 127.0.0.1:{} --access-log off \
                 >/dev/null 2>/tmp/{strategy}-tls.log & tls=$!",
                tls + 1000
            ));
        for port in [plain, tls] {
            script.shell(&format!(
                "for i in $(seq 600); do wget -q -O /dev/null http://127.0.0.1:{}/metrics 2>/dev/null \
                 && break; sleep 0.2; done",
                port + 1000
            ));
        }
        for (protocol, over_tls, args, _) in PROTOCOLS {
            let base = match over_tls {
                true => format!("https://localhost:{tls} --resolve localhost:{tls}:127.0.0.1"),
                false => format!("http://127.0.0.1:{plain}"),
            };
            let (base, resolve) = base.split_once(' ').unwrap_or((&base, ""));
            for (name, _, _) in FAILING {
                script.run(
                    &format!("{strategy}-{protocol}-{name}"),
                    &format!("sh /srv/fetch.sh /tmp/{name}.orig /{name} {base} {resolve} {args}"),
                );
            }
        }
        for (server, port) in [("plain", plain), ("tls", tls)] {
            script.run(
                &format!("{strategy}-{server}-metrics"),
                &format!("wget -q -O - http://127.0.0.1:{}/metrics", port + 1000),
            );
        }
        script
            .shell(&format!(
                "kill $plain $tls; wait $plain; a=$?; wait $tls; echo \"exit $a $?\" > /tmp/{strategy}-stopped"
            ))
            .run(
                &format!("{strategy}-stopped"),
                &format!("cat /tmp/{strategy}-stopped"),
            )
            .run(
                &format!("{strategy}-plain-log"),
                &format!("cat /tmp/{strategy}-plain.log"),
            )
            .run(
                &format!("{strategy}-tls-log"),
                &format!("cat /tmp/{strategy}-tls.log"),
            );
    }
    script
}

/// The checks of the guest's sections.
fn results(s: &guest::Sections) -> Vec<(String, Outcome)> {
    let mut results = vec![
        (
            "brd, dm-mod and ext4 load".to_string(),
            s.ok("modules").map(drop),
        ),
        (
            "ext4 on a device-mapper device".into(),
            s.ok("file-system").map(drop),
        ),
        (
            "each failing span is contiguous on the disk".into(),
            s.ok("spans").and_then(|lines| contiguous(lines)),
        ),
        (
            "the table sends the failing spans to the error target".into(),
            s.ok("failing-disk").and_then(|lines| {
                let errors = lines
                    .iter()
                    .filter(|l| l.split_whitespace().nth(2) == Some("error"))
                    .count();
                expect(
                    errors == FAILING.len(),
                    format!("{errors} error targets: {}", lines.join(" | ")),
                )
            }),
        ),
    ];
    for (name, _, _) in FAILING {
        results.push((
            format!("{name}: read before the span, EIO in it (dd)"),
            s.ok(&format!("read-{name}")).and_then(|lines| {
                expect(
                    lines.iter().any(|l| l == "before ok")
                        && lines.iter().any(|l| l == "failing fails"),
                    lines.join(" | "),
                )
            }),
        ));
    }
    for (strategy, _, _) in STRATEGIES {
        for (protocol, _, _, http) in PROTOCOLS {
            for (name, size, (start, _)) in FAILING {
                let section = format!("{strategy}-{protocol}-{name}");
                results.push((
                    format!("{section}: ends short with the file's first bytes, good one whole"),
                    s.result(&section)
                        .ok_or(format!("no output for {section}"))
                        .and_then(|(lines, _)| failed_download(lines, name, *size, *start, http)),
                ));
            }
        }
        for (server, protocols) in [("plain", 1), ("tls", 2)] {
            let log = s.ok(&format!("{strategy}-{server}-log"));
            for (name, _, (start, _)) in FAILING {
                results.push((
                    format!("{strategy} {server}: the log says {name}'s error once per response"),
                    log.clone()
                        .and_then(|lines| logged_once(lines, name, *start, protocols)),
                ));
            }
            let want = protocols * FAILING.len();
            results.push((
                format!("{strategy} {server}: ioserve_file_read_errors_total {want}"),
                s.ok(&format!("{strategy}-{server}-metrics"))
                    .and_then(|lines| {
                        let sample = format!("ioserve_file_read_errors_total {want}");
                        expect(
                            lines.contains(&sample),
                            format!(
                                "{:?}",
                                lines
                                    .iter()
                                    .filter(|l| l.contains("read_errors"))
                                    .collect::<Vec<_>>()
                            ),
                        )
                    }),
            ));
        }
        results.push((
            format!("{strategy}: both servers alive to the end, exit 0"),
            s.ok(&format!("{strategy}-stopped"))
                .and_then(|lines| expect(lines.iter().any(|l| l == "exit 0 0"), lines.join(" | "))),
        ));
    }
    results
}

/// The spans' lines (`NAME FIRST LAST SECTORS`): each span's first and last sectors are
/// SECTORS - 1 apart on the disk.
fn contiguous(lines: &[String]) -> Outcome {
    for (name, _, _) in FAILING {
        let line = lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(name))
            .ok_or(format!("no span for {name}: {}", lines.join(" | ")))?;
        let numbers: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|w| w.parse().ok())
            .collect();
        expect(
            matches!(numbers[..], [first, last, sectors] if last + 1 == first + sectors),
            format!("{name}'s span is not contiguous on the disk: {line}"),
        )?;
    }
    Ok(())
}

/// What fetch_failing.sh printed for the download of `name` (`size` bytes, failing
/// from byte `failing`) beside the good file, over HTTP version `http`: the failing
/// transfer ended in an error, short of the span, with the original's first bytes; the
/// good one succeeded and is whole.
fn failed_download(lines: &[String], name: &str, size: u64, failing: u64, http: &str) -> Outcome {
    let shown = lines.join(" | ");
    let transfer = |path: &str| {
        lines.iter().find_map(|l| {
            let rest = l.strip_prefix("transfer ")?;
            let (url, fields) = rest.split_once(' ')?;
            url.ends_with(path).then(|| {
                fields
                    .split_whitespace()
                    .filter_map(|f| f.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<std::collections::BTreeMap<_, _>>()
            })
        })
    };
    let failing_one =
        transfer(&format!("/{name}")).ok_or(format!("no transfer of {name}: {shown}"))?;
    let good = transfer("/good").ok_or(format!("no transfer of good: {shown}"))?;
    let field = |t: &std::collections::BTreeMap<String, String>, k: &str| {
        t.get(k).cloned().unwrap_or_default()
    };
    let bytes: u64 = field(&failing_one, "bytes").parse().unwrap_or(u64::MAX);
    // 28: curl's own time limit, which a server that hung instead of ending the
    // response would run into.
    let exit = field(&failing_one, "exit");
    expect(
        exit != "0" && exit != "28",
        format!("curl's exit code {exit} for {name}: {shown}"),
    )?;
    expect(
        bytes < size && bytes <= failing,
        format!("{bytes} bytes of {name} (it fails from {failing}): {shown}"),
    )?;
    expect(
        lines
            .iter()
            .any(|l| l.ends_with("bytes, the original's first")),
        format!("the bytes received are not the file's: {shown}"),
    )?;
    expect(
        field(&good, "exit") == "0" && lines.iter().any(|l| l == "good file whole"),
        format!("the good download beside it suffered: {shown}"),
    )?;
    expect(
        field(&good, "http") == http,
        format!(
            "spoke HTTP/{}, want HTTP/{http}: {shown}",
            field(&good, "http")
        ),
    )
}

/// The server's log has `times` lines that name `name`, the byte `failing` and EIO,
/// each with the file dropped from the open-file cache, and no other line about it.
fn logged_once(lines: &[String], name: &str, failing: u64, times: usize) -> Outcome {
    let about: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains(&format!("/srv/www/{name}")))
        .collect();
    let want = format!(
        "cannot read /srv/www/{name} at byte {failing}: Input/output error (os error 5): the response ends short"
    );
    let right = about
        .iter()
        .filter(|l| {
            l.contains(" ERROR ") && l.contains(&want) && l.contains("dropped_from_cache=1")
        })
        .count();
    expect(
        right == times && about.len() == times,
        format!("want {times} x {want:?} (dropped_from_cache=1), got: {about:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn a_short_download_with_the_file_s_first_bytes_passes_and_others_fail() {
        let good = lines(
            "transfer https://localhost:8401/bad exit=92 bytes=8323072 http=2\n\
             transfer https://localhost:8401/good exit=0 bytes=33554432 http=2\n\
             received 8323072 bytes, the original's first\ngood file whole",
        );
        assert!(failed_download(&good, "bad", 32 << 20, 8 << 20, "2").is_ok());
        let whole = good
            .iter()
            .map(|l| l.replace("exit=92 bytes=8323072", "exit=0 bytes=33554432"))
            .collect::<Vec<_>>();
        assert!(failed_download(&whole, "bad", 32 << 20, 8 << 20, "2").is_err());
        let wrong = good
            .iter()
            .map(|l| l.replace("the original's first", "NOT the original's first"))
            .collect::<Vec<_>>();
        assert!(failed_download(&wrong, "bad", 32 << 20, 8 << 20, "2").is_err());
        let timed_out = good
            .iter()
            .map(|l| l.replace("exit=92", "exit=28"))
            .collect::<Vec<_>>();
        assert!(failed_download(&timed_out, "bad", 32 << 20, 8 << 20, "2").is_err());
        let past = good
            .iter()
            .map(|l| l.replace("bytes=8323072", "bytes=8392704"))
            .collect::<Vec<_>>();
        assert!(failed_download(&past, "bad", 32 << 20, 8 << 20, "2").is_err());
        let hurt = good
            .iter()
            .map(|l| l.replace("good file whole", "good file NOT whole"))
            .collect::<Vec<_>>();
        assert!(failed_download(&hurt, "bad", 32 << 20, 8 << 20, "2").is_err());
        assert!(failed_download(&good, "bad", 32 << 20, 8 << 20, "1.1").is_err());
    }

    #[test]
    fn the_error_must_be_logged_once_per_response_with_the_byte() {
        let line = "2026-11-28T23:59:59Z ERROR ioserve::serve::exchange: cannot read /srv/www/bad at byte 8388608: \
                    Input/output error (os error 5): the response ends short dropped_from_cache=1";
        assert!(logged_once(&lines(line), "bad", 8 << 20, 1).is_ok());
        assert!(logged_once(&lines(&format!("{line}\n{line}")), "bad", 8 << 20, 1).is_err());
        assert!(logged_once(
            &lines(&line.replace("8388608", "8392704")),
            "bad",
            8 << 20,
            1
        )
        .is_err());
        assert!(logged_once(&lines(""), "bad", 8 << 20, 1).is_err());
    }

    #[test]
    fn spans_must_be_contiguous_on_the_disk() {
        assert!(contiguous(&lines("bad 1000 1127 128\nsmall 5000 5007 8")).is_ok());
        assert!(contiguous(&lines("bad 1000 1999 128\nsmall 5000 5007 8")).is_err());
        assert!(contiguous(&lines("bad  128\nsmall 5000 5007 8")).is_err());
    }

    #[test]
    fn every_strategy_and_protocol_downloads_each_failing_file() {
        let modules = vec![
            ("brd.ko".to_string(), vec![]),
            ("dm-mod.ko".to_string(), vec![]),
        ];
        let init = script(&modules).init();
        assert!(init.contains("insmod /lib/modules/brd.ko rd_nr=1 rd_size=131072"));
        assert_eq!(
            init.matches("sh /srv/fetch.sh").count(),
            STRATEGIES.len() * PROTOCOLS.len() * FAILING.len()
        );
        assert!(init.contains("/usr/sbin/dmsetup reload disk /tmp/table"));
    }
}
