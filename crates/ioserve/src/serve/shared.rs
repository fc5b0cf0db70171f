//! The state that the listeners and every connection share: the [`Live`] settings
//! (site, strategy, limits, access log), which SIGHUP replaces as a whole while
//! requests in flight keep the set they started with; the metrics, the shutdown token,
//! and the connection slots with the keep-alive connections that may be closed to free
//! one.
//!
//! It sits below both [`crate::serve::server`] (which creates it) and [`crate::serve::conn`] (which
//! uses it), so imports run one way: server → conn → reply.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::http::auth::Auth;
use crate::http::site::Site;
use crate::io::pacing::PaceLimits;
use crate::io::strategy::Strategy;
use crate::ops::access_log::AccessLog;
use crate::ops::metrics::Metrics;
use crate::serve::ktls::KernelTls;
use crate::serve::per_ip::PerIpConnections;
use crate::serve::tls::TlsSetup;

/// Per-connection limits.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    /// Time allowed for a complete request head.
    pub header_timeout: Duration,
    /// Time a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// Time a client may leave the socket unread.
    pub send_timeout: Duration,
    /// `--limit-rate` and `--limit-rate-after`.
    pub pace: PaceLimits,
    /// `--max-conns-per-ip`: most connections open at once from one address; 0 for
    /// no limit.
    pub max_conns_per_ip: usize,
}

/// The settings a request is served with; a reload swaps in a new set.
#[derive(Clone, Debug)]
pub(crate) struct Live {
    /// The served tree.
    pub site: Arc<Site>,
    /// The IO strategy.
    pub strategy: Arc<Strategy>,
    /// Timeouts.
    pub limits: Limits,
    /// Where each response is logged, when the access log is on.
    pub access_log: Option<AccessLog>,
    /// Basic authentication, when `--auth-file` is set.
    pub auth: Option<Arc<Auth>>,
    /// HTTPS for new connections, when `--tls-cert` and `--tls-key` or
    /// `--acme-domain` are set.
    pub tls: Option<TlsSetup>,
    /// `--hsts`: the `max-age` of `Strict-Transport-Security` on HTTPS responses.
    pub hsts: Option<u64>,
}

/// State shared by all workers and connections.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The current settings.
    live: ArcSwap<Live>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Cancelled when the server shuts down.
    pub shutdown: CancellationToken,
    /// Set (before `shutdown` is cancelled) when a new process took over the listeners:
    /// the connections left here then end gently (`serve::handover`).
    handed_over: AtomicBool,
    /// Connections open now, admitted or being refused.
    open_connections: AtomicUsize,
    /// `--max-connections`.
    max_connections: usize,
    /// Each worker's keep-alive connections waiting for a request, oldest first.
    idle: Box<[Mutex<IdleQueue>]>,
    /// The accept loops' lots of parked idle connections (`serve::parking`).
    parking_lots: Mutex<Vec<Weak<dyn ParkedConnections>>>,
    /// Connections open now per client address (`--max-conns-per-ip`).
    pub per_ip: Arc<PerIpConnections>,
    /// What the kernel's TLS takes, where TLS connections are handed to it (`--ktls`).
    pub kernel_tls: Option<KernelTls>,
    /// The `Alt-Svc` value of HTTPS responses where HTTP/3 is served (`--http3`).
    pub alt_svc: Option<String>,
}

impl Shared {
    /// The settings to serve the next request with.
    pub fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// Serves new requests with `live`; requests in flight finish with theirs.
    pub fn replace_live(&self, live: Live) {
        self.live.store(Arc::new(live));
    }

    /// Shuts down because a new process serves the listeners now: connections waiting
    /// for a request get their answer (with `Connection: close`) instead of being
    /// closed under a request that may be on its way.
    pub fn hand_over(&self) {
        self.handed_over.store(true, Ordering::SeqCst);
        self.shutdown.cancel();
    }

    /// Whether the shutdown is a hand-over to a new process ([`Shared::hand_over`]).
    pub fn handed_over(&self) -> bool {
        self.handed_over.load(Ordering::SeqCst)
    }

    /// Whether the listeners should wait before accepting: the admitted connections
    /// and those being refused have reached their bound (see [`crate::ops::budget`]).
    pub fn accepting_paused(&self) -> bool {
        self.open_connections.load(Ordering::Relaxed)
            >= self.max_connections + crate::ops::budget::refusing(self.max_connections)
    }

    /// Shared state for `workers` workers, with kTLS where `kernel_tls` is given.
    pub fn new(
        live: Live,
        metrics: Arc<Metrics>,
        max_connections: usize,
        workers: usize,
        kernel_tls: Option<KernelTls>,
    ) -> Shared {
        Shared {
            live: ArcSwap::from_pointee(live),
            metrics,
            shutdown: CancellationToken::new(),
            handed_over: AtomicBool::new(false),
            open_connections: AtomicUsize::new(0),
            max_connections,
            idle: (0..workers.max(1))
                .map(|_| Mutex::new(IdleQueue::default()))
                .collect(),
            parking_lots: Mutex::default(),
            per_ip: Arc::default(),
            kernel_tls,
            alt_svc: None,
        }
    }

    /// Lets [`ConnectionSlot::acquire`] close the oldest connection parked in `lot`
    /// to make room, as it closes the oldest waiting one; for as long as `lot` lives.
    pub fn add_parking_lot(&self, lot: Weak<dyn ParkedConnections>) {
        let mut lots = self.parking_lots.lock().unwrap_or_else(|e| e.into_inner());
        lots.retain(|lot| lot.strong_count() > 0);
        lots.push(lot);
    }

    /// Advertises HTTP/3 on UDP `port` to the clients of HTTPS responses (`Alt-Svc`,
    /// RFC 7838), for a day as Caddy and nginx do.
    pub fn advertising_http3(mut self, port: u16) -> Shared {
        self.alt_svc = Some(format!("h3=\":{port}\"; ma={ALT_SVC_MAX_AGE}"));
        self
    }
}

/// Seconds a client may remember that HTTP/3 is served (`Alt-Svc`'s `ma`).
const ALT_SVC_MAX_AGE: u64 = 86_400;

/// A connection's place in the count of open connections. Dropping it gives the place
/// back, so a connection task that ends in any way, a panic included, frees its slot.
#[derive(Debug)]
pub(crate) struct ConnectionSlot {
    shared: Arc<Shared>,
    worker: usize,
}

impl ConnectionSlot {
    /// Takes a slot for a connection accepted by `worker`. Returns the slot and whether
    /// the connection is admitted: it is when the count is under `--max-connections`,
    /// or when the idle connection that has waited longest was told to close to make
    /// room; otherwise it gets 503.
    pub fn acquire(shared: &Arc<Shared>, worker: usize) -> (ConnectionSlot, bool) {
        let open = shared.open_connections.fetch_add(1, Ordering::Relaxed);
        shared.metrics.connection(worker, 1);
        let slot = ConnectionSlot {
            shared: Arc::clone(shared),
            worker,
        };
        let admitted = open < shared.max_connections || slot.close_an_idle_connection();
        if !admitted {
            shared.metrics.refused(worker);
        }
        (slot, admitted)
    }

    /// The worker that owns the connection.
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// The server's state, which the slot keeps alive.
    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Closes the connection that has been idle longest, of any worker, waiting in its
    /// task or parked: a waiting one is told to close, a parked one is closed by its lot.
    fn close_an_idle_connection(&self) -> bool {
        let oldest =
            |queue: &Mutex<IdleQueue>| queue.lock().unwrap_or_else(|e| e.into_inner()).oldest();
        loop {
            let waiting = self
                .shared
                .idle
                .iter()
                .filter_map(|queue| Some((oldest(queue)?, queue)))
                .min_by_key(|(since, _)| *since);
            let parked = {
                let lots = self
                    .shared
                    .parking_lots
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                lots.iter()
                    .filter_map(|lot| {
                        let lot = lot.upgrade()?;
                        Some((lot.oldest()?, lot))
                    })
                    .min_by_key(|(since, _)| *since)
            };
            // Either may have woken since it was seen; then look again.
            let closed = match (waiting, parked) {
                (None, None) => return false,
                (Some((since, queue)), Some((parked_since, _))) if since <= parked_since => {
                    close_first(queue)
                }
                (Some((_, queue)), None) => close_first(queue),
                (_, Some((_, lot))) => lot.close_oldest(),
            };
            if closed {
                self.shared.metrics.idle_closed(self.worker);
                return true;
            }
        }
    }

    /// Registers the connection as idle (waiting for its next request) until the
    /// returned guard is dropped; `close` is notified if it must make room.
    pub fn idle(&self, close: &Arc<Notify>) -> IdleGuard<'_> {
        let queue = &self.shared.idle[self.worker % self.shared.idle.len()];
        let key = queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::clone(close));
        IdleGuard { queue, key }
    }

    /// Counts the connection as parked (`true`: `serve::parking`) or as leaving the
    /// lot (`false`).
    pub fn count_parked(&self, parked: bool) {
        self.shared
            .metrics
            .parked(self.worker, if parked { 1 } else { -1 });
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.shared.metrics.connection(self.worker, -1);
        self.shared.open_connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Tells the connection that has waited longest in `queue` to close; false if there
/// is none any more.
fn close_first(queue: &Mutex<IdleQueue>) -> bool {
    let popped = queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .waiting
        .pop_first();
    popped.is_some_and(|(_, close)| {
        close.notify_one();
        true
    })
}

/// Idle connections held without a task (`serve::parking`), one of which a new client
/// may need closed.
pub(crate) trait ParkedConnections: Send + Sync + std::fmt::Debug {
    /// When the connection parked longest ago was parked, if any is.
    fn oldest(&self) -> Option<Instant>;

    /// Closes the connection parked longest ago; false if none is parked any more.
    fn close_oldest(&self) -> bool;
}

/// When a connection went idle, and a tie-breaker within its queue.
type IdleKey = (Instant, u64);

/// Idle connections of one worker in the order they went idle.
#[derive(Debug, Default)]
struct IdleQueue {
    next: u64,
    waiting: BTreeMap<IdleKey, Arc<Notify>>,
}

impl IdleQueue {
    fn push(&mut self, close: Arc<Notify>) -> IdleKey {
        let key = (Instant::now(), self.next);
        self.next += 1;
        self.waiting.insert(key, close);
        key
    }

    fn oldest(&self) -> Option<Instant> {
        self.waiting.first_key_value().map(|((since, _), _)| *since)
    }
}

/// A connection's entry among the idle ones; removed when dropped.
#[derive(Debug)]
pub(crate) struct IdleGuard<'a> {
    queue: &'a Mutex<IdleQueue>,
    key: IdleKey,
}

impl Drop for IdleGuard<'_> {
    fn drop(&mut self) {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waiting
            .remove(&self.key);
    }
}
