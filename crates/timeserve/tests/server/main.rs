//! The `timeserve` binary against real clients (Debian's ntpdig and chronyd -Q) and a
//! raw UDP client for what real clients never send.

use std::fmt::Debug;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use testdata::require;
use timeserve::packet::{client_request, NtpTimestamp, Reply, HEADER_LEN};

mod nts;

/// How long a test waits for an expected reply or for state that settles
/// asynchronously (a counter bumped after the reply is sent, a signal being handled):
/// generous, for a slow and loaded 2-core CI host. Waits end as soon as it is there.
const SETTLE: Duration = Duration::from_secs(30);

/// Waits until `check` holds of what `read` returns, for at most [`SETTLE`]; returns
/// that value, or fails naming `what` was awaited and the last value read.
fn wait_until<T: Debug>(what: &str, mut read: impl FnMut() -> T, check: impl Fn(&T) -> bool) -> T {
    let deadline = Instant::now() + SETTLE;
    loop {
        let value = read();
        if check(&value) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "waited {SETTLE:?} for {what}; last seen: {value:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Held by the tests that read the kernel's clock state and by the one that lets
/// ntpd-rs steer the clock (restoring the state after), so that neither sees the
/// other's change.
static KERNEL_CLOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A running timeserve, killed when dropped.
struct Server {
    child: Child,
    addresses: Vec<SocketAddr>,
    metrics: Option<SocketAddr>,
    /// The NTS key exchange's addresses (with --nts-cert).
    key_exchange: Vec<SocketAddr>,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_timeserve"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("timeserve starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let listens = args.iter().filter(|a| **a == "--listen").count().max(1);
        let mut server = Server {
            child,
            addresses: Vec::new(),
            metrics: None,
            key_exchange: Vec::new(),
        };
        let wants_metrics = args.contains(&"--metrics-listen");
        let wants_nts = args.contains(&"--nts-cert");
        while server.addresses.len() < listens
            || (wants_metrics && server.metrics.is_none())
            || (wants_nts && server.key_exchange.is_empty())
        {
            let Some(Ok(line)) = lines.next() else {
                let mut err = String::new();
                server
                    .child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                panic!("timeserve {args:?} ended before serving: {err}");
            };
            if let Some(rest) = line.strip_prefix("timeserve: serving NTP on ") {
                server
                    .addresses
                    .push(rest.split(' ').next().unwrap().parse().unwrap());
            } else if let Some(rest) = line.strip_prefix("timeserve: serving NTS-KE on ") {
                server
                    .key_exchange
                    .push(rest.split(' ').next().unwrap().parse().unwrap());
            } else if let Some(rest) = line.strip_prefix("timeserve: metrics at http://") {
                server.metrics = Some(rest.trim_end_matches("/metrics").parse().unwrap());
            }
        }
        server
    }

    /// A server on 127.0.0.1 (a free port) with `workers` workers, declared stratum 2
    /// (this host's kernel clock may be unsynchronised), and `extra` arguments.
    fn loopback(workers: &str, extra: &[&str]) -> Server {
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--workers",
            workers,
            "--stratum",
            "2",
        ];
        args.extend_from_slice(extra);
        Server::start(&args)
    }

    fn address(&self) -> SocketAddr {
        self.addresses[0]
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill has no memory effects; the pid is our child's, not yet reaped.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
    }

    /// Sends SIGTERM and returns the exit code and stderr.
    fn terminate(mut self) -> (Option<i32>, String) {
        self.signal(libc::SIGTERM);
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        (status.code(), err)
    }

    fn scrape(&self, path: &str) -> String {
        let mut stream = TcpStream::connect(self.metrics.expect("--metrics-listen")).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        response.split("\r\n\r\n").nth(1).unwrap().to_string()
    }

    fn metric(&self, line_start: &str) -> u64 {
        let text = self.scrape("/metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {line_start} in:\n{text}"))
    }

    /// Waits until the metric satisfies `check` (responses are counted after they are
    /// sent, so a client can see a reply before its count); returns its value.
    fn wait_for_metric(&self, line_start: &str, check: impl Fn(u64) -> bool) -> u64 {
        wait_until(line_start, || self.metric(line_start), |&v| check(v))
    }

    /// Waits until every thread of the server is stopped (state `T`).
    fn wait_for_stopped(&self) {
        let pid = self.child.id();
        let running = || -> Vec<String> {
            std::fs::read_dir(format!("/proc/{pid}/task"))
                .unwrap()
                .filter_map(|task| {
                    let path = task.ok()?.path().join("stat");
                    let stat = std::fs::read_to_string(path).ok()?;
                    let state = stat.rsplit_once(") ")?.1.chars().next()?;
                    (state != 'T').then_some(stat)
                })
                .collect()
        };
        wait_until("every thread of the server to stop", running, Vec::is_empty);
    }

    /// Waits until every signal sent to the server has been taken by it: none is
    /// pending any more, in the process or in one of its threads.
    fn wait_for_signals_taken(&self) {
        let pid = self.child.id();
        let pending = || -> Vec<String> {
            let mut statuses = vec![format!("/proc/{pid}/status")];
            if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
                statuses.extend(tasks.filter_map(|task| {
                    let task = task.ok()?.file_name().into_string().ok()?;
                    Some(format!("/proc/{pid}/task/{task}/status"))
                }));
            }
            statuses
                .iter()
                .flat_map(|path| {
                    let text = std::fs::read_to_string(path).unwrap_or_default();
                    text.lines()
                        .filter(|l| {
                            let (name, mask) = l.split_once(':').unwrap_or_default();
                            matches!(name, "SigPnd" | "ShdPnd")
                                && u64::from_str_radix(mask.trim(), 16) != Ok(0)
                        })
                        .map(|l| format!("{path}: {l}"))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        wait_until("the server to take its signals", pending, Vec::is_empty);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A UDP client socket talking to `server`.
fn client(server: SocketAddr) -> UdpSocket {
    let bind = if server.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    };
    let socket = UdpSocket::bind(bind).unwrap();
    socket.connect(server).unwrap();
    socket.set_read_timeout(Some(SETTLE)).unwrap();
    socket
}

/// The next reply, waiting for it (at most [`SETTLE`]).
fn receive(socket: &UdpSocket) -> Option<Reply> {
    let mut buf = [0u8; 512];
    let n = socket.recv(&mut buf).ok()?;
    assert_eq!(n, HEADER_LEN, "replies are bare 48-byte headers");
    Reply::parse(&buf[..n])
}

/// A reply already queued on `socket`, without waiting: for checks that nothing was
/// answered, made once the server has settled (so that no waiting is needed).
fn queued(socket: &UdpSocket) -> Option<Reply> {
    socket.set_nonblocking(true).unwrap();
    let reply = receive(socket);
    socket.set_nonblocking(false).unwrap();
    reply
}

/// The bytes queued for reading on the IPv4 UDP socket bound to 127.0.0.1:`port`, from
/// /proc/net/udp (`None` while no such socket is listed).
fn udp_receive_queue(port: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    let local = format!("0100007F:{port:04X}");
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // sl local_address rem_address st tx_queue:rx_queue ...
        (fields.get(1) == Some(&local.as_str()))
            .then(|| u64::from_str_radix(fields.get(4)?.split(':').nth(1)?, 16).ok())?
    })
}

fn now() -> NtpTimestamp {
    NtpTimestamp::from_system_time(SystemTime::now())
}

/// The program's path (on PATH, or in /usr/sbin, which a user's PATH may lack), or a
/// panic that says how CI installs it.

#[test]
fn every_version_is_answered_in_kind_with_kernel_timestamps() {
    let server = Server::start(&[
        "--listen",
        "127.0.0.1:0",
        "--listen",
        "[::1]:0",
        "--workers",
        "2",
        "--stratum",
        "2",
        "--refid",
        "LOCL",
    ]);
    for &address in &server.addresses {
        let socket = client(address);
        for version in 1..=4u8 {
            let sent = now();
            socket.send(&client_request(version, sent)).unwrap();
            let reply =
                receive(&socket).unwrap_or_else(|| panic!("no reply to v{version} on {address}"));
            let back = now();
            assert_eq!((reply.version, reply.mode), (version, 4), "v{version}");
            assert_eq!((reply.leap, reply.stratum), (0, 2));
            assert_eq!(&reply.reference_id, b"LOCL");
            assert_eq!(reply.origin, sent);
            assert!(
                sent <= reply.receive && reply.receive <= reply.transmit && reply.transmit <= back,
                "T1 {sent:?} <= T2 {:?} <= T3 {:?} <= T4 {back:?}",
                reply.receive,
                reply.transmit
            );
            assert!(
                (-30..-5).contains(&reply.precision),
                "precision {}",
                reply.precision
            );
        }
    }
}

#[test]
fn without_a_declaration_replies_follow_the_kernel() {
    let _clock = KERNEL_CLOCK.lock().unwrap_or_else(|e| e.into_inner());
    let kernel = timeserve::sync::KernelState::read().unwrap();
    let server = Server::start(&["--listen", "127.0.0.1:0", "--workers", "1"]);
    let socket = client(server.address());
    socket.send(&client_request(4, now())).unwrap();
    let reply = receive(&socket).unwrap();
    if kernel.synchronised {
        assert_ne!(reply.leap, 3);
        assert_eq!(reply.stratum, timeserve::sync::DEFAULT_SYNCED_STRATUM);
    } else {
        // chrony's answer without a source: alarm, stratum 0.
        assert_eq!((reply.leap, reply.stratum), (3, 0));
    }
}

#[test]
fn what_is_not_a_client_request_is_dropped_and_counted() {
    let server = Server::start(&[
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--stratum",
        "3",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    let socket = client(server.address());
    let good = client_request(4, NtpTimestamp(42 << 32));
    let with_first_byte = |byte: u8| {
        let mut packet = good;
        packet[0] = byte;
        packet.to_vec()
    };
    let junk: Vec<(Vec<u8>, &str)> = vec![
        (vec![], "short"),
        (good[..47].to_vec(), "short"),
        ([&good[..], &[0]].concat(), "bad_length"),
        (vec![0x23; 2000], "bad_length"),
        (with_first_byte(0x26), "mode"),    // control (6)
        (with_first_byte(0x27), "mode"),    // private (7)
        (with_first_byte(0x24), "mode"),    // a server's reply
        (with_first_byte(0x21), "mode"),    // symmetric active
        (with_first_byte(0x03), "version"), // version 0
        (with_first_byte(0x2b), "version"), // version 5
    ];
    for (packet, _) in &junk {
        socket.send(packet).unwrap();
    }
    socket.send(&good).unwrap();
    let reply = receive(&socket).expect("the valid request is answered");
    assert_eq!(reply.origin, NtpTimestamp(42 << 32));
    // One worker takes the datagrams in order: a reply to junk would have been sent
    // before this one, so it would be queued here already.
    assert!(queued(&socket).is_none(), "nothing else is answered");
    // Counted after the reply is sent.
    server.wait_for_metric("timeserve_responses_total", |n| n >= 1);
    for reason in ["short", "bad_length", "mode", "version"] {
        let expected = junk.iter().filter(|(_, r)| *r == reason).count() as u64;
        let line = format!("timeserve_dropped_total{{reason=\"{reason}\"}}");
        assert_eq!(server.metric(&line), expected, "{reason}");
    }
    assert_eq!(server.metric("timeserve_requests_total{version=\"4\"}"), 1);
    assert_eq!(server.metric("timeserve_responses_total"), 1);
    assert_eq!(server.scrape("/healthz"), "ok\n");
    let (code, _) = server.terminate();
    assert_eq!(code, Some(0));
}

#[test]
fn a_client_over_its_rate_gets_one_kiss_of_death_then_silence() {
    let server = Server::loopback(
        "2",
        &[
            "--rate-limit-interval",
            "20s",
            "--rate-limit-burst",
            "2",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    // Two sockets of one address: the limit is per address, whichever worker answers.
    let sockets = [client(server.address()), client(server.address())];
    let mut normal = 0;
    let mut kisses = Vec::new();
    for i in 0..6 {
        let socket = &sockets[i % 2];
        socket.send(&client_request(4, now())).unwrap();
        // Settled once the request is counted as answered (after its reply is sent)
        // or as limited without an answer; only then does an empty queue mean silence.
        wait_until(
            &format!("request {i} answered or limited"),
            || {
                // Two scrapes: a KoD counted between them is in the second's kisses
                // and not in the first's limits, so the difference can fall below the
                // truth, even below zero (never above it): it counts as not settled
                // yet, and the next read sees both.
                let answered = server.metric("timeserve_responses_total");
                let limited = server.metric("timeserve_rate_limited_total");
                let kissed = server.metric("timeserve_kiss_of_death_total");
                answered + limited.saturating_sub(kissed)
            },
            |&settled| settled == i as u64 + 1,
        );
        match queued(socket) {
            Some(reply) if reply.stratum == 0 => kisses.push(reply),
            Some(_) => normal += 1,
            None => {}
        }
    }
    assert_eq!(normal, 2, "the burst passes");
    assert_eq!(kisses.len(), 1, "one KoD per interval");
    assert_eq!(&kisses[0].reference_id, b"RATE");
    assert_eq!(kisses[0].leap, 3);
    assert!(
        kisses[0].poll >= 5,
        "the KoD asks for a poll of at least 2^5 s: {}",
        kisses[0].poll
    );
    assert_eq!(server.metric("timeserve_rate_limited_total"), 4);
    assert_eq!(server.metric("timeserve_kiss_of_death_total"), 1);
    // Another address (IPv4 loopback has many) is not limited.
    let other = UdpSocket::bind("127.0.0.2:0").unwrap();
    other.connect(server.address()).unwrap();
    other.set_read_timeout(Some(SETTLE)).unwrap();
    other.send(&client_request(4, now())).unwrap();
    assert_eq!(receive(&other).map(|r| r.stratum), Some(2));
}

#[test]
fn a_full_receive_buffer_shows_in_the_kernel_drop_counter() {
    let server = Server::loopback(
        "1",
        &[
            "--receive-buffer",
            "1024",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let socket = client(server.address());
    // Stopped, the server reads nothing: its small buffer fills and the kernel drops.
    server.signal(libc::SIGSTOP);
    // Stopped once every thread has taken the SIGSTOP; until then it may still read.
    server.wait_for_stopped();
    for _ in 0..500 {
        let _ = socket.send(&client_request(4, now()));
    }
    server.signal(libc::SIGCONT);
    // Once the server has read its whole backlog, a last datagram finds room and
    // carries the socket's drop count to the server; the replies come in order, so
    // every one before the last datagram's answers the backlog.
    let port = server.address().port();
    wait_until(
        "the server to read its receive queue empty",
        || udp_receive_queue(port),
        |&queued| queued == Some(0),
    );
    let last = NtpTimestamp(7 << 32);
    socket.send(&client_request(4, last)).unwrap();
    let mut answered = 0;
    loop {
        let reply = receive(&socket).expect("the last datagram is answered");
        if reply.origin == last {
            break;
        }
        answered += 1;
    }
    let drops = server.wait_for_metric(
        "timeserve_socket_receive_drops_total{worker=\"0\"}",
        |drops| drops + answered as u64 >= 500,
    );
    assert!(
        drops > 0 && answered < 500,
        "answered {answered}, dropped {drops}"
    );
    assert_eq!(
        drops + answered as u64,
        500,
        "every datagram was answered or counted as dropped"
    );
}

#[test]
fn chronyd_accepts_the_replies_and_measures_under_a_millisecond() {
    let chronyd = require("chronyd", "chrony");
    let server = Server::loopback("2", &[]);
    let port = server.address().port();
    // -Q: measure once and exit, without touching the clock; -f /dev/null: no config.
    let output = Command::new(chronyd)
        .args([
            "-Q",
            "-f",
            "/dev/null",
            "-t",
            "20",
            &format!("server 127.0.0.1 port {port} iburst"),
        ])
        .output()
        .unwrap();
    let offset = chronyd_offset(&output)
        .unwrap_or_else(|text| panic!("chronyd did not accept a measurement:\n{text}"));
    assert!(offset.abs() < 1e-3, "offset {offset} s");
}

/// The offset `chronyd -Q` measured ("System clock wrong by X seconds"), or its
/// output when it measured none.
fn chronyd_offset(output: &std::process::Output) -> Result<f64, String> {
    let text = String::from_utf8_lossy(&output.stderr).to_string()
        + &String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|l| {
            l.split("System clock wrong by ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .ok_or(text)
}

#[test]
fn ntpdig_accepts_the_replies_over_ipv4_and_ipv6() {
    require("ntpdig", "ntpsec-ntpdig");
    let unshare = require("unshare", "util-linux");
    let ip = require("ip", "iproute2");
    // ntpdig only asks port 123: serve it inside a private network namespace (of a
    // user namespace, so no privilege is needed), whose loopback is ours alone.
    let script = format!(
        "set -e; {} link set lo up; {} --listen 127.0.0.1:123 --listen '[::1]:123' --workers 2 --stratum 2 >/dev/null & \
         for i in $(seq 100); do ntpdig -j -t 1 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.05; done; \
         for i in 1 2 3 4 5; do ntpdig -j -t 30 127.0.0.1; ntpdig -j -t 30 ::1; done; kill $!",
        ip.display(),
        env!("CARGO_BIN_EXE_timeserve")
    );
    let output = Command::new(unshare)
        .args(["-rn", "sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for host in ["127.0.0.1", "::1"] {
        // The best of five queries (ntpdig is Python: its own delays skew single ones).
        let best = stdout
            .lines()
            .filter(|l| l.contains(&format!("\"host\":\"{host}\"")))
            .map(|l| {
                let value: serde_json::Value = serde_json::from_str(l).unwrap();
                assert_eq!(value["stratum"], 2, "{l}");
                assert_eq!(value["leap"], "no-leap", "{l}");
                value["offset"].as_f64().unwrap().abs()
            })
            .fold(f64::INFINITY, f64::min);
        assert!(best < 1e-3, "best offset to {host}: {best} s\n{stdout}");
    }
}

#[test]
fn sighup_is_survived_and_sigterm_exits_zero() {
    let server = Server::loopback("2", &[]);
    server.signal(libc::SIGHUP);
    server.signal(libc::SIGUSR1);
    // Taken, not merely sent: the default action of either would end the server.
    server.wait_for_signals_taken();
    let socket = client(server.address());
    socket.send(&client_request(4, now())).unwrap();
    assert!(receive(&socket).is_some(), "still serving after SIGHUP");
    let (code, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("no configuration to reload"), "{err}");
}

#[test]
fn a_second_instance_on_the_same_address_is_refused() {
    let first = Server::loopback("2", &[]);
    let address = first.address().to_string();
    let second = Command::new(env!("CARGO_BIN_EXE_timeserve"))
        .args(["--listen", &address, "--stratum", "2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("address {address} is already in use")),
        "{err}"
    );
}

#[test]
fn a_privileged_port_without_the_capability_is_a_clear_error() {
    // As root, drop to nobody without capabilities; otherwise we already lack them.
    let mut command = if rustix::process::geteuid().is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ]);
        c.arg(env!("CARGO_BIN_EXE_timeserve"));
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_timeserve"))
    };
    let output = command
        .args(["--listen", "127.0.0.1:123", "--stratum", "2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(
        err.contains("binding 127.0.0.1:123 needs root or CAP_NET_BIND_SERVICE"),
        "{err}"
    );
}

#[test]
fn bad_flags_name_the_input_and_what_is_allowed() {
    for (args, expected) in [
        (&["--stratum", "16"][..], "16 is not in 1..=15"),
        (
            &["--refid", "TOOLONG"],
            "expected an IPv4 address or 1-4 ASCII",
        ),
        (
            &["--rate-limit-interval", "soon"],
            "'soon' is not a duration: use seconds",
        ),
        (&["--workers", "0"], "0 is not in 1..=1024"),
        (&["--listen", "localhost"], "invalid socket address"),
        (&["--receive-buffer", "12"], "12 is not in 1024.."),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_timeserve"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}

#[test]
fn durations_take_units_or_seconds() {
    for value in ["500ms", "2s", "1m", "3", "0.25"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_timeserve"))
            .args([
                "--listen",
                "127.0.0.1:0",
                "--workers",
                "1",
                "--stratum",
                "2",
                "--rate-limit-interval",
                value,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            line.starts_with("timeserve: serving NTP on"),
            "{value}: {line}"
        );
    }
}
