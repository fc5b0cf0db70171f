//! One connection of each kind, as a tokio task: connect from its source address, ask
//! and read the whole answer, say how that went, then hold the connection until told
//! to stop and say whether the server kept it.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit};
use tokio::time::{timeout, MissedTickBehavior};
use tokio_rustls::TlsConnector;

use super::http1::{get_small_file, read_head, request, MOST_HEAD_BYTES, SMALL_FILE};
use super::mix::{Kind, DOWNLOAD_BYTES_PER_TICK, DOWNLOAD_TICK_MS};
use super::outcome::{expect_ok, h2_outcome, io_outcome, Outcome};

/// A slow download's receive buffer (SO_RCVBUF, set before connecting so that the
/// window it advertises stays small): the server's send buffer fills and the download
/// stays in flight at the client's pace.
const DOWNLOAD_RECEIVE_BUFFER: u32 = 16 << 10;

/// How long a connection may take from its connect to the end of its answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// What every connection task of a client shares.
pub(crate) struct Setup {
    /// TLS with ALPN http/1.1, trusting the run's certificate.
    pub tls_http1: TlsConnector,
    /// TLS with ALPN h2, trusting the run's certificate.
    pub tls_h2: TlsConnector,
    /// The path of the large file that slow downloads ask for.
    pub download_path: String,
}

/// What a connection task reports once it knows how asking went.
#[derive(Debug)]
pub(crate) struct Opening {
    /// Its kind.
    pub kind: Kind,
    /// Whether its TCP connect succeeded.
    pub opened: bool,
    /// How asking went.
    pub outcome: Outcome,
}

/// How a connection task ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Ending {
    /// Its kind.
    pub kind: Kind,
    /// Whether it was answered and held (until stopped, or dropped by the server).
    pub held: bool,
    /// Whether the server closed it, or sent something unasked, while it was held.
    pub dropped: bool,
    /// Body bytes a download read while held.
    pub downloaded: u64,
    /// How long it was held.
    pub held_for: Duration,
}

impl Ending {
    /// A connection that was never held.
    pub(crate) fn not_held(kind: Kind) -> Ending {
        Ending {
            kind,
            held: false,
            dropped: false,
            downloaded: 0,
            held_for: Duration::ZERO,
        }
    }
}

/// A connection's place in its batch: its slot in the client's connecting
/// concurrency, and where it reports how asking went.
pub(crate) struct Ticket {
    /// Held from before the connect until the answer.
    pub permit: OwnedSemaphorePermit,
    /// Where the [`Opening`] goes; dropped once sent, so that the receiver sees the
    /// end of the reports when every task has reported (or died).
    pub report: mpsc::UnboundedSender<Opening>,
    /// Turns true when the batch is given up: a connection still asking then ends
    /// without a report (the batch counts it).
    pub abandon: watch::Receiver<bool>,
}

/// What a held connection watches and tells.
pub(crate) struct Hold {
    /// Turns true when the hold ends.
    pub stop: watch::Receiver<bool>,
    /// Connections of the batch held now: one more once answered, one fewer when the
    /// server drops it.
    pub still_held: Arc<AtomicUsize>,
}

/// A connection answered and now held.
enum Held {
    /// Silent: HTTP/1.1 over TCP or TLS, kept open and read only to see it close.
    Idle(Pin<Box<dyn AsyncRead + Send>>),
    /// HTTP/2: the connection's future (which answers the server's PINGs and
    /// SETTINGS), with its request handle kept inside so that it stays open.
    Http2(Pin<Box<dyn Future<Output = ()> + Send>>),
    /// A download read at its pace, with the body bytes still to come.
    Download { stream: TcpStream, left: u64 },
}

/// One connection of `kind` to `server` from `source`: connects (once `ticket`'s
/// permit is held), asks, reports the [`Opening`], then holds the connection as
/// `hold` says.
pub(crate) async fn run(
    kind: Kind,
    server: SocketAddr,
    source: Ipv4Addr,
    setup: Arc<Setup>,
    ticket: Ticket,
    hold: Hold,
) -> Ending {
    let mut opened = false;
    // On the heap, and freed once answered: the task keeps only the hold's small state
    // (a hundred thousand of them).
    let asking = Box::pin(timeout(ANSWER_TIMEOUT, async {
        let receive_buffer = (kind == Kind::Downloading).then_some(DOWNLOAD_RECEIVE_BUFFER);
        let tcp = connect(server, source, receive_buffer)
            .await
            .map_err(|error| io_outcome(&error, "connect"))?;
        opened = true;
        ask(kind, tcp, &setup).await
    }));
    let Ticket {
        permit,
        report,
        mut abandon,
    } = ticket;
    let asked = tokio::select! {
        asked = asking => asked.unwrap_or_else(|_| {
            Err(Outcome::Failed(format!(
                "no answer within {} s",
                ANSWER_TIMEOUT.as_secs()
            )))
        }),
        _ = abandon.wait_for(|abandon| *abandon) => return Ending::not_held(kind),
    };
    let (held, outcome) = match asked {
        Ok(held) => (Some(held), Outcome::Answered),
        Err(outcome) => (None, outcome),
    };
    drop(permit);
    // The receiver is gone only when the batch was given up; the hold goes on anyway.
    let _ = report.send(Opening {
        kind,
        opened,
        outcome,
    });
    drop(report);
    match held {
        Some(held) => {
            hold.still_held.fetch_add(1, Ordering::Relaxed);
            let ending = hold_until_stopped(kind, held, hold.stop).await;
            if ending.dropped {
                hold.still_held.fetch_sub(1, Ordering::Relaxed);
            }
            ending
        }
        None => Ending::not_held(kind),
    }
}

/// A TCP connection from `source` (port chosen by the kernel) to `server`, with
/// `receive_buffer` as SO_RCVBUF if given. It closes with a reset (SO_LINGER 0): no
/// port of the source address then waits in TIME_WAIT for the next batch.
async fn connect(
    server: SocketAddr,
    source: Ipv4Addr,
    receive_buffer: Option<u32>,
) -> io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    if let Some(bytes) = receive_buffer {
        socket.set_recv_buffer_size(bytes)?;
    }
    socket.set_zero_linger()?;
    socket.bind(SocketAddr::new(IpAddr::V4(source), 0))?;
    socket.connect(server).await
}

/// Asks as `kind` does on `tcp` and reads the answer: the connection to hold, or why
/// not.
async fn ask(kind: Kind, mut tcp: TcpStream, setup: &Setup) -> Result<Held, Outcome> {
    let name = rustls::pki_types::ServerName::from(
        tcp.peer_addr().map_err(|e| io_outcome(&e, "peer"))?.ip(),
    );
    match kind {
        Kind::IdleHttp1 => {
            get_small_file(&mut tcp).await?;
            Ok(Held::Idle(Box::pin(tcp)))
        }
        Kind::IdleTls => {
            let mut tls = setup
                .tls_http1
                .connect(name, tcp)
                .await
                .map_err(|e| io_outcome(&e, "TLS handshake"))?;
            get_small_file(&mut tls).await?;
            Ok(Held::Idle(Box::pin(tls)))
        }
        Kind::Http2 => {
            let tls = setup
                .tls_h2
                .connect(name, tcp)
                .await
                .map_err(|e| io_outcome(&e, "TLS handshake"))?;
            http2_get_small_file(tls).await
        }
        Kind::Downloading => {
            let request = request(&setup.download_path);
            tcp.write_all(request.as_bytes())
                .await
                .map_err(|e| io_outcome(&e, "request"))?;
            let mut head = Vec::with_capacity(MOST_HEAD_BYTES);
            let answer = read_head(&mut tcp, &mut head).await?;
            expect_ok(answer.status)?;
            let length = answer
                .content_length
                .ok_or_else(|| Outcome::Failed("no Content-Length".into()))?;
            let left = length.saturating_sub(answer.body_read as u64);
            Ok(Held::Download { stream: tcp, left })
        }
    }
}

/// The HTTP/2 handshake on `tls`, a GET of the small file read to its end, and the
/// connection to hold.
async fn http2_get_small_file<S>(tls: S) -> Result<Held, Outcome>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) = h2::client::handshake(tls)
        .await
        .map_err(|e| h2_outcome(e, "handshake"))?;
    let mut connection = Box::pin(connection);
    let uri = format!("https://127.0.0.1{}", SMALL_FILE.0);
    let exchange = async move {
        let mut send = send.ready().await.map_err(|e| h2_outcome(e, "ready"))?;
        let request = http::Request::get(uri)
            .body(())
            .map_err(|e| Outcome::Failed(format!("request: {e}")))?;
        let (response, _) = send
            .send_request(request, true)
            .map_err(|e| h2_outcome(e, "request"))?;
        let response = response.await.map_err(|e| h2_outcome(e, "answer"))?;
        expect_ok(response.status().as_u16())?;
        let mut body = response.into_body();
        let mut length = 0u64;
        while let Some(data) = body.data().await {
            let data = data.map_err(|e| h2_outcome(e, "body"))?;
            length += data.len() as u64;
            let _ = body.flow_control().release_capacity(data.len());
        }
        if length != SMALL_FILE.1 {
            return Err(Outcome::Failed(format!(
                "{length} bytes of {}, not {}",
                SMALL_FILE.0, SMALL_FILE.1
            )));
        }
        Ok(send)
    };
    // The connection's future does the I/O of the exchange.
    let send = tokio::select! {
        answered = exchange => answered?,
        ended = &mut connection => {
            return Err(match ended {
                Ok(()) => Outcome::Refused("closed before answering".into()),
                Err(error) => h2_outcome(error, "connection"),
            });
        }
    };
    Ok(Held::Http2(Box::pin(async move {
        // Dropping the last request handle would close the connection.
        let _send = send;
        let _ = connection.await;
    })))
}

/// Holds `held` until `stop` turns true; says whether the server dropped it first.
async fn hold_until_stopped(kind: Kind, held: Held, mut stop: watch::Receiver<bool>) -> Ending {
    let since = Instant::now();
    let mut downloaded = 0u64;
    let stopped = async move {
        // An error means the sender is gone: stop as well.
        let _ = stop.wait_for(|stop| *stop).await;
    };
    let dropped = match held {
        Held::Idle(mut stream) => {
            let mut byte = [0u8; 1];
            tokio::select! {
                () = stopped => false,
                _ = stream.read(&mut byte) => true,
            }
        }
        Held::Http2(connection) => {
            tokio::select! {
                () = stopped => false,
                () = connection => true,
            }
        }
        Held::Download { stream, left } => {
            tokio::select! {
                () = stopped => false,
                dropped = pace(stream, left, &mut downloaded) => dropped,
            }
        }
    };
    Ending {
        kind,
        held: true,
        dropped,
        downloaded,
        held_for: since.elapsed(),
    }
}

/// Reads the rest of a download, `left` bytes, [`DOWNLOAD_BYTES_PER_TICK`] every
/// [`DOWNLOAD_TICK_MS`], counting them in `downloaded`; then waits on the idle
/// connection. Returns (true) only when the server closes it or fails.
async fn pace(mut stream: TcpStream, mut left: u64, downloaded: &mut u64) -> bool {
    let mut ticks = tokio::time::interval(Duration::from_millis(DOWNLOAD_TICK_MS));
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut chunk = vec![0u8; DOWNLOAD_BYTES_PER_TICK];
    while left > 0 {
        ticks.tick().await;
        let want = (left as usize).min(DOWNLOAD_BYTES_PER_TICK);
        if stream.read_exact(&mut chunk[..want]).await.is_err() {
            return true;
        }
        left -= want as u64;
        *downloaded += want as u64;
    }
    drop(chunk);
    let _ = stream.read(&mut [0u8; 1]).await;
    true
}
