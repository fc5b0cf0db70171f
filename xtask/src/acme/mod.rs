//! `cargo xtask acme`: ioserve's ACME client (automatic HTTPS) against pebble, Let's
//! Encrypt's test CA, run here on 127.0.0.1.
//!
//! pebble and pebble-challtestsrv are Go programs, installed with `go install` when
//! missing ([`pebble`]); challtestsrv is pebble's DNS, answering every name with
//! 127.0.0.1, so that pebble's validation of `ioserve-acme.test` connects to the
//! ioserve under test, whose ports pebble's configuration names. Each scenario
//! ([`scenarios`], [`renewal`], [`browser`], [`bad_input`]) starts its own pebble and
//! challtestsrv on fresh ports with a fresh temporary directory (pebble's configuration
//! and log, ioserve's state directory, root and logs), drives ioserve ([`server`])
//! and checks what it serves with openssl and curl ([`client`]). Every wait polls a
//! condition under a deadline ([`process`]); a failure says what was expected and
//! what was seen, and the runner prints the tail of every log of the scenario. Every
//! child is stopped when its guard drops, on every path out.

pub(crate) mod bad_input;
pub(crate) mod browser;
pub(crate) mod client;
pub(crate) mod pebble;
pub(crate) mod process;
pub(crate) mod renewal;
pub(crate) mod scenarios;
pub(crate) mod server;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use tempfile::TempDir;

use crate::util::beside::Beside;
use crate::util::ensure_packages;
use crate::util::ioserve_process::IoserveBinary;
use pebble::PebbleInstall;

/// `certutil`, which makes the NSS database through which Chromium trusts pebble's root
/// in the browser scenario.
pub(crate) const NSS_TOOLS: (&str, &str) = ("libnss3-tools", "certutil");
/// openssl, whose `s_client` shows the certificate ioserve serves.
pub(crate) const OPENSSL: (&str, &str) = ("openssl", "openssl");
/// curl: the verified downloads, pebble's directory and roots, ioserve's metrics.
pub(crate) const CURL: (&str, &str) = ("curl", "curl");

/// The name the scenarios obtain certificates for (challtestsrv resolves it to
/// 127.0.0.1; pebble accepts `.test`).
pub(crate) const DOMAIN: &str = "ioserve-acme.test";

/// One scenario: its name (for `--only`), what it checks, and the function.
pub(crate) struct Scenario {
    /// What `--only` names it by.
    pub(crate) name: &'static str,
    /// One line on what it checks, printed as it starts.
    pub(crate) about: &'static str,
    /// The scenario, in its own [`Env`].
    pub(crate) run: fn(&Env) -> Result<()>,
}

/// Every scenario, in the order `cargo xtask acme` runs them.
pub(crate) const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "tls-alpn-01",
        about: "first certificate by tls-alpn-01; download, metrics, state directory",
        run: scenarios::tls_alpn_01,
    },
    Scenario {
        name: "http-01",
        about: "first certificate by http-01 on the --redirect-http listener",
        run: scenarios::http_01,
    },
    Scenario {
        name: "nonce-reject",
        about: "tls-alpn-01 with pebble refusing half of the nonces (badNonce)",
        run: scenarios::nonce_reject,
    },
    Scenario {
        name: "restart",
        about: "a restarted ioserve serves the stored certificate without an order",
        run: scenarios::restart,
    },
    Scenario {
        name: "renewal",
        about: "60 s certificates renewed for 3 minutes, across a pebble restart",
        run: renewal::renewal,
    },
    Scenario {
        name: "replicas",
        about: "two ioserve on one port and one state directory order once",
        run: scenarios::replicas,
    },
    Scenario {
        name: "browser",
        about: "headless Chromium trusting pebble's root loads the listing",
        run: browser::browser,
    },
    Scenario {
        name: "bad-ca",
        about: "an unreachable CA: order failed, still serving, redirect answers 308",
        run: bad_input::unreachable_ca,
    },
    Scenario {
        name: "blocked-name",
        about: "a name pebble refuses: order failed with rejectedIdentifier",
        run: bad_input::blocked_name,
    },
    Scenario {
        name: "unwritable-state",
        about: "a state directory that cannot be made: said, still running, no .tmp left",
        run: bad_input::unwritable_state,
    },
    Scenario {
        name: "full-state",
        about:
            "the state directory's disk fills: the renewal is served, then kept when space returns",
        run: bad_input::full_state,
    },
];

/// The scenario names, for `--only`'s help and value check.
fn scenario_names() -> Vec<&'static str> {
    SCENARIOS.iter().map(|scenario| scenario.name).collect()
}

/// `cargo xtask acme`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct Options {
    #[command(flatten)]
    binary: IoserveBinary,
    /// Run only these scenarios (repeat the option, or separate names with commas)
    #[arg(
        long,
        value_name = "NAME",
        value_delimiter = ',',
        value_parser = clap::builder::PossibleValuesParser::new(scenario_names())
    )]
    only: Vec<String>,
    /// Keep each scenario's temporary directory (pebble's and ioserve's logs, the state
    /// directory) and print where it is
    #[arg(long)]
    keep: bool,
}

/// What a scenario works with: its temporary directory, the ioserve under test and
/// pebble's installation.
pub(crate) struct Env {
    dir: TempDir,
    /// The ioserve executable under test.
    pub(crate) ioserve: PathBuf,
    /// pebble and challtestsrv, and pebble's module directory.
    pub(crate) pebble: PebbleInstall,
}

impl Env {
    /// `name` inside the scenario's temporary directory.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The scenario's temporary directory.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// The scenario CI runs beside its other stages: it spends its minutes waiting for
/// renewals, not on the CPU.
const BACKGROUND: &str = "renewal";

/// The scenario CI runs in the background, [`BACKGROUND`], started against `ioserve`
/// (the packaged program CI has just built) after pebble is installed here (so that
/// its build does not race the stages beside it).
pub(crate) fn start_background(ioserve: &Path) -> Result<Beside<()>> {
    ensure_packages(&[OPENSSL, CURL])?;
    PebbleInstall::ensure()?;
    let ioserve = ioserve.to_path_buf();
    let only = [BACKGROUND.to_string()];
    Ok(Beside::start("ACME's renewal scenario", move || {
        check(&ioserve, &only, false)
    }))
}

/// Every scenario but the [`BACKGROUND`] one, as `cargo xtask ci` runs them, against
/// `ioserve`.
pub(crate) fn ci(ioserve: &Path) -> Result<()> {
    let only: Vec<String> = scenario_names()
        .into_iter()
        .filter(|name| *name != BACKGROUND)
        .map(String::from)
        .collect();
    check(ioserve, &only, false)
}

/// Builds ioserve (or takes `--ioserve`) and runs the chosen scenarios.
pub(crate) fn run(options: &Options) -> Result<()> {
    let ioserve = options.binary.get()?;
    check(&ioserve, &options.only, options.keep)
}

/// Runs the scenarios named in `only` (all when empty) against `ioserve`; every one
/// runs, and the error counts the failed ones.
fn check(ioserve: &Path, only: &[String], keep: bool) -> Result<()> {
    ensure_packages(&[OPENSSL, CURL])?;
    let pebble = PebbleInstall::ensure()?;
    let ioserve = fs::canonicalize(ioserve)
        .with_context(|| format!("cannot find ioserve at {}", ioserve.display()))?;
    let chosen: Vec<&Scenario> = SCENARIOS
        .iter()
        .filter(|scenario| only.is_empty() || only.iter().any(|name| name == scenario.name))
        .collect();
    let mut outcomes = Vec::new();
    for scenario in chosen {
        eprintln!("xtask acme: {}: {}", scenario.name, scenario.about);
        let started = Instant::now();
        let result = run_one(scenario, &ioserve, &pebble, keep);
        let took = started.elapsed();
        match &result {
            Ok(()) => eprintln!("xtask acme: {} passed ({took:.1?})", scenario.name),
            Err(error) => eprintln!(
                "xtask acme: {} FAILED ({took:.1?}): {error:#}",
                scenario.name
            ),
        }
        outcomes.push((scenario.name, took, result.is_ok()));
    }
    eprintln!("xtask acme: summary");
    for (name, took, passed) in &outcomes {
        let verdict = if *passed { "passed" } else { "FAILED" };
        eprintln!("  {name:<18} {verdict:<7} {:>6.1} s", took.as_secs_f64());
    }
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|(_, _, passed)| !passed)
        .map(|(name, _, _)| *name)
        .collect();
    if !failed.is_empty() {
        bail!(
            "acme: {} of {} scenarios failed: {}",
            failed.len(),
            outcomes.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

/// Runs one scenario in a fresh [`Env`]; on failure prints the tail of each of its logs
/// and, with `keep`, where they are.
fn run_one(scenario: &Scenario, ioserve: &Path, pebble: &PebbleInstall, keep: bool) -> Result<()> {
    let dir = tempfile::Builder::new()
        .prefix(&format!("ioserve-acme-{}-", scenario.name))
        .tempdir()
        .context("cannot create a temporary directory")?;
    let env = Env {
        dir,
        ioserve: ioserve.to_path_buf(),
        pebble: pebble.clone(),
    };
    // Every process the scenario started is stopped when it returns: the logs are
    // complete and nothing writes into the state directory any more.
    let result = (scenario.run)(&env).and_then(|()| scenarios::no_temporary_files(&env));
    if result.is_err() {
        print_log_tails(env.dir());
    }
    if keep {
        let kept = env.dir.keep();
        eprintln!("xtask acme: {}: kept {}", scenario.name, kept.display());
    }
    result
}

/// How many lines of each log a failure prints.
const TAIL_LINES: usize = 25;

/// Prints the last [`TAIL_LINES`] lines of every `*.log` and `*.stdout` file in `dir`.
fn print_log_tails(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut logs: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "log" || extension == "stdout")
        })
        .collect();
    logs.sort();
    for log in logs {
        let name = log.file_name().unwrap_or_default().to_string_lossy();
        eprintln!("---- last lines of {name} ----");
        eprintln!("{}", tail(&log, TAIL_LINES));
    }
}

/// The last `lines` lines of the file at `path` (or why it cannot be read).
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(error) => format!("(cannot read {}: {error})", path.display()),
    }
}

/// How long a scenario waits for a first certificate (the order, pebble's validation,
/// finalization), once ioserve has started.
pub(crate) const ISSUANCE_WAIT: Duration = Duration::from_secs(90);
