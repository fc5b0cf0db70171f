//! `cargo xtask tls-vm`: ioserve's kTLS on Debian's stock 6.1 kernel, which ships the
//! `tls` module (CONFIG_TLS=m) and the crypto modules it needs. An x86_64 guest loads
//! them with insmod (each after the modules its modinfo says it needs), runs ioserve
//! over HTTPS with `--ktls on --strategy sendfile` under strace, and curl downloads a
//! file over TLS 1.2 and 1.3 with AES-GCM and ChaCha20-Poly1305, then once more under
//! `--strategy mmap` and `read`. The checks: every download is byte-exact,
//! /proc/net/tls_stat counts the kernel's TX and RX sessions with no decryption error,
//! the metrics count each connection under `mode="ktls"` with its version and cipher
//! (none in user space), and strace shows sendfile(2) from the file into the socket.

use std::fs;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result};

use crate::guests::{
    self as guest, expect, same_sums, Arch, Checks, Initramfs, Machine, Outcome, Script,
};
use crate::util::ioserve_process::IoserveBinary;
use crate::util::{ensure_packages, step};

/// The kernel modules kTLS needs on Debian's kernel: the ULP, and the ciphers' modules
/// the crypto API would otherwise ask modprobe for (the guest has none).
const MODULES: &[&str] = &[
    "tls",
    "gf128mul",
    "ghash-generic",
    "ctr",
    "gcm",
    "chacha_generic",
    "poly1305_generic",
    "chacha20poly1305",
];

/// MiB of the downloaded file.
const FILE_MIB: u32 = 8;

/// Each download over HTTP/1.1 (where the kernel's sendfile serves the file): its name,
/// curl's arguments, and the version and suite the server's metrics name.
const DOWNLOADS: &[(&str, &str, &str, &str)] = &[
    (
        "tls13-aes128gcm",
        "--tlsv1.3 --tls-max 1.3 --tls13-ciphers TLS_AES_128_GCM_SHA256 --http1.1",
        "TLSv1_3",
        "TLS13_AES_128_GCM_SHA256",
    ),
    (
        "tls13-chacha20",
        "--tlsv1.3 --tls-max 1.3 --tls13-ciphers TLS_CHACHA20_POLY1305_SHA256 --http1.1",
        "TLSv1_3",
        "TLS13_CHACHA20_POLY1305_SHA256",
    ),
    (
        "tls12-aes256gcm",
        "--tlsv1.2 --tls-max 1.2 --ciphers ECDHE-ECDSA-AES256-GCM-SHA384 --http1.1",
        "TLSv1_2",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "tls12-chacha20",
        "--tlsv1.2 --tls-max 1.2 --ciphers ECDHE-ECDSA-CHACHA20-POLY1305 --http1.1",
        "TLSv1_2",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
];

/// One download over HTTP/2 (the file's bytes in DATA frames, written to the kTLS
/// socket as plaintext that the kernel encrypts): curl's arguments (it prints the
/// HTTP version it spoke), and the version and suite the server's metrics name.
const HTTP2_DOWNLOAD: (&str, &str, &str) = (
    r#"--tlsv1.3 --tls-max 1.3 --tls13-ciphers TLS_AES_256_GCM_SHA384 --http2 --write-out "HTTP/%{http_version}\n""#,
    "TLSv1_3",
    "TLS13_AES_256_GCM_SHA384",
);

/// Boots the guest and checks ioserve's kTLS in it, with `binary`'s ioserve.
pub(crate) fn run(binary: &IoserveBinary) -> Result<()> {
    anyhow::ensure!(
        cfg!(target_arch = "x86_64"),
        "tls-vm boots an x86_64 guest with x86_64 binaries: run it on x86_64"
    );
    let arch = Arch::X86_64;
    arch.ensure_tools()?;
    ensure_packages(&[
        ("curl", "curl"),
        ("openssl", "openssl"),
        ("strace", "strace"),
    ])?;
    let kernel = guest::debian_kernel(arch)?;
    let modules = guest::debian_modules(arch, MODULES)?;
    let ioserve = binary.get()?;
    let (cert, key) = certificate()?;
    let mut initramfs = Initramfs::new(arch)?;
    initramfs
        .host_program("ioserve", &ioserve)?
        .host_program(
            "curl",
            &crate::util::which("curl").context("curl is not on PATH")?,
        )?
        .host_program(
            "strace",
            &crate::util::which("strace").context("strace is not on PATH")?,
        )?;
    initramfs
        .directory("lib")
        .directory("lib/modules")
        .data("srv/cert.pem", &cert)
        .data("srv/key.pem", &key);
    for (file, bytes) in &modules {
        initramfs.data(&format!("lib/modules/{file}"), bytes);
    }
    let script = script(&modules);
    let machine = Machine {
        arch,
        name: "tls".into(),
        nodes: vec![(2, 1024)],
        append: String::new(),
        timeout: Duration::from_secs(600),
        single_threaded: false,
    };
    let sections = machine.boot("tls-vm", &kernel, &initramfs.finish(&script))?;
    let mut checks = Checks::new("tls-vm");
    checks.add("x86_64 6.1", results(&sections));
    checks.finish()
}

/// A self-signed ECDSA P-256 certificate for localhost and 127.0.0.1 and its key (PEM),
/// made by openssl: the TLS 1.2 suites are then ECDHE-ECDSA.
pub(crate) fn certificate() -> Result<(Vec<u8>, Vec<u8>)> {
    let dir = guest::work_dir()?.join("tls-cert");
    fs::create_dir_all(&dir)?;
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let mut openssl = Command::new("openssl");
    openssl
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "3650"])
        .args(["-subj", "/CN=localhost", "-addext"])
        .arg("subjectAltName=DNS:localhost,IP:127.0.0.1")
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert);
    step("make the test certificate", openssl)?;
    Ok((guest::read(&cert)?, guest::read(&key)?))
}

/// The guest's commands: the modules, the server under strace, the downloads, then
/// what the kernel and the server counted.
fn script(modules: &[(String, Vec<u8>)]) -> Script {
    let insmod: Vec<String> = modules
        .iter()
        .map(|(file, _)| format!("insmod /lib/modules/{file}"))
        .collect();
    let mut script = Script::default();
    script
        .shell("mkdir -p /srv/www")
        .shell(&format!(
            "dd if=/dev/urandom of=/srv/www/file bs=1M count={FILE_MIB} 2>/dev/null"
        ))
        .run(
            "modules",
            &format!("sh -c '{} && cat /proc/modules'", insmod.join(" && ")),
        )
        .shell(
            "strace -f -qq -y -e trace=sendfile -o /tmp/strace.log \
             ioserve /srv/www --listen 127.0.0.1:8443 --workers 1 --strategy sendfile \
             --tls-cert /srv/cert.pem --tls-key /srv/key.pem --ktls on \
             --metrics-listen 127.0.0.1:9100 --access-log off \
             >/tmp/ioserve.out 2>/tmp/ioserve.log & traced=$!",
        )
        .shell(
            "for i in $(seq 600); do wget -q -O /dev/null http://127.0.0.1:9100/metrics 2>/dev/null && break; \
             sleep 0.2; done",
        );
    for (name, args, _, _) in DOWNLOADS {
        script.run(&format!("download-{name}"), &download(8443, args));
    }
    script
        .run("tls-stat", "cat /proc/net/tls_stat")
        .run("download-http2", &download(8443, HTTP2_DOWNLOAD.0))
        .run("metrics", "wget -q -O - http://127.0.0.1:9100/metrics")
        .shell("kill $(pidof ioserve); wait $traced")
        .run("ioserve-log", "cat /tmp/ioserve.log")
        .run("strace", "cat /tmp/strace.log");
    // mmap and read write plaintext to the kTLS socket: one download under each.
    let (_, args, _, _) = DOWNLOADS[0];
    for (port, strategy) in [(8444, "mmap"), (8445, "read")] {
        let metrics = port + 1000;
        script
            .shell(&format!(
                "ioserve /srv/www --listen 127.0.0.1:{port} --workers 1 --strategy {strategy} \
                 --tls-cert /srv/cert.pem --tls-key /srv/key.pem --ktls on \
                 --metrics-listen 127.0.0.1:{metrics} --access-log off \
                 >/dev/null 2>/tmp/{strategy}.log & server=$!"
            ))
            .shell(&format!(
                "for i in $(seq 600); do wget -q -O /dev/null http://127.0.0.1:{metrics}/metrics \
                 2>/dev/null && break; sleep 0.2; done"
            ))
            .run(&format!("download-{strategy}"), &download(port, args))
            .run(
                &format!("metrics-{strategy}"),
                &format!("wget -q -O - http://127.0.0.1:{metrics}/metrics"),
            )
            .shell("kill $server; wait $server");
    }
    script
}

/// curl's download of the file from the server on `port` with `args`, then the sums of
/// the served file and the copy.
fn download(port: u16, args: &str) -> String {
    format!(
        "sh -c 'curl --silent --show-error --max-time 300 --cacert /srv/cert.pem \
         --resolve localhost:{port}:127.0.0.1 {args} -o /tmp/got \
         https://localhost:{port}/file && sha256sum /srv/www/file /tmp/got'"
    )
}

/// The checks of the guest's sections.
fn results(s: &guest::Sections) -> Vec<(String, Outcome)> {
    let mut results = vec![(
        "tls.ko and the crypto modules load".to_string(),
        s.ok("modules").map(drop),
    )];
    results.push((
        "ioserve --ktls on starts: the kernel takes the keys".into(),
        s.ok("ioserve-log").and_then(|lines| {
            expect(
                lines
                    .iter()
                    .any(|l| l.contains("kTLS: the kernel encrypts TLS records")),
                format!("no kTLS line in the log: {}", lines.join(" | ")),
            )
        }),
    ));
    results.push((
        "HTTP/3 beside it: UDP segmentation offload (GSO) found on 6.1".into(),
        s.ok("ioserve-log").and_then(|lines| {
            expect(
                lines
                    .iter()
                    .any(|l| l.contains("HTTP/3: UDP segmentation offload (GSO) in use")),
                format!("no GSO line in the log: {}", lines.join(" | ")),
            )
        }),
    ));
    let metrics = s.ok("metrics").map(|lines| lines.join("\n"));
    for (name, _, version, cipher) in DOWNLOADS {
        results.push((
            format!("{name}: the download is byte-exact"),
            s.ok(&format!("download-{name}"))
                .and_then(|lines| same_sums(lines)),
        ));
        results.push((
            format!("{name}: counted as mode=\"ktls\""),
            metrics
                .clone()
                .and_then(|text| counted_ktls(&text, version, cipher)),
        ));
    }
    let (_, version, cipher) = HTTP2_DOWNLOAD;
    results.push((
        "HTTP/2 over kTLS: the download is byte-exact".into(),
        s.ok("download-http2").and_then(|lines| {
            let (http, sums): (Vec<String>, Vec<String>) =
                lines.iter().cloned().partition(|l| l.starts_with("HTTP/"));
            expect(
                http == ["HTTP/2"],
                format!("curl spoke {http:?}, not HTTP/2"),
            )
            .and_then(|()| same_sums(&sums))
        }),
    ));
    results.push((
        "HTTP/2 over kTLS: counted as mode=\"ktls\"".into(),
        metrics
            .clone()
            .and_then(|text| counted_ktls(&text, version, cipher)),
    ));
    results.push((
        "no connection served in user space".into(),
        metrics.and_then(|text| {
            let userspace: Vec<&str> = text
                .lines()
                .filter(|l| l.contains("mode=\"userspace\"") && !l.ends_with(" 0"))
                .collect();
            expect(userspace.is_empty(), format!("{userspace:?}"))
        }),
    ));
    results.push((
        "/proc/net/tls_stat: a kernel TX and RX session per download, no decrypt error".into(),
        s.ok("tls-stat").and_then(|lines| tls_stat(lines)),
    ));
    results.push((
        "strace: sendfile(2) from the file into the TLS socket".into(),
        s.ok("strace").and_then(|lines| sendfile_into_socket(lines)),
    ));
    let (name, _, version, cipher) = DOWNLOADS[0];
    for strategy in ["mmap", "read"] {
        results.push((
            format!("--strategy {strategy}: {name} is byte-exact"),
            s.ok(&format!("download-{strategy}"))
                .and_then(|lines| same_sums(lines)),
        ));
        results.push((
            format!("--strategy {strategy}: counted as mode=\"ktls\""),
            s.ok(&format!("metrics-{strategy}"))
                .and_then(|lines| counted_ktls(&lines.join("\n"), version, cipher)),
        ));
    }
    results
}

/// The metrics `text` count one connection in kernel TLS of `version` and `cipher`.
fn counted_ktls(text: &str, version: &str, cipher: &str) -> Outcome {
    let sample = format!(
        "ioserve_tls_connections_total{{mode=\"ktls\",version=\"{version}\",cipher=\"{cipher}\"}} 1"
    );
    expect(
        text.lines().any(|l| l == sample),
        format!("no {sample:?} in the metrics"),
    )
}

/// The counters of /proc/net/tls_stat: `TlsRxSw` sessions for each download (the
/// start's cipher probe sets TX keys only), as many `TlsTxSw` or more, no
/// `TlsDecryptError`.
fn tls_stat(lines: &[String]) -> Outcome {
    let counter = |name: &str| {
        lines.iter().find_map(|l| {
            let (key, value) = l.split_once(char::is_whitespace)?;
            (key == name).then(|| value.trim().parse::<u64>().ok())?
        })
    };
    let downloads = DOWNLOADS.len() as u64;
    let (tx, rx, errors) = (
        counter("TlsTxSw"),
        counter("TlsRxSw"),
        counter("TlsDecryptError"),
    );
    expect(
        rx == Some(downloads) && tx.is_some_and(|tx| tx >= downloads) && errors == Some(0),
        format!(
            "TlsTxSw {tx:?}, TlsRxSw {rx:?} (want {downloads}), TlsDecryptError {errors:?}: {}",
            lines.join(" | ")
        ),
    )
}

/// strace's sendfile lines (`-y`: descriptors with what they are, `socket:[INODE]` for
/// a socket): bytes went from the served file into a socket (the connections' kTLS
/// sockets are the only ones written to), at least the file's size per download.
fn sendfile_into_socket(lines: &[String]) -> Outcome {
    let sent: u64 = lines
        .iter()
        .filter(|l| {
            l.contains("sendfile(")
                && (l.contains("<socket:[") || l.contains("<TCP:["))
                && l.contains("</srv/www/file>")
        })
        .filter_map(|l| l.rsplit("= ").next()?.trim().parse::<u64>().ok())
        .sum();
    let want = DOWNLOADS.len() as u64 * (u64::from(FILE_MIB) << 20);
    let shown = lines
        .iter()
        .take(4)
        .cloned()
        .collect::<Vec<_>>()
        .join(" | ");
    expect(
        sent >= want,
        format!("sendfile moved {sent} bytes into sockets, want {want}: {shown}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn tls_stat_needs_a_session_per_download_and_no_error() {
        let good =
            lines("TlsCurrTxSw 0\nTlsCurrRxSw 0\nTlsTxSw 10\nTlsRxSw 4\nTlsDecryptError 0\n");
        assert!(tls_stat(&good).is_ok());
        let none = lines("TlsTxSw 6\nTlsRxSw 0\nTlsDecryptError 0\n");
        assert!(tls_stat(&none).unwrap_err().contains("TlsRxSw Some(0)"));
    }

    #[test]
    fn sendfile_lines_count_bytes_into_sockets_only() {
        let size = u64::from(FILE_MIB) << 20;
        // As strace -y printed them in the guest.
        let line = |n: u64| {
            format!("159   sendfile(16<socket:[256]>, 17</srv/www/file>, [0] => [{n}], {n}) = {n}")
        };
        let all: Vec<String> = (0..DOWNLOADS.len()).map(|_| line(size)).collect();
        assert!(sendfile_into_socket(&all).is_ok());
        let short = vec![
            line(size),
            "77 sendfile(9</tmp/x>, 10</srv/www/file>, [0], 5) = 5".into(),
        ];
        assert!(sendfile_into_socket(&short).is_err());
    }

    #[test]
    fn the_script_loads_the_modules_in_order_then_serves_with_ktls() {
        let modules = vec![
            ("gf128mul.ko".to_string(), vec![]),
            ("tls.ko".to_string(), vec![]),
        ];
        let init = script(&modules).init();
        assert!(init.contains("insmod /lib/modules/gf128mul.ko && insmod /lib/modules/tls.ko"));
        assert!(init.contains("--ktls on"));
        // Each download under sendfile, one over HTTP/2, then one under mmap and one
        // under read.
        assert_eq!(init.matches("run download-").count(), DOWNLOADS.len() + 3);
        assert_eq!(init.matches("--http1.1").count(), DOWNLOADS.len() + 2);
        assert!(init.contains("--http2"));
        assert!(init.contains("--strategy mmap") && init.contains("--strategy read"));
    }
}
