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
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let want = (clients as u64 * 2 + 1024).max(65_536);
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
    let limit = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    clients.min(limit.saturating_sub(256) as usize)
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
fn settled_anon_kib(server: &Running) -> u64 {
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
    let before = settled_anon_kib(server);
    let held = (0..clients)
        .map(|_| request(server.addr, path, read_reply))
        .collect::<Result<Vec<_>>>()?;
    let after = settled_anon_kib(server);
    drop(held);
    Ok(after.saturating_sub(before) as f64 * 1024.0 / clients as f64)
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
