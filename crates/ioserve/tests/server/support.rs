//! Test support: the real `ioserve` binary on 127.0.0.1:0, a raw HTTP/1.1 client that
//! shows exactly what went over the wire, an HTTP/2 client (`h2_client.rs`), and file
//! fixtures.

use std::fmt::Debug;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Every IO strategy; each behaviour is checked under each.
pub const STRATEGIES: [&str; 4] = ["sendfile", "mmap", "read", "buffered"];

/// The protocols the semantics cases run under, beside the strategies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 in clear, by the raw client.
    Http1,
    /// HTTP/2 over TLS (ALPN `h2`), by the `h2` crate's client.
    Http2,
    /// HTTP/3 over QUIC (ALPN `h3`), by quinn and h3's client.
    Http3,
}

/// Every protocol.
pub const PROTOCOLS: [Protocol; 3] = [Protocol::Http1, Protocol::Http2, Protocol::Http3];

/// Every protocol with every strategy.
pub fn protocols_and_strategies() -> impl Iterator<Item = (Protocol, &'static str)> {
    PROTOCOLS
        .into_iter()
        .flat_map(|protocol| STRATEGIES.map(|strategy| (protocol, strategy)))
}

/// A certificate for `localhost` and 127.0.0.1 and its key, in a directory of their own.
pub struct TestCertificate {
    pub dir: tempfile::TempDir,
    /// The certificate, PEM: the CA a client trusts.
    pub pem: String,
}

impl TestCertificate {
    pub fn new() -> TestCertificate {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cert.pem"), &pem).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        TestCertificate { dir, pem }
    }

    /// The certificate file.
    pub fn cert(&self) -> std::path::PathBuf {
        self.dir.path().join("cert.pem")
    }

    /// `--tls-cert` and `--tls-key` with this pair.
    pub fn flags(&self) -> Vec<String> {
        let path = |name: &str| self.dir.path().join(name).to_str().unwrap().to_string();
        vec![
            "--tls-cert".into(),
            path("cert.pem"),
            "--tls-key".into(),
            path("key.pem"),
        ]
    }
}

/// A running `ioserve` process, killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub metrics: Option<SocketAddr>,
    /// The `--redirect-http` listener, when it was asked for.
    pub redirect: Option<SocketAddr>,
    /// What the server has logged so far (started with `capture_stderr`).
    log: Option<ServerLog>,
    /// Started under a tracer: the server is the tracer's child.
    traced: bool,
    /// Started by [`Server::start_over`] for HTTP/2 or HTTP/3: its certificate.
    pub tls: Option<TestCertificate>,
    /// The protocol [`Server::request`] speaks.
    pub protocol: Protocol,
}

impl Server {
    /// Starts `ioserve ROOT --strategy STRATEGY` with quiet logs, plus `extra` flags.
    pub fn start(strategy: &str, root: &Path, extra: &[&str]) -> Server {
        Self::start_with(strategy, root, extra, false)
    }

    /// As [`Server::start`], speaking `protocol` to [`Server::request`]: HTTP/2 and
    /// HTTP/3 add a test certificate (HTTPS, where clients choose `h2` by ALPN, and
    /// HTTP/3 on the same port over UDP).
    pub fn start_over(protocol: Protocol, strategy: &str, root: &Path, extra: &[&str]) -> Server {
        match protocol {
            Protocol::Http1 => Self::start(strategy, root, extra),
            Protocol::Http2 | Protocol::Http3 => {
                let tls = TestCertificate::new();
                let flags = tls.flags();
                let mut all: Vec<&str> = flags.iter().map(String::as_str).collect();
                all.extend(extra);
                let mut server = Self::start(strategy, root, &all);
                server.tls = Some(tls);
                server.protocol = protocol;
                server
            }
        }
    }

    /// `METHOD path` with extra header lines, on a new connection: HTTP/1.1 (with
    /// `Host` and `Connection: close`), or HTTP/2 for a server started over it.
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
        match (&self.tls, self.protocol) {
            (None, _) | (_, Protocol::Http1) => {
                raw(self.addr, request_bytes(method, path, headers).as_bytes())
            }
            (Some(tls), Protocol::Http2) => {
                crate::h2_client::request(self.addr, &tls.pem, method, path, headers)
            }
            (Some(tls), Protocol::Http3) => {
                crate::h3_client::request(self.addr, &tls.pem, method, path, headers)
            }
        }
    }

    /// `GET path` with extra header lines, as [`Server::request`].
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        self.request("GET", path, headers)
    }

    /// As [`Server::start`]; with `capture_stderr` the access log can be read.
    pub fn start_with(strategy: &str, root: &Path, extra: &[&str], capture_stderr: bool) -> Server {
        Self::launch(&[], strategy, root, extra, capture_stderr)
    }

    /// As [`Server::start`], under `strace -ff -y` writing the syscalls in `trace` to
    /// `LOG.TID`, one file per thread. The server's pid is then strace's child.
    pub fn start_traced(strategy: &str, root: &Path, trace: &str, log: &Path) -> Server {
        let log = log.to_str().unwrap();
        // -ff: one file per thread (LOG.TID), so no call is split into
        // "<unfinished ...>" and "<... resumed>" halves by another thread's.
        let wrapper = ["strace", "-ff", "-y", "-qq", "-e", trace, "-o", log];
        Self::launch(&wrapper, strategy, root, &[], false)
    }

    /// As [`Server::start_with`], the server started by `wrapper` (a program and its
    /// arguments, to which the server's command line is appended).
    pub fn launch(
        wrapper: &[&str],
        strategy: &str,
        root: &Path,
        extra: &[&str],
        capture_stderr: bool,
    ) -> Server {
        let binary = env!("CARGO_BIN_EXE_ioserve");
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        command
            .arg(root)
            .args(["--listen", "127.0.0.1:0", "--strategy", strategy])
            .args(if extra.contains(&"--workers") {
                &[][..]
            } else {
                &["--workers", "2"][..]
            })
            .args(if capture_stderr {
                &[][..]
            } else {
                &["--access-log", "off"][..]
            })
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if capture_stderr {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", command.get_program()));
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut addr = None;
        let mut metrics = None;
        let mut redirect = None;
        let wants_metrics = extra.contains(&"--metrics-listen");
        let wants_redirect = extra.contains(&"--redirect-http");
        let mut line = String::new();
        // Every line the server prints is read: it exits if stdout is closed first.
        while addr.is_none()
            || (wants_metrics && metrics.is_none())
            || (wants_redirect && redirect.is_none())
        {
            line.clear();
            if stdout.read_line(&mut line).unwrap() == 0 {
                let status = child.wait().unwrap();
                panic!("ioserve exited before listening: {status}");
            }
            // http:// or, with TLS, https://
            let url = line
                .split("://")
                .nth(1)
                .and_then(|rest| rest.split('/').next());
            let parsed: Option<SocketAddr> = url.and_then(|u| u.parse().ok());
            if line.contains("metrics at") {
                metrics = parsed;
            } else if line.contains("redirecting") {
                redirect = parsed;
            } else {
                addr = parsed;
            }
        }
        let log = child.stderr.take().map(ServerLog::drain);
        // strace forks the server; other wrappers (prlimit) exec it.
        let traced = wrapper
            .first()
            .is_some_and(|program| program.ends_with("strace"));
        Server {
            child,
            addr: addr.unwrap(),
            metrics,
            redirect,
            log,
            traced,
            tls: None,
            protocol: Protocol::Http1,
        }
    }

    /// The server's pid (the tracer's child when traced).
    pub fn pid(&self) -> u32 {
        self.server_pid().expect("the server is running")
    }

    fn server_pid(&self) -> Option<u32> {
        if !self.traced {
            return Some(self.child.id());
        }
        // /proc/PID/task/PID/children needs CONFIG_PROC_CHILDREN: scan parents instead.
        let tracer = self.child.id();
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // "pid (comm) state ppid ...": comm may hold spaces, so split after ')'.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(tracer)
            })
    }

    /// Sends a signal (`TERM`, `INT`, `HUP`, `USR1`, `USR2`) to the server, with kill(2) itself
    /// rather than kill(1), so that it comes as soon as the caller asks.
    pub fn signal(&self, signal: &str) {
        use rustix::process::{kill_process, Pid, Signal};
        let signal = match signal {
            "TERM" => Signal::TERM,
            "INT" => Signal::INT,
            "HUP" => Signal::HUP,
            "USR1" => Signal::USR1,
            "USR2" => Signal::USR2,
            other => panic!("signal {other}: the tests send TERM, INT, HUP, USR1 or USR2"),
        };
        let pid = Pid::from_raw(self.pid() as i32).expect("a process id is positive");
        kill_process(pid, signal).expect("the server is running");
    }

    /// Waits for the process to exit, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// What the server has logged so far (started with `capture_stderr`).
    pub fn log_so_far(&self) -> String {
        self.log
            .as_ref()
            .expect("started with capture_stderr")
            .text()
    }

    /// Waits until the server has logged a line containing `needle` (the sign that an
    /// asynchronous step, such as a signal's handling, is done); returns the log.
    pub fn wait_for_log(&self, needle: &str) -> String {
        wait_for(&format!("the server logs {needle:?}"), || {
            let log = self.log_so_far();
            if log.contains(needle) {
                Ok(log)
            } else {
                Err(log)
            }
        })
    }

    /// Stops the server with SIGTERM, waits for it, and returns what it logged (started
    /// with `capture_stderr`).
    pub fn stop_and_read_log(&mut self) -> String {
        self.signal("TERM");
        let status = self.wait_exit(SETTLE);
        assert!(
            status.is_some_and(|s| s.success()),
            "the server did not drain and exit 0 on SIGTERM within {SETTLE:?}: {status:?}"
        );
        self.log_after_exit()
    }

    /// Everything the server logged, once it has exited (its stderr is then closed).
    pub fn log_after_exit(&mut self) -> String {
        assert!(
            self.child.try_wait().unwrap().is_some(),
            "the whole log is there once the server has exited"
        );
        self.log
            .take()
            .expect("started with capture_stderr")
            .finish()
    }

    /// Open file descriptors of the server process.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .unwrap()
            .count()
    }

    /// Resident set size of the server process, in KiB.
    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    /// Resident anonymous memory (what the server allocates; not the page cache that
    /// a file mapping shows), in KiB.
    pub fn anon_kib(&self) -> u64 {
        self.status_kib("RssAnon:")
    }

    fn status_kib(&self, key: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let (true, Some(pid)) = (self.traced, self.server_pid()) {
            // Killing the tracer alone would leave the server running, detached.
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server's stderr, read to the end by a thread of its own so that the server never
/// blocks on a full pipe and a test can look at the log while the server runs.
struct ServerLog {
    text: Arc<Mutex<String>>,
    reader: JoinHandle<()>,
}

impl ServerLog {
    fn drain(stderr: ChildStderr) -> ServerLog {
        let text = Arc::new(Mutex::new(String::new()));
        let shared = Arc::clone(&text);
        let reader = std::thread::spawn(move || {
            let mut lines = BufReader::new(stderr);
            let mut line = Vec::new();
            while lines.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                shared
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&line));
                line.clear();
            }
        });
        ServerLog { text, reader }
    }

    fn text(&self) -> String {
        self.text.lock().unwrap().clone()
    }

    /// The whole log; the server must have exited (closing its stderr).
    fn finish(self) -> String {
        self.reader.join().expect("the log reader does not panic");
        Arc::try_unwrap(self.text)
            .map(|text| text.into_inner().unwrap())
            .unwrap_or_else(|text| text.lock().unwrap().clone())
    }
}

/// A response as it came over the wire.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The name and value of each of `fields` (an HTTP/2 or HTTP/3 response's), in
    /// order, as [`Response::headers`] holds them.
    pub fn header_pairs(fields: &hyper::http::HeaderMap) -> Vec<(String, String)> {
        fields
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_string(),
                    value.to_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// The value of a header (case-insensitive name), if present once or more.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Connects with generous timeouts so that a hung server fails the test, not CI.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
}

/// Reads one response; `head_only` for answers to HEAD.
pub fn read_response(reader: &mut impl BufRead, head_only: bool) -> io::Result<Response> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let status: u16 = line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let trimmed = line.trim_end_matches("\r\n");
        if trimmed.is_empty() {
            break;
        }
        let (name, value) = trimmed.split_once(':').expect("header line has a colon");
        headers.push((name.to_string(), value.trim().to_string()));
    }
    let mut response = Response {
        status,
        headers,
        body: Vec::new(),
    };
    if head_only || status == 304 {
        return Ok(response);
    }
    match response.header("Content-Length") {
        Some(len) => {
            let len: usize = len.parse().unwrap();
            response.body = vec![0; len];
            reader.read_exact(&mut response.body)?;
        }
        None => {
            reader.read_to_end(&mut response.body)?;
        }
    }
    Ok(response)
}

/// Sends raw bytes on a new connection and reads one response.
pub fn raw(addr: SocketAddr, request: &[u8]) -> Response {
    let mut stream = connect(addr);
    stream.write_all(request).unwrap();
    let head_only = request.starts_with(b"HEAD ");
    read_response(&mut BufReader::new(stream), head_only).unwrap()
}

/// `GET path` with extra header lines, on a new connection.
pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
    raw(addr, request_bytes("GET", path, headers).as_bytes())
}

/// A request head with `Host` and `Connection: close`.
pub fn request_bytes(method: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// Deterministic pseudo-random bytes (fastrand seeded with `seed`), so a failure can be
/// replayed.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0; len];
    fastrand::Rng::with_seed(seed).fill(&mut out);
    out
}

/// One part of a `multipart/byteranges` body.
#[derive(Debug)]
pub struct Part {
    pub content_range: String,
    pub content_type: String,
    pub data: Vec<u8>,
}

/// Parses a `multipart/byteranges` body strictly: each part's length comes from its
/// Content-Range, and the delimiters must be exactly where they belong.
pub fn parse_multipart(response: &Response) -> Vec<Part> {
    let content_type = response.header("Content-Type").unwrap();
    let boundary = content_type
        .strip_prefix("multipart/byteranges; boundary=")
        .unwrap_or_else(|| panic!("not multipart: {content_type}"));
    let body = &response.body;
    let mut at = 0;
    let mut parts = Vec::new();
    let delimiter = format!("--{boundary}");
    loop {
        if at > 0 {
            assert_eq!(&body[at..at + 2], b"\r\n", "CRLF before a delimiter");
            at += 2;
        }
        assert_eq!(&body[at..at + delimiter.len()], delimiter.as_bytes());
        at += delimiter.len();
        if &body[at..at + 2] == b"--" {
            assert_eq!(&body[at + 2..], b"\r\n", "closing delimiter ends the body");
            return parts;
        }
        assert_eq!(&body[at..at + 2], b"\r\n");
        at += 2;
        let head_end = at
            + body[at..]
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .unwrap();
        let head = std::str::from_utf8(&body[at..head_end]).unwrap();
        at = head_end + 4;
        let mut content_range = String::new();
        let mut part_type = String::new();
        for line in head.split("\r\n") {
            let (name, value) = line.split_once(": ").unwrap();
            match name {
                "Content-Range" => content_range = value.to_string(),
                "Content-Type" => part_type = value.to_string(),
                other => panic!("unexpected part header {other}"),
            }
        }
        let (first, last) = parse_content_range(&content_range).0;
        let len = (last - first + 1) as usize;
        parts.push(Part {
            content_range,
            content_type: part_type,
            data: body[at..at + len].to_vec(),
        });
        at += len;
    }
}

/// `bytes A-B/LEN` → ((A, B), LEN).
pub fn parse_content_range(value: &str) -> ((u64, u64), u64) {
    let rest = value.strip_prefix("bytes ").unwrap();
    let (range, len) = rest.split_once('/').unwrap();
    let (a, b) = range.split_once('-').unwrap();
    (
        (a.parse().unwrap(), b.parse().unwrap()),
        len.parse().unwrap(),
    )
}

/// How long a test waits for state that settles asynchronously (a counter bumped after
/// the response, a log line, a closed connection, an exited process): generous, for a
/// slow and loaded 2-core CI host (30 s was once too short for a thousand clients to
/// connect while other builds shared the two cores). Waits end as soon as the state is
/// there.
pub const SETTLE: Duration = Duration::from_secs(90);

/// Polls `probe` until it returns `Ok`, for at most [`SETTLE`]; on timeout fails naming
/// `what` was awaited and the last value seen (the `Err`).
pub fn wait_for<T, S: Debug>(what: &str, mut probe: impl FnMut() -> Result<T, S>) -> T {
    let deadline = Instant::now() + SETTLE;
    loop {
        match probe() {
            Ok(value) => return value,
            Err(seen) if Instant::now() > deadline => {
                panic!("waited {SETTLE:?} for {what}; last seen: {seen:?}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Waits until `check` holds of what `read` returns; returns that value, or fails with
/// the last one read.
pub fn wait_until<T: Debug>(
    what: &str,
    mut read: impl FnMut() -> T,
    check: impl Fn(&T) -> bool,
) -> T {
    wait_for(what, || {
        let value = read();
        if check(&value) {
            Ok(value)
        } else {
            Err(value)
        }
    })
}

/// A scrape of the metrics listener at `metrics`.
pub fn scrape(metrics: SocketAddr) -> String {
    let response = get(metrics, "/metrics", &[]);
    assert_eq!(response.status, 200);
    String::from_utf8(response.body).unwrap()
}

/// `name`'s value in a scrape `text` (`name` holds its labels, if any).
pub fn metric_in(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} missing in\n{text}"))
        .parse()
        .unwrap()
}

/// Waits until the metric `name` of the server's metrics listener satisfies `check`
/// (counters are bumped once a response is written, which may trail the client);
/// returns its value, or fails with the last one scraped.
pub fn wait_for_metric(server: &Server, name: &str, check: impl Fn(u64) -> bool) -> u64 {
    let metrics = server.metrics.expect("started with --metrics-listen");
    wait_until(name, || metric_in(&scrape(metrics), name), |&v| check(v))
}

/// Waits until the server has closed every client connection (`--metrics-listen`).
pub fn wait_for_no_connections(server: &Server) {
    wait_for_metric(server, "ioserve_connections_open", |open| open == 0);
}

/// Raises this process's open-file limit to its hard limit; returns it.
pub fn raise_nofile() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum;
    let _ = setrlimit(Resource::Nofile, limit);
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Reads a response head, through its blank line, and no byte of the body.
pub fn read_head(reader: &mut impl Read) -> Vec<u8> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8];
        reader.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    head
}

/// Reads a response head from a raw stream, leaving the body unread; returns the
/// Content-Length.
pub fn start_download(server: &Server, path: &str) -> (BufReader<TcpStream>, usize) {
    let mut stream = connect(server.addr);
    stream
        .write_all(request_bytes("GET", path, &[]).as_bytes())
        .unwrap();
    let mut reader = BufReader::with_capacity(64 * 1024, stream);
    let head = String::from_utf8(read_head(&mut reader)).unwrap();
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (reader, len)
}

/// Waits until the server has filled the socket buffers of a download that `stream`'s
/// client does not read: bytes are queued for the client and the queue has stopped
/// growing, so the server's next send meets a full buffer (EAGAIN). Returns the bytes
/// queued.
pub fn wait_until_stalled(stream: &TcpStream) -> u64 {
    let mut last = 0;
    let mut unchanged = 0;
    wait_for(
        "the client's receive queue to fill and stop growing",
        || {
            let queued = rustix::io::ioctl_fionread(stream).unwrap();
            unchanged = if queued > 0 && queued == last {
                unchanged + 1
            } else {
                0
            };
            last = queued;
            // Unchanged across 5 polls (250 ms): the server is blocked on the full buffer.
            if unchanged >= 5 {
                Ok(queued)
            } else {
                Err(queued)
            }
        },
    )
}

/// Waits until every thread of the server sleeps (state `S` in
/// `/proc/PID/task/*/stat`): the server has finished what it was doing (such as
/// putting a connection it just answered on the idle list) and waits for events.
pub fn wait_until_quiescent(server: &Server) {
    let pid = server.pid();
    wait_until(
        "every server thread to sleep",
        || -> Vec<String> {
            std::fs::read_dir(format!("/proc/{pid}/task"))
                .unwrap()
                .filter_map(|task| {
                    let stat = std::fs::read_to_string(task.ok()?.path().join("stat")).ok()?;
                    let state = stat.rsplit_once(") ")?.1.chars().next()?;
                    (state != 'S').then_some(stat)
                })
                .collect()
        },
        Vec::is_empty,
    );
}

/// A rustls client configuration that trusts the PEM certificates in `ca` (the test
/// certificate), for the tests' TLS clients.
pub fn tls_client_config(ca: &str) -> rustls::ClientConfig {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}
