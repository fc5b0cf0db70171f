//! Scenario 8, bad input: a CA that does not answer, a name the CA refuses, a state
//! directory that cannot be made, a state directory whose disk fills up. ioserve must say so in its log, count the failure,
//! keep running (the redirect listener still answering) and leave no temporary file.

use std::fs;
use std::time::Duration;

use anyhow::{ensure, Result};

use super::pebble::{PebbleSettings, BLOCKED_DOMAIN};
use super::process::{free_tcp_port, wait_until, Look};
use super::scenarios::{
    expect_orders, expect_redirect, no_temporary_files, stop_cleanly, Setup, METRICS_WAIT,
};
use super::server::{AcmeServer, ServerArgs, CANNOT_WRITE_STATE, ORDERS_TOTAL, ORDER_FAILED};
use super::{Env, DOMAIN, ISSUANCE_WAIT};

/// A CA URL where nothing listens (port 1 of 127.0.0.1).
const UNREACHABLE_CA: &str = "https://127.0.0.1:1/dir";
/// The ACME problem type of a refused identifier.
const REJECTED_IDENTIFIER: &str = "rejectedIdentifier";
/// How long the process must go on running after the failure was logged, checked by
/// asking its metrics and redirect listener again.
const STILL_RUNNING_FOR: Duration = Duration::from_secs(2);

/// 8a: `--acme-ca` where nothing listens: the order fails naming the URL, the failure
/// is counted, and ioserve keeps running with its redirect listener answering 308.
pub(crate) fn unreachable_ca(env: &Env) -> Result<()> {
    let root = env.path("root");
    fs::create_dir_all(&root)?;
    fs::write(root.join("hello.txt"), "hello\n")?;
    let args = ServerArgs {
        root,
        tls_port: free_tcp_port()?,
        domains: vec![DOMAIN.to_owned()],
        ca: UNREACHABLE_CA.to_owned(),
        ca_root: env.pebble.minica(),
        state: env.path("state"),
        challenge: None,
        profile: None,
        redirect_http: Some(free_tcp_port()?),
        reuse_port: false,
    };
    let mut server = AcmeServer::start(env, "ioserve", &args)?;
    let line = server.wait_for_log(ORDER_FAILED, ISSUANCE_WAIT)?;
    eprintln!("xtask acme: {}", line.trim());
    ensure!(
        line.contains(UNREACHABLE_CA),
        "expected the {ORDER_FAILED:?} line to name the CA {UNREACHABLE_CA}; it says: {line}"
    );
    expect_failed_order_counted(&mut server)?;
    expect_redirect(&server)?;
    still_running(&mut server)?;
    expect_redirect(&server)?;
    stop_cleanly(&mut server)
}

/// 8b: a name in pebble's domainBlocklist: the order fails with pebble's
/// `rejectedIdentifier` problem in the log, and ioserve keeps running.
pub(crate) fn blocked_name(env: &Env) -> Result<()> {
    let mut setup = Setup::new(env, |_| {})?;
    setup.args.domains = vec![BLOCKED_DOMAIN.to_owned()];
    let mut server = AcmeServer::start(env, "ioserve", &setup.args)?;
    let line = server.wait_for_log(ORDER_FAILED, ISSUANCE_WAIT)?;
    eprintln!("xtask acme: {}", line.trim());
    ensure!(
        line.contains(REJECTED_IDENTIFIER) && line.contains(BLOCKED_DOMAIN),
        "expected the {ORDER_FAILED:?} line to carry pebble's {REJECTED_IDENTIFIER} problem \
         for {BLOCKED_DOMAIN}; it says: {line}"
    );
    expect_failed_order_counted(&mut server)?;
    expect_orders(&setup.pebble, 0, "for a blocked name")?;
    still_running(&mut server)?;
    stop_cleanly(&mut server)
}

/// 8c: `--acme-state` under a regular file (root is not stopped by permissions, but
/// no one makes a directory inside a file): ioserve says it cannot write the state
/// directory, naming it, keeps running, and leaves no `.tmp` file anywhere in the
/// scenario's directory.
pub(crate) fn unwritable_state(env: &Env) -> Result<()> {
    let mut setup = Setup::new(env, |_: &mut PebbleSettings| {})?;
    let file = env.path("a-regular-file");
    fs::write(&file, "not a directory\n")?;
    setup.args.state = file.join("acme");
    let mut server = AcmeServer::start(env, "ioserve", &setup.args)?;
    let line = server.wait_for_log(CANNOT_WRITE_STATE, ISSUANCE_WAIT)?;
    eprintln!("xtask acme: {}", line.trim());
    let named = setup.args.state.display().to_string();
    ensure!(
        line.contains(&named),
        "expected the {CANNOT_WRITE_STATE:?} line to name {named}; it says: {line}"
    );
    still_running(&mut server)?;
    no_temporary_files(env)?;
    stop_cleanly(&mut server)
}

/// Waits for `ioserve_acme_orders_total{result="failed"}` >= 1.
fn expect_failed_order_counted(server: &mut AcmeServer) -> Result<()> {
    let name = server.name.clone();
    let failed = wait_until(
        &format!("{name}'s {ORDERS_TOTAL}{{result=\"failed\"}} >= 1"),
        METRICS_WAIT,
        || {
            server.alive()?;
            Ok(match server.metric(ORDERS_TOTAL, &[("result", "failed")]) {
                Ok(Some(value)) if value >= 1.0 => Look::Holds(value),
                Ok(value) => Look::Not(format!("{value:?}")),
                Err(error) => Look::Not(format!("{error:#}")),
            })
        },
    )?;
    eprintln!("xtask acme: {ORDERS_TOTAL}{{result=\"failed\"}} {failed}");
    Ok(())
}

/// An error unless ioserve is still running and answering its metrics after
/// [`STILL_RUNNING_FOR`] more.
fn still_running(server: &mut AcmeServer) -> Result<()> {
    std::thread::sleep(STILL_RUNNING_FOR);
    server.alive()?;
    server.metrics_text()?;
    Ok(())
}

/// What ioserve logs when a certificate it obtained cannot be written.
const NOT_KEPT: &str = "the new certificate is served, and kept once it can be written";
/// What it logs when that certificate has been written after all.
const KEPT_NOW: &str = "acme: the state directory takes the certificate again";

/// 8d: the state directory's disk (a 512 KiB tmpfs, as root) fills up after the first
/// certificate: the renewal of the 60 s certificate is served though it cannot be
/// written, which is said; once space returns it is written, and the stored
/// certificate is the served one.
pub(crate) fn full_state(env: &Env) -> Result<()> {
    ensure!(
        rustix::process::geteuid().is_root(),
        "the full-state scenario mounts a tmpfs: run it as root"
    );
    let disk = Tmpfs::mount(&env.path("state-disk"), "512k")?;
    let mut setup = Setup::new(env, |settings| settings.shortlived_validity = 60)?;
    setup.args.profile = Some("shortlived");
    setup.args.state = disk.0.join("acme");
    let mut server = AcmeServer::start(env, "ioserve", &setup.args)?;
    server.wait_for_certificate(ISSUANCE_WAIT)?;
    let first = server.served()?;
    fill(&disk.0)?;
    // Renewed when a third of the 60 s is left.
    let line = server.wait_for_log(NOT_KEPT, Duration::from_secs(90))?;
    eprintln!("xtask acme: {}", line.trim());
    let renewed = wait_until("the renewed certificate served", METRICS_WAIT, || {
        server.alive()?;
        let served = server.served()?;
        Ok(match served.serial != first.serial {
            true => Look::Holds(served),
            false => Look::Not(format!("serial {}", served.serial)),
        })
    })?;
    fs::remove_file(disk.0.join("filler"))?;
    let line = server.wait_for_log(KEPT_NOW, Duration::from_secs(30))?;
    eprintln!("xtask acme: {}", line.trim());
    let stored = stored_certificate(&setup.args.state)?;
    let stored = super::client::describe(&stored)?;
    ensure!(
        stored.serial == renewed.serial || stored.not_after >= renewed.not_after,
        "the stored certificate (serial {}) is not the one served after the full disk (serial {})",
        stored.serial,
        renewed.serial
    );
    no_temporary_files(env)?;
    stop_cleanly(&mut server)
}

/// The one certificate-and-key.pem under `state`.
fn stored_certificate(state: &std::path::Path) -> Result<Vec<u8>> {
    let mut found = Vec::new();
    let mut dirs = vec![state.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path
                .file_name()
                .is_some_and(|name| name == "certificate-and-key.pem")
            {
                found.push(path);
            }
        }
    }
    ensure!(
        found.len() == 1,
        "expected one stored certificate under {}: {found:?}",
        state.display()
    );
    Ok(fs::read(&found[0])?)
}

/// A tmpfs mounted on a directory, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &std::path::Path, size: &str) -> Result<Tmpfs> {
        fs::create_dir_all(dir)?;
        let status = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()?;
        ensure!(
            status.success(),
            "mount -t tmpfs {}: {status}",
            dir.display()
        );
        Ok(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// Fills the filesystem of `dir` with `dir/filler` until it takes no more.
fn fill(dir: &std::path::Path) -> Result<()> {
    use std::io::Write as _;
    let mut filler = fs::File::create(dir.join("filler"))?;
    let page = [b'x'; 4096];
    loop {
        match filler.write(&page) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(error) if error.raw_os_error() == Some(28) => return Ok(()),
            Err(error) => return Err(error.into()),
        }
    }
}
