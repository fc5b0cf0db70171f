//! `cargo xtask systemd-vm`: the live upgrade under systemd itself, as PID 1 of an
//! x86_64 guest on Debian's 6.1 kernel.
//!
//! `cargo xtask upgrade` proves the hand-over under load and that the old process
//! says `MAINPID=` on the notify socket; what it cannot show is systemd acting on it.
//! Here the guest's init execs Debian's systemd (the host's, with its libraries) with
//! the repository's own units (contrib/systemd: the hardened `ioserve.service`,
//! `Type=notify`, and `ioserve.socket`) and the targets they depend on, plus one
//! drop-in that sends ioserve's log to a file (the guest has no journal). A one-shot
//! unit then starts the service, renames a second build over /usr/bin/ioserve and
//! sends SIGUSR2 with the README's command. Checked: systemd follows the new process
//! as the main one (the service stays active and running, never restarted), the old
//! process exits, the new one is the second build and serves, `systemctl reload`
//! reaches the new process, and `systemctl stop` stops it cleanly.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context as _, Result};

use crate::guests::{self as guest, expect, Arch, Checks, Initramfs, Machine, Outcome, Script};
use crate::operations::upgrade::build_of;
use crate::util::ioserve_process::IoserveBinary;
use crate::util::which;

/// The checks, run by guest-check.service (see its header).
const CHECK: &str = include_str!("systemd_check.sh");

/// The units ioserve's package installs.
const SERVICE: &str = include_str!("../../../contrib/systemd/ioserve.service");
const SOCKET: &str = include_str!("../../../contrib/systemd/ioserve.socket");
const CONFIG: &str = include_str!("../../../contrib/ioserve.toml");

/// The targets the units' default dependencies name, copied from the host's systemd.
const TARGETS: &[&str] = &[
    "sysinit.target",
    "basic.target",
    "sockets.target",
    "timers.target",
    "paths.target",
    "slices.target",
    "local-fs.target",
    "swap.target",
    "network.target",
    "multi-user.target",
];

/// The only change to the shipped service: its output in a file the checks read.
const LOG_DROP_IN: &str = "[Service]\n\
    StandardOutput=append:/run/ioserve.log\n\
    StandardError=append:/run/ioserve.log\n";

/// The unit systemd starts: the checks, on the serial console.
const CHECK_UNIT: &str = "[Unit]\n\
    Description=systemd-vm's checks\n\
    After=basic.target\n\
    [Service]\n\
    Type=oneshot\n\
    ExecStart=/bin/sh /srv/check.sh\n\
    StandardOutput=tty\n\
    StandardError=tty\n\
    TTYPath=/dev/ttyS0\n";

/// What the test file says.
const HELLO: &str = "served under systemd\n";

/// Options of `cargo xtask systemd-vm`.
#[derive(clap::Args, Debug)]
pub(crate) struct Options {
    /// The build that serves first (default: the debug build, built now)
    #[command(flatten)]
    from: IoserveBinary,
    /// The build SIGUSR2 upgrades to
    #[arg(long, value_name = "PATH")]
    to: PathBuf,
}

/// `cargo xtask systemd-vm`.
pub(crate) fn run(options: &Options) -> Result<()> {
    ensure!(
        options.to.is_file(),
        "--to {}: no such file; give the path of an ioserve executable",
        options.to.display()
    );
    upgrade_under_systemd(&options.from.get()?, &options.to)
}

/// Boots the guest and checks an upgrade from `from` to `to` under systemd.
pub(crate) fn upgrade_under_systemd(from: &Path, to: &Path) -> Result<()> {
    ensure!(
        cfg!(target_arch = "x86_64"),
        "systemd-vm boots an x86_64 guest with the host's systemd: run it on x86_64"
    );
    let builds = (build_of(from)?, build_of(to)?);
    ensure!(
        builds.0 != builds.1,
        "{} and {} both say {:?}: upgrade between two different builds",
        from.display(),
        to.display(),
        builds.0
    );
    let arch = Arch::X86_64;
    arch.ensure_tools()?;
    let kernel = guest::debian_kernel(arch)?;
    let scratch = tempfile::tempdir()?;
    let mut initramfs = Initramfs::new(arch)?;
    for dir in [
        "etc",
        "etc/systemd",
        "etc/systemd/system",
        "etc/systemd/system/ioserve.service.d",
        "etc/ioserve",
        "usr/lib",
        "usr/lib/systemd",
        "usr/lib/systemd/system",
        "srv/downloads",
        "var",
        "var/log",
        "var/lib",
        "run",
    ] {
        initramfs.directory(dir);
    }
    let systemd = Path::new("/usr/lib/systemd/systemd");
    ensure!(
        systemd.is_file(),
        "{} is missing: install systemd",
        systemd.display()
    );
    initramfs.program_with_libraries(systemd, "usr/lib/systemd/systemd")?;
    let systemctl = which("systemctl").context("systemctl is not on PATH: install systemd")?;
    initramfs.program_with_libraries(&systemctl, "usr/bin/systemctl")?;
    initramfs
        .program_with_libraries(&stripped(from, scratch.path(), "from")?, "usr/bin/ioserve")?;
    initramfs.program_with_libraries(&stripped(to, scratch.path(), "to")?, "srv/ioserve-next")?;
    for target in TARGETS {
        let path = Path::new("/usr/lib/systemd/system").join(target);
        initramfs.data(
            &format!("usr/lib/systemd/system/{target}"),
            &guest::read(&path)?,
        );
    }
    initramfs
        .data("usr/lib/systemd/system/ioserve.service", SERVICE.as_bytes())
        .data("usr/lib/systemd/system/ioserve.socket", SOCKET.as_bytes())
        .data(
            "etc/systemd/system/ioserve.service.d/guest-log.conf",
            LOG_DROP_IN.as_bytes(),
        )
        .data(
            "etc/systemd/system/guest-check.service",
            CHECK_UNIT.as_bytes(),
        )
        .data("etc/ioserve/ioserve.toml", CONFIG.as_bytes())
        .data("srv/downloads/hello.txt", HELLO.as_bytes())
        .data("srv/check.sh", CHECK.as_bytes());
    let machine = Machine {
        arch,
        name: "systemd".into(),
        // One CPU: CI runs it beside the other guests, on the core they leave.
        nodes: vec![(1, 1024)],
        append: String::new(),
        timeout: Duration::from_secs(300),
        single_threaded: false,
    };
    let sections = machine.boot("systemd-vm", &kernel, &initramfs.finish(&script()))?;
    let mut checks = Checks::new("systemd-vm");
    checks.add("x86_64 6.1", results(&sections, &builds));
    checks.finish()
}

/// A copy of `binary` without its debug sections (the debug build's are most of its
/// 100 MB, which the guest would unpack for nothing).
fn stripped(binary: &Path, dir: &Path, name: &str) -> Result<PathBuf> {
    let copy = dir.join(name);
    let status = std::process::Command::new("objcopy")
        .arg("--strip-debug")
        .arg(binary)
        .arg(&copy)
        .status()
        .context("cannot run objcopy (binutils)")?;
    ensure!(
        status.success(),
        "objcopy --strip-debug {} failed",
        binary.display()
    );
    Ok(copy)
}

/// init's part: hand PID 1 to systemd, which starts the checks' unit.
fn script() -> Script {
    let mut script = Script::default();
    script.shell(
        "exec /usr/lib/systemd/systemd --unit=guest-check.service --log-target=kmsg \
         --log-level=info --show-status=0",
    );
    script
}

/// `KEY=VALUE` lines as a lookup.
fn property<'a>(lines: &'a [String], key: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or("")
}

/// The checks of the guest's sections; `builds` are what the old and the new binary
/// say they are.
fn results(s: &guest::Sections, builds: &(String, String)) -> Vec<(String, Outcome)> {
    let started = s.ok("started").cloned().unwrap_or_default();
    let upgraded = s.ok("upgraded").cloned().unwrap_or_default();
    let (old, new) = (
        property(&started, "MainPID").to_string(),
        property(&upgraded, "MainPID").to_string(),
    );
    let running = |lines: &[String]| {
        property(lines, "ActiveState") == "active" && property(lines, "SubState") == "running"
    };
    vec![
        (
            "systemd is PID 1".to_string(),
            s.ok("pid1").and_then(|l| {
                expect(
                    l.first().map(String::as_str) == Some("systemd"),
                    l.join(" | "),
                )
            }),
        ),
        (
            "the shipped units start ioserve (Type=notify, socket)".into(),
            s.ok("start").map(drop).and_then(|()| {
                expect(
                    running(&started) && old.parse::<u32>().is_ok_and(|pid| pid > 1),
                    started.join(" | "),
                )
            }),
        ),
        (
            "it serves before the upgrade".into(),
            s.ok("served-before")
                .and_then(|l| expect(l.concat() == HELLO.trim_end(), l.join(" | "))),
        ),
        (
            "SIGUSR2 with the README's command".into(),
            s.ok("upgrade").map(drop),
        ),
        (
            "systemd follows the new main PID; the old process exits".into(),
            expect(
                !new.is_empty()
                    && new != "0"
                    && new != old
                    && property(&upgraded, "Old") == "exited",
                upgraded.join(" | "),
            ),
        ),
        (
            "the service stays active, never restarted".into(),
            expect(
                running(&upgraded) && property(&upgraded, "NRestarts") == "0",
                upgraded.join(" | "),
            ),
        ),
        (
            "the new main process runs the new file, in the service's cgroup".into(),
            s.ok("new-process").and_then(|l| {
                expect(
                    l.first().map(String::as_str) == Some("/usr/bin/ioserve")
                        && l.iter().any(|c| c.ends_with("/ioserve.service")),
                    l.join(" | "),
                )
            }),
        ),
        (
            "the new process serves".into(),
            s.ok("served-after")
                .and_then(|l| expect(l.concat() == HELLO.trim_end(), l.join(" | "))),
        ),
        (
            "the log names the old build, then the new one".into(),
            s.ok("log")
                .and_then(|l| builds_logged(l, &old, &new, builds)),
        ),
        (
            "systemctl reload reaches the new process".into(),
            s.ok("reload").and_then(|l| {
                expect(running(l) && property(l, "MainPID") == new, l.join(" | "))?;
                let log = s.ok("log")?;
                reloaded_once_after_upgrade(log)
            }),
        ),
        (
            "systemctl stop stops it cleanly".into(),
            s.ok("stop").and_then(|l| {
                expect(
                    property(l, "ActiveState") == "inactive" && property(l, "Result") == "success",
                    l.join(" | "),
                )
            }),
        ),
        (
            "systemd waited for the new process and stopped it gracefully".into(),
            s.ok("systemd-log").and_then(|l| systemd_said(l)),
        ),
    ]
}

/// The log has the old process's start-up line with the first build and the new
/// process's with the second, and the old process's word that the new one serves.
fn builds_logged(lines: &[String], old: &str, new: &str, builds: &(String, String)) -> Outcome {
    let start_of = |pid: &str| {
        lines
            .iter()
            .find(|l| l.contains(" starting") && l.contains(&format!("pid={pid}")))
    };
    let (Some(old_line), Some(new_line)) = (start_of(old), start_of(new)) else {
        return Err(format!(
            "no start-up line for pid {old} or {new}: {}",
            lines.join(" | ")
        ));
    };
    expect(
        old_line.contains(&builds.0) && new_line.contains(&builds.1),
        format!(
            "want {:?} then {:?}: {old_line:?}, {new_line:?}",
            builds.0, builds.1
        ),
    )?;
    expect(
        lines.iter().any(|l| {
            l.contains("SIGUSR2: the new process serves") && l.contains(&format!("pid={new}"))
        }),
        format!("no hand-over line naming pid={new}: {}", lines.join(" | ")),
    )
}

/// What systemd logged about the unit: it stopped the service (a graceful stop: no
/// SIGKILL), and never said that it supervises a process that is not its child (it
/// cannot wait for one, and so kills it at once on stop), refused a notification, or
/// left a process behind.
fn systemd_said(lines: &[String]) -> Outcome {
    const WRONG: [&str; 4] = [
        "not our child",
        "reception only permitted",
        "SIGKILL",
        "remains running",
    ];
    let wrong: Vec<&String> = lines
        .iter()
        .filter(|l| WRONG.iter().any(|w| l.contains(w)))
        .collect();
    expect(wrong.is_empty(), format!("systemd said: {wrong:?}"))?;
    expect(
        lines.iter().any(|l| l.contains("Stopped ioserve.service")),
        format!(
            "systemd never said it stopped the service: {}",
            lines.join(" | ")
        ),
    )
}

/// One reload, logged after the hand-over (when the old process no longer serves).
fn reloaded_once_after_upgrade(lines: &[String]) -> Outcome {
    let handed = lines
        .iter()
        .position(|l| l.contains("SIGUSR2: the new process serves"));
    let reloads: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("SIGHUP: configuration reloaded"))
        .map(|(i, _)| i)
        .collect();
    expect(
        matches!((handed, reloads.as_slice()), (Some(h), [r]) if r > &h),
        format!("hand-over at line {handed:?}, reloads at lines {reloads:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    /// What systemd 252 logged when the new process was the old one's child: it could
    /// not wait for it and killed it on stop.
    #[test]
    fn an_alien_main_pid_killed_on_stop_fails() {
        let alien = lines(
            "systemd[1]: ioserve.service: Supervising process 114 which is not our child. We'll most likely not notice when it exits.\n\
             systemd[1]: ioserve.service: Killing process 114 (ioserve) with signal SIGKILL.\n\
             systemd[1]: ioserve.service: Unit process 114 (ioserve) remains running after unit stopped.\n\
             systemd[1]: Stopped ioserve.service - ioserve download daemon.",
        );
        assert!(systemd_said(&alien).is_err());
        let graceful = lines(
            "systemd[1]: Stopping ioserve.service - ioserve download daemon...\n\
             systemd[1]: ioserve.service: Deactivated successfully.\n\
             systemd[1]: Stopped ioserve.service - ioserve download daemon.",
        );
        assert!(systemd_said(&graceful).is_ok());
        assert!(systemd_said(&graceful[..2]).is_err());
    }

    #[test]
    fn the_reload_must_come_after_the_hand_over() {
        let log = lines(
            "a INFO SIGUSR2: the new process serves; this one stops accepting pid=114\n\
             b INFO SIGHUP: configuration reloaded; new requests use it",
        );
        assert!(reloaded_once_after_upgrade(&log).is_ok());
        let before: Vec<String> = log.iter().rev().cloned().collect();
        assert!(reloaded_once_after_upgrade(&before).is_err());
        assert!(reloaded_once_after_upgrade(&log[..1]).is_err());
    }

    #[test]
    fn the_builds_are_read_from_the_start_up_lines() {
        let log = lines(
            "t INFO ioserve: ioserve 0.1.0 (optimized build) starting pid=96\n\
             t INFO ioserve: ioserve 0.1.0 (debug build) starting pid=114\n\
             t INFO SIGUSR2: the new process serves; this one stops pid=114",
        );
        let builds = (
            "ioserve 0.1.0 (optimized build)".to_string(),
            "ioserve 0.1.0 (debug build)".to_string(),
        );
        assert!(builds_logged(&log, "96", "114", &builds).is_ok());
        assert!(builds_logged(&log, "114", "96", &builds).is_err());
        assert!(builds_logged(&log, "96", "", &builds).is_err());
    }
}
