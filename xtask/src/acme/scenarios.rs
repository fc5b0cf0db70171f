//! The scenarios of a first certificate (tls-alpn-01, http-01, with refused nonces),
//! a restart on the stored certificate, and two replicas sharing a port and a state
//! directory; with what they share: the set-up (a served tree, pebble validating on
//! ioserve's ports), the checks of a first certificate, and the state directory's
//! (modes, no temporary file left).

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, ensure, Context as _, Result};

use super::client::{self, ServedCert};
use super::pebble::{Pebble, PebbleSettings};
use super::process::{free_tcp_port, wait_until, Look};
use super::server::{
    AcmeServer, ServerArgs, LOADED_FROM_REPLICA, OBTAINED, ORDERS_TOTAL, USING_STORED,
};
use super::{Env, DOMAIN, ISSUANCE_WAIT};

/// The random file every scenario serves and downloads.
pub(crate) const FILE: &str = "random.bin";
/// Its size: a few MiB, so that the download spans many TLS records.
const FILE_SIZE: usize = 4 << 20;
/// How long metrics may lag behind the log line that they follow.
pub(crate) const METRICS_WAIT: Duration = Duration::from_secs(10);
/// How long a restarted ioserve may take to say it uses the stored certificate.
const STORED_WAIT: Duration = Duration::from_secs(30);
/// Fresh handshakes in the replicas scenario.
const REPLICA_HANDSHAKES: usize = 20;

/// A scenario's usual set-up: the served tree, pebble validating on ioserve's ports,
/// and ioserve's arguments.
pub(crate) struct Setup {
    /// pebble and challtestsrv.
    pub(crate) pebble: Pebble,
    /// How ioserve is started (change fields before starting it).
    pub(crate) args: ServerArgs,
    /// The random file in the served tree.
    pub(crate) file: PathBuf,
}

impl Setup {
    /// A served tree in `root/` ([`FILE`] and `hello.txt`), free ports for ioserve's
    /// TLS and HTTP listeners, pebble configured by `settings` (given those ports), and
    /// a state directory `state/` that ioserve makes.
    pub(crate) fn new(env: &Env, settings: impl FnOnce(&mut PebbleSettings)) -> Result<Setup> {
        let root = env.path("root");
        fs::create_dir_all(&root)?;
        let file = root.join(FILE);
        let mut rng = fastrand::Rng::new();
        let bytes: Vec<u8> = std::iter::repeat_with(|| rng.u8(..))
            .take(FILE_SIZE)
            .collect();
        fs::write(&file, bytes).with_context(|| format!("cannot write {}", file.display()))?;
        fs::write(root.join("hello.txt"), "hello over ACME\n")?;
        let tls_port = free_tcp_port()?;
        let http_port = free_tcp_port()?;
        let mut pebble_settings = PebbleSettings::new(tls_port, http_port);
        settings(&mut pebble_settings);
        let pebble = Pebble::start(env, pebble_settings)?;
        let args = ServerArgs::new(env, &pebble, tls_port, &root, &env.path("state"));
        Ok(Setup { pebble, args, file })
    }
}

/// 1: a first certificate by tls-alpn-01 (the default).
pub(crate) fn tls_alpn_01(env: &Env) -> Result<()> {
    let setup = Setup::new(env, |_| {})?;
    let mut server = AcmeServer::start(env, "ioserve", &setup.args)?;
    first_certificate(&setup, &mut server)?;
    ensure_no_http_validation(&setup.pebble)?;
    stop_cleanly(&mut server)?;
    check_state_dir(&setup.args.state)
}

/// 2: a first certificate by http-01, answered on the `--redirect-http` listener on
/// pebble's httpPort, which redirects everything else with 308.
pub(crate) fn http_01(env: &Env) -> Result<()> {
    let mut setup = Setup::new(env, |_| {})?;
    setup.args.challenge = Some("http-01");
    setup.args.redirect_http = Some(setup.pebble.http_port());
    let mut server = AcmeServer::start(env, "ioserve", &setup.args)?;
    first_certificate(&setup, &mut server)?;
    let validated = setup.pebble.log_lines("Attempting to validate w/ HTTP");
    ensure!(
        !validated.is_empty(),
        "expected pebble to validate over HTTP (http-01); its log has no \
         \"Attempting to validate w/ HTTP\" line"
    );
    eprintln!("xtask acme: pebble: {}", validated[0].trim());
    expect_redirect(&server)?;
    stop_cleanly(&mut server)?;
    check_state_dir(&setup.args.state)
}

/// 3: tls-alpn-01 while pebble refuses half of the good nonces with `badNonce`.
pub(crate) fn nonce_reject(env: &Env) -> Result<()> {
    let setup = Setup::new(env, |settings| settings.nonce_reject_percent = 50)?;
    let configured = "Configured to reject 50% of good nonces";
    ensure!(
        !setup.pebble.log_lines(configured).is_empty(),
        "expected pebble's log to say {configured:?} (PEBBLE_WFE_NONCEREJECT=50)"
    );
    let mut server = AcmeServer::start(env, "ioserve", &setup.args)?;
    first_certificate(&setup, &mut server)?;
    stop_cleanly(&mut server)?;
    check_state_dir(&setup.args.state)
}

/// 4: a certificate obtained, ioserve stopped (SIGTERM) and started again on the same
/// state directory: it says it uses the stored certificate, orders nothing, and serves
/// the same serial.
pub(crate) fn restart(env: &Env) -> Result<()> {
    let setup = Setup::new(env, |_| {})?;
    let mut first = AcmeServer::start(env, "ioserve", &setup.args)?;
    let obtained = first_certificate(&setup, &mut first)?;
    stop_cleanly(&mut first)?;
    drop(first);
    let mut second = AcmeServer::start(env, "ioserve-2", &setup.args)?;
    let line = second.wait_for_log(USING_STORED, STORED_WAIT)?;
    eprintln!("xtask acme: ioserve-2: {}", line.trim());
    let served = second.served()?;
    ensure!(
        served.serial == obtained.serial,
        "expected the restarted ioserve to serve the stored certificate, serial {}; it \
         serves serial {} (notAfter {}, issuer {})",
        obtained.serial,
        served.serial,
        served.not_after,
        served.issuer
    );
    second.wait_for_expiry_gauge(DOMAIN, served.not_after, METRICS_WAIT)?;
    let issued = second.metric(ORDERS_TOTAL, &[("result", "issued")])?;
    ensure!(
        issued.unwrap_or(0.0) == 0.0,
        "expected no order from the restarted ioserve; its {ORDERS_TOTAL}{{result=\"issued\"}} \
         is {issued:?}"
    );
    let obtained_again = second.log_lines(OBTAINED);
    ensure!(
        obtained_again.is_empty(),
        "expected no new certificate after the restart; ioserve-2's log says: {}",
        obtained_again.join(" | ")
    );
    expect_orders(&setup.pebble, 1, "after the restart")?;
    stop_cleanly(&mut second)?;
    check_state_dir(&setup.args.state)
}

/// 6: two ioserve on the same port (SO_REUSEPORT) and the same state directory: one
/// order at pebble, both expose the same expiry, and every handshake presents the
/// certificate.
pub(crate) fn replicas(env: &Env) -> Result<()> {
    let mut setup = Setup::new(env, |_| {})?;
    setup.args.reuse_port = true;
    let mut servers = [
        AcmeServer::start(env, "ioserve-a", &setup.args)?,
        AcmeServer::start(env, "ioserve-b", &setup.args)?,
    ];
    ensure!(
        servers[0].addr == servers[1].addr,
        "expected both replicas on one address; they serve at {} and {}",
        servers[0].addr,
        servers[1].addr
    );
    let phrases = [OBTAINED, LOADED_FROM_REPLICA, USING_STORED];
    for server in &mut servers {
        let name = server.name.clone();
        let line = wait_until(
            &format!("{name}'s log to say one of {phrases:?}"),
            ISSUANCE_WAIT,
            || {
                server.alive()?;
                Ok(
                    match phrases
                        .iter()
                        .find_map(|phrase| server.log_lines(phrase).into_iter().next())
                    {
                        Some(line) => Look::Holds(line),
                        None => {
                            Look::Not(format!("last log line: {:?}", super::tail(&server.log, 1)))
                        }
                    },
                )
            },
        )?;
        eprintln!("xtask acme: {name}: {}", line.trim());
    }
    let obtained: Vec<String> = servers
        .iter()
        .flat_map(|server| {
            server
                .log_lines(OBTAINED)
                .into_iter()
                .map(|line| format!("{}: {line}", server.name))
        })
        .collect();
    ensure!(
        obtained.len() == 1,
        "expected exactly one replica to obtain the certificate; {} lines say {OBTAINED:?}: {}",
        obtained.len(),
        obtained.join(" | ")
    );
    expect_orders(&setup.pebble, 1, "with two replicas")?;
    let first = servers[0].served()?;
    first.must_name(DOMAIN)?;
    for server in &mut servers {
        server.wait_for_expiry_gauge(DOMAIN, first.not_after, METRICS_WAIT)?;
    }
    let mut serials = BTreeSet::new();
    for round in 0..REPLICA_HANDSHAKES {
        let served = client::handshake(servers[0].addr.port(), DOMAIN)
            .with_context(|| format!("handshake {} of {REPLICA_HANDSHAKES}", round + 1))?;
        served.must_name(DOMAIN)?;
        serials.insert(served.serial);
    }
    ensure!(
        serials.len() == 1 && serials.contains(&first.serial),
        "expected every handshake to present serial {}; {REPLICA_HANDSHAKES} handshakes \
         presented {serials:?}",
        first.serial
    );
    eprintln!(
        "xtask acme: {REPLICA_HANDSHAKES} handshakes on {}: all serial {}",
        servers[0].addr, first.serial
    );
    for server in &mut servers {
        server.alive()?;
    }
    for server in &mut servers {
        stop_cleanly(server)?;
    }
    check_state_dir(&setup.args.state)
}

/// `promtool check metrics` finds nothing wrong in `text` (the expiry gauge with its
/// sample, the orders counter).
fn promtool_accepts(text: &str) -> Result<()> {
    let mut promtool = std::process::Command::new("promtool");
    promtool.args(["check", "metrics"]);
    let output = super::process::output_within(
        "promtool check metrics",
        promtool,
        Some(text.as_bytes()),
        Duration::from_secs(30),
    )?;
    ensure!(
        output.status.success(),
        "promtool check metrics refused ioserve's metrics: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// The checks of a first certificate: ioserve says it obtained one; a handshake
/// presents it for [`DOMAIN`] with a serial pebble issued; [`FILE`] downloads byte-exact
/// over it, verified against pebble's root, over HTTPS and over HTTP/3; the expiry gauge equals its notAfter;
/// ioserve counts one issued order and pebble logged one order; promtool accepts the
/// metrics. The served certificate.
pub(crate) fn first_certificate(setup: &Setup, server: &mut AcmeServer) -> Result<ServedCert> {
    let started = Instant::now();
    let line = server.wait_for_certificate(ISSUANCE_WAIT)?;
    eprintln!(
        "xtask acme: {} after {:.1?}: {}",
        server.name,
        started.elapsed(),
        line.trim()
    );
    let served = server.served()?;
    served.must_name(DOMAIN)?;
    expect_issued_by_pebble(&setup.pebble, &served)?;
    let root = setup.pebble.root()?;
    client::download_matches(&root, DOMAIN, server.addr.port(), FILE, &setup.file)?;
    client::http3_download_matches(&root, DOMAIN, server.addr.port(), FILE, &setup.file)?;
    server.wait_for_expiry_gauge(DOMAIN, served.not_after, METRICS_WAIT)?;
    let issued = wait_until(
        &format!(
            "{}'s {ORDERS_TOTAL}{{result=\"issued\"}} to be 1",
            server.name
        ),
        METRICS_WAIT,
        || {
            Ok(match server.metric(ORDERS_TOTAL, &[("result", "issued")]) {
                Ok(Some(value)) if value >= 1.0 => Look::Holds(value),
                Ok(value) => Look::Not(format!("{value:?}")),
                Err(error) => Look::Not(format!("{error:#}")),
            })
        },
    )?;
    ensure!(
        issued == 1.0,
        "expected {ORDERS_TOTAL}{{result=\"issued\"}} 1 after the first certificate; it is {issued}"
    );
    expect_orders(&setup.pebble, 1, "for the first certificate")?;
    promtool_accepts(&server.metrics_text()?)?;
    eprintln!(
        "xtask acme: served serial {}, notAfter {} ({}), issuer {}; gauge and counter agree",
        served.serial,
        served.not_after,
        in_days(served.not_after),
        served.issuer
    );
    Ok(served)
}

/// An error unless pebble's log names `served`'s serial among those it issued.
pub(crate) fn expect_issued_by_pebble(pebble: &Pebble, served: &ServedCert) -> Result<()> {
    let issued = pebble.issued_serials();
    let normal = |serial: &str| serial.trim_start_matches('0').to_ascii_uppercase();
    ensure!(
        issued.iter().any(|serial| normal(serial) == served.serial),
        "expected the served certificate (serial {}, issuer {}) to be one pebble issued; \
         pebble's log names {issued:?}",
        served.serial,
        served.issuer
    );
    Ok(())
}

/// An error unless pebble logged exactly `count` orders.
pub(crate) fn expect_orders(pebble: &Pebble, count: usize, when: &str) -> Result<()> {
    let orders = pebble.orders();
    ensure!(
        orders == count,
        "expected {count} order(s) at pebble {when}; its log ({}) has {orders} {:?} lines",
        pebble.current_log().display(),
        super::pebble::ORDER_LINE.trim()
    );
    Ok(())
}

/// An error if pebble validated anything over HTTP (tls-alpn-01 was asked for).
fn ensure_no_http_validation(pebble: &Pebble) -> Result<()> {
    let http = pebble.log_lines("Attempting to validate w/ HTTP");
    ensure!(
        http.is_empty(),
        "expected tls-alpn-01 only; pebble validated over HTTP: {}",
        http.join(" | ")
    );
    Ok(())
}

/// An error unless `server`'s redirect listener answers a plain GET with 308 to
/// https.
pub(crate) fn expect_redirect(server: &AcmeServer) -> Result<()> {
    let redirect = server
        .redirect
        .context("ioserve printed no redirect address")?;
    let url = format!("http://{redirect}/{FILE}");
    let (code, location) = client::http_status(&url)?;
    ensure!(
        code == 308 && location.starts_with("https://"),
        "expected GET {url} to answer 308 to https://...; it answered {code}, Location {location:?}"
    );
    eprintln!("xtask acme: GET {url}: 308 to {location}");
    Ok(())
}

/// Stops `server` with SIGTERM: an error unless it exits, successfully, in time.
pub(crate) fn stop_cleanly(server: &mut AcmeServer) -> Result<()> {
    let status = server.stop()?;
    ensure!(
        status.success(),
        "expected {} to exit successfully on SIGTERM; it exited {status}",
        server.name
    );
    Ok(())
}

/// The state directory's checks: every directory mode 0700, every file that holds a
/// key (named `*key*`, or holding a PEM private key or a JWK's private `"d"`) mode
/// 0600 or stricter; prints the listing.
pub(crate) fn check_state_dir(state: &Path) -> Result<()> {
    let mut problems = Vec::new();
    let mut listing = Vec::new();
    let mut pending = vec![state.to_path_buf()];
    while let Some(path) = pending.pop() {
        let metadata = fs::symlink_metadata(&path)
            .with_context(|| format!("cannot stat {}", path.display()))?;
        let mode = metadata.permissions().mode() & 0o777;
        let shown = path
            .strip_prefix(state)
            .unwrap_or(&path)
            .display()
            .to_string();
        if metadata.is_dir() {
            listing.push(format!("{mode:04o} {shown}/"));
            if mode != 0o700 {
                problems.push(format!(
                    "directory {} has mode {mode:04o}, not 0700",
                    path.display()
                ));
            }
            for entry in fs::read_dir(&path)? {
                pending.push(entry?.path());
            }
        } else {
            listing.push(format!("{mode:04o} {shown}"));
            if holds_key(&path)? && mode & 0o077 != 0 {
                problems.push(format!(
                    "{} holds a key but has mode {mode:04o}, not 0600",
                    path.display()
                ));
            }
        }
    }
    listing.sort();
    eprintln!(
        "xtask acme: state directory {}: {}",
        state.display(),
        listing.join(", ")
    );
    if !problems.is_empty() {
        bail!("state directory: {}", problems.join("; "));
    }
    Ok(())
}

/// Whether the file at `path` holds a private key.
fn holds_key(path: &Path) -> Result<bool> {
    let named = path
        .file_name()
        .is_some_and(|name| name.to_string_lossy().to_ascii_lowercase().contains("key"));
    let bytes = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    Ok(named || text.contains("PRIVATE KEY") || text.contains("\"d\""))
}

/// An error naming every file or directory under the scenario's directory (but a
/// browser's home) whose name contains `.tmp`: ioserve's atomic writes must leave none.
pub(crate) fn no_temporary_files(env: &Env) -> Result<()> {
    let mut found = Vec::new();
    let mut pending = vec![env.dir().to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path == env.path(super::browser::HOME) {
                continue;
            }
            if entry.file_name().to_string_lossy().contains(".tmp") {
                found.push(path.display().to_string());
            }
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                pending.push(path);
            }
        }
    }
    ensure!(
        found.is_empty(),
        "expected no temporary file left after the scenario; found {}",
        found.join(", ")
    );
    Ok(())
}

/// Unix seconds now.
pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64)
}

/// How far `at` (Unix seconds) is from now, in words.
fn in_days(at: i64) -> String {
    let seconds = at - unix_now();
    if seconds.abs() >= 86_400 {
        format!("in {:.1} days", seconds as f64 / 86_400.0)
    } else {
        format!("in {seconds} s")
    }
}
