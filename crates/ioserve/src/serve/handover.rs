//! Live binary upgrades, as nginx's (SIGUSR2): the running process starts the binary
//! now on disk with its listening sockets inherited, waits for the new process's word
//! that it serves, then stops accepting and finishes what it has in flight.
//!
//! Both sides live here. The old process dups its sockets without close-on-exec, names
//! them in [`LISTENERS_VAR`] (`serve:3,serve:4,metrics:5`), and gives the new process
//! the writing end of a pipe in [`READY_VAR`]; the new process takes the sockets
//! ([`inherited`]) instead of binding or of socket activation's, starts its workers,
//! and writes `ready` ([`ReadyPipe`]). The sockets are the same kernel objects in both
//! processes, so a connection waiting in a backlog is accepted by one or the other and
//! none is refused while the two overlap. Under systemd the old process, still the main
//! one, then names the new one with `MAINPID=`.

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Read as _, Write as _};
use std::net::TcpListener;
use std::os::fd::{AsFd, AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
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
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Serve => "serve",
            Role::Metrics => "metrics",
            Role::Redirect => "redirect",
        }
    }

    fn named(name: &str) -> Option<Role> {
        [Role::Serve, Role::Metrics, Role::Redirect]
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
        })
    }

    fn roles(&self) -> impl Iterator<Item = (Role, &OwnedFd)> {
        let serve = self.serve.iter().map(|fd| (Role::Serve, fd));
        let metrics = self.metrics.iter().map(|fd| (Role::Metrics, fd));
        let redirect = self.redirect.iter().map(|fd| (Role::Redirect, fd));
        serve.chain(metrics).chain(redirect)
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
    };
    for (role, fd) in passed {
        let listener =
            take_listener(fd).map_err(|why| refused(format!("descriptor {fd}: {why}")))?;
        match role {
            Role::Serve => inherited.serve.push(listener),
            Role::Metrics => inherited.metrics = Some(listener),
            Role::Redirect => inherited.redirect = Some(listener),
        }
    }
    if inherited.serve.is_empty() {
        return Err(refused("no serving socket".into()));
    }
    Ok(Some(inherited))
}

/// `serve:3,serve:4,metrics:5` as roles and descriptors: each descriptor once, at
/// most one metrics and one redirect socket, descriptors above 2.
fn parse(text: &str) -> Result<Vec<(Role, RawFd)>, String> {
    let mut passed: Vec<(Role, RawFd)> = Vec::new();
    for item in text.split(',') {
        let (role, fd) = item
            .split_once(':')
            .ok_or_else(|| format!("{item:?} is not ROLE:DESCRIPTOR"))?;
        let role = Role::named(role)
            .ok_or_else(|| format!("{role:?}: the roles are serve, metrics, redirect"))?;
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
    child: tokio::process::Child,
    ready: std::fs::File,
}

/// How the start of a new binary ended.
#[derive(Debug)]
pub(super) enum Outcome {
    /// It serves; this process must stop accepting.
    Ready,
    /// It ended before it said so.
    Exited(io::Result<ExitStatus>),
    /// It said nothing within [`READY_WAIT`]; it has been stopped.
    Silent,
}

impl Upgrade {
    /// Starts `executable` with this process's arguments and environment, the
    /// `sockets` inherited, and the pipe for its word.
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
        let mut command = tokio::process::Command::new(path);
        command
            .args(std::env::args_os().skip(1).collect::<Vec<OsString>>())
            .env(LISTENERS_VAR, names.join(","))
            .env(READY_VAR, writer.as_raw_fd().to_string())
            .stdin(Stdio::null());
        for var in ACTIVATION_VARS {
            command.env_remove(var);
        }
        let child = command.spawn();
        drop(writer);
        drop(passed);
        Ok(Upgrade {
            child: child?,
            ready: std::fs::File::from(OwnedFd::from(ready)),
        })
    }

    /// The new process's id.
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits for the new process's word, its end, or [`READY_WAIT`].
    pub(super) async fn outcome(mut self) -> Outcome {
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
            status = self.child.wait() => return Outcome::Exited(status),
            () = tokio::time::sleep(READY_WAIT) => {
                let _ = self.child.kill().await;
                return Outcome::Silent;
            }
        };
        match said_ready {
            true => Outcome::Ready,
            // The pipe closed without the word: the process is ending, or has.
            false => Outcome::Exited(self.child.wait().await),
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

    #[test]
    fn the_roles_and_descriptors_are_read() {
        assert_eq!(
            parse("serve:3,serve:4,metrics:5,redirect:6").unwrap(),
            vec![
                (Role::Serve, 3),
                (Role::Serve, 4),
                (Role::Metrics, 5),
                (Role::Redirect, 6)
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
            ("udp:3", "the roles are serve, metrics, redirect"),
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
}
