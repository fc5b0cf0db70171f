//! The servers under test: how each is started (nginx's configuration included),
//! stopped, and what its processes spend.

use std::fs;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use crate::util::certificate::CertificatePair;

/// How a server under test is started.
#[derive(Clone, Debug)]
enum Kind {
    /// nginx; with `aio threads` its file reads (sendfile included) run on its thread
    /// pool.
    Nginx {
        aio_threads: bool,
    },
    Go,
    /// Caddy (its file server, HTTP/3 by quic-go), the program at `binary`.
    Caddy {
        binary: std::path::PathBuf,
    },
    Ioserve {
        strategy: &'static str,
        runtime: &'static str,
        cold_reads: &'static str,
    },
}

pub(crate) struct ServerSpec {
    pub(crate) name: String,
    kind: Kind,
    /// Served over HTTPS with this certificate (user-space TLS), else plain HTTP.
    tls: Option<CertificatePair>,
    /// SO_SNDBUF of every connection in bytes (ioserve's `--send-buffer`, nginx's
    /// `listen ... sndbuf=`), else the kernel's autotuning.
    send_buffer: Option<u64>,
    /// Sized to hold this many connections at once (`loadtest --c100k`), see
    /// [`Sizing`]; else each server's own limits.
    sized_for: Option<usize>,
}

impl ServerSpec {
    /// This server with every connection's send buffer set to `bytes` (`None`:
    /// autotuning); refused for the Go FileServer peer, which cannot set it.
    pub(super) fn with_send_buffer(self, bytes: Option<u64>) -> Result<ServerSpec> {
        if bytes.is_some() && matches!(self.kind, Kind::Go) {
            bail!(
                "--send-buffer: the Go FileServer peer cannot set its sockets' send buffer; \
                 leave it out (--only nginx,ioserve)"
            );
        }
        Ok(ServerSpec {
            send_buffer: bytes,
            ..self
        })
    }
}

pub(super) fn servers() -> Vec<ServerSpec> {
    let mut specs = vec![
        ServerSpec {
            name: "nginx".into(),
            kind: Kind::Nginx { aio_threads: false },
            tls: None,
            send_buffer: None,
            sized_for: None,
        },
        ServerSpec {
            name: "go-fileserver".into(),
            kind: Kind::Go,
            tls: None,
            send_buffer: None,
            sized_for: None,
        },
    ];
    for strategy in ["sendfile", "mmap", "read", "buffered"] {
        specs.push(ServerSpec {
            name: format!("ioserve-{strategy}"),
            kind: Kind::Ioserve {
                strategy,
                runtime: "per-core",
                cold_reads: "pool",
            },
            tls: None,
            send_buffer: None,
            sized_for: None,
        });
    }
    // The hot path with the cold-read pool's residency checks left out, for comparison.
    specs.push(ServerSpec {
        name: "ioserve-sendfile-inline".into(),
        kind: Kind::Ioserve {
            strategy: "sendfile",
            runtime: "per-core",
            cold_reads: "inline",
        },
        tls: None,
        send_buffer: None,
        sized_for: None,
    });
    specs.push(ServerSpec {
        name: "ioserve-sendfile-multi".into(),
        kind: Kind::Ioserve {
            strategy: "sendfile",
            runtime: "multi",
            cold_reads: "pool",
        },
        tls: None,
        send_buffer: None,
        sized_for: None,
    });
    specs
}

/// The servers of the cold-disk scenario: ioserve with cold reads on its pool and
/// inline, nginx as installed and with `aio threads`.
pub(super) fn cold_servers() -> Vec<ServerSpec> {
    let ioserve = |name: &str, cold_reads| ServerSpec {
        name: name.into(),
        kind: Kind::Ioserve {
            strategy: "sendfile",
            runtime: "per-core",
            cold_reads,
        },
        tls: None,
        send_buffer: None,
        sized_for: None,
    };
    let nginx = |name: &str, aio_threads| ServerSpec {
        name: name.into(),
        kind: Kind::Nginx { aio_threads },
        tls: None,
        send_buffer: None,
        sized_for: None,
    };
    vec![
        ioserve("ioserve-sendfile", "pool"),
        ioserve("ioserve-sendfile-inline", "inline"),
        nginx("nginx", false),
        nginx("nginx-aio-threads", true),
    ]
}

/// The servers of `loadtest --tls`, both over HTTPS with `pair` (TLS in user space):
/// nginx (TLS 1.3 only, HTTP/2 on) and ioserve with the sendfile strategy.
pub(super) fn tls_servers(pair: &CertificatePair) -> Vec<ServerSpec> {
    vec![
        ServerSpec {
            name: "nginx".into(),
            kind: Kind::Nginx { aio_threads: false },
            tls: Some(pair.clone()),
            send_buffer: None,
            sized_for: None,
        },
        ioserve_over_tls(pair),
    ]
}

/// The servers of `loadtest --h3`, both over HTTPS with `pair` (TLS in user space) and
/// HTTP/3 on the same port: Caddy (`caddy`, its file server; quic-go for HTTP/3) and
/// ioserve with the sendfile strategy.
pub(super) fn h3_servers(pair: &CertificatePair, caddy: &Path) -> Vec<ServerSpec> {
    vec![
        ServerSpec {
            name: "caddy".into(),
            kind: Kind::Caddy {
                binary: caddy.to_path_buf(),
            },
            tls: Some(pair.clone()),
            send_buffer: None,
            sized_for: None,
        },
        ioserve_over_tls(pair),
    ]
}

/// The servers of `loadtest --c100k`, over plain HTTP, sized to hold `connections` at
/// once (see [`Sizing`]): nginx and ioserve with the sendfile strategy. Each has an
/// HTTPS twin, [`ServerSpec::over_https`].
pub(super) fn c100k_servers(connections: usize) -> Vec<ServerSpec> {
    let sized = |name: &str, kind| ServerSpec {
        name: name.into(),
        kind,
        tls: None,
        send_buffer: None,
        sized_for: Some(connections),
    };
    vec![
        sized("nginx", Kind::Nginx { aio_threads: false }),
        sized(
            "ioserve-sendfile",
            Kind::Ioserve {
                strategy: "sendfile",
                runtime: "per-core",
                cold_reads: "pool",
            },
        ),
    ]
}

impl ServerSpec {
    /// The same server over HTTPS with `pair` (TLS in user space; nginx with HTTP/2 by
    /// ALPN), named `<name>-https` (nginx keeps its configuration and pid file in a
    /// folder of that name, so both can run at once).
    pub(super) fn over_https(&self, pair: &CertificatePair) -> ServerSpec {
        ServerSpec {
            name: format!("{}-https", self.name),
            kind: self.kind.clone(),
            tls: Some(pair.clone()),
            send_buffer: self.send_buffer,
            sized_for: self.sized_for,
        }
    }
}

/// How a server sized for many held connections (`loadtest --c100k`) is set up, from
/// the number of connections it is to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sizing {
    /// Connections each process may have open: the held ones and a margin for the
    /// warm-up requests, the polite client and the listeners (nginx's
    /// `worker_connections`, per worker since either may get them all; ioserve's
    /// `--max-connections`).
    pub(crate) connections: usize,
    /// Descriptors per nginx worker (`worker_rlimit_nofile`): a socket and, while a
    /// file is sent, its file, per connection.
    pub(crate) nginx_descriptors: usize,
}

impl Sizing {
    /// Connections beyond the held ones.
    const MARGIN: usize = 1024;

    /// Seconds an idle connection is kept (nginx's `keepalive_timeout`, which HTTP/2
    /// uses too; ioserve's `--idle-timeout`): longer than opening and holding the
    /// c100k scenario's connections takes, so that no server closes them while held
    /// (an hour: in `cargo xtask c100k-vm`'s guest, under emulation, the full mix of
    /// 100,000 took 13 minutes to open, and 600 s would have closed the first while
    /// the last were opening).
    pub(crate) const IDLE_TIMEOUT_S: u64 = 3600;

    /// Seconds a connection may take to send its first request head, or to finish its
    /// TLS handshake: nginx's default `client_header_timeout` (which its TLS handshake
    /// also keeps to), given to ioserve's `--header-timeout` (10 s by default), so
    /// that both servers wait alike for a client that is slow to start. Under
    /// emulation the c100k client, busy with hundreds of TLS handshakes, left some
    /// plain connections more than 10 s between their connect and their request.
    pub(crate) const HEADER_TIMEOUT_S: u64 = 60;

    /// The sizing for `connections` held at once.
    pub(crate) fn for_connections(connections: usize) -> Sizing {
        let connections = connections + Self::MARGIN;
        Sizing {
            connections,
            nginx_descriptors: 2 * connections,
        }
    }
}

/// ioserve with the sendfile strategy over HTTPS with `pair`, as the TLS and HTTP/3
/// load tests run it.
fn ioserve_over_tls(pair: &CertificatePair) -> ServerSpec {
    ServerSpec {
        name: "ioserve-sendfile".into(),
        kind: Kind::Ioserve {
            strategy: "sendfile",
            runtime: "per-core",
            cold_reads: "pool",
        },
        tls: Some(pair.clone()),
        send_buffer: None,
        sized_for: None,
    }
}

/// The servers of `all` that one of `only` names (all of them when `only` is empty): a
/// server's exact name picks that server alone, other text every server whose name
/// contains it (`nginx` is nginx, `aio` nginx-aio-threads, `ioserve` every ioserve);
/// an error that names the servers when none matches.
pub(super) fn select(all: Vec<ServerSpec>, only: &[String]) -> Result<Vec<ServerSpec>> {
    let names: Vec<String> = all.iter().map(|s| s.name.clone()).collect();
    let picks = |name: &str, wanted: &str| match names.iter().any(|n| n == wanted) {
        true => name == wanted,
        false => name.contains(wanted),
    };
    let chosen: Vec<ServerSpec> = all
        .into_iter()
        .filter(|s| only.is_empty() || only.iter().any(|o| picks(&s.name, o)))
        .collect();
    if chosen.is_empty() {
        bail!("--only matches no server; servers: {}", names.join(", "));
    }
    Ok(chosen)
}

/// A started server; stopped when dropped.
pub(crate) struct Running {
    pub(crate) name: String,
    child: Child,
    pub(crate) addr: SocketAddr,
    /// Whether it serves HTTPS.
    pub(crate) https: bool,
}

impl Running {
    /// The URL of `path` on this server.
    pub(crate) fn url(&self, path: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    /// The server's processes: the child and, for nginx, its workers.
    pub(crate) fn pids(&self) -> Vec<u32> {
        let main = self.child.id();
        let mut pids = vec![main];
        pids.extend(children_of(main));
        pids
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a server, ioserve from the release build.
pub(crate) fn start(spec: &ServerSpec, www: &Path, out: &Path) -> Result<Running> {
    let ioserve = crate::util::target_dir()?.join("release/ioserve");
    start_built(spec, www, out, &ioserve)
}

/// Starts a server, ioserve from the binary `ioserve` (another build of it).
pub(super) fn start_built(
    spec: &ServerSpec,
    www: &Path,
    out: &Path,
    ioserve: &Path,
) -> Result<Running> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut command = match &spec.kind {
        Kind::Nginx { aio_threads } => {
            let dir = out.join(&spec.name);
            fs::create_dir_all(dir.join("tmp"))?;
            let conf = dir.join("nginx.conf");
            fs::write(
                &conf,
                nginx_conf(
                    &dir,
                    www,
                    addr,
                    *aio_threads,
                    spec.tls.as_ref(),
                    spec.send_buffer,
                    spec.sized_for.map(Sizing::for_connections),
                ),
            )?;
            let mut command = Command::new("nginx");
            command.arg("-c").arg(&conf).arg("-p").arg(&dir);
            command
        }
        Kind::Caddy { binary } => {
            let dir = out.join(&spec.name);
            fs::create_dir_all(&dir)?;
            let pair = spec
                .tls
                .as_ref()
                .context("Caddy is measured over HTTPS only")?;
            let conf = dir.join("Caddyfile");
            fs::write(&conf, caddyfile(&dir, www, addr, pair))?;
            let mut command = Command::new(binary);
            command
                .args(["run", "--adapter", "caddyfile", "--config"])
                .arg(&conf)
                // Caddy keeps its data (certificates, locks) under these.
                .env("XDG_DATA_HOME", dir.join("data"))
                .env("XDG_CONFIG_HOME", dir.join("config"));
            command
        }
        Kind::Go => {
            let mut command = Command::new(out.join("go-fileserver"));
            command
                .arg("-root")
                .arg(www)
                .arg("-listen")
                .arg(addr.to_string());
            command
        }
        Kind::Ioserve {
            strategy,
            runtime,
            cold_reads,
        } => {
            let mut command = Command::new(ioserve);
            command.arg(www).args([
                "--listen",
                &addr.to_string(),
                "--strategy",
                strategy,
                "--runtime",
                runtime,
                "--access-log",
                "off",
                "--cold-reads",
                cold_reads,
            ]);
            if let Some(bytes) = spec.send_buffer {
                command.args(["--send-buffer", &bytes.to_string()]);
            }
            if let Some(sizing) = spec.sized_for.map(Sizing::for_connections) {
                command
                    .args(["--max-connections", &sizing.connections.to_string()])
                    .args(["--idle-timeout", &format!("{}s", Sizing::IDLE_TIMEOUT_S)])
                    .args([
                        "--header-timeout",
                        &format!("{}s", Sizing::HEADER_TIMEOUT_S),
                    ]);
            }
            if let Some(pair) = &spec.tls {
                command
                    .arg("--tls-cert")
                    .arg(&pair.cert)
                    .arg("--tls-key")
                    .arg(&pair.key)
                    // TLS in user space, as nginx's here (no `ssl_conf_command Options
                    // KTLS`): the comparison is rustls against OpenSSL.
                    .args(["--ktls", "off"]);
            }
            command
        }
    };
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", spec.name))?;
    let running = Running {
        name: spec.name.clone(),
        child,
        addr,
        https: spec.tls.is_some(),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            bail!("{} did not listen on {addr} within 10 s", spec.name);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(running)
}

/// nginx as the issue asks: sendfile on, tcp_nopush on, access_log off, 2 workers;
/// with `aio_threads`, `aio threads` (the default pool of 32 threads); with `tls`,
/// HTTPS with that certificate, TLS 1.3 only, and HTTP/2 by ALPN (`listen ... ssl
/// http2`, which nginx 1.22, Debian 12's, needs; `http2 on` came in 1.25.1); with
/// `sndbuf`, that SO_SNDBUF on the listener (`listen ... sndbuf=`); with `sizing`,
/// `worker_connections`, `worker_rlimit_nofile` and `keepalive_timeout` from it
/// (else 32768 connections of 65536 descriptors per worker and nginx's 75 s).
fn nginx_conf(
    dir: &Path,
    www: &Path,
    addr: SocketAddr,
    aio_threads: bool,
    tls: Option<&CertificatePair>,
    sndbuf: Option<u64>,
    sizing: Option<Sizing>,
) -> String {
    let aio = if aio_threads { "  aio threads;\n" } else { "" };
    let (worker_connections, worker_rlimit_nofile, keepalive) = match sizing {
        None => (32768, 65536, String::new()),
        Some(sizing) => (
            sizing.connections,
            sizing.nginx_descriptors,
            format!("  keepalive_timeout {}s;\n", Sizing::IDLE_TIMEOUT_S),
        ),
    };
    let sndbuf = sndbuf.map_or_else(String::new, |bytes| format!(" sndbuf={bytes}"));
    let tmp = dir.join("tmp");
    let tmp = tmp.display();
    let server = match tls {
        None => format!("listen {addr} reuseport{sndbuf}; root {};", www.display()),
        Some(pair) => format!(
            "listen {addr} ssl http2 reuseport{sndbuf}; root {};\n    ssl_certificate {};\n    \
             ssl_certificate_key {};\n    ssl_protocols TLSv1.3;\n  ",
            www.display(),
            pair.cert.display(),
            pair.key.display()
        ),
    };
    format!(
        "worker_processes 2;\ndaemon off;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\n\
         worker_rlimit_nofile {worker_rlimit_nofile};\nevents {{ worker_connections {worker_connections}; }}\n\
         http {{\n{aio}{keepalive}  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  keepalive_requests 1000000;\n  \
         default_type application/octet-stream;\n  client_body_temp_path {tmp};\n  proxy_temp_path {tmp};\n  \
         fastcgi_temp_path {tmp};\n  uwsgi_temp_path {tmp};\n  scgi_temp_path {tmp};\n  \
         server {{ {server} }}\n}}\n",
        dir = dir.display(),
    )
}

/// Caddy's file server on `addr` over HTTPS with `pair`, as a user would set it up:
/// HTTP/1.1, HTTP/2 and HTTP/3 (its default), no admin endpoint, no redirect listener
/// on port 80, no access log (Caddy's default).
fn caddyfile(dir: &Path, www: &Path, addr: SocketAddr, pair: &CertificatePair) -> String {
    format!(
        "{{\n\tadmin off\n\tauto_https disable_redirects\n\tpersist_config off\n\t\
         storage file_system {data}\n\tservers {{\n\t\tprotocols h1 h2 h3\n\t}}\n}}\n\n\
         https://{addr} {{\n\ttls {cert} {key}\n\troot * {www}\n\tfile_server\n}}\n",
        data = dir.join("data").display(),
        cert = pair.cert.display(),
        key = pair.key.display(),
        www = www.display(),
    )
}

pub(super) fn cpu_seconds(pids: &[u32]) -> f64 {
    let ticks_per_s = 100.0; // USER_HZ, fixed at 100 on Linux for /proc/PID/stat.
    pids.iter()
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // After ')': state is field 3; utime and stime are fields 14 and 15.
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / ticks_per_s)
        })
        .sum()
}

pub(crate) fn status_kib(pid: u32, key: &str) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

pub(super) fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse::<u32>()
                        .ok()
                })
                == Some(parent)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chosen(only: &[&str]) -> Result<Vec<String>> {
        let only: Vec<String> = only.iter().map(|o| o.to_string()).collect();
        Ok(select(cold_servers(), &only)?
            .into_iter()
            .map(|s| s.name)
            .collect())
    }

    #[test]
    fn nginx_serves_https_with_the_certificate_tls_1_3_only_and_http2() {
        let pair = CertificatePair {
            cert: "/c/cert.pem".into(),
            key: "/c/key.pem".into(),
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], 8443));
        let (dir, www) = (Path::new("/d"), Path::new("/www"));
        let conf = nginx_conf(dir, www, addr, false, Some(&pair), None, None);
        for line in [
            "listen 127.0.0.1:8443 ssl http2 reuseport; root /www;",
            "ssl_certificate /c/cert.pem;",
            "ssl_certificate_key /c/key.pem;",
            "ssl_protocols TLSv1.3;",
            "sendfile on;",
        ] {
            assert!(conf.contains(line), "{line}: {conf}");
        }
        let plain = nginx_conf(dir, www, addr, false, None, None, None);
        assert!(
            plain.contains("server { listen 127.0.0.1:8443 reuseport; root /www; }"),
            "{plain}"
        );
        assert!(!plain.contains("ssl"), "{plain}");
        let sized = nginx_conf(dir, www, addr, false, None, Some(4 << 20), None);
        assert!(
            sized.contains("listen 127.0.0.1:8443 reuseport sndbuf=4194304; root /www;"),
            "{sized}"
        );
        let names: Vec<String> = tls_servers(&pair).into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["nginx", "ioserve-sendfile"]);
    }

    #[test]
    fn a_server_sized_for_c100k_has_room_for_every_connection_and_keeps_them_idle() {
        let (dir, www) = (Path::new("/d"), Path::new("/www"));
        let addr = SocketAddr::from(([127, 0, 0, 1], 8080));
        let sizing = Sizing::for_connections(100_000);
        assert_eq!(
            (sizing.connections, sizing.nginx_descriptors),
            (101_024, 202_048)
        );
        let conf = nginx_conf(dir, www, addr, false, None, None, Some(sizing));
        for line in [
            "worker_rlimit_nofile 202048;\nevents { worker_connections 101024; }",
            "keepalive_timeout 3600s;",
        ] {
            assert!(conf.contains(line), "{line}: {conf}");
        }
        let as_before = nginx_conf(dir, www, addr, false, None, None, None);
        assert!(
            as_before.contains("worker_rlimit_nofile 65536;\nevents { worker_connections 32768; }"),
            "the other runs' nginx is as it was: {as_before}"
        );
        assert!(!as_before.contains("keepalive_timeout"), "{as_before}");
        let pair = CertificatePair {
            cert: "/c/cert.pem".into(),
            key: "/c/key.pem".into(),
        };
        let specs = c100k_servers(100_000);
        let names: Vec<(String, String)> = specs
            .iter()
            .map(|s| (s.name.clone(), s.over_https(&pair).name))
            .collect();
        assert_eq!(
            names,
            [
                ("nginx".to_string(), "nginx-https".to_string()),
                ("ioserve-sendfile".into(), "ioserve-sendfile-https".into())
            ]
        );
        let https = specs[1].over_https(&pair);
        assert_eq!(
            (https.sized_for, https.tls.is_some()),
            (Some(100_000), true)
        );
    }

    #[test]
    fn a_send_buffer_goes_to_every_server_but_the_go_peer_which_cannot_set_one() {
        let mut sized = Vec::new();
        for spec in servers() {
            let name = spec.name.clone();
            match spec.with_send_buffer(Some(4 << 20)) {
                Ok(spec) => sized.push((name, spec.send_buffer)),
                Err(error) => {
                    assert_eq!(name, "go-fileserver");
                    assert!(
                        error.to_string().contains("--only nginx,ioserve"),
                        "{error}"
                    );
                }
            }
        }
        assert!(
            sized.iter().all(|(_, bytes)| *bytes == Some(4 << 20)),
            "{sized:?}"
        );
        assert!(sized.iter().any(|(name, _)| name == "nginx"), "{sized:?}");
        let go = servers()
            .into_iter()
            .find(|s| s.name == "go-fileserver")
            .unwrap();
        assert!(
            go.with_send_buffer(None).is_ok(),
            "autotuning is every server's"
        );
    }

    #[test]
    fn an_exact_name_picks_one_server_and_other_text_every_server_containing_it() {
        assert_eq!(chosen(&[]).unwrap().len(), 4, "all without --only");
        assert_eq!(chosen(&["nginx"]).unwrap(), ["nginx"]);
        assert_eq!(chosen(&["ioserve-sendfile"]).unwrap(), ["ioserve-sendfile"]);
        assert_eq!(
            chosen(&["ioserve"]).unwrap(),
            ["ioserve-sendfile", "ioserve-sendfile-inline"]
        );
        assert_eq!(
            chosen(&["ioserve-sendfile", "aio"]).unwrap(),
            ["ioserve-sendfile", "nginx-aio-threads"]
        );
        let error = chosen(&["caddy"]).unwrap_err().to_string();
        assert!(error.contains("nginx-aio-threads"), "{error}");
    }
}
