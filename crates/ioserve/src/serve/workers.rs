//! The worker threads: one current-thread runtime per listener (`--runtime per-core`),
//! pinned or placed on NUMA nodes, or one work-stealing runtime (`--runtime multi`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::ops::placement::WorkerPlace;
use crate::serve::accept::accept_loop;
use crate::serve::error::ServerError;
use crate::serve::http3::{self, Http3};
use crate::serve::shared::Shared;

/// Where the per-core workers run: pinned or not, and with `--numa` their places.
pub(super) struct Placement {
    pub(super) pin: bool,
    pub(super) numa: Option<Vec<WorkerPlace>>,
}

impl Placement {
    /// The thread name of worker `id`: with `--numa` it says the node
    /// (`ioserve-n1-w3`), so that `ps -L`, `top -H` and /proc show the groups.
    fn thread_name(&self, id: usize) -> String {
        match self.numa.as_ref().and_then(|places| places.get(id)) {
            Some(place) => format!("ioserve-n{}-w{id}", place.node),
            None => format!("ioserve-worker-{id}"),
        }
    }

    /// Places the calling thread, worker `id`.
    fn apply(&self, id: usize) {
        match self.numa.as_ref().and_then(|places| places.get(id)) {
            Some(place) => match place.apply(self.pin) {
                Ok(()) => tracing::debug!(worker = id, %place, "worker placed"),
                Err(error) => tracing::warn!(worker = id, %place, %error, "cannot place a worker"),
            },
            None if self.pin => pin_current_thread(id),
            None => {}
        }
    }
}

/// One thread per listener, each with a current-thread runtime; connections of worker
/// `id` use shard `id` of the metrics and of the open-file cache.
pub(super) fn spawn_per_core(
    listeners: Vec<std::net::TcpListener>,
    http3: Option<Http3>,
    shared: &Arc<Shared>,
    shutdown_timeout: Duration,
    placement: &Arc<Placement>,
) -> Result<Vec<thread::JoinHandle<()>>, ServerError> {
    if let Some(places) = &placement.numa {
        let mut nodes: Vec<u32> = places.iter().map(|p| p.node).collect();
        nodes.dedup();
        for node in nodes {
            let group: Vec<&WorkerPlace> = places.iter().filter(|p| p.node == node).collect();
            tracing::info!(node, workers = group.len(), cpus = %group[0].cpus, "numa: worker group");
        }
    }
    let mut threads = Vec::with_capacity(listeners.len());
    for (id, listener) in listeners.into_iter().enumerate() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ServerError::Worker)?;
        let shared = Arc::clone(shared);
        let placement = Arc::clone(placement);
        let http3 = http3.clone();
        let handle = thread::Builder::new()
            .name(placement.thread_name(id))
            .spawn(move || {
                // Before the first connection: what the worker allocates and first
                // touches from here on follows its node's policy.
                placement.apply(id);
                let quic = http3.map(|http3| {
                    http3::accept_loop(http3, Arc::clone(&shared), shutdown_timeout, id)
                });
                let tcp = accept_loop(listener, shared, shutdown_timeout, || id);
                runtime.block_on(async move {
                    match quic {
                        Some(quic) => drop(tokio::join!(tcp, quic)),
                        None => tcp.await,
                    }
                });
            })
            .map_err(ServerError::Worker)?;
        threads.push(handle);
    }
    Ok(threads)
}

/// One work-stealing runtime of `workers` threads behind the listeners (one, or those
/// passed by socket activation); connections are given shards round-robin.
pub(super) fn spawn_multi(
    listeners: Vec<std::net::TcpListener>,
    http3: Option<Http3>,
    shared: &Arc<Shared>,
    shutdown_timeout: Duration,
    workers: usize,
    pin: bool,
) -> Result<Vec<thread::JoinHandle<()>>, ServerError> {
    let next_thread = AtomicUsize::new(0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("ioserve-worker")
        .on_thread_start(move || {
            if pin {
                pin_current_thread(next_thread.fetch_add(1, Ordering::Relaxed));
            }
        })
        .enable_all()
        .build()
        .map_err(ServerError::Worker)?;
    let shared = Arc::clone(shared);
    let handle = thread::Builder::new()
        .name("ioserve-accept".into())
        .spawn(move || {
            // One accept loop per listener (several with socket activation), each
            // giving its connections shards round-robin from its own starting point.
            let loops = listeners.into_iter().enumerate().map(|(i, listener)| {
                let mut next = i;
                accept_loop(listener, Arc::clone(&shared), shutdown_timeout, move || {
                    next = (next + 1) % workers;
                    next
                })
            });
            // HTTP/3 takes its connections on one loop: the runtime spreads their tasks.
            let quic = http3
                .map(|http3| http3::accept_loop(http3, Arc::clone(&shared), shutdown_timeout, 0));
            runtime.block_on(async move {
                match quic {
                    Some(quic) => drop(tokio::join!(futures_util::future::join_all(loops), quic)),
                    None => drop(futures_util::future::join_all(loops).await),
                }
            });
        })
        .map_err(ServerError::Worker)?;
    Ok(vec![handle])
}

/// Pins the calling thread to the `index`-th CPU of those the process may use.
fn pin_current_thread(index: usize) {
    use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
    let allowed = match sched_getaffinity(None) {
        Ok(allowed) => allowed,
        Err(error) => return tracing::warn!(%error, "cannot read the CPU affinity; not pinning"),
    };
    let cpus: Vec<usize> = (0..CpuSet::MAX_CPU)
        .filter(|&cpu| allowed.is_set(cpu))
        .collect();
    let Some(&cpu) = cpus.get(index % cpus.len().max(1)) else {
        return;
    };
    let mut only = CpuSet::new();
    only.set(cpu);
    match sched_setaffinity(None, &only) {
        Ok(()) => tracing::debug!(cpu, "worker thread pinned"),
        Err(error) => tracing::warn!(%error, cpu, "cannot pin a worker thread"),
    }
}
