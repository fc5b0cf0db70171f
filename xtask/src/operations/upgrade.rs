//! `cargo xtask upgrade`: ioserve's live binary upgrade (SIGUSR2) under load, from one
//! build to another, losing nothing.
//!
//! Each scenario serves a small tree from a copy of the old build, puts a steady load
//! of small requests on it (wrk, `--rate` per second over 20 keep-alive connections)
//! and `--downloads` rate-limited curl downloads of a 16 MiB file, replaces the binary
//! on disk with the new build, sends SIGUSR2, and waits for the old process to finish
//! its downloads and exit. Then: wrk saw no refused, reset or timed-out connection and
//! no failed request; every download is byte-exact; the new process (its start-up
//! line names the other build) answers, metrics included; it stops cleanly on SIGTERM.
//! `plain` first makes two upgrades fail under the same load (a binary that cannot be
//! executed, a configuration the new process refuses): the old one keeps serving and
//! says why. `tls` serves HTTPS (wrk over HTTP/1.1, curl over HTTP/2); `activation`
//! runs ioserve under systemd-socket-activate with a notify socket, where the old
//! process names its successor with `MAINPID=`.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use rustix::process::{Pid, Signal};

use super::paced_wrk::{signal, PacedWrk};
use crate::util::certificate::{issued_by_test_ca, IssuedPair};
use crate::util::ioserve_process::{listener_address, served_address, IoserveBinary};
use crate::util::{cargo, ensure_packages, step, target_dir};

/// The programs the scenarios run.
const PACKAGES: &[(&str, &str)] = &[
    ("wrk", "wrk"),
    ("curl", "curl"),
    ("systemd", "systemd-socket-activate"),
];

/// The scenarios, by name.
const SCENARIOS: [&str; 3] = ["plain", "tls", "activation"];

/// Options of `cargo xtask upgrade`.
#[derive(clap::Args, Debug)]
pub(crate) struct Options {
    /// The build that serves first (default: the debug build, built now)
    #[command(flatten)]
    from: IoserveBinary,
    /// The build SIGUSR2 upgrades to (default: the ci-package profile's, built now)
    #[arg(long, value_name = "PATH")]
    to: Option<PathBuf>,
    /// Small requests per second during the upgrade
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(20..=100_000))]
    rate: u32,
    /// Large downloads in flight at the upgrade
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
    downloads: u32,
    /// Run only these scenarios (repeat the option, or separate names with commas)
    #[arg(long, value_name = "NAME", value_delimiter = ',',
          value_parser = clap::builder::PossibleValuesParser::new(SCENARIOS))]
    only: Vec<String>,
    /// Keep each scenario's directory (the servers' log, the downloads) and print
    /// where it is
    #[arg(long)]
    keep: bool,
}

/// `cargo xtask upgrade`.
pub(crate) fn run(options: &Options) -> Result<()> {
    let from = options.from.get()?;
    let to = match &options.to {
        Some(path) => {
            ensure!(
                path.is_file(),
                "--to {}: no such file; give the path of an ioserve executable",
                path.display()
            );
            path.clone()
        }
        None => {
            step(
                "cargo build -p ioserve --profile ci-package",
                cargo(&[
                    "build",
                    "--package",
                    "ioserve",
                    "--bin",
                    "ioserve",
                    "--profile",
                    "ci-package",
                ]),
            )?;
            target_dir()?.join("ci-package/ioserve")
        }
    };
    let load = Load {
        rate: options.rate,
        downloads: options.downloads,
        keep: options.keep,
    };
    let chosen: Vec<&str> = SCENARIOS
        .into_iter()
        .filter(|name| options.only.is_empty() || options.only.iter().any(|only| only == name))
        .collect();
    upgrade_scenarios(&from, &to, &load, &chosen)
}

/// `cargo xtask ci`'s run: every scenario at the default load, from the packaged
/// (optimized) build to the debug one.
pub(crate) fn ci(packaged: &Path, debug: &Path) -> Result<()> {
    let load = Load {
        rate: 2000,
        downloads: 50,
        keep: false,
    };
    upgrade_scenarios(packaged, debug, &load, &SCENARIOS)
}

fn upgrade_scenarios(from: &Path, to: &Path, load: &Load, names: &[&str]) -> Result<()> {
    ensure_packages(PACKAGES)?;
    let builds = [build_of(from)?, build_of(to)?];
    ensure!(
        builds[0] != builds[1],
        "{} and {} both say {:?}: upgrade between two different builds",
        from.display(),
        to.display(),
        builds[0]
    );
    // The new process outlives the old one, its parent: it is reparented to this
    // process, which can then wait for it.
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .context("cannot become the child subreaper")?;
    for name in names {
        let scenario = Scenario {
            tls: *name == "tls",
            activation: *name == "activation",
            failed_starts: *name == "plain",
        };
        let started = Instant::now();
        let report = scenario
            .run(from, to, load)
            .with_context(|| format!("upgrade scenario {name}"))?;
        println!(
            "xtask upgrade: {name}: {} -> {}: {report} ({:.1} s)",
            builds[0],
            builds[1],
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// What `ioserve --version` says of `binary`.
pub(crate) fn build_of(binary: &Path) -> Result<String> {
    let output = Command::new(binary)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {}", binary.display()))?;
    ensure!(
        output.status.success(),
        "{} --version failed",
        binary.display()
    );
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// The load put on the server during the upgrade.
#[derive(Debug)]
struct Load {
    rate: u32,
    downloads: u32,
    /// Keep the scenario's directory.
    keep: bool,
}

/// wrk's connections; each waits between its requests so that all give `rate`.
const CONNECTIONS: u32 = 20;
/// The small files wrk asks for in turn.
const SMALL_FILES: [&str; 4] = ["/s0.txt", "/s1.txt", "/s2.txt", "/s3.txt"];
/// The large file's size and each download's rate: every download lasts about 8 s, so
/// that the old process still sends for seconds after the upgrade (more than the
/// kernel's socket buffers hold).
const LARGE_FILE: usize = 16 << 20;
const DOWNLOAD_RATE: &str = "2M";
/// The bound on each wait for the server (start, a log line, an exit).
const WAIT: Duration = Duration::from_secs(60);

/// One scenario's shape.
#[derive(Debug)]
struct Scenario {
    tls: bool,
    activation: bool,
    /// Two failed upgrades first.
    failed_starts: bool,
}

/// What a scenario measured.
struct Report {
    requests: u64,
    downloads: u32,
    drained: Duration,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} requests and {} downloads, none lost; the old process exited {:.1} s after SIGUSR2",
            self.requests,
            self.downloads,
            self.drained.as_secs_f64()
        )
    }
}

impl Scenario {
    fn run(&self, from: &Path, to: &Path, load: &Load) -> Result<Report> {
        let dir = tempfile::tempdir()?;
        let dir = match load.keep {
            true => {
                let kept = dir.keep();
                println!(
                    "xtask upgrade: the scenario's directory: {}",
                    kept.display()
                );
                kept
            }
            false => dir.path().to_path_buf(),
        };
        let dir = dir.as_path();
        let root = dir.join("root");
        std::fs::create_dir(&root)?;
        let mut large = vec![0u8; LARGE_FILE];
        fastrand::fill(&mut large);
        std::fs::write(root.join("large.bin"), &large)?;
        let large = std::sync::Arc::new(large);
        for (i, size) in [512, 2048, 4096, 16384].into_iter().enumerate() {
            std::fs::write(root.join(format!("s{i}.txt")), vec![b'a' + i as u8; size])?;
        }
        let bin = dir.join("bin");
        std::fs::create_dir(&bin)?;
        let binary = bin.join("ioserve");
        std::fs::copy(from, &binary)?;
        let config = dir.join("ioserve.toml");
        std::fs::write(&config, "access-log = false\n")?;
        let certificate = match self.tls {
            true => Some(issued_by_test_ca(dir)?),
            false => None,
        };
        let notify = dir.join("notify");
        let notifications = UnixDatagram::bind(&notify)?;
        notifications.set_read_timeout(Some(WAIT))?;
        let log = dir.join("ioserve.log");

        let mut server =
            self.start(&binary, &root, &config, certificate.as_ref(), &notify, &log)?;
        let old = server.child.id();
        let scheme = if self.tls { "https" } else { "http" };
        let base = format!("{scheme}://{}", server.addr);
        let curl = Curl {
            ca: certificate.as_ref().map(|c| c.ca.clone()),
        };
        if self.activation {
            ensure!(
                next_message(&notifications)? == "READY=1",
                "the old process did not say READY=1"
            );
        }
        // Each connection waits this long after each answer, so that all give `rate`.
        let delay_ms = (CONNECTIONS * 1000 / load.rate).max(1);
        let wrk = PacedWrk::start(&base, &SMALL_FILES, CONNECTIONS, delay_ms, dir)?;
        std::thread::sleep(Duration::from_secs(1));

        if self.failed_starts {
            // A binary that cannot be executed.
            replace(&binary, b"this is not an executable\n")?;
            signal(old, Signal::USR2)?;
            wait_for_line(
                &log,
                "SIGUSR2: cannot start the new binary; still serving",
                1,
            )?;
            // A configuration the new binary refuses (after it replaced the file).
            replace(&binary, &std::fs::read(to)?)?;
            std::fs::write(&config, "access-log = false\nworkers = \"many\"\n")?;
            signal(old, Signal::USR2)?;
            wait_for_line(&log, "SIGUSR2: the new binary ended before it served", 1)?;
            std::fs::write(&config, "access-log = false\n")?;
            ensure!(
                curl.get(&format!("{base}/s0.txt"))?.len() == 512,
                "the old process stopped serving"
            );
        }

        let downloads: Vec<Download> = (0..load.downloads)
            .map(|_| curl.download(&format!("{base}/large.bin"), &large))
            .collect::<Result<_>>()?;
        // Every download is under way when the signal comes.
        std::thread::sleep(Duration::from_secs(1));
        replace(&binary, &std::fs::read(to)?)?;
        let signalled = Instant::now();
        signal(old, Signal::USR2)?;
        let line = wait_for_line(&log, "SIGUSR2: the new process serves", 1)?;
        let new = field(&line, "pid=").context("the hand-over line names no pid")?;
        let status = wait_for_exit(&mut server.child)?;
        let drained = signalled.elapsed();
        ensure!(status.success(), "the old process exited with {status}");
        // A second of load on the new process alone.
        std::thread::sleep(Duration::from_secs(1));
        let requests = wrk.finish()?;
        for (i, download) in downloads.into_iter().enumerate() {
            download.finish().with_context(|| format!("download {i}"))?;
        }

        // The new build serves now, its metrics too.
        let started = std::fs::read_to_string(&log)?;
        let says = |pid: u32| {
            started
                .lines()
                .find(|line| line.contains(" starting") && line.contains(&format!("pid={pid}")))
                .map(str::to_string)
        };
        let (old_line, new_line) = (says(old), says(new));
        let (Some(old_line), Some(new_line)) = (old_line, new_line) else {
            bail!("no start-up line of the old ({old}) or the new ({new}) process in the log");
        };
        ensure!(
            build_in(&old_line) != build_in(&new_line),
            "the old and the new process say the same build: {old_line:?}, {new_line:?}"
        );
        ensure!(
            curl.get(&format!("{base}/s1.txt"))?.len() == 2048,
            "the new process does not serve"
        );
        if let Some(metrics) = server.metrics {
            let text = String::from_utf8(curl.get(&format!("http://{metrics}/metrics"))?)?;
            ensure!(
                text.contains("ioserve_requests_total"),
                "the new process's metrics: {text}"
            );
        }
        if self.activation {
            let message = next_message(&notifications)?;
            ensure!(
                message == format!("MAINPID={new}"),
                "the old process said {message:?}, not MAINPID={new}"
            );
        }
        signal(new, Signal::TERM)?;
        let status = wait_for_pid(new)?;
        ensure!(
            status == 0,
            "the new process exited with status {status} on SIGTERM"
        );
        if self.activation {
            let message = next_message(&notifications)?;
            ensure!(
                message == "STOPPING=1",
                "the new process said {message:?} when stopping"
            );
        }
        Ok(Report {
            requests,
            downloads: load.downloads,
            drained,
        })
    }

    /// Starts ioserve from `binary`, bound to a port of its own or under
    /// systemd-socket-activate, and waits for its address.
    fn start(
        &self,
        binary: &Path,
        root: &Path,
        config: &Path,
        certificate: Option<&IssuedPair>,
        notify: &Path,
        log: &Path,
    ) -> Result<Server> {
        let mut command;
        let activated_addr = if self.activation {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            command = Command::new("systemd-socket-activate");
            command
                .args(["-l", &format!("127.0.0.1:{port}"), "-E", "NOTIFY_SOCKET"])
                .arg(binary)
                .env("NOTIFY_SOCKET", notify);
            Some(SocketAddr::from(([127, 0, 0, 1], port)))
        } else {
            command = Command::new(binary);
            command.args(["--listen", "127.0.0.1:0"]);
            None
        };
        command
            .args(["--metrics-listen", "127.0.0.1:0"])
            .arg("--config")
            .arg(config)
            .args(["--workers", "2", "--shutdown-timeout", "30s"])
            .arg(root);
        if let Some(certificate) = certificate {
            command
                .arg("--tls-cert")
                .arg(&certificate.pair.cert)
                .arg("--tls-key")
                .arg(&certificate.pair.key);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?)
            .spawn()
            .context("cannot start ioserve")?;
        let mut server = Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            metrics: None,
            lines: mpsc::channel().1,
        };
        let stdout = server.child.stdout.take().context("ioserve's stdout")?;
        let (sender, lines) = mpsc::channel();
        server.lines = lines;
        // Read to the end: the old and the new process both print there.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = sender.send(line);
            }
        });
        if let Some(addr) = activated_addr {
            // systemd-socket-activate starts ioserve at the first connection.
            let deadline = Instant::now() + WAIT;
            while std::net::TcpStream::connect(addr).is_err() {
                ensure!(
                    Instant::now() < deadline,
                    "systemd-socket-activate did not listen on {addr}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let scheme = if self.tls { "https" } else { "http" };
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = server.lines.recv_timeout(left).with_context(|| {
                format!(
                    "ioserve printed no {scheme}:// address; its log: {}",
                    log.display()
                )
            })?;
            if let Some(addr) = served_address(&line, scheme) {
                server.addr = addr;
            }
            if let Some(metrics) = listener_address(&line, "ioserve: metrics at http://") {
                server.metrics = Some(metrics);
            }
            if server.addr.port() != 0 && server.metrics.is_some() {
                return Ok(server);
            }
        }
    }
}

/// The old ioserve, as started.
struct Server {
    child: Child,
    addr: SocketAddr,
    metrics: Option<SocketAddr>,
    lines: mpsc::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The build a start-up line names: "ioserve VERSION (KIND build) starting".
fn build_in(line: &str) -> Option<&str> {
    let after = line.split_once("ioserve ")?.1;
    Some(after.split_once(" starting")?.0)
}

/// The value of `name` (`pid=`) in a log line.
fn field(line: &str, name: &str) -> Option<u32> {
    let after = line.split_once(name)?.1;
    after
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Replaces `path` with `bytes` as a package manager does: a new file renamed over it.
fn replace(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let staged = path.with_extension("new");
    std::fs::write(&staged, bytes)?;
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&staged, path)?;
    Ok(())
}

/// Waits for the `count`-th line of `log` that contains `text`, and returns it.
fn wait_for_line(log: &Path, text: &str, count: usize) -> Result<String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let content = std::fs::read_to_string(log)?;
        if let Some(line) = content
            .lines()
            .filter(|line| line.contains(text))
            .nth(count - 1)
        {
            return Ok(line.to_string());
        }
        ensure!(
            Instant::now() < deadline,
            "no log line with {text:?} within {WAIT:?}; the log:\n{content}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` to exit, at most [`WAIT`].
fn wait_for_exit(child: &mut Child) -> Result<std::process::ExitStatus> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        ensure!(
            Instant::now() < deadline,
            "the old process did not exit within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for the process `pid` (reparented to this one) to exit; its exit status.
fn wait_for_pid(pid: u32) -> Result<i32> {
    use rustix::process::{waitpid, WaitOptions};
    let pid = Pid::from_raw(pid as i32).context("pid 0")?;
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some((_, status)) = waitpid(Some(pid), WaitOptions::NOHANG)? {
            return Ok(status.exit_status().unwrap_or(-1));
        }
        ensure!(
            Instant::now() < deadline,
            "process {pid:?} did not exit within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The next message on the notify socket.
fn next_message(socket: &UnixDatagram) -> Result<String> {
    let mut message = [0u8; 512];
    let n = socket
        .recv(&mut message)
        .context("no message on the notify socket")?;
    Ok(String::from_utf8_lossy(&message[..n])
        .trim_end()
        .to_string())
}

/// curl, trusting the test CA where the server has its certificate.
struct Curl {
    ca: Option<PathBuf>,
}

impl Curl {
    fn command(&self) -> Command {
        let mut command = Command::new("curl");
        command.args(["--silent", "--show-error", "--fail", "--max-time", "60"]);
        if let Some(ca) = &self.ca {
            command.arg("--cacert").arg(ca);
        }
        command
    }

    /// The body of `url`.
    fn get(&self, url: &str) -> Result<Vec<u8>> {
        let output = self.command().arg(url).output()?;
        ensure!(
            output.status.success(),
            "curl {url}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(output.stdout)
    }

    /// A rate-limited download of `url`, under way, compared with `expected` as it
    /// comes.
    fn download(&self, url: &str, expected: &std::sync::Arc<Vec<u8>>) -> Result<Download> {
        let mut child = self
            .command()
            .args(["--limit-rate", DOWNLOAD_RATE, "--output", "-"])
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?;
        let body = child.stdout.take().context("curl's stdout")?;
        let expected = std::sync::Arc::clone(expected);
        let comparing = std::thread::spawn(move || compare(body, &expected));
        Ok(Download { child, comparing })
    }
}

/// A download under way: curl, and the thread that compares what it writes.
struct Download {
    child: Child,
    comparing: std::thread::JoinHandle<Result<()>>,
}

impl Download {
    /// Waits for its end: curl succeeded, and every byte was the file's.
    fn finish(mut self) -> Result<()> {
        let status = self.child.wait()?;
        let compared = self
            .comparing
            .join()
            .map_err(|_| anyhow::anyhow!("the comparing thread panicked"))?;
        ensure!(status.success(), "curl exited with {status}");
        compared
    }
}

/// Reads `body` to its end and checks that it is `expected`, byte for byte.
fn compare(mut body: impl std::io::Read, expected: &[u8]) -> Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut at = 0;
    loop {
        let n = body.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let end = at + n;
        ensure!(
            end <= expected.len() && buf[..n] == expected[at..end],
            "the body differs from the file within bytes {at}..{end}"
        );
        at = end;
    }
    ensure!(at == expected.len(), "{at} bytes of {}", expected.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_and_pid_are_read_from_the_log() {
        let line = "2026-11-28T20:21:41.649973Z  INFO ioserve: ioserve 0.1.0 (debug build) starting pid=25221";
        assert_eq!(build_in(line), Some("0.1.0 (debug build)"));
        assert_eq!(field(line, "pid="), Some(25221));
        assert_eq!(field("no pid here", "pid="), None);
    }
}
