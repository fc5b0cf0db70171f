//! The c100k load client: a tokio runtime of its own (two worker threads, beside the
//! synchronous rest of xtask) that opens batches of connections from source addresses
//! spread over 127.0.0.0/8, a bounded number connecting at once, holds them while the
//! caller measures, counts how each went, and runs the polite client during a hold.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use serde::Serialize;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

use super::connection::{self, Ending, Hold, Opening, Setup, Ticket};
use super::mix::{interleaved, source_address, Kind};
use super::outcome::Outcome;
use super::polite::{self, Polite, POLITE_EVERY};

/// Connections connecting and waiting for their answer at once, unless the scenario
/// says otherwise (`cargo xtask c100k-vm`'s guest, whose emulated CPUs take tens of
/// milliseconds per TLS handshake, has fewer wait their turn).
pub(crate) const CONNECTING_AT_ONCE: usize = 256;

/// How long a batch may go without any connection answered, refused or failed before
/// the rest of it is given up (counted as failed): a server that stops accepting
/// leaves its connections in the listen backlog, and each would otherwise wait out
/// its answer timeout, a few hundred at a time.
const MOST_SILENCE: Duration = Duration::from_secs(15);

/// Distinct failure messages kept per batch, for the reader.
const FAILURE_SAMPLES: usize = 5;

/// Descriptors of the open-file limit kept for the rest of xtask (reading /proc, the
/// polite client, the runtime): connections past the rest fail at once, counted,
/// rather than leaving xtask unable to open a file.
const RESERVED_DESCRIPTORS: u64 = 256;

/// Connections of one kind to open.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batch {
    /// Their kind.
    pub kind: Kind,
    /// How many.
    pub count: usize,
    /// The server they connect to (plain or HTTPS, as the kind needs).
    pub server: SocketAddr,
}

/// How the connections of one kind went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Counts {
    /// Connections tried.
    pub connections: usize,
    /// Those whose TCP connect succeeded.
    pub opened: usize,
    /// Those answered: 200 with the whole body (a download: the head of its 200).
    pub answered: usize,
    /// Those refused: 503, or refused, reset or closed before the answer.
    pub refused: usize,
    /// Those that failed otherwise (a timeout, another status, a TLS error).
    pub failed: usize,
    /// Answered ones that the server closed while they were held.
    pub dropped: usize,
    /// Body bytes that the downloads read while held.
    pub downloaded_bytes: u64,
    /// Seconds held, summed over the connections.
    pub held_s: f64,
}

impl Counts {
    /// Whether every connection was answered and held to the end.
    pub(crate) fn all_held(&self) -> bool {
        self.answered == self.connections && self.dropped == 0
    }

    /// KiB/s that a held connection read on average (the downloads' pace).
    pub(crate) fn kib_per_s(&self) -> Option<f64> {
        (self.held_s > 0.0).then(|| self.downloaded_bytes as f64 / 1024.0 / self.held_s)
    }

    /// Counts an [`Opening`].
    fn add_opening(&mut self, opening: &Opening) {
        self.opened += usize::from(opening.opened);
        match opening.outcome {
            Outcome::Answered => self.answered += 1,
            Outcome::Refused(_) => self.refused += 1,
            Outcome::Failed(_) => self.failed += 1,
        }
    }

    /// Counts an [`Ending`].
    fn add_ending(&mut self, ending: &Ending) {
        self.dropped += usize::from(ending.dropped);
        self.downloaded_bytes += ending.downloaded;
        self.held_s += ending.held_for.as_secs_f64();
    }
}

/// Connections opened and held; [`Client::release`] closes them.
pub(crate) struct Holding {
    /// Turned true to end the hold.
    stop: watch::Sender<bool>,
    /// The connection tasks.
    tasks: Vec<JoinHandle<Ending>>,
    /// Per kind, in the order of the batches, how the opening went.
    counts: Vec<(Kind, Counts)>,
    /// Connections held now, of every kind.
    still_held: Arc<AtomicUsize>,
}

impl Holding {
    /// Connections held now (answered and not dropped since), of every kind.
    pub(crate) fn still_held(&self) -> usize {
        self.still_held.load(Ordering::Relaxed)
    }
}

/// What the connection tasks of one [`Client::open`] share.
struct Shared {
    /// Turns to connect: the client's `at_once`, closed when the batch is given up.
    permits: Arc<Semaphore>,
    /// Where each task reports how asking went.
    report: mpsc::UnboundedSender<Opening>,
    /// Turns true when the batch is given up.
    abandoned: watch::Receiver<bool>,
    /// Turns true when the hold ends.
    stopped: watch::Receiver<bool>,
    /// Connections held now.
    still_held: Arc<AtomicUsize>,
}

/// The load client.
pub(crate) struct Client {
    runtime: tokio::runtime::Runtime,
    setup: Arc<Setup>,
    /// Connections from each source address.
    per_address: usize,
    /// One permit per descriptor that the client's connections may take.
    descriptors: Arc<Semaphore>,
    /// What a connection that finds no descriptor left is told.
    no_descriptor: Arc<str>,
    /// Connections connecting and waiting for their answer at once.
    at_once: usize,
}

impl Client {
    /// A client trusting the certificate in `certificate` (PEM) for HTTPS, whose slow
    /// downloads ask for `download_path`, `per_address` connections from each source
    /// address, at most as many connections open at once as the open-file limit
    /// `descriptor_limit` leaves beside [`RESERVED_DESCRIPTORS`], and `at_once` of
    /// them connecting and waiting for their answer at a time.
    pub(crate) fn new(
        certificate: &Path,
        download_path: &str,
        per_address: usize,
        descriptor_limit: u64,
        at_once: usize,
    ) -> Result<Client> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("c100k-client")
            .enable_all()
            .build()
            .context("cannot start the c100k client's runtime")?;
        let tls = |alpn: &[u8]| -> Result<TlsConnector> {
            Ok(TlsConnector::from(tls_config(certificate, alpn)?))
        };
        Ok(Client {
            runtime,
            setup: Arc::new(Setup {
                tls_http1: tls(b"http/1.1")?,
                tls_h2: tls(b"h2")?,
                download_path: download_path.to_string(),
            }),
            per_address,
            descriptors: Arc::new(Semaphore::new(
                descriptor_limit
                    .saturating_sub(RESERVED_DESCRIPTORS)
                    .min(Semaphore::MAX_PERMITS as u64) as usize,
            )),
            no_descriptor: format!(
                "no descriptor left: the open-file limit is {descriptor_limit}, \
                 {RESERVED_DESCRIPTORS} of them kept for the rest of xtask"
            )
            .into(),
            at_once: at_once.max(1),
        })
    }

    /// Opens every connection of `batches`, the kinds interleaved,
    /// the client's `at_once` at a time, from source addresses in turn; returns once each has been answered or has failed
    /// (or the batch was given up, [`MOST_SILENCE`]), with the answered ones held.
    /// Says on stderr how long it took and, for connections not answered, the first
    /// reasons.
    pub(crate) fn open(&self, batches: &[Batch]) -> Holding {
        let started = Instant::now();
        let (stop, stopped) = watch::channel(false);
        let (abandon, abandoned) = watch::channel(false);
        let (report, mut reports) = mpsc::unbounded_channel();
        let shared = Shared {
            permits: Arc::new(Semaphore::new(self.at_once)),
            report,
            abandoned,
            stopped,
            still_held: Arc::new(AtomicUsize::new(0)),
        };
        let mut counts: Vec<(Kind, Counts)> = batches
            .iter()
            .map(|b| {
                let counts = Counts {
                    connections: b.count,
                    ..Counts::default()
                };
                (b.kind, counts)
            })
            .collect();
        let total: usize = batches.iter().map(|b| b.count).sum();
        let still_held = Arc::clone(&shared.still_held);
        let mut failures: Vec<String> = Vec::new();
        let tasks = self.runtime.block_on(async {
            let mut tasks = Vec::with_capacity(total);
            let connections: Vec<((Kind, SocketAddr), usize)> = batches
                .iter()
                .map(|b| ((b.kind, b.server), b.count))
                .collect();
            for (index, (kind, server)) in interleaved(&connections).into_iter().enumerate() {
                let source = source_address(index, self.per_address);
                tasks.push(tokio::spawn(self.connection(kind, server, source, &shared)));
            }
            let permits = Arc::clone(&shared.permits);
            // Each task drops its sender once it has reported: the reports end when
            // all have (or a task died).
            drop(shared);
            let mut reported = 0;
            while reported < total {
                let opening = match tokio::time::timeout(MOST_SILENCE, reports.recv()).await {
                    Ok(Some(opening)) => opening,
                    Ok(None) => {
                        failures.push(format!(
                            "{} connection task(s) ended without reporting",
                            total - reported
                        ));
                        break;
                    }
                    Err(_) => {
                        failures.push(format!(
                            "{} given up: none answered, refused or failed in {} s",
                            total - reported,
                            MOST_SILENCE.as_secs()
                        ));
                        let _ = abandon.send(true);
                        permits.close();
                        break;
                    }
                };
                reported += 1;
                if let Some((_, c)) = counts.iter_mut().find(|(k, _)| *k == opening.kind) {
                    c.add_opening(&opening);
                }
                if let Outcome::Refused(why) | Outcome::Failed(why) = &opening.outcome {
                    let why = format!("{}: {why}", opening.kind.title());
                    if failures.len() < FAILURE_SAMPLES && !failures.contains(&why) {
                        failures.push(why);
                    }
                }
            }
            tasks
        });
        // Given up, or died without reporting: failed.
        for (_, c) in &mut counts {
            c.failed += c.connections - (c.answered + c.refused + c.failed);
        }
        let answered: usize = counts.iter().map(|(_, c)| c.answered).sum();
        // Warm-ups say nothing unless they fail.
        if total > 1 || answered < total {
            eprintln!(
                "xtask loadtest --c100k: {answered} of {total} connections answered and held \
                 ({:.1} s to open)",
                started.elapsed().as_secs_f64()
            );
        }
        for why in &failures {
            eprintln!("  not answered: {why}");
        }
        Holding {
            stop,
            tasks,
            counts,
            still_held,
        }
    }

    /// The task of one connection of `kind` to `server` from `source`: waits for its
    /// turn to connect, takes a descriptor (or fails at once when none is left), and
    /// runs the connection.
    fn connection(
        &self,
        kind: Kind,
        server: SocketAddr,
        source: Ipv4Addr,
        shared: &Shared,
    ) -> impl Future<Output = Ending> + Send + 'static {
        let (setup, permits) = (Arc::clone(&self.setup), Arc::clone(&shared.permits));
        let descriptors = Arc::clone(&self.descriptors);
        let no_descriptor = Arc::clone(&self.no_descriptor);
        let (report, abandon) = (shared.report.clone(), shared.abandoned.clone());
        let hold = Hold {
            stop: shared.stopped.clone(),
            still_held: Arc::clone(&shared.still_held),
        };
        async move {
            // Closed when the batch is given up.
            let Ok(permit) = permits.acquire_owned().await else {
                return Ending::not_held(kind);
            };
            let Ok(descriptor) = descriptors.try_acquire_owned() else {
                let _ = report.send(Opening {
                    kind,
                    opened: false,
                    outcome: Outcome::Failed(no_descriptor.to_string()),
                });
                return Ending::not_held(kind);
            };
            let ticket = Ticket {
                permit,
                report,
                abandon,
            };
            let ending = connection::run(kind, server, source, setup, ticket, hold).await;
            // The connection's socket is closed by now.
            drop(descriptor);
            ending
        }
    }

    /// Runs the polite client against `server` (plain HTTP) for `hold`, while what is
    /// held stays held.
    pub(crate) fn polite(&self, server: SocketAddr, hold: Duration) -> Polite {
        let (stop, stopped) = watch::channel(false);
        let times = self.runtime.block_on(async {
            let asking = polite::polite(server, POLITE_EVERY, stopped);
            let timer = async {
                tokio::time::sleep(hold).await;
                let _ = stop.send(true);
            };
            let (times, ()) = tokio::join!(asking, timer);
            times
        });
        Polite::of(&times)
    }

    /// Ends the hold of `holding` and closes its connections (with a reset); per kind,
    /// in the order of the batches, how they went.
    pub(crate) fn release(&self, holding: Holding) -> Vec<(Kind, Counts)> {
        let Holding {
            stop,
            tasks,
            mut counts,
            ..
        } = holding;
        let _ = stop.send(true);
        self.runtime.block_on(async {
            for task in tasks {
                let Ok(ending) = task.await else {
                    continue;
                };
                if let Some((_, c)) = counts.iter_mut().find(|(k, _)| *k == ending.kind) {
                    c.add_ending(&ending);
                }
            }
        });
        counts
    }
}

/// A TLS client configuration trusting the self-signed certificate in `certificate`,
/// offering `alpn`, with a full handshake per connection (no resumption), as a
/// hundred thousand distinct clients would make.
fn tls_config(certificate: &Path, alpn: &[u8]) -> Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(certificate)
        .with_context(|| format!("cannot read {}", certificate.display()))?
    {
        roots
            .add(cert.with_context(|| format!("a certificate in {}", certificate.display()))?)
            .context("the run's certificate is not usable as a root")?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    config.resumption = rustls::client::Resumption::disabled();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_say_whether_every_connection_was_held() {
        let mut counts = Counts {
            connections: 2,
            ..Counts::default()
        };
        for outcome in [Outcome::Answered, Outcome::Refused("503".into())] {
            counts.add_opening(&Opening {
                kind: Kind::Downloading,
                opened: true,
                outcome,
            });
        }
        assert_eq!((counts.opened, counts.answered, counts.refused), (2, 1, 1));
        assert!(!counts.all_held());
        let ending = Ending {
            kind: Kind::Downloading,
            held: true,
            dropped: false,
            downloaded: 64 << 10,
            held_for: Duration::from_secs(2),
        };
        counts.add_ending(&ending);
        assert_eq!(counts.kib_per_s(), Some(32.0));
    }
}
