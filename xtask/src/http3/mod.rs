//! `cargo xtask http3`: ioserve's HTTP/3 proven with clients no one here wrote.
//!
//! - `h3get` (h3get/main.go), a client on quic-go's `http3` package, built by the
//!   check with `go build` from its committed go.mod and go.sum;
//! - `aioquic_get.py`, a client on Python's aioquic, installed from PyPI with pip
//!   under the target directory;
//! - headless Chromium forced onto QUIC (`--origin-to-force-quic-on`), trusting the
//!   test certificate by its key (`--ignore-certificate-errors-spki-list`).
//!
//! Each of the two programs downloads a 32 MiB file byte-exact, a range, gets 304 for
//! the file's ETag, reads the listing, and sends 300 requests at once on one connection
//! (more than the server's 128 concurrent streams); Chromium loads the listing and a
//! download, and both must report `h3` as their protocol.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context as _, Result};
use serde::Deserialize;

use crate::acme::process::output_within;
use crate::util::certificate::{self, IssuedPair};
use crate::util::ioserve_process::{IoserveBinary, IoserveProcess};
use crate::util::{ensure_packages, find_go, project_root, step, target_dir};

/// The aioquic release installed for the Python client.
pub(crate) const AIOQUIC: &str = "aioquic==1.7.2";
/// The size of the download every client checks.
const BIG: usize = 32 << 20;
/// Requests each client sends at once on one connection.
const AT_ONCE: usize = 300;
/// How long ioserve may take to print its address.
const SERVER_WAIT: Duration = Duration::from_secs(60);
/// How long one client run may take.
const CLIENT_WAIT: Duration = Duration::from_secs(180);

/// `cargo xtask http3`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct Options {
    /// The ioserve to check (default: the debug build, built now)
    #[command(flatten)]
    binary: IoserveBinary,
}

/// `cargo xtask http3`.
pub(crate) fn run(options: &Options) -> Result<()> {
    check(&options.binary.get()?)
}

/// The checks, with the packaged `ioserve` CI has built.
pub(crate) fn ci(ioserve: &Path) -> Result<()> {
    check(ioserve)
}

/// One response as both client programs print it (one JSON object per line).
#[derive(Debug, Deserialize)]
struct Response {
    status: u16,
    proto: String,
    headers: std::collections::BTreeMap<String, String>,
    length: u64,
    sha256: String,
    #[serde(default)]
    body: String,
    #[serde(default)]
    error: String,
}

/// A client program and how it is run.
struct Client {
    name: &'static str,
    /// The program, and the arguments before the check's.
    program: PathBuf,
    leading: Vec<std::ffi::OsString>,
    /// `PYTHONPATH`, for the Python client.
    python_path: Option<PathBuf>,
}

impl Client {
    /// `-n` requests for `url` at once, with `headers`; the body printed with `body`.
    fn get(
        &mut self,
        ca: &Path,
        url: &str,
        headers: &[&str],
        n: usize,
        body: bool,
    ) -> Result<Vec<Response>> {
        let mut command = Command::new(&self.program);
        command.args(&self.leading);
        if let Some(path) = &self.python_path {
            command.env("PYTHONPATH", path);
        }
        let python = self.name == "aioquic";
        command.arg(if python { "--ca" } else { "-ca" }).arg(ca);
        command.arg("-n").arg(n.to_string());
        if body {
            command.arg(if python { "--body" } else { "-body" });
        }
        for header in headers {
            command.arg("-H").arg(header);
        }
        command.arg(url);
        let output = output_within(self.name, command, None, CLIENT_WAIT)?;
        ensure!(
            output.status.success(),
            "{} {url} failed ({}): {}",
            self.name,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let responses = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(serde_json::from_str)
            .collect::<Result<Vec<Response>, _>>()
            .with_context(|| format!("{} printed a line that is not a response", self.name))?;
        ensure!(
            responses.len() == n,
            "{}: {} responses of {n}",
            self.name,
            responses.len()
        );
        for response in &responses {
            ensure!(
                response.error.is_empty(),
                "{} {url}: {}",
                self.name,
                response.error
            );
            ensure!(
                response.proto == "HTTP/3.0",
                "{} {url}: over {}, not HTTP/3",
                self.name,
                response.proto
            );
        }
        Ok(responses)
    }
}

fn check(ioserve: &Path) -> Result<()> {
    ensure_packages(&[
        crate::browser::CHROMIUM,
        crate::browser::CHROMIUM_DRIVER,
        crate::browser::PYTHON_SELENIUM,
        ("openssl", "openssl"),
    ])?;
    let work = target_dir()?.join("http3");
    let clients = [go_client(&work)?, aioquic_client(&work)?];
    let scratch = tempfile::tempdir().context("cannot create a temporary directory")?;
    let root = scratch.path().join("root");
    let big = make_tree(&root)?;
    let issued = certificate::issued_by_test_ca(scratch.path())?;
    let server = start(ioserve, &root, &issued)?;
    let base = format!("https://127.0.0.1:{}", server.addr.port());
    let mut results = Vec::new();
    for mut client in clients {
        for (what, outcome) in client_checks(&mut client, &issued.ca, &base, &big) {
            results.push((client.name, what, outcome));
        }
    }
    let chromium = chromium_check(&base, &issued, &big);
    results.push((
        "chromium",
        "listing and a 32 MiB download over h3",
        chromium,
    ));
    drop(server);
    eprintln!();
    eprintln!("{:<9} {:<52} result", "client", "check");
    let mut failed = 0;
    for (client, what, outcome) in &results {
        let result = match outcome {
            Ok(()) => "ok".to_string(),
            Err(error) => {
                failed += 1;
                format!("FAILED: {error:#}")
            }
        };
        eprintln!("{client:<9} {what:<52} {result}");
    }
    ensure!(
        failed == 0,
        "xtask http3: {failed} of {} checks failed",
        results.len()
    );
    eprintln!("xtask http3: all {} checks passed", results.len());
    Ok(())
}

/// The served file every client downloads: its bytes' SHA-256 and length.
struct Big {
    sha256: String,
    len: usize,
}

/// Writes the served tree: `big.bin` (random, [`BIG`] bytes), `hello.txt`, a
/// directory.
fn make_tree(root: &Path) -> Result<Big> {
    std::fs::create_dir_all(root.join("docs"))?;
    let mut data = vec![0; BIG];
    fastrand::Rng::with_seed(55).fill(&mut data);
    std::fs::write(root.join("big.bin"), &data)?;
    std::fs::write(root.join("hello.txt"), "hello\n")?;
    std::fs::write(root.join("docs/readme.txt"), "read me\n")?;
    Ok(Big {
        sha256: sha256_hex(&data),
        len: data.len(),
    })
}

/// The SHA-256 of `data`, in hex.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Starts `ioserve` serving `root` over HTTPS (and so HTTP/3) with `issued`.
fn start(ioserve: &Path, root: &Path, issued: &IssuedPair) -> Result<IoserveProcess> {
    let mut command = Command::new(ioserve);
    command
        .arg(root)
        .args(["--listen", "127.0.0.1:0", "--access-log", "off"])
        .arg("--tls-cert")
        .arg(&issued.pair.cert)
        .arg("--tls-key")
        .arg(&issued.pair.key);
    IoserveProcess::start(command, "https", SERVER_WAIT)
}

/// What each client program is checked for.
fn client_checks(
    client: &mut Client,
    ca: &Path,
    base: &str,
    big: &Big,
) -> Vec<(&'static str, Result<()>)> {
    let big_url = format!("{base}/big.bin");
    let mut results = Vec::new();
    let whole = client.get(ca, &big_url, &[], 1, false).and_then(|mut r| {
        let response = r.remove(0);
        ensure!(
            response.status == 200
                && response.length == big.len as u64
                && response.sha256 == big.sha256,
            "status {}, {} bytes, SHA-256 {}; expected 200, {} bytes, {}",
            response.status,
            response.length,
            response.sha256,
            big.len,
            big.sha256
        );
        response
            .headers
            .get("etag")
            .cloned()
            .context("no ETag on the file")
    });
    let etag = whole.as_ref().ok().cloned();
    results.push(("a 32 MiB download, byte-exact", whole.map(drop)));
    results.push((
        "a range (206, its bytes)",
        client
            .get(ca, &big_url, &["Range: bytes=1000000-1999999"], 1, false)
            .and_then(|r| {
                let mut data = vec![0; BIG];
                fastrand::Rng::with_seed(55).fill(&mut data);
                let expected = sha256_hex(&data[1_000_000..2_000_000]);
                ensure!(
                    r[0].status == 206 && r[0].length == 1_000_000 && r[0].sha256 == expected,
                    "status {}, {} bytes; expected 206 and the range's bytes",
                    r[0].status,
                    r[0].length
                );
                Ok(())
            }),
    ));
    results.push((
        "304 for the file's ETag",
        match etag {
            None => Err(anyhow::anyhow!("no ETag from the download")),
            Some(etag) => client
                .get(ca, &big_url, &[&format!("If-None-Match: {etag}")], 1, false)
                .and_then(|r| {
                    ensure!(
                        r[0].status == 304 && r[0].length == 0,
                        "status {}, {} bytes; expected 304 without a body",
                        r[0].status,
                        r[0].length
                    );
                    Ok(())
                }),
        },
    ));
    results.push((
        "the listing",
        client
            .get(ca, &format!("{base}/"), &[], 1, true)
            .and_then(|r| {
                ensure!(
                    r[0].status == 200
                        && ["big.bin", "hello.txt", "docs/"]
                            .iter()
                            .all(|name| r[0].body.contains(name)),
                    "status {}; the listing lacks big.bin, hello.txt or docs/",
                    r[0].status
                );
                Ok(())
            }),
    ));
    results.push((
        "300 requests at once on one connection",
        client
            .get(ca, &format!("{base}/hello.txt"), &[], AT_ONCE, false)
            .and_then(|r| {
                let hello = sha256_hex(b"hello\n");
                let answered = r
                    .iter()
                    .filter(|r| r.status == 200 && r.sha256 == hello)
                    .count();
                ensure!(
                    answered == AT_ONCE,
                    "{answered} of {AT_ONCE} answered hello"
                );
                Ok(())
            }),
    ));
    results
}

/// Headless Chromium forced onto QUIC loads the listing and downloads big.bin.
fn chromium_check(base: &str, issued: &IssuedPair, big: &Big) -> Result<()> {
    let spki = spki_sha256_base64(&issued.pair.cert)?;
    let mut check = Command::new("/usr/bin/python3");
    check
        .arg(project_root().join("xtask/src/browser/check_h3.py"))
        .arg(format!("{base}/"))
        .arg(spki)
        .arg("hello.txt")
        .arg("big.bin")
        .arg(big.len.to_string())
        .arg(&big.sha256);
    let output = output_within("chromium over HTTP/3", check, None, CLIENT_WAIT)?;
    eprint!("{}", String::from_utf8_lossy(&output.stdout));
    ensure!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(())
}

/// The base64 SHA-256 of `cert`'s public key (SubjectPublicKeyInfo), as Chromium's
/// `--ignore-certificate-errors-spki-list` takes it.
fn spki_sha256_base64(cert: &Path) -> Result<String> {
    let mut command = Command::new("sh");
    command.arg("-c").arg(
        "openssl x509 -in \"$1\" -pubkey -noout | openssl pkey -pubin -outform der \
         | openssl dgst -sha256 -binary | openssl base64 -A",
    );
    command.arg("spki").arg(cert);
    let output = output_within(
        "openssl (SPKI hash)",
        command,
        None,
        Duration::from_secs(30),
    )?;
    let spki = String::from_utf8_lossy(&output.stdout).trim().to_string();
    ensure!(
        output.status.success() && spki.len() == 44,
        "cannot hash the certificate's key: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(spki)
}

/// Builds h3get, the client on quic-go's `http3` package, from its committed module
/// (xtask/src/http3/h3get) into `program`.
pub(crate) fn build_h3get(program: &Path) -> Result<()> {
    let mut build = Command::new(find_go()?);
    build
        .current_dir(project_root().join("xtask/src/http3/h3get"))
        .args(["build", "-trimpath", "-o"])
        .arg(program)
        .arg(".");
    step("go build h3get (quic-go's http3)", build)
}

/// quic-go's client (h3get), built into `work`.
fn go_client(work: &Path) -> Result<Client> {
    let program = work.join("h3get");
    build_h3get(&program)?;
    Ok(Client {
        name: "quic-go",
        program,
        leading: Vec::new(),
        python_path: None,
    })
}

/// Fetches what the checks install (h3get's Go modules, aioquic from PyPI), so that a
/// fresh host's CI run downloads them beside its first stages.
pub(crate) fn prefetch() -> Result<()> {
    let mut download = Command::new(find_go()?);
    download
        .current_dir(project_root().join("xtask/src/http3/h3get"))
        .args(["mod", "download"]);
    step("go mod download (h3get: quic-go)", download)?;
    install_aioquic(&target_dir()?.join("http3")).map(drop)
}

/// aioquic installed under `work` (pip --target), once: the directory for PYTHONPATH.
fn install_aioquic(work: &Path) -> Result<PathBuf> {
    ensure_packages(&[("python3-pip", "/usr/lib/python3/dist-packages/pip")])?;
    let packages = work.join("python");
    let marker = packages.join(format!("{}.installed", AIOQUIC.replace("==", "-")));
    if !marker.is_file() {
        if packages.exists() {
            std::fs::remove_dir_all(&packages)?;
        }
        let mut install = Command::new("/usr/bin/python3");
        install
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg("--target")
            .arg(&packages)
            .arg(AIOQUIC);
        step(&format!("pip install {AIOQUIC}"), install)?;
        std::fs::write(&marker, "")?;
    }
    Ok(packages)
}

/// aioquic's client, with aioquic installed under `work`.
fn aioquic_client(work: &Path) -> Result<Client> {
    let packages = install_aioquic(work)?;
    let script: PathBuf = project_root().join("xtask/src/http3/aioquic_get.py");
    if !script.is_file() {
        bail!("{} is missing", script.display());
    }
    Ok(Client {
        name: "aioquic",
        program: PathBuf::from("/usr/bin/python3"),
        leading: vec![script.into_os_string()],
        python_path: Some(packages),
    })
}
