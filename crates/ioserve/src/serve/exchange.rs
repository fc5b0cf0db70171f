//! One request's exchange, the same over HTTP/1.1 ([`crate::serve::conn`]) and HTTP/2
//! ([`crate::serve::http2`]): the answer decided for a parsed [`Request`] (Basic
//! authentication first, then [`reply::respond`]), completed where it may wait (the
//! password check, listings, tar walks and cold opens on the blocking pool), and the
//! body sent through an [`Output`] by the strategy, with the metrics and the access-log
//! line of the response.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use crate::http::auth::{Check, Pending};
use crate::http::reply::{self, Answer, Blocking};
use crate::http::request::{Method, Request, Version};
use crate::http::resolve::Resolved;
use crate::http::response::{Body, Multipart, Reply};
use crate::http::site::Site;
use crate::http::tar;
use crate::io::output::Output;
use crate::io::read_error::{file_read_error_in, FileReadError};
use crate::io::strategy::ColdReads;
use crate::ops::access_log::{Outcome, Record};
use crate::serve::shared::{Live, Shared};

/// A request's answer and everything its response needs, owned (the request, which
/// borrows the read buffer, is gone).
pub(super) struct Decision {
    /// The settings it was decided with, which its response keeps to the end.
    pub live: Arc<Live>,
    /// When the head was complete.
    pub started: Instant,
    pub answer: Answer,
    /// Basic credentials to verify before `answer` may go out.
    pub unverified: Option<Unverified>,
    /// HTTP/1.x: whether the connection stays open after the response.
    pub keep_alive: bool,
    /// HTTP/1.0: keep-alive must be said in the response.
    pub http10: bool,
    pub log: Option<Box<Record>>,
}

impl Decision {
    /// Starts completing this decision ([`complete`]) on the heap, where the answer and
    /// the pool's hand-offs stay only until the reply is ready; returns that and what the
    /// response needs after it. The decision's own box is freed here, not held to the end
    /// of the response.
    // Boxed on purpose: the decision travels in its box (it is 192 bytes, and a
    // connection's future would otherwise keep room for it), and the box ends here.
    #[allow(clippy::boxed_local)]
    pub(super) fn start_completing<'a>(
        self: Box<Self>,
        shared: &'a Shared,
        worker: usize,
        encrypted: bool,
    ) -> (Completing<'a>, Decided) {
        let Decision {
            live,
            started,
            answer,
            unverified,
            keep_alive,
            http10,
            log,
        } = *self;
        let settings = Arc::clone(&live);
        let completing = Box::pin(async move {
            complete(shared, worker, &settings, answer, unverified, encrypted).await
        });
        let decided = Decided {
            live,
            started,
            keep_alive,
            http10,
            log,
        };
        (completing, decided)
    }
}

/// A reply being completed.
pub(super) type Completing<'a> = Pin<Box<dyn Future<Output = Reply> + Send + 'a>>;

/// What a decided response needs once its reply is complete (see [`Decision`]).
pub(super) struct Decided {
    /// The settings it was decided with.
    pub live: Arc<Live>,
    /// When the head was complete.
    pub started: Instant,
    /// HTTP/1.x: whether the connection stays open after the response.
    pub keep_alive: bool,
    /// HTTP/1.0: keep-alive must be said in the response.
    pub http10: bool,
    /// The access-log record, when the access log is on.
    pub log: Option<Box<Record>>,
}

/// Credentials that the blocking pool verifies (a password hash is slow by design),
/// and whether a refusal answers a HEAD.
pub(super) struct Unverified {
    pending: Pending,
    head_only: bool,
}

/// Decides the answer to `request` from `peer` with the settings of the moment.
pub(super) fn decide(
    shared: &Shared,
    peer: SocketAddr,
    worker: usize,
    request: &Request<'_>,
) -> Decision {
    let started = Instant::now();
    shared.metrics.protocol_request(worker, request.version);
    let live = shared.live();
    let log = live
        .access_log
        .as_ref()
        .map(|_| Box::new(Record::new(peer, request)));
    // Where cold data is waited for on the pool, the loop does not open files either
    // (a path walk or open of a cold inode reads the disk too).
    let blocking = match live.strategy.cold_reads() {
        ColdReads::Pool => Blocking::Never,
        ColdReads::Inline => Blocking::Allowed,
    };
    // Basic authentication comes first, for every path: files, listings and errors.
    let head_only = matches!(request.method, Method::Head);
    let (answer, unverified) = match live
        .auth
        .as_ref()
        .map(|auth| (auth, auth.check(request.authorization)))
    {
        None | Some((_, Check::Granted)) => {
            (reply::respond(&live.site, worker, request, blocking), None)
        }
        Some((auth, Check::Refused(failure))) => {
            shared.metrics.auth_failure(worker, failure);
            (Answer::Ready(auth.challenge(head_only)), None)
        }
        // Decided without IO (nothing is opened for a client not yet known), and sent
        // only once the pool has verified the password.
        Some((_, Check::Verify(pending))) => (
            reply::respond(&live.site, worker, request, Blocking::Never),
            Some(Unverified { pending, head_only }),
        ),
    };
    Decision {
        live,
        started,
        answer,
        unverified,
        keep_alive: request.keep_alive && !request.has_body && !shared.shutdown.is_cancelled(),
        http10: request.version == Version::Http10,
        log,
    }
}

/// Completes a decided answer into its reply, with `Strict-Transport-Security` where
/// the connection is `encrypted` and `--hsts` is set, and `Alt-Svc` where it is
/// encrypted and HTTP/3 is served.
///
/// What may wait for the disk runs on the blocking pool, where it stalls no other
/// connection of this worker: a listing (reading a large directory), and with
/// `--cold-reads pool` a path that the open-file cache does not hold (the path walk,
/// open and fstat of a cold inode).
pub(super) async fn complete(
    shared: &Shared,
    worker: usize,
    live: &Live,
    answer: Answer,
    unverified: Option<Unverified>,
    encrypted: bool,
) -> Reply {
    let answer = match unverified {
        None => answer,
        Some(Unverified { pending, head_only }) => {
            let auth = pending.auth();
            match tokio::task::spawn_blocking(move || pending.verify()).await {
                Ok(Ok(())) => answer,
                Ok(Err(failure)) => {
                    shared.metrics.auth_failure(worker, failure);
                    Answer::Ready(auth.challenge(head_only))
                }
                Err(_) => Answer::Ready(Reply::error(500)),
            }
        }
    };
    let reply = match answer {
        Answer::Ready(reply) => reply,
        Answer::Listing { job, head_only } => {
            tokio::task::spawn_blocking(move || reply::listing_reply(&job, head_only))
                .await
                .unwrap_or_else(|_| Reply::error(500))
        }
        Answer::Tar { job, head_only } => {
            tokio::task::spawn_blocking(move || reply::tar_reply(&job, head_only))
                .await
                .unwrap_or_else(|_| Reply::error(500))
        }
        Answer::Offload(resolved) => {
            shared.metrics.offloaded_open(worker);
            let site = Arc::clone(&live.site);
            tokio::task::spawn_blocking(move || answer_off_loop(&site, worker, *resolved))
                .await
                .unwrap_or_else(|_| Reply::error(500))
        }
    };
    if !encrypted {
        return reply;
    }
    // HSTS only where it is true: a plain response may come from anyone on the path.
    let reply = match live.hsts {
        Some(max_age) => reply.header(
            "Strict-Transport-Security",
            format_args!("max-age={max_age}"),
        ),
        None => reply,
    };
    // HTTP/3 is offered on encrypted responses only: a plain one may come from anyone
    // on the path, and would send the client to their port.
    match &shared.alt_svc {
        Some(alt_svc) => reply.header("Alt-Svc", alt_svc),
        None => reply,
    }
}

/// The reply to a resolved request, on the blocking pool: it may open files and read a
/// directory here.
fn answer_off_loop(site: &Site, worker: usize, resolved: Resolved) -> Reply {
    match reply::answer(site, worker, resolved, Blocking::Allowed) {
        Answer::Ready(reply) => reply,
        Answer::Listing { job, head_only } => reply::listing_reply(&job, head_only),
        Answer::Tar { job, head_only } => reply::tar_reply(&job, head_only),
        Answer::Offload(_) => Reply::error(500),
    }
}

/// Sends `body` through `out` (after what is queued there: `head_len` bytes of head),
/// then counts the response of `status` in the metrics and writes its access-log line.
/// (A function returning an `async` block, not an `async fn`: an `async fn` keeps its
/// arguments twice, and this future is part of every response in flight.)
#[allow(clippy::too_many_arguments, clippy::manual_async_fn)]
pub(super) fn deliver<'a, 'o>(
    shared: &'a Shared,
    live: &'a Live,
    worker: usize,
    out: &'a mut Output<'o>,
    status: u16,
    head_len: u64,
    body: Body,
    log: Option<&'a Record>,
) -> impl Future<Output = io::Result<()>> + use<'a, 'o> {
    async move {
        let delivery = Delivery::start(shared, worker, status, head_len, &body);
        let result = send_body(out, live, body).await;
        delivery.end(shared, live, worker, out, &result, log);
        result
    }
}

/// [`deliver`] in two halves around the sending of the body ([`send_body`]), for a
/// caller whose own future holds what they need: a future that awaits `deliver` keeps
/// its arguments, the body's 32 bytes among them, for as long as the body goes out.
pub(super) struct Delivery {
    status: u16,
    head_len: u64,
    download: bool,
}

impl Delivery {
    /// A response of `status` starts to go out, its head (`head_len` bytes) queued:
    /// a file, ranges of one or an archive count as a download while it does.
    pub(super) fn start(
        shared: &Shared,
        worker: usize,
        status: u16,
        head_len: u64,
        body: &Body,
    ) -> Delivery {
        let download = matches!(body, Body::File { .. } | Body::Multipart(_) | Body::Tar(_));
        if download {
            shared.metrics.download(worker, 1);
        }
        Delivery {
            status,
            head_len,
            download,
        }
    }

    /// The body went out (or failed, `result`): a file that could not be read leaves
    /// the open-file cache, the metrics count the response and the access log has its
    /// line.
    pub(super) fn end(
        self,
        shared: &Shared,
        live: &Live,
        worker: usize,
        out: &Output<'_>,
        result: &io::Result<()>,
        log: Option<&Record>,
    ) {
        if let Some(failed) = result.as_ref().err().and_then(file_read_error_in) {
            file_unreadable(shared, live, worker, failed);
        }
        if self.download {
            shared.metrics.download(worker, -1);
            shared.metrics.cold_windows(worker, out.cold_windows());
            shared.metrics.kept_bodies(worker, out.kept_bodies());
        }
        shared.metrics.paced(worker, out.paced());
        let sent = Sent {
            status: self.status,
            bytes: out.sent(),
            head_len: self.head_len,
            complete: result.is_ok(),
        };
        account(shared, live, worker, sent, log);
    }
}

/// A response's file could not be read: said once in the error log, counted, and the
/// file dropped from the open-file cache (with its mapping and the bytes it kept).
fn file_unreadable(shared: &Shared, live: &Live, worker: usize, failed: &FileReadError) {
    let dropped = live.site.files.forget(failed.identity);
    tracing::error!(
        dropped_from_cache = dropped,
        "{failed}: the response ends short"
    );
    shared.metrics.file_read_error(worker);
}

/// What went out for one response.
pub(super) struct Sent {
    /// The status.
    pub status: u16,
    /// Bytes written, head included.
    pub bytes: u64,
    /// Bytes of them that were the head.
    pub head_len: u64,
    /// Whether the whole body went out.
    pub complete: bool,
}

/// Counts a response in the metrics and writes its access-log line (`log`, when the
/// access log is on).
pub(super) fn account(
    shared: &Shared,
    live: &Live,
    worker: usize,
    sent: Sent,
    log: Option<&Record>,
) {
    shared.metrics.request(worker, sent.status, sent.bytes);
    if let (Some(access_log), Some(record)) = (&live.access_log, log) {
        access_log.write(
            record,
            Outcome {
                status: sent.status,
                bytes: sent.bytes.saturating_sub(sent.head_len),
                strategy: live.strategy.kind().name(),
                complete: sent.complete,
            },
        );
    }
}

/// The sending of `body` through `out`, on the heap: the response's future then holds
/// only the kind of body it has, not room for the largest kind, and none of it twice.
pub(super) fn send_body<'a>(out: &'a mut Output<'_>, live: &'a Live, body: Body) -> Sending<'a> {
    match body {
        Body::Empty => Box::pin(out.flush(false)),
        Body::Bytes(bytes) => Box::pin(async move { out.write(&bytes).await }),
        Body::File { file, range } => Box::pin(live.strategy.send(out, file, range)),
        Body::Multipart(multipart) => Box::pin(async move {
            let Multipart {
                file,
                parts,
                closing,
            } = &*multipart;
            for (part_head, range) in parts {
                out.queue(part_head);
                live.strategy.send(out, file, *range).await?;
            }
            out.queue(closing);
            out.flush(false).await
        }),
        Body::Tar(plan) => {
            Box::pin(async move { tar::stream::send(out, &live.strategy, &live.site, &plan).await })
        }
    }
}

/// A body being sent.
type Sending<'a> = Pin<Box<dyn Future<Output = io::Result<()>> + Send + 'a>>;
