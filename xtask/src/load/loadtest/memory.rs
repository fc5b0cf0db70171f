//! Memory per connection, the part of `cargo xtask loadtest` that asks what a flood of
//! idle or slow clients costs a server: N keep-alive clients that made one request,
//! then N clients that asked for an 8 MiB file and read nothing (a 4 KiB receive
//! buffer, so the download stays in flight). The figure is the growth of the server's
//! resident anonymous memory (`RssAnon`, all its processes) divided by N: what the
//! server allocates, not page-cache pages that a file mapping shows.

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

/// Measures every server in `specs`, each started afresh.
pub(crate) fn measure_all(
    specs: &[ServerSpec],
    www: &Path,
    out: &Path,
    clients: usize,
) -> Result<Vec<ConnectionMemory>> {
    specs
        .iter()
        .map(|spec| {
            let server = start(spec, www, out)?;
            let figures = measure(&server, clients)
                .with_context(|| format!("memory per connection of {}", spec.name))?;
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

fn measure(server: &Running, clients: usize) -> Result<ConnectionMemory> {
    // One request first: lazily made state (pools, caches) is not per connection.
    drop(request(server.addr, "/4k.bin", true)?);
    std::thread::sleep(Duration::from_millis(200));
    let before = anon_kib(server);
    let idle = (0..clients)
        .map(|_| request(server.addr, "/4k.bin", true))
        .collect::<Result<Vec<_>>>()?;
    std::thread::sleep(Duration::from_secs(1));
    let idle_bytes = anon_kib(server).saturating_sub(before) as f64 * 1024.0 / clients as f64;
    drop(idle);
    std::thread::sleep(Duration::from_secs(1));
    let before = anon_kib(server);
    let downloading = (0..clients)
        .map(|_| request(server.addr, "/8m.bin", false))
        .collect::<Result<Vec<_>>>()?;
    std::thread::sleep(Duration::from_secs(1));
    let downloading_bytes =
        anon_kib(server).saturating_sub(before) as f64 * 1024.0 / clients as f64;
    drop(downloading);
    Ok(ConnectionMemory {
        server: server.name.clone(),
        clients,
        idle_bytes,
        downloading_bytes,
    })
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
