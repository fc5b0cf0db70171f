//! `numa` as a drop-in numactl and numastat: linked under those names (argv[0]) it must
//! accept and refuse what Debian's numactl 2.0.16 accepts and refuses, and print what
//! it prints. Each case runs both tools with the same arguments.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

/// A directory holding `numactl` and `numastat` links to the `numa` binary.
struct Ours {
    dir: tempfile::TempDir,
}

impl Ours {
    fn new() -> Ours {
        let dir = tempfile::tempdir().unwrap();
        for name in ["numactl", "numastat"] {
            symlink(env!("CARGO_BIN_EXE_numa"), dir.path().join(name)).unwrap();
        }
        Ours { dir }
    }

    fn path(&self, tool: &str) -> PathBuf {
        self.dir.path().join(tool)
    }
}

fn run(program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .env_remove("NUMASTAT_WIDTH")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (cargo xtask ci installs Debian's numactl)",
                program.display()
            )
        })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_same_status(args: &[&str], mine: &Output, theirs: &Output) {
    assert_eq!(
        mine.status.code(),
        theirs.status.code(),
        "numactl {args:?}: ours {}, numactl {}",
        text(&mine.stderr),
        text(&theirs.stderr)
    );
}

/// numactl's message: its first stderr line up to the usage text it runs into.
fn message(stderr: &[u8]) -> String {
    let text = text(stderr);
    let line = text.lines().next().unwrap_or_default();
    line.split("usage:")
        .next()
        .unwrap_or_default()
        .trim_end()
        .to_string()
}

#[test]
fn numactl_order_rules_match_debians_numactl() {
    let ours = Ours::new();
    // (arguments, whether numactl's own message must lead ours)
    let cases: &[(&[&str], bool)] = &[
        (&["-i", "0", "-m", "0", "true"], true),
        (&["-m", "0", "-i", "0", "true"], true),
        (&["-l", "-l", "true"], true),
        (&["-m", "0", "-b", "true"], true),
        (&["-b", "-m", "0", "true"], false),
        (&["-m", "0", "-a", "true"], true),
        (&["-a", "-m", "0", "true"], false),
        (&["-m", "0", "-H"], true),
        (&["-H", "-m", "0"], false),
        (&["-s", "-m", "0", "-m", "0"], false),
        (&["-m", "same", "true"], true),
        (&["-m", "0", "-N", "same", "true"], false),
        (&["-m", "0", "-i", "same", "true"], true),
        (&["-p", "0", "true"], false),
        (&["-p", "0,0", "true"], false),
        (&["-L", "1M", "true"], true),
        (&["-o", "4k", "true"], true),
        (&["-u", "true"], true),
        (&["-M", "0644", "true"], true),
        (&["-L", "1M", "-N", "0", "true"], true),
        (&["-L", "1M", "-C", "0", "true"], true),
        (&["--touch", "true"], true),
        (&["--verify", "true"], true),
        (&["-d", "true"], true),
        (&["-D", "true"], true),
        (&["-t", "-m", "0", "true"], false),
        (&["-M", "9", "true"], false),
        (&["-I", "x", "true"], false),
        (&["-x", "true"], false),
        (&["--hardware=3"], false),
        (&["-i"], false),
        (&[], false),
        (&["--inter", "0", "true"], false),
        (&["-C", "0", "-N", "0", "true"], false),
        (&["-m", "0", "--", "false"], false),
        (&["-m", "0", "/no/such/program"], false),
    ];
    for (args, same_message) in cases {
        let theirs = run(Path::new("numactl"), args);
        let mine = run(&ours.path("numactl"), args);
        assert_same_status(args, &mine, &theirs);
        if *same_message {
            let (a, b) = (message(&mine.stderr), message(&theirs.stderr));
            assert!(
                !b.is_empty() && a.starts_with(&b),
                "numactl {args:?}: ours {a:?}, numactl {b:?}"
            );
        }
    }
}

#[test]
fn numactl_show_after_each_option_matches_debians_numactl() {
    let ours = Ours::new();
    let cases: &[&[&str]] = &[
        &["-s"],
        &["-m", "0", "-s"],
        &["-i", "0", "-s"],
        &["-p", "0", "-s"],
        &["-l", "-s"],
        &["-b", "-m", "0", "-s"],
        &["-N", "0", "-s"],
        &["-C", "0", "-s"],
        &["-a", "-C", "all", "-s"],
        &["-m", "0", "-N", "same", "-s"],
    ];
    for args in cases {
        let theirs = run(Path::new("numactl"), args);
        let mine = run(&ours.path("numactl"), args);
        assert_eq!(
            mine.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&mine.stderr)
        );
        assert_eq!(
            without_interleave_next(&text(&mine.stdout)),
            without_interleave_next(&text(&theirs.stdout)),
            "numactl {args:?}"
        );
    }
}

/// `--show`'s next interleave node moves with every page a process allocates, so two
/// programs may disagree on it where there are several nodes: the number is left out.
fn without_interleave_next(show: &str) -> String {
    show.lines()
        .map(|line| {
            if line.ends_with("(interleave next)") {
                "preferred node: N (interleave next)"
            } else if line.starts_with("interleavenode: ") {
                "interleavenode: N"
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Removes the System V segment keyed by `key_file` (project id 0), if any.
fn remove_segment(key_file: &Path) {
    let path = std::ffi::CString::new(key_file.to_str().unwrap()).unwrap();
    // SAFETY: path is NUL-terminated and outlives the calls; shmget and shmctl take
    // plain values and a null buffer for IPC_RMID.
    unsafe {
        let key = libc::ftok(path.as_ptr(), 0);
        if key < 0 {
            return;
        }
        let id = libc::shmget(key, 0, 0);
        if id >= 0 {
            libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
        }
    }
}

#[test]
fn shared_memory_regions_match_debians_numactl() {
    let ours = Ours::new();
    let shm = tempfile::tempdir_in("/dev/shm").expect("/dev/shm is a tmpfs");
    let (file, key) = (shm.path().join("region"), shm.path().join("key"));
    let (file, key) = (file.to_str().unwrap(), key.to_str().unwrap());
    // Each case runs on a fresh file or segment, for numactl and then for ours.
    let cases: &[&[&str]] = &[
        &[
            "-L",
            "64k",
            "-f",
            file,
            "-m",
            "0",
            "--touch",
            "--dump",
            "--dump-nodes",
        ],
        &["-L", "64k", "-o", "8k", "-f", file, "-i", "0", "-d"],
        &["-L", "64k", "-f", file, "-l", "-d"],
        &["-L", "64k", "-f", file, "-d"],
        &["-L", "64k", "-o", "64k", "-f", file, "--touch"],
        &["-L", "64k", "-f", file, "-t", "-m", "0", "-T", "-D"],
        &["-L", "64k", "-f", file, "-m", "0", "-V"],
        &["-L", "64k", "-f", file, "-m", "0", "true"],
        &["-L", "64k", "-f", file, "-L", "4k"],
        &["-L", "64k", "-f", file, "-N", "0"],
        &["-N", "0", "-L", "64k", "-f", file],
        &["-m", "0", "-L", "64k", "-f", file],
        &["-f", file],
        &["-L", "1m", "-S", key, "-m", "0", "-T", "-d", "-D"],
        &[
            "-L", "1m", "-M", "0640", "-I", "3", "-S", key, "-i", "0", "-d",
        ],
        &["-S", key, "-d"],
    ];
    for args in cases {
        let mut results = Vec::new();
        for program in [Path::new("numactl"), &ours.path("numactl")] {
            let _ = std::fs::remove_file(file);
            remove_segment(Path::new(key));
            let _ = std::fs::remove_file(key);
            results.push(run(program, args));
        }
        remove_segment(Path::new(key));
        let (theirs, mine) = (&results[0], &results[1]);
        assert_same_status(args, mine, theirs);
        if theirs.status.success() {
            assert_eq!(text(&mine.stdout), text(&theirs.stdout), "numactl {args:?}");
            assert_eq!(text(&mine.stderr), text(&theirs.stderr), "numactl {args:?}");
        }
    }
    // The policy lives with the segment: a later run without a policy dumps it.
    let _ = std::fs::remove_file(key);
    let create = run(&ours.path("numactl"), &["-L", "1m", "-S", key, "-i", "0"]);
    assert!(create.status.success(), "{}", text(&create.stderr));
    let theirs = run(Path::new("numactl"), &["-S", key, "-d"]);
    let mine = run(&ours.path("numactl"), &["-S", key, "-d"]);
    remove_segment(Path::new(key));
    assert_eq!(text(&mine.stdout), text(&theirs.stdout));
    assert_eq!(
        text(&theirs.stdout),
        "0000000000000000-0000000000100000: interleave : 0 \n"
    );
}

/// Stopped copies of `sleep` under a unique name, so that their memory holds still and
/// a pattern finds only them.
struct Sleepers {
    children: Vec<Child>,
    name: String,
    _dir: tempfile::TempDir,
}

impl Sleepers {
    fn start(count: usize) -> Sleepers {
        let dir = tempfile::tempdir().unwrap();
        let name = format!("dropin{}", std::process::id());
        let program = dir.path().join(&name);
        // A link, not a copy: a file this process had open for writing can be inherited
        // by a child that another test thread forks at that moment, and exec then fails
        // with ETXTBSY. The kernel names the process after the link (comm and argv[0]).
        symlink("/bin/sleep", &program).unwrap();
        let children: Vec<Child> = (0..count)
            .map(|_| Command::new(&program).arg("600").spawn().unwrap())
            .collect();
        // Let them reach their sleep (exec'd under the link's name, asleep) before
        // stopping them, and wait until each is stopped: a signal is taken when its
        // process next runs, and only then does its memory hold still.
        for child in &children {
            wait_for_state(child.id(), &name, 'S');
            // SAFETY: kill takes plain values; the child is ours and not yet reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGSTOP) };
            wait_for_state(child.id(), &name, 'T');
        }
        Sleepers {
            children,
            name,
            _dir: dir,
        }
    }

    fn pids(&self) -> Vec<String> {
        self.children.iter().map(|c| c.id().to_string()).collect()
    }
}

/// Waits (at most 30 s: generous, for a slow and loaded CI host) until process `pid`
/// runs the program named `comm` and is in `state` (`/proc/PID/stat`); fails with the
/// last line seen.
fn wait_for_state(pid: u32, comm: &str, state: char) {
    let wanted = format!("{pid} ({comm}) {state} ");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.starts_with(&wanted) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} never came to {wanted:?}; last seen: {stat:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn numastat_process_tables_match_debians_numastat() {
    let ours = Ours::new();
    let sleepers = Sleepers::start(2);
    let pids = sleepers.pids();
    let (a, b, name) = (pids[0].as_str(), pids[1].as_str(), sleepers.name.as_str());
    let cases: &[&[&str]] = &[
        &["-p", a],
        &["-p", a, b],
        &[b, "-p", a],
        &["-v", "-p", a, b],
        &["-c", "-p", name],
        &["-cv", name],
        &["-z", "-p", a],
        &["-s", "-p", a, b],
        &["-s0", "-z", "-c", a, b],
        &["-p", "999999999"],
        &["-V"],
        &["-x"],
    ];
    for args in cases {
        let theirs = run(Path::new("numastat"), args);
        let mine = run(&ours.path("numastat"), args);
        assert_eq!(
            mine.status.code(),
            theirs.status.code(),
            "numastat {args:?}"
        );
        if args == &["-V"] {
            let prefix = "numastat version: 20130723: ";
            assert!(text(&theirs.stdout).starts_with(prefix));
            assert!(
                text(&mine.stdout).starts_with(prefix),
                "{}",
                text(&mine.stdout)
            );
            continue;
        }
        assert_eq!(
            text(&mine.stdout),
            text(&theirs.stdout),
            "numastat {args:?}"
        );
        if theirs.status.success() {
            assert_eq!(
                text(&mine.stderr),
                text(&theirs.stderr),
                "numastat {args:?}"
            );
        }
    }
    // A pattern that finds nothing says so, then shows the system's counters (which
    // move between the two runs).
    let args = ["-p", "nothing-is-called-this-dropin"];
    let (theirs, mine) = (
        run(Path::new("numastat"), &args),
        run(&ours.path("numastat"), &args),
    );
    let first_line = |o: &Output| text(&o.stdout).lines().next().map(str::to_string);
    assert_eq!(first_line(&mine), first_line(&theirs));
    assert_eq!(mine.status.code(), theirs.status.code());
}

/// Runs both numastats with each argument list (and each `NUMASTAT_WIDTH`) in a mount
/// namespace where a snapshot of a multi-node machine replaces
/// `/sys/devices/system/node`, and returns the outputs that differ.
fn numastat_on_a_snapshot(ours: &Ours, snapshot: &Path, cases: &[&str]) -> Vec<String> {
    let script_lines: Vec<String> = cases
        .iter()
        .flat_map(|args| {
            ["", "NUMASTAT_WIDTH=40", "NUMASTAT_WIDTH=100"].map(|width| {
                format!(
                    "env {width} numastat {args} > theirs 2>&1; echo $? >> theirs; \
                     env {width} {ours} {args} > mine 2>&1; echo $? >> mine; \
                     cmp -s theirs mine || {{ echo '--- {width} numastat {args}'; diff theirs mine; }}",
                    ours = ours.path("numastat").display()
                )
            })
        })
        .collect();
    let script = format!(
        "set -e; mount --bind {}/sys/devices/system/node /sys/devices/system/node; cd {}; set +e; {}",
        snapshot.display(),
        ours.dir.path().display(),
        script_lines.join("\n")
    );
    let output = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .expect("unshare (util-linux) runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout)
        .split("--- ")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn numastat_system_tables_match_debians_numastat_on_snapshots() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a snapshot over /sys/devices/system/node needs root");
        return;
    }
    let ours = Ours::new();
    let cases = [
        "",
        "-n",
        "-m",
        "-c",
        "-cm",
        "-z",
        "-s",
        "-s2",
        "-s9",
        "-mnz",
        "-c -s1 -n",
        "-cs0 -m",
        "-zcs2",
        "-m -n -v",
    ];
    for snapshot in ["sysfs-4node", "sysfs-3node-cpuless"] {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata")
            .join(snapshot);
        let differences = numastat_on_a_snapshot(&ours, &root, &cases);
        assert!(
            differences.is_empty(),
            "{snapshot}:\n{}",
            differences.join("\n")
        );
    }
}
