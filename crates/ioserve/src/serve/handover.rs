//! Live binary upgrades, as nginx's (SIGUSR2): the running process starts the binary
//! now on disk with its listening sockets inherited, waits for the new process's word
//! that it serves, then stops accepting and finishes what it has in flight.
//!
//! Both sides live here. The old process dups its sockets without close-on-exec, names
//! them in [`LISTENERS_VAR`] (`serve:3,serve:4,quic:5,metrics:6`), and gives the new process
//! the writing end of a pipe in [`READY_VAR`]; the new process takes the sockets
//! ([`inherited`]) instead of binding or of socket activation's, starts its workers,
//! and writes `ready` ([`ReadyPipe`]). The sockets are the same kernel objects in both
//! processes, so a connection waiting in a backlog is accepted by one or the other and
//! none is refused while the two overlap. Under systemd the old process, still the main
//! one, then names the new one with `MAINPID=`.
//!
//! HTTP/3's UDP socket passes the same way, so new QUIC connections reach the new
//! process at once. A QUIC connection has no backlog to wait in: its packets come to
//! whichever process reads the socket, so the old process closes its HTTP/3
//! connections at the hand-over (CONNECTION_CLOSE with H3_NO_ERROR) and moves off the
//! socket; their clients go on with new connections to the new process (a download
//! resumes with a range). Downloads in flight over HTTP/1.1 and HTTP/2 finish in the
//! old process.

use std::ffi::{CString, OsString};
use std::fmt;
use std::io::{self, Read as _, Write as _};
use std::net::{TcpListener, UdpSocket};
use std::os::fd::{AsFd, AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::serve::error::ServerError;

/// The environment variable that names the inherited listening sockets.
pub const LISTENERS_VAR: &str = "IOSERVE_INHERITED_LISTENERS";
/// The environment variable that names the descriptor the new process writes `ready`
/// to.
pub const READY_VAR: &str = "IOSERVE_UPGRADE_READY_FD";
/// The variables of socket activation, which belong to the process they were set for.
const ACTIVATION_VARS: [&str; 3] = ["LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"];
/// How long the old process waits for the new one's word before it stops it.
pub const READY_WAIT: Duration = Duration::from_secs(60);
/// The word the new process writes when it serves.
const READY_WORD: &[u8] = b"ready\n";

/// What a passed socket is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Serves HTTP or HTTPS (`--listen`, or socket activation's).
    Serve,
    /// The metrics endpoint (`--metrics-listen`).
    Metrics,
    /// The redirect to HTTPS (`--redirect-http`).
    Redirect,
    /// HTTP/3's UDP socket (`--http3`).
    Quic,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Serve => "serve",
            Role::Metrics => "metrics",
            Role::Redirect => "redirect",
            Role::Quic => "quic",
        }
    }

    fn named(name: &str) -> Option<Role> {
        [Role::Serve, Role::Metrics, Role::Redirect, Role::Quic]
            .into_iter()
            .find(|role| role.name() == name)
    }
}

/// The listening sockets a process passes on at an upgrade: each socket once (the
/// workers' accept loops hold copies of the same sockets).
#[derive(Debug, Default)]
pub(super) struct Sockets {
    serve: Vec<OwnedFd>,
    metrics: Option<OwnedFd>,
    redirect: Option<OwnedFd>,
    quic: Option<OwnedFd>,
}

impl Sockets {
    /// Copies of `serve` (distinct sockets), and of the metrics and redirect listeners.
    pub(super) fn copy(
        serve: &[TcpListener],
        metrics: Option<&TcpListener>,
        redirect: Option<&TcpListener>,
    ) -> io::Result<Sockets> {
        let copy = |listener: &TcpListener| listener.as_fd().try_clone_to_owned();
        Ok(Sockets {
            serve: serve.iter().map(copy).collect::<io::Result<_>>()?,
            metrics: metrics.map(copy).transpose()?,
            redirect: redirect.map(copy).transpose()?,
            quic: None,
        })
    }

    /// These sockets and a copy of HTTP/3's UDP socket.
    pub(super) fn with_quic(mut self, socket: &UdpSocket) -> io::Result<Sockets> {
        self.quic = Some(socket.as_fd().try_clone_to_owned()?);
        Ok(self)
    }

    fn roles(&self) -> impl Iterator<Item = (Role, &OwnedFd)> {
        let serve = self.serve.iter().map(|fd| (Role::Serve, fd));
        let quic = self.quic.iter().map(|fd| (Role::Quic, fd));
        let metrics = self.metrics.iter().map(|fd| (Role::Metrics, fd));
        let redirect = self.redirect.iter().map(|fd| (Role::Redirect, fd));
        serve.chain(quic).chain(metrics).chain(redirect)
    }
}

/// The sockets the process this one replaces passed on.
#[derive(Debug)]
pub(super) struct Inherited {
    /// The serving sockets, in the order the old process had them.
    pub(super) serve: Vec<TcpListener>,
    /// The metrics endpoint's, if the old process had one.
    pub(super) metrics: Option<TcpListener>,
    /// The redirect's, if the old process had one.
    pub(super) redirect: Option<TcpListener>,
    /// HTTP/3's UDP socket, if the old process served HTTP/3.
    pub(super) quic: Option<UdpSocket>,
}

/// The sockets passed in [`LISTENERS_VAR`], when this process was started by an
/// upgrade.
pub(super) fn inherited() -> Result<Option<Inherited>, ServerError> {
    let Some(text) = std::env::var_os(LISTENERS_VAR) else {
        return Ok(None);
    };
    let refused = |why: String| ServerError::Upgrade(format!("{LISTENERS_VAR}: {why}"));
    let text = text.into_string().map_err(|_| refused("not text".into()))?;
    let passed = parse(&text).map_err(refused)?;
    let mut inherited = Inherited {
        serve: Vec::new(),
        metrics: None,
        redirect: None,
        quic: None,
    };
    for (role, fd) in passed {
        let why = |why: String| refused(format!("descriptor {fd}: {why}"));
        if role == Role::Quic {
            inherited.quic = Some(take_udp(fd).map_err(why)?);
            continue;
        }
        let listener = take_listener(fd).map_err(why)?;
        match role {
            Role::Serve => inherited.serve.push(listener),
            Role::Metrics => inherited.metrics = Some(listener),
            Role::Redirect => inherited.redirect = Some(listener),
            Role::Quic => unreachable!("taken above"),
        }
    }
    if inherited.serve.is_empty() {
        return Err(refused("no serving socket".into()));
    }
    Ok(Some(inherited))
}

/// `serve:3,serve:4,metrics:5` as roles and descriptors: each descriptor once, at
/// most one metrics, one redirect and one quic socket, descriptors above 2.
fn parse(text: &str) -> Result<Vec<(Role, RawFd)>, String> {
    let mut passed: Vec<(Role, RawFd)> = Vec::new();
    for item in text.split(',') {
        let (role, fd) = item
            .split_once(':')
            .ok_or_else(|| format!("{item:?} is not ROLE:DESCRIPTOR"))?;
        let role = Role::named(role)
            .ok_or_else(|| format!("{role:?}: the roles are serve, metrics, redirect, quic"))?;
        let fd: RawFd = fd
            .parse()
            .ok()
            .filter(|&fd| fd > 2)
            .ok_or_else(|| format!("{fd:?}: a descriptor is a number above 2"))?;
        if passed.iter().any(|&(_, seen)| seen == fd) {
            return Err(format!("descriptor {fd} is named twice"));
        }
        if role != Role::Serve && passed.iter().any(|&(seen, _)| seen == role) {
            return Err(format!("two {} sockets", role.name()));
        }
        passed.push((role, fd));
    }
    Ok(passed)
}

/// The listening TCP socket at `fd`, set non-blocking and close-on-exec.
fn take_listener(fd: RawFd) -> Result<TcpListener, String> {
    use rustix::net::{sockopt, SocketType};
    let fd = take(fd)?;
    match (sockopt::socket_type(&fd), sockopt::socket_acceptconn(&fd)) {
        (Ok(SocketType::STREAM), Ok(true)) => {}
        _ => return Err("not a listening TCP socket".into()),
    }
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC).map_err(|e| e.to_string())?;
    let listener = TcpListener::from(fd);
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    Ok(listener)
}

/// The UDP socket at `fd`, set non-blocking and close-on-exec.
fn take_udp(fd: RawFd) -> Result<UdpSocket, String> {
    use rustix::net::{sockopt, SocketType};
    let fd = take(fd)?;
    if sockopt::socket_type(&fd) != Ok(SocketType::DGRAM) {
        return Err("not a UDP socket".into());
    }
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC).map_err(|e| e.to_string())?;
    let socket = UdpSocket::from(fd);
    socket.set_nonblocking(true).map_err(|e| e.to_string())?;
    Ok(socket)
}

/// The open descriptor `fd`, which the parent passed to this process.
fn take(fd: RawFd) -> Result<OwnedFd, String> {
    // Only an open descriptor is taken: a number that names nothing is refused here.
    // SAFETY: F_GETFD reads the flags of a descriptor number and changes nothing; any
    // number may be asked about (a closed one fails with EBADF).
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return Err("not open".into());
    }
    // SAFETY: the descriptor is open, and it is the old process's copy passed to this
    // one through exec: nothing in this process opened it, and `parse` names each
    // number once, so this is its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Where a process started by an upgrade says that it serves.
#[derive(Debug)]
pub(super) struct ReadyPipe(std::fs::File);

impl ReadyPipe {
    /// The pipe named in [`READY_VAR`], when this process was started by an upgrade.
    pub(super) fn from_env() -> Result<Option<ReadyPipe>, ServerError> {
        let Some(text) = std::env::var_os(READY_VAR) else {
            return Ok(None);
        };
        let refused = |why: String| ServerError::Upgrade(format!("{READY_VAR}: {why}"));
        let fd = text
            .to_str()
            .and_then(|text| text.parse::<RawFd>().ok())
            .filter(|&fd| fd > 2)
            .ok_or_else(|| refused(format!("{text:?}: a descriptor is a number above 2")))?;
        let fd = take(fd).map_err(|why| refused(format!("descriptor {fd}: {why}")))?;
        rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)
            .map_err(|error| refused(error.to_string()))?;
        Ok(Some(ReadyPipe(std::fs::File::from(fd))))
    }

    /// Tells the old process that this one serves; it then stops accepting.
    pub(super) fn ready(mut self) -> io::Result<()> {
        self.0.write_all(READY_WORD)
    }
}

/// The path this process was started from, read at start: the binary that SIGUSR2
/// runs, whatever replaced the file since.
#[derive(Debug, Clone)]
pub(super) struct Executable(Result<PathBuf, String>);

impl Executable {
    /// The path this process was started by: its `argv[0]` made absolute (against the
    /// working directory, or found on `PATH` when it is a bare name), so that a
    /// symbolic link (`/usr/sbin/ioserve` to a versioned directory) is followed anew
    /// at the upgrade, as nginx does; else the file the kernel says it runs.
    pub(super) fn current() -> Executable {
        let started_as = std::env::args_os().next().map(PathBuf::from);
        let path = started_as.and_then(|path| absolute(&path));
        match path {
            Some(path) => Executable(Ok(path)),
            None => Executable(std::env::current_exe().map_err(|error| error.to_string())),
        }
    }
}

/// `argv[0]` as an absolute path: as it is, against the working directory when it has
/// a `/`, else the first executable of that name on `PATH`.
fn absolute(path: &std::path::Path) -> Option<PathBuf> {
    if path.is_absolute() {
        return Some(path.to_path_buf());
    }
    if path.components().count() > 1 {
        return std::env::current_dir().ok().map(|dir| dir.join(path));
    }
    let search = std::env::var_os("PATH")?;
    std::env::split_paths(&search)
        .map(|dir| dir.join(path))
        .find(|candidate| candidate.is_file())
        .filter(|candidate| candidate.is_absolute())
}

impl fmt::Display for Executable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Ok(path) => write!(f, "{}", path.display()),
            Err(error) => write!(f, "(unknown: {error})"),
        }
    }
}

/// A new binary being started by an upgrade.
#[derive(Debug)]
pub(super) struct Upgrade {
    process: Successor,
    ready: std::fs::File,
}

/// How the start of a new binary ended.
#[derive(Debug)]
pub(super) enum Outcome {
    /// It serves; this process must stop accepting.
    Ready,
    /// It ended (or closed its pipe and was stopped) before it said so.
    Ended,
    /// It said nothing within [`READY_WAIT`]; it has been stopped.
    Silent,
}

impl Upgrade {
    /// Starts `executable` with this process's arguments and environment, the
    /// `sockets` inherited, and the pipe for its word.
    ///
    /// The new process is started as a grandchild whose parent exits at once, so that
    /// it is this process's sibling: the child of systemd (or of whatever started this
    /// one as a subreaper). systemd follows a `MAINPID=` that is its own child as it
    /// follows the process it started; one that is not ("Supervising process N which
    /// is not our child") it cannot wait for, and `systemctl stop` then skips the
    /// grace period and kills it with SIGKILL, cutting its downloads.
    pub(super) fn start(executable: &Executable, sockets: &Sockets) -> io::Result<Upgrade> {
        let path = executable.0.as_ref().map_err(|error| {
            io::Error::other(format!(
                "the path of this process's binary is unknown: {error}"
            ))
        })?;
        let (ready, ready_writer) = std::io::pipe()?;
        // Copies without close-on-exec, closed here again once the child has them.
        let passed: Vec<(Role, OwnedFd)> = sockets
            .roles()
            .map(|(role, fd)| rustix::io::dup(fd).map(|copy| (role, copy)))
            .collect::<Result<_, _>>()?;
        let writer = rustix::io::dup(&ready_writer)?;
        drop(ready_writer);
        let names: Vec<String> = passed
            .iter()
            .map(|(role, fd)| format!("{}:{}", role.name(), fd.as_raw_fd()))
            .collect();
        // Where the intermediate process writes its child's pid (close-on-exec: the
        // new binary does not keep it).
        let (mut pid_reader, pid_writer) = std::io::pipe()?;
        let report = pid_writer.as_raw_fd();
        let mut environment: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(name, _)| {
                !ACTIVATION_VARS.iter().any(|var| name == var)
                    && name != LISTENERS_VAR
                    && name != READY_VAR
            })
            .collect();
        environment.push((LISTENERS_VAR.into(), names.join(",").into()));
        environment.push((READY_VAR.into(), writer.as_raw_fd().to_string().into()));
        let image = ExecImage::new(path, std::env::args_os().skip(1), environment)?;
        // The Command forks (stdin from /dev/null, and its pipe that carries an exec
        // error back to `spawn`); the closure forks again and execs in the grandchild.
        let mut command = std::process::Command::new(path);
        command.stdin(Stdio::null());
        // SAFETY: the closure runs in the forked child between fork and exec, where
        // only async-signal-safe calls are sound; it makes four (fork, write, _exit,
        // execve), allocates nothing and takes no lock. `report` stays open in the
        // child: the parent's `pid_writer` lives until `spawn` has returned.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                orphan(report)?;
                Err(image.exec())
            });
        }
        // `spawn` returns once the grandchild has exec'd (the exec error pipe closes)
        // or with the error it failed with.
        let spawned = command.spawn();
        drop(writer);
        drop(passed);
        drop(pid_writer);
        let mut intermediate = spawned?;
        // It exits right after its fork.
        intermediate.wait()?;
        let mut pid = [0u8; 4];
        pid_reader.read_exact(&mut pid).map_err(|error| {
            io::Error::other(format!("the new process's id was not reported: {error}"))
        })?;
        let pid = u32::from_ne_bytes(pid);
        Ok(Upgrade {
            process: Successor::new(pid),
            ready: std::fs::File::from(OwnedFd::from(ready)),
        })
    }

    /// The new process's id.
    pub(super) fn pid(&self) -> u32 {
        self.process.pid
    }

    /// Waits for the new process's word, its end, or [`READY_WAIT`].
    pub(super) async fn outcome(self) -> Outcome {
        // The pipe is read on the blocking pool: its end comes when the new process
        // writes its word, or closes the pipe (by exiting, or by writing it).
        let mut ready = self.ready;
        let mut reading = tokio::task::spawn_blocking(move || {
            let mut word = Vec::new();
            let _ = (&mut ready)
                .take(READY_WORD.len() as u64)
                .read_to_end(&mut word);
            word == READY_WORD
        });
        let said_ready = tokio::select! {
            said = &mut reading => said.unwrap_or(false),
            () = tokio::time::sleep(READY_WAIT) => {
                self.process.signal(rustix::process::Signal::KILL);
                return Outcome::Silent;
            }
        };
        if said_ready {
            return Outcome::Ready;
        }
        // The pipe closed without the word: the process is ending, or has. One that
        // lives on without its pipe will never say it serves.
        if !self.process.exited_within(ENDING_WAIT).await {
            self.process.signal(rustix::process::Signal::KILL);
        }
        Outcome::Ended
    }
}

/// How long a new process that closed its pipe without the word may take to exit.
const ENDING_WAIT: Duration = Duration::from_secs(5);

/// In the child `Command` forked: forks again; the child of that goes on to exec the
/// new binary, this one reports its pid on `report` and exits, so that the new
/// process is reparented to this process's parent (or nearest subreaper).
fn orphan(report: RawFd) -> io::Result<()> {
    // SAFETY: fork in a single-threaded process (the child of a fork); both sides
    // only make async-signal-safe calls until exec or _exit.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(()),
        pid => {
            let bytes = pid.to_ne_bytes();
            // SAFETY: `bytes` is a live 4-byte buffer; `report` is open (see the
            // caller). _exit skips atexit handlers and buffered IO, which belong to
            // the parent.
            unsafe {
                libc::write(report, bytes.as_ptr().cast(), bytes.len());
                libc::_exit(0)
            }
        }
    }
}

/// What the new process is exec'd with, made before the fork: `execve` itself, not
/// std's `execvp`, which on ENOEXEC (a file that is not a program) runs the file with
/// /bin/sh instead of failing.
struct ExecImage {
    program: CString,
    /// The strings the pointers below point into (their heap buffers do not move
    /// when the vectors do).
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into `_strings` (and `program`), owned by the same value
// and never changed: sharing or moving it across threads shares no mutable state.
unsafe impl Send for ExecImage {}
// SAFETY: as for Send: nothing is ever written through the pointers.
unsafe impl Sync for ExecImage {}

impl ExecImage {
    fn new(
        program: &std::path::Path,
        args: impl Iterator<Item = OsString>,
        environment: Vec<(OsString, OsString)>,
    ) -> io::Result<ExecImage> {
        use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
        let c_string = |bytes: Vec<u8>| {
            CString::new(bytes)
                .map_err(|_| io::Error::other("a NUL byte in an argument or variable"))
        };
        let program = c_string(program.as_os_str().as_bytes().to_vec())?;
        let mut strings = vec![program.clone()];
        for arg in args {
            strings.push(c_string(arg.into_vec())?);
        }
        let arguments = strings.len();
        for (name, value) in environment {
            let mut pair = name.into_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            strings.push(c_string(pair)?);
        }
        let pointers = |range: &[CString]| {
            range
                .iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        let argv = pointers(&strings[..arguments]);
        let envp = pointers(&strings[arguments..]);
        Ok(ExecImage {
            program,
            _strings: strings,
            argv,
            envp,
        })
    }

    /// Replaces this process with the new binary; returns only its error.
    fn exec(&self) -> io::Error {
        // SAFETY: `program` is a C string; `argv` and `envp` are null-terminated arrays
        // of pointers to C strings that `self` owns and keeps alive.
        unsafe {
            libc::execve(
                self.program.as_ptr(),
                self.argv.as_ptr(),
                self.envp.as_ptr(),
            )
        };
        io::Error::last_os_error()
    }
}

/// The new process of an upgrade, which is not this process's child: its pid, and a
/// pidfd where the kernel has them (5.3 and later), which neither a reused pid nor the
/// lack of a wait status can confuse.
#[derive(Debug)]
struct Successor {
    pid: u32,
    pidfd: Option<OwnedFd>,
}

impl Successor {
    fn new(pid: u32) -> Successor {
        let pidfd = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .and_then(|pid| {
                rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
            });
        Successor { pid, pidfd }
    }

    fn signal(&self, signal: rustix::process::Signal) {
        match &self.pidfd {
            Some(pidfd) => {
                let _ = rustix::process::pidfd_send_signal(pidfd, signal);
            }
            None => {
                if let Some(pid) = i32::try_from(self.pid)
                    .ok()
                    .and_then(rustix::process::Pid::from_raw)
                {
                    let _ = rustix::process::kill_process(pid, signal);
                }
            }
        }
    }

    /// Whether the process has exited (a pidfd turns readable then), waiting up to
    /// `wait`; without a pidfd, whether signal 0 still finds it.
    async fn exited_within(&self, wait: Duration) -> bool {
        match &self.pidfd {
            Some(pidfd) => {
                let Ok(copy) = pidfd.try_clone() else {
                    return false;
                };
                let interest = tokio::io::Interest::READABLE;
                // SAFETY: the AsyncFd owns `copy`, an open descriptor that stays the
                // same until the AsyncFd drops it.
                match unsafe { tokio::io::unix::AsyncFd::register_with_interest(copy, interest) } {
                    Ok(watched) => tokio::time::timeout(wait, watched.readable())
                        .await
                        .is_ok_and(|ready| ready.is_ok()),
                    Err(_) => false,
                }
            }
            None => {
                let deadline = tokio::time::Instant::now() + wait;
                loop {
                    let gone = i32::try_from(self.pid)
                        .ok()
                        .and_then(rustix::process::Pid::from_raw)
                        .is_none_or(|pid| rustix::process::test_kill_process(pid).is_err());
                    if gone || tokio::time::Instant::now() >= deadline {
                        return gone;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Sends SIGTERM to the new process `pid` (the operator stops this one while the new
/// one starts).
pub(super) fn terminate(pid: u32) {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    if let Some(pid) = pid {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_roles_and_descriptors_are_read() {
        assert_eq!(
            parse("serve:3,serve:4,metrics:5,redirect:6,quic:7").unwrap(),
            vec![
                (Role::Serve, 3),
                (Role::Serve, 4),
                (Role::Metrics, 5),
                (Role::Redirect, 6),
                (Role::Quic, 7)
            ]
        );
    }

    #[test]
    fn a_bad_list_is_refused_with_its_reason() {
        for (text, reason) in [
            ("serve:3,serve:3", "named twice"),
            ("metrics:3,metrics:4", "two metrics sockets"),
            ("serve:2", "a number above 2"),
            ("serve:x", "a number above 2"),
            ("serve", "is not ROLE:DESCRIPTOR"),
            ("quic:3,quic:4", "two quic sockets"),
            ("udp:3", "the roles are serve, metrics, redirect, quic"),
            ("", "is not ROLE:DESCRIPTOR"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(reason), "{text:?}: {error}");
        }
    }

    #[test]
    fn a_descriptor_that_is_not_a_listener_is_refused() {
        let (reader, _writer) = std::io::pipe().unwrap();
        let fd = OwnedFd::from(reader);
        let raw = fd.as_raw_fd();
        // take_listener owns what it takes: hand the pipe over to it.
        std::mem::forget(fd);
        assert_eq!(
            take_listener(raw).unwrap_err(),
            "not a listening TCP socket"
        );
        assert_eq!(take_listener(1_000_000).unwrap_err(), "not open");
    }

    #[test]
    fn the_started_path_is_made_absolute() {
        use std::path::Path;
        assert_eq!(
            absolute(Path::new("/usr/bin/ioserve")).unwrap(),
            Path::new("/usr/bin/ioserve")
        );
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            absolute(Path::new("bin/ioserve")).unwrap(),
            cwd.join("bin/ioserve")
        );
        // A bare name is looked for on PATH: sh is there.
        assert!(absolute(Path::new("sh")).unwrap().ends_with("sh"));
    }

    #[test]
    fn a_listening_socket_is_taken() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let raw = OwnedFd::from(listener);
        let number = raw.as_raw_fd();
        std::mem::forget(raw);
        let taken = take_listener(number).unwrap();
        assert_eq!(taken.local_addr().unwrap(), addr);
    }

    /// A script at `dir/name` with `body`, executable.
    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// std's execvp would hand such a file to /bin/sh; an upgrade refuses it, as
    /// nginx's execve does.
    #[test]
    fn a_file_that_is_not_a_program_is_refused_not_run_by_the_shell() {
        let dir = tempfile::tempdir().unwrap();
        let ran = dir.path().join("ran");
        let path = script(dir.path(), "ioserve", &format!("touch {}\n", ran.display()));
        let error = Upgrade::start(&Executable(Ok(path)), &Sockets::default()).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENOEXEC), "{error}");
        std::thread::sleep(Duration::from_millis(300));
        assert!(!ran.exists(), "the shell ran it");
    }

    /// The new process is not this process's child (systemd waits only for its own),
    /// gets its variables and arguments, and can be stopped through its pidfd.
    #[tokio::test]
    async fn the_new_process_is_a_sibling_with_the_sockets_named() {
        let dir = tempfile::tempdir().unwrap();
        let seen = dir.path().join("seen");
        let path = script(
            dir.path(),
            "ioserve",
            &format!(
                "#!/bin/sh\necho \"$IOSERVE_INHERITED_LISTENERS ${{LISTEN_FDS:-none}}\" > {}.tmp\n\
                 mv {0}.tmp {0}\nexec sleep 30\n",
                seen.display()
            ),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sockets = Sockets::copy(std::slice::from_ref(&listener), None, None).unwrap();
        let upgrade = Upgrade::start(&Executable(Ok(path)), &sockets).unwrap();
        let pid = upgrade.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let parent: u32 = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_ne!(
            parent,
            std::process::id(),
            "the new process is this one's child"
        );
        for _ in 0..100 {
            if seen.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let said = std::fs::read_to_string(&seen).unwrap();
        assert!(said.starts_with("serve:"), "{said}");
        assert!(said.trim_end().ends_with(" none"), "{said}");
        upgrade.process.signal(rustix::process::Signal::KILL);
        assert!(upgrade.process.exited_within(Duration::from_secs(5)).await);
    }
}
