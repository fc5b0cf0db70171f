//! Scenario 7, browser: headless Chromium, trusting pebble's root through an NSS
//! database in a temporary HOME (`certutil`) and resolving [`DOMAIN`] to 127.0.0.1
//! (`--host-resolver-rules`), loads ioserve's listing at `https://DOMAIN:PORT/` over
//! the ACME certificate (`check_acme_page.py`, Selenium through chromedriver, as
//! `cargo xtask browser` drives it).

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Result};

use super::process::output_within;
use super::scenarios::{stop_cleanly, Setup};
use super::server::AcmeServer;
use super::{Env, DOMAIN, ISSUANCE_WAIT, NSS_TOOLS};
use crate::browser::{CHROMIUM, CHROMIUM_DRIVER, PYTHON_SELENIUM};
use crate::util::{ensure_packages, project_root};

/// The browser's HOME in the scenario's directory (its NSS database, its profile).
pub(crate) const HOME: &str = "home";
/// How long the page check may take.
const CHECK_LIMIT: Duration = Duration::from_secs(180);
/// How long one certutil may take.
const CERTUTIL_LIMIT: Duration = Duration::from_secs(30);

/// 7: the listing in headless Chromium over the ACME certificate.
pub(crate) fn browser(env: &Env) -> Result<()> {
    ensure_packages(&[CHROMIUM, CHROMIUM_DRIVER, PYTHON_SELENIUM, NSS_TOOLS])?;
    let setup = Setup::new(env, |_| {})?;
    let root = &setup.args.root;
    fs::create_dir_all(root.join("docs"))?;
    fs::write(root.join("docs/README.txt"), "a file inside\n")?;
    fs::write(root.join("notes.md"), "# Notes\n")?;
    let mut server = AcmeServer::start(env, "ioserve", &setup.args)?;
    let line = server.wait_for_certificate(ISSUANCE_WAIT)?;
    eprintln!("xtask acme: {}", line.trim());
    let pebble_root = setup.pebble.root()?;
    let home = env.path(HOME);
    trust(&home, &pebble_root)?;

    let url = format!("https://{DOMAIN}:{}/", server.addr.port());
    let screenshot = env.path("listing.png");
    let mut check = Command::new("/usr/bin/python3");
    check
        .arg(project_root().join("xtask/src/browser/check_acme_page.py"))
        .arg(&url)
        .arg(root)
        .arg(&screenshot)
        .arg(format!("MAP {DOMAIN} 127.0.0.1"))
        .env("HOME", &home);
    let output = output_within("check_acme_page.py", check, None, CHECK_LIMIT)?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprint!("{said}");
    ensure!(
        output.status.success(),
        "expected headless Chromium to load the listing at {url} over pebble's certificate; \
         check_acme_page.py failed ({})",
        output.status
    );
    server.alive()?;
    stop_cleanly(&mut server)
}

/// Makes an NSS database under `home/.pki/nssdb` that trusts `root` to issue server
/// certificates.
fn trust(home: &Path, root: &Path) -> Result<()> {
    let nssdb = home.join(".pki/nssdb");
    fs::create_dir_all(&nssdb)?;
    let database = format!("sql:{}", nssdb.display());
    let mut create = Command::new("certutil");
    create.args(["-N", "--empty-password", "-d", &database]);
    certutil(create)?;
    let mut add = Command::new("certutil");
    add.args(["-A", "-t", "C,,", "-n", "pebble", "-d", &database, "-i"])
        .arg(root);
    certutil(add)
}

/// Runs one certutil command: an error with what it said unless it succeeds.
fn certutil(command: Command) -> Result<()> {
    let shown = format!("{command:?}");
    let output = output_within("certutil", command, None, CERTUTIL_LIMIT)?;
    ensure!(
        output.status.success(),
        "{shown} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}
