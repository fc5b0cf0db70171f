//! Scenario 8, bad input: a CA that does not answer, a name the CA refuses, a state
//! directory that cannot be made. ioserve must say so in its log, count the failure,
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
