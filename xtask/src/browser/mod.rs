//! `cargo xtask browser`: ioserve's directory listing as people use it, in headless
//! Chromium driven through chromedriver (WebDriver) by Selenium (Debian's
//! python3-selenium, so no WebDriver client is compiled into xtask).
//!
//! This module builds ioserve, makes a fixture tree in `TARGET_DIR/browser/root`
//! (directories, files from 0 B to sparse 4 GiB, names that need escaping, fixed
//! modification times so that the screenshots do not change from run to run), starts
//! the server on a free port and waits until it answers, installs axe-core with npm
//! when it is missing, and runs `check_listing.py`: the page renders, the Size header
//! sorts ascending and then descending, the dark theme applies under an emulated
//! `prefers-color-scheme: dark`, a 390 px phone viewport has no horizontal scroll, and
//! axe-core finds no serious or critical violation. It writes the screenshots
//! `listing-{light,dark,phone}.png` beside the fixture; `--docs` copies them to
//! `crates/ioserve/docs/`, where the README shows them.

use std::fs::{self, File};
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context as _, Result};

use crate::util::ioserve_process::IoserveProcess;
use crate::util::{cargo, ensure_packages, project_root, step, target_dir};

/// Debian's Chromium.
pub(crate) const CHROMIUM: (&str, &str) = ("chromium", "/usr/bin/chromium");
/// chromedriver, Chromium's WebDriver server.
pub(crate) const CHROMIUM_DRIVER: (&str, &str) = ("chromium-driver", "/usr/bin/chromedriver");
/// Selenium for Debian's /usr/bin/python3, which runs the checks.
pub(crate) const PYTHON_SELENIUM: (&str, &str) = (
    "python3-selenium",
    "/usr/lib/python3/dist-packages/selenium",
);
/// npm, which installs axe-core at run time.
pub(crate) const NPM: (&str, &str) = ("npm", "npm");

/// How long the server may take to print its address and answer.
const SERVER_WAIT: Duration = Duration::from_secs(30);

/// The files of the fixture: name, size (a size over 1 MiB is made sparse with
/// `set_len`), and how long before [`FIXTURE_TIME`] it was modified.
const FILES: &[(&str, u64, u64)] = &[
    ("debian-13-amd64.iso", 4 << 30, 6 * DAY),
    ("backup 2026-11.tar.zst", 1536 << 20, 2 * DAY + 5 * HOUR),
    ("holiday video.mkv", 734 << 20, 40 * DAY),
    (
        "a-very-long-file-name-that-must-wrap-on-a-phone-screen-without-scrolling.tar.gz",
        25 << 20,
        3 * HOUR,
    ),
    ("report <draft> & \"final\".pdf", 212_345, 26 * MINUTE),
    ("café menü.txt", 3_100, 400 * DAY),
    ("notes.txt", 512, 9 * MINUTE),
    ("empty.log", 0, 90 * DAY),
];

/// The directories of the fixture, and how long before [`FIXTURE_TIME`] each was
/// modified.
const DIRECTORIES: &[(&str, u64)] = &[
    ("Documents", DAY),
    ("Photos 2026", 12 * DAY),
    ("src", 4 * HOUR),
];

/// The fixture's "now": 2026-11-26 02:10 UTC.
const FIXTURE_TIME: u64 = 1_795_659_000;
const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// The screenshots the check writes.
const SCREENSHOTS: [&str; 3] = ["listing-light.png", "listing-dark.png", "listing-phone.png"];

/// `cargo xtask browser`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct Options {
    /// Copy the screenshots to crates/ioserve/docs/ (shown in its README)
    #[arg(long)]
    docs: bool,
}

/// The checks, as `cargo xtask ci` runs them, on `ioserve`: the packaged program that
/// CI has just built (building ioserve alone again would resolve its dependencies'
/// features anew and compile them a third time). The screenshots stay under the target
/// directory.
pub(crate) fn ci(ioserve: &Path) -> Result<()> {
    check(ioserve, &Options { docs: false })
}

/// Builds ioserve, serves the fixture and runs the browser checks.
pub(crate) fn run(options: &Options) -> Result<()> {
    step(
        "cargo build -p ioserve",
        cargo(&["build", "--package", "ioserve", "--bin", "ioserve"]),
    )?;
    check(&target_dir()?.join("debug/ioserve"), options)
}

/// Serves the fixture with the program `ioserve` and runs the browser checks.
fn check(ioserve: &Path, options: &Options) -> Result<()> {
    ensure_packages(&[CHROMIUM, CHROMIUM_DRIVER, PYTHON_SELENIUM, NPM])?;
    let target = target_dir()?;
    let work = target.join("browser");
    let root = work.join("root");
    make_fixture(&root)?;
    let axe = install_axe(&work)?;
    let server = start_server(ioserve, &root)?;
    let mut check = Command::new("/usr/bin/python3");
    check
        .arg(project_root().join("xtask/src/browser/check_listing.py"))
        .arg(format!("http://{}/", server.addr))
        .arg(&root)
        .arg(&axe)
        .arg(&work);
    step("the listing in headless Chromium", check)?;
    drop(server);
    if options.docs {
        let docs = project_root().join("crates/ioserve/docs");
        fs::create_dir_all(&docs)?;
        for name in SCREENSHOTS {
            fs::copy(work.join(name), docs.join(name))
                .with_context(|| format!("cannot copy {name} to {}", docs.display()))?;
        }
        eprintln!("xtask: screenshots copied to {}", docs.display());
    }
    Ok(())
}

/// Makes the fixture tree at `root`, replacing any earlier one.
fn make_fixture(root: &Path) -> Result<()> {
    if root.exists() {
        fs::remove_dir_all(root).with_context(|| format!("cannot remove {}", root.display()))?;
    }
    let at = |ago: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(FIXTURE_TIME - ago);
    for &(name, size, ago) in FILES {
        let path = root.join(name);
        fs::create_dir_all(root)?;
        let mut file =
            File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        if size > 1 << 20 {
            // Sparse: gigabytes that take no disk.
            file.set_len(size)?;
        } else {
            file.write_all(&vec![b'x'; size as usize])?;
        }
        file.set_modified(at(ago))?;
    }
    for &(name, ago) in DIRECTORIES {
        let path = root.join(name);
        fs::create_dir(&path)?;
        fs::write(path.join("README.txt"), b"a file inside\n")?;
        File::open(&path)?.set_modified(at(ago))?;
    }
    Ok(())
}

/// axe-core's script: installed with npm under `work` at run time when missing.
fn install_axe(work: &Path) -> Result<PathBuf> {
    let axe = work.join("node_modules/axe-core/axe.min.js");
    if !axe.is_file() {
        let mut npm = Command::new("npm");
        npm.args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(work)
            .arg("axe-core@4");
        step("npm install axe-core@4", npm)?;
    }
    if !axe.is_file() {
        bail!("npm installed axe-core, but {} is missing", axe.display());
    }
    Ok(axe)
}

/// Starts ioserve on a free port of 127.0.0.1 serving `root` and waits until it
/// answers `GET /` with 200.
fn start_server(binary: &Path, root: &Path) -> Result<IoserveProcess> {
    let mut command = Command::new(binary);
    command
        .arg(root)
        .args(["--listen", "127.0.0.1:0", "--access-log", "off"]);
    let deadline = Instant::now() + SERVER_WAIT;
    let server = IoserveProcess::start(command, "http", SERVER_WAIT)?;
    loop {
        let last = match status_line(server.addr) {
            Ok(line) if line.starts_with("HTTP/1.1 200") => return Ok(server),
            Ok(line) => line,
            Err(error) => error.to_string(),
        };
        if Instant::now() > deadline {
            bail!(
                "ioserve at {} did not answer GET / with 200 within {SERVER_WAIT:?}; last: {last}",
                server.addr
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The status line of `GET /` at `addr`.
fn status_line(addr: SocketAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
    let mut head = [0u8; 64];
    let read = stream.read(&mut head)?;
    Ok(String::from_utf8_lossy(&head[..read])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned())
}
