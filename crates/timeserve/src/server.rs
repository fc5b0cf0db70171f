//! The server: for each listen address, a group of SO_REUSEPORT sockets, one worker
//! thread per socket, each answering batches of requests with `recvmmsg`/`sendmmsg`.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crate::error::Error;
use crate::io::{RecvBatch, SendBatch};
use crate::metrics::{Metrics, WorkerMetrics};
use crate::nts::extension::{self, Classified, KISS_NTS_NAK};
use crate::nts::responder::Responder;
use crate::nts::SharedSecret;
use crate::packet::{
    write_kiss, write_kiss_rate, write_reply, DropReason, NtpTimestamp, Request, HEADER_LEN,
};
use crate::ratelimit::{Limit, RateLimiter, Verdict};
use crate::socket::{self, SocketOptions};
use crate::sync::{Declared, SyncCache};

/// Datagrams taken per `recvmmsg` by default.
pub const DEFAULT_BATCH: usize = 32;

/// Sets of the rate limiter's table (four addresses each): 16384 clients tracked.
const RATE_LIMIT_SETS: usize = 4096;

/// How the server runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The addresses to serve (each gets its own group of sockets).
    pub listen: Vec<SocketAddr>,
    /// Sockets (and threads) per address.
    pub workers: usize,
    /// Pin worker `i` of each group to the `i`th CPU this process may run on.
    pub pin: bool,
    /// Options of every socket.
    pub socket: SocketOptions,
    /// Datagrams per `recvmmsg`.
    pub batch: usize,
    /// What the operator declared about the clock.
    pub declared: Declared,
    /// The per-client rate limit, if any.
    pub rate_limit: Option<Limit>,
    /// The NTS master secret, when NTS is served: requests with NTS fields are then
    /// authenticated (without it they get plain replies, as from any SNTP server).
    pub nts: Option<SharedSecret>,
}

/// One bound socket and the worker that will serve it.
#[derive(Debug)]
struct Worker {
    index: usize,
    cpu: Option<usize>,
    address: SocketAddr,
    socket: UdpSocket,
}

/// A bound server, ready to run.
#[derive(Debug)]
pub struct Server {
    workers: Vec<Worker>,
    addresses: Vec<SocketAddr>,
    batch: usize,
    declared: Declared,
    precision: i8,
    metrics: Arc<Metrics>,
    limiter: Option<Arc<RateLimiter>>,
    nts: Option<SharedSecret>,
}

impl Server {
    /// Binds every socket; nothing is served until [`Server::run`].
    pub fn bind(config: &Config) -> Result<Server, Error> {
        if config.listen.is_empty() {
            return Err(Error::Config("no listen address".into()));
        }
        if config.workers == 0 {
            return Err(Error::Config("--workers must be at least 1".into()));
        }
        let cpus = if config.pin {
            allowed_cpus()?
        } else {
            Vec::new()
        };
        let mut workers = Vec::new();
        let mut addresses = Vec::new();
        for &listen in &config.listen {
            let group = socket::bind_group(listen, config.workers, &config.socket)?;
            let address = group[0].local_addr().unwrap_or(listen);
            addresses.push(address);
            for (i, socket) in group.into_iter().enumerate() {
                workers.push(Worker {
                    index: workers.len(),
                    cpu: (!cpus.is_empty()).then(|| cpus[i % cpus.len()]),
                    address,
                    socket,
                });
            }
        }
        Ok(Server {
            metrics: Arc::new(Metrics::new(workers.len())),
            workers,
            addresses,
            batch: config.batch.max(1),
            declared: config.declared,
            precision: crate::sync::measure_precision(),
            limiter: config
                .rate_limit
                .map(|limit| Arc::new(RateLimiter::new(limit, RATE_LIMIT_SETS))),
            nts: config.nts.clone(),
        })
    }

    /// The addresses served, with the ports the kernel chose for port 0.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addresses
    }

    /// The receive buffer the kernel gave the first socket of `address`.
    pub fn receive_buffer(&self, address: SocketAddr) -> Option<usize> {
        self.workers
            .iter()
            .find(|w| w.address == address)
            .and_then(|w| socket::receive_buffer(&w.socket).ok())
    }

    /// The server's counters.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// The precision exponent replies carry.
    pub fn precision(&self) -> i8 {
        self.precision
    }

    /// Serves until `stop` is set (each worker looks at it at least every
    /// [`socket::RECEIVE_TIMEOUT`]), then returns; the first worker error stops every
    /// worker and is returned.
    pub fn run(self, stop: &AtomicBool) -> Result<(), Error> {
        let failed = AtomicBool::new(false);
        let results: Vec<Result<(), Error>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .workers
                .iter()
                .map(|worker| {
                    let context = WorkerContext {
                        worker,
                        metrics: self.metrics.worker(worker.index),
                        limiter: self.limiter.as_deref(),
                        sync: SyncCache::new(self.declared, self.precision),
                        batch: self.batch,
                        nts: self.nts.clone().map(Responder::new),
                    };
                    let failed = &failed;
                    std::thread::Builder::new()
                        .name(format!("timeserve-{}", worker.index))
                        .spawn_scoped(scope, move || {
                            let result = context.run(stop, failed);
                            if result.is_err() {
                                failed.store(true, Ordering::Relaxed);
                            }
                            result
                        })
                        .expect("spawning a worker thread")
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        results.into_iter().collect()
    }
}

/// What one worker thread holds.
struct WorkerContext<'a> {
    worker: &'a Worker,
    metrics: WorkerMetrics<'a>,
    limiter: Option<&'a RateLimiter>,
    sync: SyncCache,
    batch: usize,
    nts: Option<Responder>,
}

impl WorkerContext<'_> {
    fn run(mut self, stop: &AtomicBool, failed: &AtomicBool) -> Result<(), Error> {
        if let Some(cpu) = self.worker.cpu {
            pin_to(cpu).map_err(|cause| Error::Pin {
                worker: self.worker.index,
                cpu,
                cause,
            })?;
        }
        let socket = self.worker.socket.as_fd();
        let mut received = RecvBatch::new(self.batch);
        let mut replies = SendBatch::new(self.batch);
        while !stop.load(Ordering::Relaxed) && !failed.load(Ordering::Relaxed) {
            let count = received.recv(socket).map_err(|cause| Error::Receive {
                worker: self.worker.index,
                address: self.worker.address,
                cause,
            })?;
            if let Some(drops) = received.kernel_drops() {
                self.metrics.kernel_drops(drops);
            }
            if count == 0 {
                continue;
            }
            self.answer(&received, count, &mut replies);
            if !replies.is_empty() {
                // T3: one reading just before the batch goes out.
                let transmit = NtpTimestamp::from_system_time(SystemTime::now());
                replies.stamp_transmit(transmit.0.to_be_bytes());
                let sent = replies.send(socket);
                self.metrics.responses(sent.sent);
                self.metrics.send_errors(sent.failed);
            }
        }
        Ok(())
    }

    /// Classifies each datagram of the batch and queues the replies.
    fn answer(&mut self, received: &RecvBatch, count: usize, replies: &mut SendBatch) {
        let now = Instant::now();
        let state = *self.sync.state(now);
        let kiss_poll = self.limiter.map_or(0, |l| l.limit().poll_exponent());
        let wall = SystemTime::now();
        if let Some(nts) = &mut self.nts {
            nts.refresh();
        }
        for i in 0..count {
            let (bytes, meta) = received.datagram(i);
            let Some(source) = meta.source else {
                self.metrics.dropped(DropReason::SourcePort);
                continue;
            };
            if meta.truncated {
                self.metrics.dropped(DropReason::BadLength);
                continue;
            }
            let request = match Request::parse(bytes, source.port()) {
                Ok(request) => request,
                Err(reason) => {
                    self.metrics.dropped(reason);
                    continue;
                }
            };
            // NTS fields are looked at only where NTS is served.
            let nts_request = match (&self.nts, bytes.len() > HEADER_LEN) {
                (Some(_), true) => match extension::classify(bytes) {
                    Classified::Plain => None,
                    Classified::Nts(nts) if request.version == 4 => Some(nts),
                    Classified::Nts(_) | Classified::Malformed => {
                        self.metrics.dropped(DropReason::Nts);
                        continue;
                    }
                },
                _ => None,
            };
            self.metrics.request(request.version);
            // T2: the kernel's receive timestamp, or now if it gave none.
            let arrived = meta
                .timestamp
                .map(|t| NtpTimestamp::from_unix(t.as_secs(), t.subsec_nanos()))
                .unwrap_or_else(|| NtpTimestamp::from_system_time(SystemTime::now()));
            let verdict = self
                .limiter
                .map_or(Verdict::Pass, |limiter| limiter.check(source.ip(), now));
            if verdict == Verdict::Drop {
                self.metrics.rate_limited(false);
                continue;
            }
            if verdict == Verdict::Kiss {
                self.metrics.rate_limited(true);
            }
            let write_header = |header: &mut [u8; HEADER_LEN]| match verdict {
                Verdict::Kiss => write_kiss_rate(
                    header,
                    &request,
                    &state,
                    kiss_poll,
                    arrived,
                    NtpTimestamp::ZERO,
                ),
                _ => write_reply(header, &request, &state, arrived, NtpTimestamp::ZERO),
            };
            let (Some(nts), Some(nts_request)) = (&mut self.nts, nts_request) else {
                write_header(replies.push(source, meta.local).header_mut());
                continue;
            };
            // An NTS request: authenticated, or a NAK; a Kiss-o'-Death RATE is
            // authenticated too (clients ignore unauthenticated kisses but NTSN).
            match nts.verify(bytes, &nts_request, wall) {
                Ok(verified) => {
                    let packet = replies.push(source, meta.local);
                    write_header(packet.header_mut());
                    if nts.seal(packet, &nts_request, bytes.len(), &verified) {
                        self.metrics.nts_authenticated();
                    } else {
                        replies.pop();
                    }
                }
                Err(reason) => {
                    self.metrics.nts_nak(reason);
                    let packet = replies.push(source, meta.local);
                    write_kiss(
                        packet.header_mut(),
                        &request,
                        &state,
                        KISS_NTS_NAK,
                        arrived,
                        NtpTimestamp::ZERO,
                    );
                    if !nts.nak(packet, &nts_request) {
                        replies.pop();
                    }
                }
            }
        }
    }
}

/// The CPUs this process may run on, in order.
fn allowed_cpus() -> Result<Vec<usize>, Error> {
    let set = rustix::thread::sched_getaffinity(None).map_err(|cause| Error::Pin {
        worker: 0,
        cpu: 0,
        cause: cause.into(),
    })?;
    Ok((0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&cpu| set.is_set(cpu))
        .collect())
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) -> std::io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).map_err(Into::into)
}
