//! The errors of probe's library.

use std::path::PathBuf;

/// Everything that can stop a probe.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The process may not load BPF programs or open perf events.
    #[error(
        "needs root (or CAP_BPF and CAP_PERFMON) to load BPF programs; \
         running as uid {uid} without them"
    )]
    NotPrivileged {
        /// The effective user id.
        uid: u32,
    },
    /// The kernel exposes no BTF, which CO-RE relocations need.
    #[error(
        "this kernel has no BTF ({path} is missing; it needs CONFIG_DEBUG_INFO_BTF): \
         the BPF probes cannot load; `probe clock` timings, `probe faults` counts and \
         `probe doctor`'s system checks need no BTF and still work"
    )]
    NoBtf {
        /// Where BTF was looked for.
        path: PathBuf,
    },
    /// A task name to filter on that no task can have.
    #[error("invalid task name '{name}': {why}; a task name (comm) is 1 to 15 bytes without NUL")]
    InvalidTaskName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// Loading a BPF object failed.
    #[error("loading the {object} BPF programs failed: {cause}")]
    Load {
        /// Which object ("syscalls", "runq", "faults").
        object: &'static str,
        /// libbpf's error.
        cause: libbpf_rs::Error,
    },
    /// The kernel lacks (or refuses) an attach point.
    #[error("cannot attach to {point}: {cause}; {still_works}")]
    Attach {
        /// The attach point, e.g. "raw tracepoint sys_enter".
        point: String,
        /// libbpf's error.
        cause: libbpf_rs::Error,
        /// What does not need this attach point.
        still_works: &'static str,
    },
    /// perf_event_open failed.
    #[error("perf_event_open({event}, cpu {cpu}) failed: {cause}")]
    PerfEvent {
        /// The event's name.
        event: &'static str,
        /// The CPU it was opened on.
        cpu: u32,
        /// The system error.
        cause: std::io::Error,
    },
    /// Reading or updating a BPF map failed.
    #[error("reading the BPF map {map} failed: {cause}")]
    Map {
        /// The map's name.
        map: &'static str,
        /// libbpf's error.
        cause: libbpf_rs::Error,
    },
    /// A file of /proc or /sys could not be read.
    #[error("cannot read {path}: {cause}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The system error.
        cause: std::io::Error,
    },
    /// A process to trace does not exist.
    #[error("no process with pid {pid}")]
    NoSuchProcess {
        /// The pid asked for.
        pid: u32,
    },
    /// Starting the command to trace failed.
    #[error("cannot run {command}: {cause}")]
    Spawn {
        /// The command.
        command: String,
        /// The system error.
        cause: std::io::Error,
    },
    /// The report file (`-o FILE`) cannot be created or written.
    #[error("cannot write the report to {} (-o): {cause}", path.display())]
    Output {
        /// The file.
        path: std::path::PathBuf,
        /// The system error.
        cause: std::io::Error,
    },
    /// Another system call failed.
    #[error("{what} failed: {cause}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The system error.
        cause: std::io::Error,
    },
}

/// probe's result type.
pub type Result<T, E = ProbeError> = std::result::Result<T, E>;
