//! Memory per connection, the part of `cargo xtask loadtest` that asks what a flood of
//! idle or slow clients costs a server: N keep-alive clients that made one request,
//! then N clients that asked for an 8 MiB file and read nothing (a 4 KiB receive
//! buffer, so the download stays in flight), each kind on a fresh start of the server.
//! The figure is the growth of the server's resident anonymous memory (`RssAnon`, all
//! its processes) divided by N: what the server allocates, not page-cache pages that a
//! file mapping shows.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::servers::{start, status_kib, Running, ServerSpec};

/// One server's figures.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ConnectionMemory {
    pub server: String,
    pub clients: usize,
    /// Bytes of anonymous memory per idle keep-alive client.
    pub idle_bytes: f64,
    /// Bytes per client with a download in flight.
    pub downloading_bytes: f64,
}

/// Raises this process's open-file limit (as root, past the hard limit), so that it
/// and the servers it starts can hold `clients` connections; returns how many clients
/// fit.
pub(crate) fn raise_limit(clients: usize) -> usize {
    let limit = raise_limit_to(clients as u64 * 2 + 1024);
    clients.min(limit.saturating_sub(256) as usize)
}

/// Raises this process's open-file limit to `descriptors` (at least 65536; as root past
/// the hard limit, up to the kernel's `fs.nr_open`; otherwise to the hard limit), for
/// it and the servers it starts after; returns the limit now in force.
pub(crate) fn raise_limit_to(descriptors: u64) -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let want = descriptors.max(65_536);
    let current = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: Some(want),
        maximum: Some(want.max(current.maximum.unwrap_or(0))),
    };
    if setrlimit(Resource::Nofile, raised).is_err() {
        let mut soft = current;
        soft.current = soft.maximum;
        let _ = setrlimit(Resource::Nofile, soft);
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Measures every server in `specs`: the idle clients on one fresh start, the
/// downloading clients on another. Measured one after the other on the same server,
/// the downloads reused memory that the dropped idle connections had left in the
/// allocator, so the figure depended on how much of it came back: 1366 to 2778 bytes
/// per downloading client across runs of the same code.
pub(crate) fn measure_all(
    specs: &[ServerSpec],
    www: &Path,
    out: &Path,
    clients: usize,
) -> Result<Vec<ConnectionMemory>> {
    specs
        .iter()
        .map(|spec| {
            let on_a_fresh_start = |path: &str, read_reply: bool| -> Result<f64> {
                let server = start(spec, www, out)?;
                per_client(&server, clients, path, read_reply)
                    .with_context(|| format!("memory per connection of {}", spec.name))
            };
            let figures = ConnectionMemory {
                server: spec.name.clone(),
                clients,
                idle_bytes: on_a_fresh_start("/4k.bin", true)?,
                downloading_bytes: on_a_fresh_start("/8m.bin", false)?,
            };
            eprintln!(
                "xtask loadtest: {:<24} {clients} clients: {:>6.0} B idle, {:>8.0} B downloading",
                spec.name, figures.idle_bytes, figures.downloading_bytes
            );
            Ok(figures)
        })
        .collect()
}

fn anon_kib(server: &Running) -> u64 {
    server
        .pids()
        .iter()
        .map(|&pid| status_kib(pid, "RssAnon:"))
        .sum()
}

/// The server's anonymous memory once it has stopped changing: the same figure in two
/// readings 300 ms apart. After 10 s of change it is read as it is then, and the
/// report's reader is told so (the last two readings), since the figure is then of a
/// server still growing or shrinking.
pub(super) fn settled_anon_kib(server: &Running) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut last = anon_kib(server);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = anon_kib(server);
        if now == last {
            return now;
        }
        if std::time::Instant::now() >= deadline {
            eprintln!(
                "xtask loadtest: {}'s memory did not settle in 10 s \
                 (RssAnon {last} KiB, then {now} KiB 300 ms later): taking {now} KiB",
                server.name
            );
            return now;
        }
        last = now;
    }
}

/// Bytes of anonymous memory per client of `clients` that each asked for `path` (and,
/// with `read_reply`, read the 4 KiB reply; otherwise left the download in flight).
/// One request of the same kind first, dropped: lazily made state (pools, caches, the
/// file's residency verdicts) is not per connection.
fn per_client(server: &Running, clients: usize, path: &str, read_reply: bool) -> Result<f64> {
    drop(request(server.addr, path, read_reply)?);
    let (held, bytes) = growth_per_connection(
        server,
        || {
            (0..clients)
                .map(|_| request(server.addr, path, read_reply))
                .collect::<Result<Vec<_>>>()
        },
        Vec::len,
    )?;
    drop(held);
    Ok(bytes)
}

/// How long a server's memory may still change by itself after clients stop
/// connecting: ioserve's parking (1 s) and jemalloc's decay (10 s), with a margin.
const SERVER_DELAYED_WORK: Duration = Duration::from_secs(13);

/// Bytes of anonymous memory per connection that `open` adds to `server`: its settled
/// `RssAnon` before and after `open` opens connections, the growth over the number of
/// them that `held` says are still open once it has settled (NaN for none). What holds
/// them is returned, still open, for the caller to close once it has read what else it
/// needs.
///
/// Both readings wait for the server's delayed work first: the warm-up connection's
/// work outlives it. A cold download's read-ahead starts blocking threads, which
/// tokio keeps for 10 s after their last job (a fresh ioserve here: 8 threads,
/// 14 after one cold download, 8 again 10 s later, RssAnon 10,388 KiB then 10,272);
/// read before they ended, `before` counted them and the growth did not. (1,000 slow
/// downloads in the 6.1 guest measured below zero, 0 B each: more than the 116 KiB
/// the threads took here, where thread stacks may take huge pages, not measured.)
pub(super) fn growth_per_connection<Held>(
    server: &Running,
    open: impl FnOnce() -> Result<Held>,
    held: impl FnOnce(&Held) -> usize,
) -> Result<(Held, f64)> {
    std::thread::sleep(SERVER_DELAYED_WORK);
    let before = settled_anon_kib(server);
    let connections = open()?;
    // The server's own delayed work first: ioserve parks a keep-alive connection
    // without its task after a second of idling, and its jemalloc returns the freed
    // pages on a background thread after its 10-second decay, all at once (RssAnon
    // read each second stayed flat for 8 s, then fell by 9.6 MiB for 8,000 parked
    // connections), which no stability test sees coming.
    std::thread::sleep(SERVER_DELAYED_WORK);
    let after = settled_anon_kib(server);
    let bytes = match held(&connections) {
        0 => f64::NAN,
        count => after.saturating_sub(before) as f64 * 1024.0 / count as f64,
    };
    Ok((connections, bytes))
}

/// Connects with a 4 KiB receive buffer and sends `GET path` (keep-alive); with
/// `read_reply`, reads the whole (small) response, leaving the connection idle.
fn request(addr: SocketAddr, path: &str, read_reply: bool) -> Result<TcpStream> {
    use rustix::net::{sockopt, AddressFamily, SocketType};
    let socket = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None)?;
    // Before connect, so the advertised window stays small.
    sockopt::set_socket_recv_buffer_size(&socket, 4096)?;
    rustix::net::connect(&socket, &addr)?;
    let mut stream = TcpStream::from(socket);
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: loadtest\r\n\r\n").as_bytes())?;
    if read_reply {
        // The 4 KiB body and its head: read until the body is complete.
        let mut reply = Vec::with_capacity(8192);
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk)?;
            anyhow::ensure!(
                n > 0,
                "{addr} closed the connection before answering {path}"
            );
            reply.extend_from_slice(&chunk[..n]);
            if let Some(head_end) = reply.windows(4).position(|w| w == b"\r\n\r\n") {
                if reply.len() >= head_end + 4 + 4096 {
                    break;
                }
            }
        }
    }
    Ok(stream)
}

/// The table for the report.
pub(crate) fn render_table(figures: &[ConnectionMemory]) -> String {
    use std::fmt::Write as _;
    let nginx = figures.iter().find(|f| f.server == "nginx");
    let mut md = String::new();
    let clients = figures.first().map_or(0, |f| f.clients);
    let _ = writeln!(
        md,
        "\nMemory per connection: growth of the server's resident anonymous memory (all its \
         processes) with {clients} idle keep-alive clients, then with {clients} clients each \
         with an 8 MiB download in flight (4 KiB receive buffer, nothing read).\n"
    );
    let _ = writeln!(
        md,
        "| server | bytes per idle client | bytes per downloading client | idle vs nginx | downloading vs nginx |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|");
    for f in figures {
        let ratio = |ours: f64, theirs: Option<f64>| {
            theirs
                .filter(|t| *t > 0.0)
                .map_or("-".to_string(), |t| format!("{:.2}", ours / t))
        };
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} | {} | {} |",
            f.server,
            f.idle_bytes,
            f.downloading_bytes,
            ratio(f.idle_bytes, nginx.map(|n| n.idle_bytes)),
            ratio(f.downloading_bytes, nginx.map(|n| n.downloading_bytes)),
        );
    }
    md
}
