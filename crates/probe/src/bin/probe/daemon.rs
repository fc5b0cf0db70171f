//! `probe daemon`: keeps the syscall, fault and run-queue probes attached and serves
//! their totals as Prometheus metrics until SIGTERM or Ctrl-C, then detaches.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::mem::MaybeUninit;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;

use ioserve_probe::bpf::Scope;
use ioserve_probe::cli::DaemonArgs;
use ioserve_probe::faults::FaultTracer;
use ioserve_probe::metrics::{self, Scrape};
use ioserve_probe::runq::RunqTracer;
use ioserve_probe::signals::{Interrupt, Signals};
use ioserve_probe::syscalls::{SyscallOptions, SyscallTracer};
use ioserve_probe::target::WatchedProcess;

/// Connections served at once; more are closed unanswered.
const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The probes, shared by the connection threads.
struct Probes<'a> {
    syscalls: SyscallTracer<'a>,
    faults: FaultTracer<'a>,
    runq: RunqTracer<'a>,
    filtered: bool,
    targets_up: AtomicUsize,
}

impl Probes<'_> {
    fn add(&self, pid: u32) -> anyhow::Result<()> {
        self.syscalls.add_process(pid)?;
        self.faults.add_process(pid)?;
        self.runq.add_process(pid)?;
        Ok(())
    }

    fn remove(&self, pid: u32) {
        self.syscalls.remove_process(pid);
        self.faults.remove_process(pid);
        self.runq.remove_process(pid);
    }

    fn scrape(&self) -> anyhow::Result<String> {
        let scrape = Scrape {
            syscalls: self.syscalls.snapshot()?,
            faults: self.faults.snapshot()?,
            per_process_faults: self.filtered,
            runq: self.runq.snapshot()?,
            targets_up: self
                .filtered
                .then(|| self.targets_up.load(Ordering::Relaxed)),
        };
        Ok(metrics::render(&scrape))
    }
}

pub fn run(args: &DaemonArgs, signals: &Signals) -> anyhow::Result<()> {
    crate::require_bpf()?;
    let filtered = !args.pid.is_empty() || !args.comm.is_empty();
    let mut watched: Vec<WatchedProcess> = args
        .pid
        .iter()
        .map(|&pid| WatchedProcess::open(pid))
        .collect::<Result<_, _>>()?;
    let scope = if filtered {
        Scope::Processes(watched.iter().map(WatchedProcess::pid).collect())
    } else {
        Scope::System
    };
    let listener = TcpListener::bind(args.listen)
        .with_context(|| format!("cannot listen on {} (--listen)", args.listen))?;
    let address = listener.local_addr()?;

    let (mut s1, mut s2, mut s3) = (
        MaybeUninit::uninit(),
        MaybeUninit::uninit(),
        MaybeUninit::uninit(),
    );
    let probes = Probes {
        syscalls: SyscallTracer::start(
            &mut s1,
            &SyscallOptions {
                scope: scope.clone(),
                ..SyscallOptions::default()
            },
        )?,
        faults: FaultTracer::start(&mut s2, &scope)?,
        runq: RunqTracer::start(&mut s3, &scope)?,
        filtered,
        targets_up: AtomicUsize::new(watched.len()),
    };
    let what = if filtered {
        format!("pids {:?}, commands {:?}", args.pid, args.comm)
    } else {
        "all processes".into()
    };
    note!("probe daemon: serving http://{address}/metrics for {what}");

    let stop = AtomicBool::new(false);
    let connections = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        // However this closure ends (even by a panic), the accept loop must end too,
        // or the scope would wait for it forever.
        let _stop_acceptor = StopAcceptor {
            stop: &stop,
            address,
        };
        accept_connections(scope, &listener, &stop, &connections, &probes);
        track_targets(args, signals, &mut watched, &probes);
    });
    drop(probes);
    note!("probe daemon: detached");
    Ok(())
}

/// Accepts scrapes on a thread of `scope`, each answered on a thread of its own (at most
/// MAX_CONNECTIONS at once; more are closed unanswered), until `stop` is set.
fn accept_connections<'scope, 'env: 'scope, 'obj: 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    listener: &'env TcpListener,
    stop: &'env AtomicBool,
    connections: &'env AtomicUsize,
    probes: &'env Probes<'obj>,
) {
    scope.spawn(move || {
        for stream in listener.incoming() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let Ok(stream) = stream else { continue };
            if connections.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                connections.fetch_sub(1, Ordering::AcqRel);
                continue; // dropped: closed unanswered
            }
            scope.spawn(move || {
                let _ = serve(stream, probes);
                connections.fetch_sub(1, Ordering::AcqRel);
            });
        }
    });
}

/// Follows the traced processes until SIGTERM/SIGINT: exited `--pid` targets leave
/// the filter, and with `--comm` processes of those names join and leave it as they
/// start and exit; `targets_up` says how many are traced.
fn track_targets(
    args: &DaemonArgs,
    signals: &Signals,
    watched: &mut Vec<WatchedProcess>,
    probes: &Probes<'_>,
) {
    let mut by_comm: BTreeSet<u32> = BTreeSet::new();
    loop {
        if let Some(Interrupt::Terminate(signal)) = signals.wait(Duration::from_secs(1)) {
            note!("probe daemon: signal {signal}, detaching");
            break;
        }
        watched.retain(|process| {
            let gone = process.exited();
            if gone {
                probes.remove(process.pid());
            }
            !gone
        });
        if !args.comm.is_empty() {
            let now = pids_with_comm(&args.comm);
            for &pid in now.difference(&by_comm) {
                if let Err(err) = probes.add(pid) {
                    note!("probe daemon: cannot trace pid {pid}: {err:#}");
                }
            }
            for &pid in by_comm.difference(&now) {
                probes.remove(pid);
            }
            by_comm = now;
        }
        probes
            .targets_up
            .store(watched.len() + by_comm.len(), Ordering::Relaxed);
    }
}

/// Ends the accept loop when dropped: sets the flag, then connects once so that the
/// blocked accept returns and sees it.
struct StopAcceptor<'a> {
    stop: &'a AtomicBool,
    address: SocketAddr,
}

impl Drop for StopAcceptor<'_> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.address);
    }
}

/// Answers one HTTP/1.x request: GET /metrics, or a short index at /.
fn serve(stream: TcpStream, probes: &Probes<'_>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let mut reader = BufReader::new(&stream);
    let mut request_line = String::new();
    // Bounded read of the request line and headers (8 KiB).
    let mut budget = (&mut reader).take(8192);
    budget.read_line(&mut request_line)?;
    loop {
        let mut header = String::new();
        if budget.read_line(&mut header)? == 0 || header == "\r\n" || header == "\n" {
            break;
        }
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => match probes.scrape() {
            Ok(text) => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", text),
            Err(err) => (
                "500 Internal Server Error",
                "text/plain",
                format!("{err:#}\n"),
            ),
        },
        ("GET", "/") => (
            "200 OK",
            "text/plain",
            "probe daemon: metrics at /metrics\n".into(),
        ),
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "not found: try /metrics\n".into(),
        ),
        _ => ("405 Method Not Allowed", "text/plain", "only GET\n".into()),
    };
    let mut stream = &stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

use std::io::Read as _;

/// The pids whose /proc/PID/comm is one of `names`. The kernel keeps the first 15
/// bytes of a command name, so longer names match by those.
fn pids_with_comm(names: &[String]) -> BTreeSet<u32> {
    let names: Vec<&[u8]> = names
        .iter()
        .map(|n| &n.as_bytes()[..n.len().min(15)])
        .collect();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| {
                let comm = comm.trim_end_matches('\n').as_bytes();
                names.contains(&comm)
            })
        })
        .collect()
}
