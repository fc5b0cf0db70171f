//! The processes a probe watches: running ones given by pid, or a command probe
//! starts itself, held stopped until the probes are attached so that its very first
//! syscall is counted.

use std::collections::BTreeSet;
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, Pid, PidfdFlags};

use crate::error::{ProbeError, Result};

/// A running process given by pid, watched through a pidfd.
pub struct WatchedProcess {
    pid: u32,
    pidfd: OwnedFd,
}

impl WatchedProcess {
    /// Starts watching `pid`; fails when there is no such process.
    pub fn open(pid: u32) -> Result<Self> {
        let no_such = || ProbeError::NoSuchProcess { pid };
        let raw = Pid::from_raw(pid as i32).ok_or_else(no_such)?;
        let pidfd = pidfd_open(raw, PidfdFlags::empty()).map_err(|err| {
            if err == rustix::io::Errno::SRCH {
                no_such()
            } else {
                ProbeError::Sys {
                    what: "pidfd_open",
                    cause: err.into(),
                }
            }
        })?;
        Ok(WatchedProcess { pid, pidfd })
    }

    /// The pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process has exited (a zombie counts as exited).
    pub fn exited(&self) -> bool {
        let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
    }
}

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildExit {
    /// It exited with this status.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

/// A command started by probe, stopped before its execve until [`release`] is called.
///
/// [`release`]: PausedCommand::release
///
/// Dropped without being released (the probes failed to attach), the child is killed
/// and reaped rather than left stopped.
pub struct PausedCommand {
    pid: i32,
    exec_error: OwnedFd,
    program: String,
    released: bool,
}

/// Starts `argv` stopped: the child blocks signals as the parent did, stops itself
/// with SIGSTOP and only runs execve once continued. Nothing between the fork and
/// the execve allocates or takes a lock (the parent prepares everything), and the
/// stop makes no read or write, so the traced command's counts are its own.
pub fn spawn_paused(argv: &[OsString]) -> Result<PausedCommand> {
    let program = argv
        .first()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let spawn_error = |source| ProbeError::Spawn {
        command: program.clone(),
        cause: source,
    };
    if argv.is_empty() {
        return Err(spawn_error(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no command given",
        )));
    }
    let image = ExecImage::new(argv, &spawn_error)?;
    let (error_read, error_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|err| ProbeError::Sys {
            what: "pipe",
            cause: err.into(),
        })?;
    let error_fd = {
        use std::os::fd::AsRawFd;
        error_write.as_raw_fd()
    };

    // SAFETY: fork in a process that may have threads: the child only calls
    // async-signal-safe functions (sigprocmask, signal, kill, getpid, execve, write,
    // _exit) on memory prepared before the fork, then execs or exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(ProbeError::Sys {
            what: "fork",
            cause: io::Error::last_os_error(),
        });
    }
    if pid == 0 {
        // SAFETY: see above; all pointers point into `image`, which the parent built
        // and which stays alive in the child's copy of the address space.
        unsafe {
            let mut empty = std::mem::zeroed::<libc::sigset_t>();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            // Rust ignores SIGPIPE; commands expect the default.
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::kill(libc::getpid(), libc::SIGSTOP);
            libc::execve(
                image.path.as_ptr(),
                image.arg_ptrs.as_ptr(),
                image.env_ptrs.as_ptr(),
            );
            let errno = *libc::__errno_location();
            libc::write(error_fd, (&errno as *const i32).cast(), 4);
            libc::_exit(127);
        }
    }
    drop(error_write);
    // Wait until the child has stopped itself.
    let mut status = 0;
    // SAFETY: waitpid writes the status of our own child into `status`.
    let rc = unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED) };
    if rc != pid || !libc::WIFSTOPPED(status) {
        return Err(spawn_error(io::Error::other(
            "the child did not stop before its execve",
        )));
    }
    Ok(PausedCommand {
        pid,
        exec_error: error_read,
        program,
        released: false,
    })
}

/// What the child's execve needs, built before the fork (the child must not allocate):
/// the resolved program, and NULL-terminated argv and environment arrays whose
/// pointers point into the strings kept here.
struct ExecImage {
    path: CString,
    arg_ptrs: Vec<*const libc::c_char>,
    env_ptrs: Vec<*const libc::c_char>,
    _strings: Vec<CString>,
}

impl ExecImage {
    /// `argv` (argv[0] found in PATH) with this process's environment; errors from
    /// `spawn_error` (not found, a NUL byte).
    fn new(argv: &[OsString], spawn_error: &dyn Fn(io::Error) -> ProbeError) -> Result<Self> {
        let path = resolve_program(Path::new(&argv[0])).ok_or_else(|| {
            spawn_error(io::Error::new(io::ErrorKind::NotFound, "not found in PATH"))
        })?;
        let c_string = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| {
                spawn_error(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "contains a NUL byte",
                ))
            })
        };
        let path = c_string(path.as_os_str().as_bytes())?;
        let args = argv
            .iter()
            .map(|a| c_string(a.as_bytes()))
            .collect::<Result<Vec<_>>>()?;
        let env = std::env::vars_os()
            .map(|(k, v)| {
                let mut pair = k.as_bytes().to_vec();
                pair.push(b'=');
                pair.extend_from_slice(v.as_bytes());
                c_string(&pair)
            })
            .collect::<Result<Vec<_>>>()?;
        let pointers = |strings: &[CString]| {
            let mut ptrs: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
            ptrs.push(std::ptr::null());
            ptrs
        };
        let (arg_ptrs, env_ptrs) = (pointers(&args), pointers(&env));
        // A CString's bytes live on the heap: moving the vectors keeps the pointers.
        let mut strings = args;
        strings.extend(env);
        Ok(ExecImage {
            path,
            arg_ptrs,
            env_ptrs,
            _strings: strings,
        })
    }
}

impl PausedCommand {
    /// The child's pid (which the command keeps after its execve).
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Lets the child run its execve; fails when the execve fails.
    pub fn release(mut self) -> Result<RunningCommand> {
        self.released = true;
        // SAFETY: plain kill(2) of our own stopped child.
        unsafe { libc::kill(self.pid, libc::SIGCONT) };
        let mut errno = [0u8; 4];
        let read = rustix::io::read(self.exec_error.as_fd(), &mut errno).unwrap_or(0);
        let child = RunningCommand {
            pid: self.pid,
            exit: None,
        };
        if read == 4 {
            let mut child = child;
            child.wait();
            return Err(ProbeError::Spawn {
                command: std::mem::take(&mut self.program),
                cause: io::Error::from_raw_os_error(i32::from_ne_bytes(errno)),
            });
        }
        Ok(child)
    }
}

impl Drop for PausedCommand {
    fn drop(&mut self) {
        if !self.released {
            let mut status = 0;
            // SAFETY: kill(2) and waitpid(2) of our own, never released child.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, &mut status, 0);
            }
        }
    }
}

/// A command started by [`spawn_paused`] and released.
pub struct RunningCommand {
    pid: i32,
    exit: Option<ChildExit>,
}

impl RunningCommand {
    /// The pid.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// How it ended, if it has (reaps it).
    pub fn try_wait(&mut self) -> Option<ChildExit> {
        self.reap(libc::WNOHANG)
    }

    /// Waits for it to end.
    pub fn wait(&mut self) -> Option<ChildExit> {
        self.reap(0)
    }

    /// Sends it `signal` (if it still runs).
    pub fn signal(&self, signal: i32) {
        if self.exit.is_none() {
            // SAFETY: plain kill(2) of our own, not yet reaped child.
            unsafe { libc::kill(self.pid, signal) };
        }
    }

    fn reap(&mut self, flags: i32) -> Option<ChildExit> {
        if self.exit.is_some() {
            return self.exit;
        }
        let mut status = 0;
        // SAFETY: waitpid writes the status of our own child into `status`.
        let rc = unsafe { libc::waitpid(self.pid, &mut status, flags) };
        if rc == self.pid {
            if libc::WIFEXITED(status) {
                self.exit = Some(ChildExit::Code(libc::WEXITSTATUS(status)));
            } else if libc::WIFSIGNALED(status) {
                self.exit = Some(ChildExit::Signal(libc::WTERMSIG(status)));
            }
        }
        self.exit
    }
}

/// `program` itself when it contains a slash, else the first executable file of that
/// name in PATH.
fn resolve_program(program: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Some(program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}

/// The pids whose /proc/PID/comm is one of `names`. The kernel keeps the first 15
/// bytes of a command name, so longer names match by those.
pub fn pids_with_comm(names: &[String]) -> BTreeSet<u32> {
    let names: Vec<&[u8]> = names
        .iter()
        .map(|n| &n.as_bytes()[..n.len().min(15)])
        .collect();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| {
                let comm = comm.trim_end_matches('\n').as_bytes();
                names.contains(&comm)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paused_command_runs_only_when_released() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let argv: Vec<OsString> = vec!["touch".into(), marker.clone().into_os_string()];
        let paused = spawn_paused(&argv).unwrap();
        // Stopped (state T) at the pause before its execve: only then does the absent
        // marker show that nothing ran, rather than that nothing ran yet.
        let stat = format!("/proc/{}/stat", paused.pid());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let line = std::fs::read_to_string(&stat).unwrap_or_default();
            if line
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the paused command never stopped: {line:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!marker.exists(), "the command ran before release");
        let mut running = paused.release().unwrap();
        assert_eq!(running.wait(), Some(ChildExit::Code(0)));
        assert!(marker.exists());
    }

    #[test]
    fn a_paused_command_dropped_unreleased_is_killed() {
        let paused = spawn_paused(&["sleep".into(), "30".into()]).unwrap();
        let pid = paused.pid();
        drop(paused);
        // Reaped: the pid no longer exists (not even as a zombie).
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn a_missing_program_is_an_error_naming_it() {
        let err = spawn_paused(&["no-such-program-xyz".into()]).err().unwrap();
        assert!(err.to_string().contains("no-such-program-xyz"), "{err}");
        let err = spawn_paused(&["/nonexistent/prog".into()])
            .unwrap()
            .release()
            .err()
            .unwrap();
        assert!(err.to_string().contains("/nonexistent/prog"), "{err}");
    }

    #[test]
    fn watching_a_pid_sees_its_exit() {
        assert!(matches!(
            WatchedProcess::open(0x3fff_fff0),
            Err(ProbeError::NoSuchProcess { .. })
        ));
        // Ended by the test, not by a timer: a `sleep 0.2` could end (a zombie counts as
        // exited) before a loaded host runs the first check.
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap();
        let watched = WatchedProcess::open(child.id()).unwrap();
        assert!(!watched.exited());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(watched.exited());
    }
}
