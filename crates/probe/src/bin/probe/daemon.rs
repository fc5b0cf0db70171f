//! `probe daemon`: keeps the syscall, fault and run-queue probes attached and serves
//! their totals as Prometheus metrics (the toolkit's metrics stack) until SIGTERM or
//! Ctrl-C, then detaches.

use std::collections::BTreeSet;
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use libbpf_rs::OpenObject;

use ioserve_exporter::prometheus_client::registry::Registry;
use ioserve_exporter::server::MetricsServer;
use ioserve_exporter::signals::OperatorSignals;
use ioserve_probe::bpf::Scope;
use ioserve_probe::cli::DaemonArgs;
use ioserve_probe::metrics::{DaemonProbes, LiveScrape};
use ioserve_probe::target::{self, WatchedProcess};

/// How often the traced processes are looked for again.
const RESCAN: Duration = Duration::from_secs(1);

/// Storage for one BPF object that lives as long as the process: the scrapes run on
/// the metrics server's thread and need the tracers there. Nothing is lost by never
/// freeing it: a `MaybeUninit` never drops what it holds in any case, and the daemon
/// makes three of them once.
fn object_storage() -> &'static mut MaybeUninit<OpenObject> {
    Box::leak(Box::new(MaybeUninit::uninit()))
}

pub fn run(args: &DaemonArgs) -> anyhow::Result<()> {
    ioserve_probe::privilege::require_bpf()?;
    // The control runtime, with the signal handlers installed before anything is
    // bound or attached (as ioserve does): a SIGTERM from then on is handled.
    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the daemon's runtime")?;
    let signals = {
        let _context = control.enter();
        OperatorSignals::install()?
    };
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
    let listener = std::net::TcpListener::bind(args.listen)
        .with_context(|| format!("cannot listen on {} (--listen)", args.listen))?;
    let address = listener.local_addr()?;
    listener.set_nonblocking(true)?;

    let probes = Arc::new(DaemonProbes::start(
        [object_storage(), object_storage(), object_storage()],
        &scope,
        watched.len(),
    )?);
    let what = if filtered {
        format!("pids {:?}, commands {:?}", args.pid, args.comm)
    } else {
        "all processes".into()
    };
    note!("probe daemon: serving http://{address}/metrics for {what}");

    let mut registry = Registry::default();
    let scraped = Arc::clone(&probes);
    registry.register_collector(Box::new(LiveScrape::new(move || {
        scraped
            .scrape()
            .inspect_err(|err| note!("probe daemon: scrape failed: {err:#}"))
            .ok()
    })));
    control.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let (stop_serving, stopped) = tokio::sync::oneshot::channel::<()>();
        // One answer per connection, as a scraper that reads to the end expects.
        let server = MetricsServer::new(Arc::new(registry)).keep_alive(false);
        let serving = tokio::spawn(server.serve(listener, async move {
            let _ = stopped.await;
        }));
        track_targets(args, signals, &mut watched, &probes).await;
        let _ = stop_serving.send(());
        serving.await.context("the metrics server failed")
    })?;
    // The server and its registry are gone: this is the last handle, and dropping it
    // detaches the programs.
    drop(probes);
    note!("probe daemon: detached");
    Ok(())
}

/// Follows the traced processes until SIGTERM/SIGINT: exited `--pid` targets leave
/// the filter, and with `--comm` processes of those names join and leave it as they
/// start and exit; `targets_up` says how many are traced. Other signals (SIGHUP,
/// SIGUSR1, SIGUSR2) are logged and ignored: the daemon has nothing to reload.
async fn track_targets(
    args: &DaemonArgs,
    mut signals: OperatorSignals,
    watched: &mut Vec<WatchedProcess>,
    probes: &DaemonProbes<'static>,
) {
    let mut by_comm: BTreeSet<u32> = BTreeSet::new();
    let mut rescan = tokio::time::interval(RESCAN);
    rescan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            signal = signals.recv() => {
                if signal.stops() {
                    note!("probe daemon: {}, detaching", signal.name());
                    return;
                }
                note!("probe daemon: {} ignored (nothing to reload)", signal.name());
                continue;
            }
            _ = rescan.tick() => {}
        }
        watched.retain(|process| {
            let gone = process.exited();
            if gone {
                probes.remove(process.pid());
            }
            !gone
        });
        if !args.comm.is_empty() {
            let now = target::pids_with_comm(&args.comm);
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
        probes.set_targets_up(watched.len() + by_comm.len());
    }
}
