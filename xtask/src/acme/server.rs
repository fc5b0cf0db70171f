//! The ioserve under test, with ACME: its command line, the addresses it prints
//! (serving, metrics, redirect), its log (stderr, in a file of the scenario's
//! directory) polled for the `acme: ...` phrases, its metrics, and a graceful stop
//! (SIGTERM) when the scenario asks or the guard drops.

use std::fs::{self, File};
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};

use super::client::{self, ServedCert};
use super::pebble::Pebble;
use super::process::{terminate, wait_until, Look};
use super::{tail, Env, DOMAIN};
use crate::util::ioserve_process::{listener_address, served_address};

/// ioserve's log phrase for a new certificate from a successful order.
pub(crate) const OBTAINED: &str = "acme: certificate obtained";
/// ioserve's log phrase for a start with a valid stored certificate (no order).
pub(crate) const USING_STORED: &str = "acme: using the stored certificate";
/// ioserve's log phrase for a failed order (the CA's problem document follows).
pub(crate) const ORDER_FAILED: &str = "acme: order failed";
/// ioserve's log phrase for a state directory it cannot write (naming it).
pub(crate) const CANNOT_WRITE_STATE: &str = "acme: cannot write the state directory";
/// ioserve's log phrase for a certificate another replica (same state directory)
/// obtained.
pub(crate) const LOADED_FROM_REPLICA: &str =
    "acme: loaded the certificate another replica obtained";

/// The expiry gauge, labelled `name`.
pub(crate) const EXPIRY_GAUGE: &str = "ioserve_tls_certificate_expiry_timestamp_seconds";
/// The orders counter, labelled `result` (`issued`, `failed`).
pub(crate) const ORDERS_TOTAL: &str = "ioserve_acme_orders_total";

/// The email address the scenarios register with.
const EMAIL: &str = "ops@ioserve-acme.test";
/// How long ioserve may take to print its addresses.
const START_WAIT: Duration = Duration::from_secs(30);
/// How long a graceful stop may take.
const STOP_WAIT: Duration = Duration::from_secs(15);

/// How ioserve's line naming its metrics address begins.
const METRICS_LINE: &str = "ioserve: metrics at http://";
/// How ioserve's line naming its `--redirect-http` address begins.
const REDIRECT_LINE: &str = "ioserve: redirecting http://";

/// How an ioserve under test is started.
#[derive(Clone, Debug)]
pub(crate) struct ServerArgs {
    /// The directory it serves.
    pub(crate) root: PathBuf,
    /// Its `--listen` port on 127.0.0.1 (pebble's tlsPort).
    pub(crate) tls_port: u16,
    /// `--acme-domain`, one each.
    pub(crate) domains: Vec<String>,
    /// `--acme-ca`: the ACME directory's URL.
    pub(crate) ca: String,
    /// `--acme-ca-root`: what the CA's HTTPS certificate chains to.
    pub(crate) ca_root: PathBuf,
    /// `--acme-state`.
    pub(crate) state: PathBuf,
    /// `--acme-challenge`, when not the default (tls-alpn-01).
    pub(crate) challenge: Option<&'static str>,
    /// `--acme-profile`, when set.
    pub(crate) profile: Option<&'static str>,
    /// `--redirect-http 127.0.0.1:PORT`, when set (pebble's httpPort for http-01).
    pub(crate) redirect_http: Option<u16>,
    /// `--reuse-port`: replicas share the address.
    pub(crate) reuse_port: bool,
}

impl ServerArgs {
    /// [`DOMAIN`] from `pebble` on `tls_port`, serving `root`, the state in `state`.
    pub(crate) fn new(
        env: &Env,
        pebble: &Pebble,
        tls_port: u16,
        root: &Path,
        state: &Path,
    ) -> ServerArgs {
        ServerArgs {
            root: root.to_path_buf(),
            tls_port,
            domains: vec![DOMAIN.to_owned()],
            ca: pebble.directory_url(),
            ca_root: env.pebble.minica(),
            state: state.to_path_buf(),
            challenge: None,
            profile: None,
            redirect_http: None,
            reuse_port: false,
        }
    }

    /// The command line's arguments after the program.
    fn args(&self) -> Vec<String> {
        let mut args = vec![
            self.root.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{}", self.tls_port),
        ];
        for domain in &self.domains {
            args.extend(["--acme-domain".into(), domain.clone()]);
        }
        args.extend([
            "--acme-ca".into(),
            self.ca.clone(),
            "--acme-ca-root".into(),
            self.ca_root.display().to_string(),
            "--acme-state".into(),
            self.state.display().to_string(),
            "--acme-email".into(),
            EMAIL.into(),
        ]);
        if let Some(challenge) = self.challenge {
            args.extend(["--acme-challenge".into(), challenge.into()]);
        }
        if let Some(profile) = self.profile {
            args.extend(["--acme-profile".into(), profile.into()]);
        }
        if let Some(port) = self.redirect_http {
            args.extend(["--redirect-http".into(), format!("127.0.0.1:{port}")]);
        }
        if self.reuse_port {
            args.push("--reuse-port".into());
        }
        args.extend([
            "--metrics-listen".into(),
            "127.0.0.1:0".into(),
            "--access-log".into(),
            "off".into(),
        ]);
        args
    }
}

/// A running ioserve under test; stopped (SIGTERM, then SIGKILL) when dropped.
pub(crate) struct AcmeServer {
    /// What messages call it (`ioserve`, `ioserve-2`), and its logs' stem.
    pub(crate) name: String,
    child: Child,
    /// Its stderr (the tracing log).
    pub(crate) log: PathBuf,
    /// Where it serves HTTPS.
    pub(crate) addr: SocketAddr,
    /// Where it serves /metrics.
    pub(crate) metrics: SocketAddr,
    /// Where its `--redirect-http` listener is, when asked for.
    pub(crate) redirect: Option<SocketAddr>,
    /// The SNI name handshakes use: its first `--acme-domain`.
    pub(crate) domain: String,
}

impl AcmeServer {
    /// Starts `env`'s ioserve with `args`, its stderr in `NAME.log` and stdout in
    /// `NAME.stdout` of the scenario's directory, and waits for the lines that give its
    /// addresses.
    pub(crate) fn start(env: &Env, name: &str, args: &ServerArgs) -> Result<AcmeServer> {
        let log = env.path(&format!("{name}.log"));
        let stdout_log = env.path(&format!("{name}.stdout"));
        let argv = args.args();
        eprintln!(
            "xtask acme: {name}: {} {}",
            env.ioserve.display(),
            argv.join(" ")
        );
        let stderr =
            File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let mut child = Command::new(&env.ioserve)
            .args(&argv)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("cannot start {}", env.ioserve.display()))?;
        let stdout = child.stdout.take().context("ioserve's stdout")?;
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let mut copy = File::create(&stdout_log)?;
        let seen = Arc::clone(&lines);
        // Every line is read, to the end: ioserve exits if its stdout closes.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(copy, "{line}");
                if let Ok(mut seen) = seen.lock() {
                    seen.push(line);
                }
            }
        });
        let mut server = AcmeServer {
            name: name.to_owned(),
            child,
            log,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            metrics: SocketAddr::from(([127, 0, 0, 1], 0)),
            redirect: None,
            domain: args.domains.first().cloned().unwrap_or_default(),
        };
        let want_redirect = args.redirect_http.is_some();
        let (addr, metrics, redirect) = wait_until(
            &format!("{name} to print its serving, metrics and redirect addresses"),
            START_WAIT,
            || {
                server.alive()?;
                let printed = lines.lock().map(|lines| lines.clone()).unwrap_or_default();
                let addr = printed
                    .iter()
                    .find_map(|line| served_address(line, "https"));
                let metrics = printed
                    .iter()
                    .find_map(|line| listener_address(line, METRICS_LINE));
                let redirect = printed
                    .iter()
                    .find_map(|line| listener_address(line, REDIRECT_LINE));
                Ok(match (addr, metrics, redirect) {
                    (Some(addr), Some(metrics), redirect)
                        if redirect.is_some() || !want_redirect =>
                    {
                        Look::Holds((addr, metrics, redirect))
                    }
                    _ => Look::Not(format!("stdout: {printed:?}")),
                })
            },
        )?;
        server.addr = addr;
        server.metrics = metrics;
        server.redirect = redirect;
        Ok(server)
    }

    /// An error if ioserve has exited, with how and its log's last lines.
    pub(crate) fn alive(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => bail!(
                "{} exited ({status}); its log ends:\n{}",
                self.name,
                tail(&self.log, 10)
            ),
        }
    }

    /// The lines of its log that contain `phrase`.
    pub(crate) fn log_lines(&self, phrase: &str) -> Vec<String> {
        fs::read(&self.log)
            .map(|bytes| {
                String::from_utf8_lossy(&bytes)
                    .lines()
                    .filter(|line| line.contains(phrase))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits at most `limit` for a log line with `phrase` (ending the wait if ioserve
    /// exits): the first such line.
    pub(crate) fn wait_for_log(&mut self, phrase: &str, limit: Duration) -> Result<String> {
        let what = format!("{}'s log to say {phrase:?}", self.name);
        wait_until(&what, limit, || {
            self.alive()?;
            Ok(match self.log_lines(phrase).into_iter().next() {
                Some(line) => Look::Holds(line),
                None => Look::Not(format!("last log line: {:?}", tail(&self.log, 1))),
            })
        })
    }

    /// Waits at most `limit` for [`OBTAINED`]; the error names the orders that failed
    /// meanwhile.
    pub(crate) fn wait_for_certificate(&mut self, limit: Duration) -> Result<String> {
        let what = format!("{}'s log to say {OBTAINED:?}", self.name);
        wait_until(&what, limit, || {
            self.alive()?;
            if let Some(line) = self.log_lines(OBTAINED).into_iter().next() {
                return Ok(Look::Holds(line));
            }
            Ok(Look::Not(match self.log_lines(ORDER_FAILED).last() {
                Some(failed) => format!("an order failed: {failed}"),
                None => format!("last log line: {:?}", tail(&self.log, 1)),
            }))
        })
    }

    /// Its /metrics text.
    pub(crate) fn metrics_text(&self) -> Result<String> {
        client::get_text(&format!("http://{}/metrics", self.metrics))
    }

    /// The sum of `metric`'s samples with `labels` on its /metrics (None: no sample).
    pub(crate) fn metric(&self, metric: &str, labels: &[(&str, &str)]) -> Result<Option<f64>> {
        Ok(client::metric(&self.metrics_text()?, metric, labels))
    }

    /// Waits at most `limit` for its expiry gauge of `name` to equal `not_after`.
    pub(crate) fn wait_for_expiry_gauge(
        &mut self,
        name: &str,
        not_after: i64,
        limit: Duration,
    ) -> Result<()> {
        let what = format!(
            "{}'s {EXPIRY_GAUGE}{{name=\"{name}\"}} to equal the served notAfter {not_after}",
            self.name
        );
        wait_until(&what, limit, || {
            self.alive()?;
            Ok(match self.metric(EXPIRY_GAUGE, &[("name", name)]) {
                Ok(Some(value)) if value == not_after as f64 => Look::Holds(()),
                Ok(Some(value)) => Look::Not(format!("{value}")),
                Ok(None) => Look::Not("no such sample".into()),
                Err(error) => Look::Not(format!("{error:#}")),
            })
        })
    }

    /// The certificate a fresh handshake with it presents for its domain.
    pub(crate) fn served(&self) -> Result<ServedCert> {
        client::handshake(self.addr.port(), &self.domain)
    }

    /// Stops it with SIGTERM and waits for it to exit: its exit status.
    pub(crate) fn stop(&mut self) -> Result<ExitStatus> {
        terminate(&mut self.child, &self.name, STOP_WAIT)
    }
}

impl Drop for AcmeServer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_and_redirect_addresses_are_read() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 9100));
        assert_eq!(
            listener_address(
                "ioserve: metrics at http://127.0.0.1:9100/metrics",
                METRICS_LINE
            ),
            Some(addr)
        );
        assert_eq!(
            listener_address(
                "ioserve: redirecting http://127.0.0.1:9100/ to https",
                REDIRECT_LINE
            ),
            Some(addr)
        );
        assert_eq!(
            listener_address("ioserve: serving /r at https://127.0.0.1:1/", METRICS_LINE),
            None
        );
        assert_eq!(
            listener_address(
                "ioserve: metrics at http://127.0.0.1:9/metrics",
                REDIRECT_LINE
            ),
            None
        );
    }
}
