//! pebble, Let's Encrypt's test CA, and pebble-challtestsrv, its DNS: installed with
//! `go install` when missing, configured per scenario, started on fresh ports of
//! 127.0.0.1 and awaited, restarted (a new root, no accounts: pebble keeps everything
//! in memory), and read: its roots from the management port, its orders from its log.
//!
//! pebble logs (to stdout, `Pebble YYYY/MM/DD HH:MM:SS ` first) `Added order "ID" to
//! the db` for each new order and `Issued certificate serial HEX for order ID` for
//! each certificate, the serial in lower-case hexadecimal.

use std::fs;
use std::net::{Ipv4Addr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context as _, Result};

use super::process::{free_tcp_port, free_udp_port, output_within, wait_until, Look, Spawned};
use super::Env;
use crate::util::{find_go, go_tool};

/// pebble's module and version: its programs are installed from here, and its test
/// certificates (pebble's own TLS certificate and the minica root that signs it) are
/// read from the module's directory.
const MODULE: &str = "github.com/letsencrypt/pebble/v2";
/// The pebble release.
const VERSION: &str = "v2.10.3";

/// The phrase of pebble's log line for a new order.
pub(crate) const ORDER_LINE: &str = "Added order ";
/// The phrase of pebble's log line for an issued certificate (`... serial HEX for
/// order ID`).
pub(crate) const ISSUED_LINE: &str = "Issued certificate serial ";

/// A name in pebble's `domainBlocklist`: orders for it are refused with
/// `rejectedIdentifier`.
pub(crate) const BLOCKED_DOMAIN: &str = "blocked.test";

/// How long pebble and challtestsrv may take to answer once started.
const READY_WAIT: Duration = Duration::from_secs(30);
/// How long one curl to pebble may take.
const CURL_LIMIT: Duration = Duration::from_secs(10);

/// pebble's and challtestsrv's executables and pebble's module directory.
#[derive(Clone, Debug)]
pub(crate) struct PebbleInstall {
    pebble: PathBuf,
    challtestsrv: PathBuf,
    module: PathBuf,
}

impl PebbleInstall {
    /// Finds pebble and pebble-challtestsrv (PATH, then Go's bin directory), installing
    /// them with `go install` when missing, and pebble's module directory in Go's
    /// module cache (`go mod download`, which `go install` has filled).
    pub(crate) fn ensure() -> Result<PebbleInstall> {
        let pebble =
            go_tool("pebble", &format!("{MODULE}/cmd/pebble@{VERSION}")).with_context(go_needed)?;
        let challtestsrv = go_tool(
            "pebble-challtestsrv",
            &format!("{MODULE}/cmd/pebble-challtestsrv@{VERSION}"),
        )
        .with_context(go_needed)?;
        let module = module_dir().with_context(go_needed)?;
        let install = PebbleInstall {
            pebble,
            challtestsrv,
            module,
        };
        for file in [install.minica(), install.tls_cert(), install.tls_key()] {
            ensure!(
                file.is_file(),
                "pebble's module has no {}: is {} pebble {VERSION}'s?",
                file.display(),
                install.module.display()
            );
        }
        Ok(install)
    }

    /// The minica root that signs pebble's own HTTPS certificate (its directory and
    /// management port): what ioserve's `--acme-ca-root` names.
    pub(crate) fn minica(&self) -> PathBuf {
        self.module.join("test/certs/pebble.minica.pem")
    }

    /// pebble's HTTPS certificate (for localhost and 127.0.0.1).
    fn tls_cert(&self) -> PathBuf {
        self.module.join("test/certs/localhost/cert.pem")
    }

    /// pebble's HTTPS key.
    fn tls_key(&self) -> PathBuf {
        self.module.join("test/certs/localhost/key.pem")
    }
}

/// What installing pebble needs, and which Go there is: for the error of a failed
/// install (Debian 12's golang-go is 1.19, too old for pebble's go.mod).
fn go_needed() -> String {
    let found = find_go()
        .ok()
        .and_then(|go| Command::new(go).arg("version").output().ok())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .unwrap_or_else(|| "no go command".to_owned());
    format!("pebble {VERSION} needs Go 1.25 or later (its go.mod); found: {found}")
}

/// pebble's module directory, from `go mod download -json` (run outside any module).
fn module_dir() -> Result<PathBuf> {
    let go = find_go()?;
    let mut command = Command::new(&go);
    command
        .args(["mod", "download", "-json", &format!("{MODULE}@{VERSION}")])
        .current_dir(std::env::temp_dir());
    let output = output_within("go mod download", command, None, Duration::from_secs(300))?;
    ensure!(
        output.status.success(),
        "go mod download {MODULE}@{VERSION} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("go mod download -json printed no JSON")?;
    json["Dir"]
        .as_str()
        .map(PathBuf::from)
        .context("go mod download -json gave no Dir")
}

/// What a scenario's pebble is configured with.
#[derive(Clone, Debug)]
pub(crate) struct PebbleSettings {
    /// Where pebble connects for tls-alpn-01: the port ioserve's `--listen` uses.
    pub(crate) tls_port: u16,
    /// Where pebble connects for http-01: the port of ioserve's `--redirect-http`.
    pub(crate) http_port: u16,
    /// The `shortlived` profile's validity period, in seconds.
    pub(crate) shortlived_validity: u64,
    /// `PEBBLE_WFE_NONCEREJECT`: the percentage of good nonces pebble refuses with
    /// `badNonce` (0 but in the nonce scenario, so that each scenario checks one thing).
    pub(crate) nonce_reject_percent: u8,
}

impl PebbleSettings {
    /// Validation on `tls_port` and `http_port`, pebble's own shortlived validity (6
    /// days), no refused nonces.
    pub(crate) fn new(tls_port: u16, http_port: u16) -> PebbleSettings {
        PebbleSettings {
            tls_port,
            http_port,
            shortlived_validity: 518_400,
            nonce_reject_percent: 0,
        }
    }
}

/// A running pebble with its challtestsrv; both stopped when dropped.
pub(crate) struct Pebble {
    install: PebbleInstall,
    /// The scenario's directory, where the configuration and logs are.
    dir: PathBuf,
    config: PathBuf,
    settings: PebbleSettings,
    /// The ACME directory's port.
    pub(crate) port: u16,
    /// The management port (roots, intermediates).
    pub(crate) management_port: u16,
    /// challtestsrv's DNS port (UDP and TCP).
    pub(crate) dns_port: u16,
    challtestsrv: Spawned,
    pebble: Option<Spawned>,
    /// Each pebble process's log, in order: `pebble.log`, `pebble-2.log`, ...
    logs: Vec<PathBuf>,
}

impl Pebble {
    /// Writes a configuration for `settings` into the scenario's directory, starts
    /// challtestsrv and pebble on free ports and waits until both answer.
    pub(crate) fn start(env: &Env, settings: PebbleSettings) -> Result<Pebble> {
        let port = free_tcp_port()?;
        let management_port = free_tcp_port()?;
        let dns_port = free_udp_port()?;
        let challtestsrv_management = free_tcp_port()?;
        let config = env.path("pebble-config.json");
        let json = config_json(&env.pebble, &settings, port, management_port);
        fs::write(&config, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("cannot write {}", config.display()))?;

        let mut command = Command::new(&env.pebble.challtestsrv);
        command
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .arg("-dnsserver")
            .arg(format!("127.0.0.1:{dns_port}"))
            .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
            .arg("-management")
            .arg(format!("127.0.0.1:{challtestsrv_management}"))
            .current_dir(env.dir());
        let mut challtestsrv = Spawned::start(
            "pebble-challtestsrv",
            command,
            &env.path("challtestsrv.log"),
        )?;
        wait_until(
            &format!("challtestsrv to answer DNS on 127.0.0.1:{dns_port}"),
            READY_WAIT,
            || {
                challtestsrv.alive()?;
                Ok(match resolve(dns_port, super::DOMAIN) {
                    Ok(()) => Look::Holds(()),
                    Err(error) => Look::Not(format!("{error:#}")),
                })
            },
        )?;
        let mut pebble = Pebble {
            install: env.pebble.clone(),
            dir: env.dir().to_path_buf(),
            config,
            settings,
            port,
            management_port,
            dns_port,
            challtestsrv,
            pebble: None,
            logs: Vec::new(),
        };
        pebble.start_again()?;
        Ok(pebble)
    }

    /// The ACME directory's URL (ioserve's `--acme-ca`).
    pub(crate) fn directory_url(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.port)
    }

    /// Kills pebble (not challtestsrv), as a crash would: its root and accounts are
    /// gone with it.
    pub(crate) fn kill(&mut self) {
        if let Some(mut pebble) = self.pebble.take() {
            pebble.kill();
        }
    }

    /// Starts a pebble (after [`Pebble::kill`], a new one on the same ports and
    /// configuration, with a new root and no accounts) logging to its own file, and
    /// waits until its directory and management port answer.
    pub(crate) fn start_again(&mut self) -> Result<()> {
        self.kill();
        let log = match self.logs.len() {
            0 => self.dir.join("pebble.log"),
            count => self.dir.join(format!("pebble-{}.log", count + 1)),
        };
        let mut command = Command::new(&self.install.pebble);
        command
            .arg("-config")
            .arg(&self.config)
            .arg("-dnsserver")
            .arg(format!("127.0.0.1:{}", self.dns_port))
            .env("PEBBLE_VA_NOSLEEP", "1")
            // Real validation, whatever the caller's environment says.
            .env_remove("PEBBLE_VA_ALWAYS_VALID")
            .env(
                "PEBBLE_WFE_NONCEREJECT",
                self.settings.nonce_reject_percent.to_string(),
            )
            .current_dir(&self.dir);
        let mut pebble = Spawned::start("pebble", command, &log)?;
        self.logs.push(log);
        let directory = self.directory_url();
        wait_until(
            &format!("pebble's directory {directory}"),
            READY_WAIT,
            || {
                pebble.alive()?;
                Ok(match self.get(&directory) {
                    Ok(body) if body.contains("newOrder") => Look::Holds(()),
                    Ok(body) => Look::Not(format!("a directory without newOrder: {body}")),
                    Err(error) => Look::Not(format!("{error:#}")),
                })
            },
        )?;
        let root = self.root_url();
        wait_until(&format!("pebble's root at {root}"), READY_WAIT, || {
            pebble.alive()?;
            Ok(match self.get(&root) {
                Ok(body) if body.contains("BEGIN CERTIFICATE") => Look::Holds(()),
                Ok(body) => Look::Not(format!("no certificate: {body}")),
                Err(error) => Look::Not(format!("{error:#}")),
            })
        })?;
        self.pebble = Some(pebble);
        self.challtestsrv.alive()?;
        Ok(())
    }

    /// The URL of the running pebble's root.
    fn root_url(&self) -> String {
        format!("https://127.0.0.1:{}/roots/0", self.management_port)
    }

    /// The running pebble's root (what the certificates it issues chain to), written
    /// to `pebble-root-N.pem` for pebble N of the scenario; its path.
    pub(crate) fn root(&self) -> Result<PathBuf> {
        let pem = self.get(&self.root_url())?;
        ensure!(
            pem.contains("BEGIN CERTIFICATE"),
            "pebble's /roots/0 gave no certificate: {pem}"
        );
        let path = self
            .dir
            .join(format!("pebble-root-{}.pem", self.logs.len()));
        fs::write(&path, pem).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    /// The running pebble's intermediate certificate (PEM), which signs what it issues.
    pub(crate) fn intermediate(&self) -> Result<String> {
        let url = format!("https://127.0.0.1:{}/intermediates/0", self.management_port);
        let pem = self.get(&url)?;
        ensure!(
            pem.contains("BEGIN CERTIFICATE"),
            "pebble's /intermediates/0 gave no certificate: {pem}"
        );
        Ok(pem)
    }

    /// GET `url` from pebble over HTTPS, trusting the minica root.
    fn get(&self, url: &str) -> Result<String> {
        let mut command = Command::new("curl");
        command
            .args(["--silent", "--show-error", "--fail", "--max-time", "5"])
            .arg("--cacert")
            .arg(self.install.minica())
            .arg(url);
        let output = output_within(&format!("curl {url}"), command, None, CURL_LIMIT)?;
        if !output.status.success() {
            bail!(
                "curl {url}: {} ({})",
                String::from_utf8_lossy(&output.stderr).trim(),
                output.status
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Every pebble's log so far, in order.
    fn log_text(&self) -> String {
        self.logs
            .iter()
            .map(|log| fs::read_to_string(log).unwrap_or_default())
            .collect()
    }

    /// The port pebble validates http-01 on (ioserve's `--redirect-http`).
    pub(crate) fn http_port(&self) -> u16 {
        self.settings.http_port
    }

    /// The lines of every pebble's log that contain `phrase`.
    pub(crate) fn log_lines(&self, phrase: &str) -> Vec<String> {
        self.log_text()
            .lines()
            .filter(|line| line.contains(phrase))
            .map(str::to_owned)
            .collect()
    }

    /// How many orders pebble has logged (every pebble of the scenario).
    pub(crate) fn orders(&self) -> usize {
        self.log_text()
            .lines()
            .filter(|line| line.contains(ORDER_LINE))
            .count()
    }

    /// The serials (lower-case hexadecimal, as pebble logs them) of the certificates
    /// pebble has issued (every pebble of the scenario), in order.
    pub(crate) fn issued_serials(&self) -> Vec<String> {
        issued_serials(&self.log_text())
    }

    /// The running pebble's log.
    pub(crate) fn current_log(&self) -> &Path {
        self.logs.last().map_or(Path::new("pebble.log"), |log| log)
    }
}

/// The serials of pebble's `Issued certificate serial HEX for order ID` lines.
fn issued_serials(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|line| {
            let (_, after) = line.split_once(ISSUED_LINE)?;
            Some(after.split_whitespace().next()?.to_owned())
        })
        .collect()
}

/// pebble's configuration: its ports on 127.0.0.1, its own TLS certificate from the
/// module, validation on ioserve's ports, [`BLOCKED_DOMAIN`] refused, and the
/// `default` (90 days) and `shortlived` profiles.
fn config_json(
    install: &PebbleInstall,
    settings: &PebbleSettings,
    port: u16,
    management_port: u16,
) -> serde_json::Value {
    serde_json::json!({
        "pebble": {
            "listenAddress": format!("127.0.0.1:{port}"),
            "managementListenAddress": format!("127.0.0.1:{management_port}"),
            "certificate": install.tls_cert(),
            "privateKey": install.tls_key(),
            "httpPort": settings.http_port,
            "tlsPort": settings.tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "domainBlocklist": [BLOCKED_DOMAIN],
            "keyAlgorithm": "ecdsa",
            "profiles": {
                "default": {
                    "description": "90 days",
                    "validityPeriod": 7_776_000
                },
                "shortlived": {
                    "description": "short-lived, for the renewal scenario",
                    "validityPeriod": settings.shortlived_validity
                }
            }
        }
    })
}

/// Asks challtestsrv on `port` for `name`'s A record: Ok when it answers 127.0.0.1.
fn resolve(port: u16, name: &str) -> Result<()> {
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    socket.set_read_timeout(Some(Duration::from_millis(500)))?;
    socket.connect((Ipv4Addr::LOCALHOST, port))?;
    socket.send(&dns_query(0x1c0e, name))?;
    let mut answer = [0u8; 512];
    let read = socket.recv(&mut answer).context("no DNS answer")?;
    let answer = &answer[..read];
    ensure!(
        read >= 16 && answer[..2] == [0x1c, 0x0e],
        "a short or foreign DNS answer ({read} bytes)"
    );
    let rcode = answer[3] & 0x0f;
    let answers = u16::from_be_bytes([answer[6], answer[7]]);
    ensure!(
        rcode == 0 && answers >= 1,
        "DNS answer with rcode {rcode}, {answers} records"
    );
    let address = first_a_record(answer).context("no A record in the DNS answer")?;
    ensure!(
        address == [127, 0, 0, 1],
        "{name} resolved to {address:?}, not 127.0.0.1"
    );
    Ok(())
}

/// The address of the first answer of a DNS response to one question, if it is an A
/// record.
fn first_a_record(response: &[u8]) -> Option<[u8; 4]> {
    /// The offset past the (possibly compressed) name at `at`.
    fn skip_name(response: &[u8], mut at: usize) -> Option<usize> {
        loop {
            let length = *response.get(at)?;
            match length {
                0 => return Some(at + 1),
                // A pointer ends the name.
                0xc0..=0xff => return Some(at + 2),
                _ => at += 1 + usize::from(length),
            }
        }
    }
    let question_end = skip_name(response, 12)? + 4;
    let fields = skip_name(response, question_end)?;
    let record = response.get(fields..fields + 10)?;
    let kind = u16::from_be_bytes([record[0], record[1]]);
    let length = u16::from_be_bytes([record[8], record[9]]);
    if kind != 1 || length != 4 {
        return None;
    }
    response.get(fields + 10..fields + 14)?.try_into().ok()
}

/// A DNS query (recursion desired) for `name`'s A record, with the id `id`.
fn dns_query(id: u16, name: &str) -> Vec<u8> {
    let mut query = Vec::with_capacity(18 + name.len());
    query.extend_from_slice(&id.to_be_bytes());
    query.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    query
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_serials_are_read_from_pebbles_log() {
        let log = "Pebble 2026/11/28 16:43:13 Added order \"abc\" to the db\n\
            Pebble 2026/11/28 16:43:14 Issued certificate serial 1f2e3d4c5b6a7988 for order abc\n\
            Pebble 2026/11/28 16:43:15 GET /dir -> calling handler()\n";
        assert_eq!(issued_serials(log), vec!["1f2e3d4c5b6a7988".to_owned()]);
        assert_eq!(log.lines().filter(|l| l.contains(ORDER_LINE)).count(), 1);
    }

    /// pebble starts on fresh ports, serves its directory and root, and a restarted
    /// pebble has a new root (needs Go, or pebble installed: `cargo test -p xtask --
    /// --ignored pebble_`).
    #[test]
    #[ignore = "installs and runs pebble"]
    fn pebble_starts_and_restarts_with_a_new_root() {
        let env = Env {
            dir: tempfile::tempdir().unwrap(),
            ioserve: PathBuf::from("/nonexistent/ioserve"),
            pebble: PebbleInstall::ensure().unwrap(),
        };
        let mut pebble = Pebble::start(&env, PebbleSettings::new(1, 2)).unwrap();
        let first = fs::read_to_string(pebble.root().unwrap()).unwrap();
        let intermediate = pebble.intermediate().unwrap();
        let issuer = super::super::client::subject(intermediate.as_bytes()).unwrap();
        assert!(issuer.contains("Pebble Intermediate CA"), "{issuer}");
        pebble.kill();
        pebble.start_again().unwrap();
        let second = fs::read_to_string(pebble.root().unwrap()).unwrap();
        assert_ne!(first, second);
        assert_eq!(pebble.orders(), 0);
        assert!(env.path("pebble-2.log").is_file());
        let log = fs::read_to_string(env.path("pebble.log")).unwrap();
        assert!(log.contains("validity period of 518400 seconds"), "{log}");
        assert!(log.contains("reject 0% of good nonces"), "{log}");
    }

    #[test]
    fn the_a_record_is_read_from_challtestsrvs_answer() {
        // challtestsrv's answer for ioserve-acme.test: the A record, then an SOA in the
        // authority section.
        let hex = "1c0e8100000100010001000011696f73657276652d61636d650474657374000001000111\
            696f73657276652d61636d65047465737400000100010000000000047f0000010c6368616c6c\
            7465737473727607696e76616c6964000006000100000000004a026e73";
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).unwrap())
            .collect();
        assert_eq!(first_a_record(&bytes), Some([127, 0, 0, 1]));
        assert_eq!(first_a_record(&bytes[..40]), None);
    }

    #[test]
    fn the_dns_query_names_the_labels() {
        let query = dns_query(7, "a.test");
        assert_eq!(&query[..2], &[0, 7]);
        assert_eq!(&query[12..], b"\x01a\x04test\x00\x00\x01\x00\x01");
    }
}
