//! `cargo xtask numa-vm`: `numa` on a real multi-node kernel.
//!
//! This machine has one NUMA node, so binding can only be tested for real in a guest:
//! Debian's kernel under qemu-system-x86_64 (TCG) with 2 and then 4 virtual nodes, and an
//! initramfs holding busybox-static, a statically linked `numa`, the `touch` example
//! (which reports its CPU and the nodes of its pages) and, when the host has it,
//! Debian's numactl with its libraries. The guest's init runs a fixed list of commands
//! between markers on the serial console and powers off; the checks are made here, on
//! the captured console.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};

use crate::cpio::Archive;
use crate::{cargo, ensure_packages, project_root, step};

const PACKAGES: &[(&str, &str)] = &[
    ("qemu-system-x86", "qemu-system-x86_64"),
    ("busybox-static", "busybox"),
];

/// How long one guest may take from start to power-off (TCG on 2 busy cores).
const BOOT_TIMEOUT: Duration = Duration::from_secs(240);

/// MiB the `touch` runs allocate: 8192 pages, far above the guest's background noise.
const TOUCH_MIB: u64 = 32;

/// Boots the 2- and 4-node guests and checks numa in each.
pub(crate) fn run() -> Result<()> {
    ensure!(
        cfg!(target_arch = "x86_64"),
        "numa-vm boots an x86_64 guest with x86_64 binaries of numa: run it on x86_64"
    );
    ensure_packages(PACKAGES)?;
    let work = project_root().join("target/numa-vm");
    fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let kernel = debian_kernel(&work)?;
    let binaries = static_binaries(&work)?;
    let mut failures = Vec::new();
    for nodes in [2, 4] {
        let guest = Guest { nodes };
        let started = Instant::now();
        let initrd = work.join(format!("initrd-{nodes}node.cpio"));
        fs::write(&initrd, guest.initramfs(&binaries)?)
            .with_context(|| format!("cannot write {}", initrd.display()))?;
        let console = guest.boot(&kernel, &initrd, &work)?;
        let sections = Sections::parse(&console)
            .with_context(|| format!("{nodes}-node guest: console:\n{}", tail(&console)))?;
        let results = guest.check(&sections);
        for (name, outcome) in &results {
            match outcome {
                Ok(()) => eprintln!("xtask numa-vm: {nodes} nodes: {name}: ok"),
                Err(why) => {
                    eprintln!("xtask numa-vm: {nodes} nodes: {name}: FAILED: {why}");
                    failures.push(format!("{nodes} nodes: {name}: {why}"));
                }
            }
        }
        eprintln!(
            "xtask numa-vm: {nodes}-node guest done in {:.1?}",
            started.elapsed()
        );
    }
    if !failures.is_empty() {
        bail!(
            "numa-vm: {} checks failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    Ok(())
}

/// The kernel image of Debian's `linux-image-amd64`, downloaded once into `work`.
fn debian_kernel(work: &Path) -> Result<PathBuf> {
    let vmlinuz = work.join("vmlinuz");
    if vmlinuz.is_file() {
        return Ok(vmlinuz);
    }
    // The metapackage depends on the versioned image package that holds the kernel.
    let depends = output(Command::new("apt-cache").args(["depends", "linux-image-amd64"]))?;
    let package = depends
        .lines()
        .find_map(|line| line.trim().strip_prefix("Depends: "))
        .filter(|p| p.starts_with("linux-image-"))
        .context("apt-cache depends linux-image-amd64 names no linux-image-* package")?
        .to_string();
    let download = |work: &Path| {
        let mut command = Command::new("apt-get");
        command.current_dir(work).args(["-q", "download", &package]);
        step(&format!("apt-get download {package}"), command)
    };
    if download(work).is_err() {
        // Stale package lists name a version the mirror no longer has.
        let mut update = Command::new("apt-get");
        update.args(["-q", "update"]);
        step("apt-get update", update)?;
        download(work)?;
    }
    let deb = fs::read_dir(work)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{package}_")) && n.ends_with(".deb"))
        })
        .with_context(|| {
            format!(
                "apt-get download left no {package}_*.deb in {}",
                work.display()
            )
        })?;
    let version = package.trim_start_matches("linux-image-");
    let member = format!("./boot/vmlinuz-{version}");
    let mut unpack = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(&deb)
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run dpkg-deb")?;
    let tar = Command::new("tar")
        .args(["-x", "-O", "-f", "-", &member])
        .stdin(unpack.stdout.take().expect("stdout is piped"))
        .output()
        .context("cannot run tar")?;
    unpack.wait()?;
    ensure!(
        tar.status.success() && !tar.stdout.is_empty(),
        "cannot extract {member} from {}: {}",
        deb.display(),
        String::from_utf8_lossy(&tar.stderr)
    );
    fs::write(&vmlinuz, &tar.stdout)?;
    fs::remove_file(&deb)?;
    Ok(vmlinuz)
}

/// Paths of the statically linked guest programs.
struct Binaries {
    numa: PathBuf,
    touch: PathBuf,
}

/// Builds `numa` and the `touch` example with `+crt-static`, in their own target
/// directory so that the flags do not invalidate the normal build.
fn static_binaries(work: &Path) -> Result<Binaries> {
    let target_dir = work.join("build");
    let triple = "x86_64-unknown-linux-gnu";
    let mut build = cargo(&[
        "build",
        "--package",
        "numa",
        "--bin",
        "numa",
        "--example",
        "touch",
        "--target",
        triple,
        "--target-dir",
    ]);
    build
        .arg(&target_dir)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env(
            "RUSTFLAGS",
            "-C target-feature=+crt-static -C strip=debuginfo",
        );
    step("build static numa and touch", build)?;
    let out = target_dir.join(triple).join("debug");
    Ok(Binaries {
        numa: out.join("numa"),
        touch: out.join("examples/touch"),
    })
}

/// One guest shape: `nodes` nodes of 256 or 512 MiB, 4 CPUs shared out evenly.
struct Guest {
    nodes: u32,
}

impl Guest {
    const CPUS: u32 = 4;

    /// The CPUs of `node`.
    fn cpus_of(&self, node: u32) -> Vec<u32> {
        let per_node = Self::CPUS / self.nodes;
        (node * per_node..(node + 1) * per_node).collect()
    }

    /// The node the binding checks aim at: the last one, never the boot CPU's.
    fn target(&self) -> u32 {
        self.nodes - 1
    }

    fn memory_mib(&self) -> u32 {
        1024 / self.nodes
    }

    /// The commands init runs, each as (section name, command line).
    fn commands(&self) -> Vec<(String, String)> {
        let t = self.target();
        let bad = self.nodes + 5;
        vec![
            ("hardware".into(), "numa --hardware".into()),
            ("show".into(), "numa --show".into()),
            ("hardware-json".into(), "numa --hardware --json".into()),
            (
                "membind".into(),
                format!("numa --membind={t} touch {TOUCH_MIB}"),
            ),
            (
                "preferred".into(),
                format!("numa --preferred={t} touch {TOUCH_MIB}"),
            ),
            (
                "cpunodebind".into(),
                format!("numa --cpunodebind={t} touch 1"),
            ),
            (
                "physcpubind".into(),
                format!("numa --physcpubind={} touch 1", Self::CPUS - 1),
            ),
            (
                "interleave".into(),
                format!("numa --interleave=all touch {TOUCH_MIB}"),
            ),
            ("map".into(), format!("numa --cpunodebind=0 touch map {t}")),
            ("stat-before".into(), "numa stat --json".into()),
            (
                "stat-touch".into(),
                format!("numa --membind={t} touch {TOUCH_MIB}"),
            ),
            ("stat-after".into(), "numa stat --json".into()),
            ("bad-node".into(), format!("numa --membind={bad} true")),
            ("bad-token".into(), "numa --cpunodebind=x true".into()),
            // Run only when the initramfs has numactl (see init_script).
            ("numactl-hardware".into(), "numactl --hardware".into()),
            ("numactl-show".into(), "numactl --show".into()),
        ]
    }

    /// The init script: mounts, then each command between markers, then power-off.
    fn init_script(&self) -> String {
        let mut script = String::from(
            "#!/bin/busybox sh\n\
             /bin/busybox --install -s /bin\n\
             export PATH=/bin:/usr/bin\n\
             mount -t proc proc /proc\n\
             mount -t sysfs sysfs /sys\n\
             run() { name=$1; shift; echo \"@@@ begin $name\"; \"$@\" 2>&1; echo \"@@@ end $name rc=$?\"; }\n",
        );
        for (name, command) in self.commands() {
            if command.starts_with("numactl") {
                let _ = writeln!(script, "[ -x /usr/bin/numactl ] && run {name} {command}");
            } else {
                let _ = writeln!(script, "run {name} {command}");
            }
        }
        script.push_str("echo '@@@ done'\npoweroff -f\n");
        script
    }

    fn initramfs(&self, binaries: &Binaries) -> Result<Vec<u8>> {
        let busybox = which("busybox")?;
        let busybox_bytes = read(&busybox)?;
        ensure!(
            !is_dynamic_elf(&busybox_bytes),
            "{} is dynamically linked; the guest needs busybox-static (apt-get install busybox-static)",
            busybox.display()
        );
        let mut archive = Archive::default();
        for dir in ["bin", "dev", "proc", "sys", "usr", "usr/bin", "tmp"] {
            archive.directory(dir);
        }
        archive.char_device("dev/console", 5, 1);
        archive.char_device("dev/null", 1, 3);
        archive.file("init", 0o755, self.init_script().as_bytes());
        archive.file("bin/busybox", 0o755, &busybox_bytes);
        archive.file("bin/numa", 0o755, &read(&binaries.numa)?);
        archive.file("bin/touch", 0o755, &read(&binaries.touch)?);
        if let Some(numactl) = crate::which("numactl") {
            add_with_libraries(&mut archive, &numactl, "usr/bin/numactl")?;
        }
        Ok(archive.finish())
    }

    /// Boots the guest and returns its serial console output.
    fn boot(&self, kernel: &Path, initrd: &Path, work: &Path) -> Result<String> {
        let console = work.join(format!("console-{}node.log", self.nodes));
        let _ = fs::remove_file(&console);
        let mut qemu = Command::new("qemu-system-x86_64");
        qemu.args(["-accel", "tcg", "-machine", "q35", "-m"])
            .arg(format!("{}M", self.memory_mib() * self.nodes))
            .arg("-smp")
            .arg(format!(
                "{},sockets={},cores={}",
                Self::CPUS,
                self.nodes,
                Self::CPUS / self.nodes
            ));
        for node in 0..self.nodes {
            let cpus = self.cpus_of(node);
            qemu.arg("-object")
                .arg(format!(
                    "memory-backend-ram,id=m{node},size={}M",
                    self.memory_mib()
                ))
                .arg("-numa")
                .arg(format!(
                    "node,nodeid={node},cpus={}-{},memdev=m{node}",
                    cpus[0],
                    cpus[cpus.len() - 1]
                ));
        }
        for src in 0..self.nodes {
            for dst in src + 1..self.nodes {
                qemu.arg("-numa")
                    .arg(format!("dist,src={src},dst={dst},val=20"));
            }
        }
        qemu.arg("-kernel")
            .arg(kernel)
            .arg("-initrd")
            .arg(initrd)
            .args([
                "-append",
                "console=ttyS0 panic=-1 quiet transparent_hugepage=never",
                "-display",
                "none",
                "-monitor",
                "none",
                "-no-reboot",
                "-serial",
            ])
            .arg(format!("file:{}", console.display()))
            .stdin(Stdio::null());
        eprintln!("xtask numa-vm: booting the {}-node guest", self.nodes);
        let mut child = qemu.spawn().context("cannot start qemu-system-x86_64")?;
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if started.elapsed() > BOOT_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                let text = fs::read_to_string(&console).unwrap_or_default();
                bail!(
                    "the {}-node guest did not power off within {BOOT_TIMEOUT:?}; console:\n{}",
                    self.nodes,
                    tail(&text)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let bytes = read(&console)?;
        let text = String::from_utf8_lossy(&bytes).replace('\r', "");
        ensure!(
            status.success(),
            "qemu exited with {status}; console:\n{}",
            tail(&text)
        );
        Ok(text)
    }

    /// Every check, by name, with why it failed.
    fn check(&self, s: &Sections) -> Vec<(String, Result<(), String>)> {
        let t = self.target();
        let total_pages = TOUCH_MIB * 256;
        let mut results = vec![
            ("--hardware".to_string(), self.check_hardware(s)),
            (
                "--hardware --json".into(),
                s.ok("hardware-json").and_then(|lines| {
                    let json: serde_json::Value = serde_json::from_str(&lines.join("\n"))
                        .map_err(|e| format!("not JSON: {e}"))?;
                    let count = json["nodes"].as_array().map_or(0, Vec::len);
                    expect(
                        count == self.nodes as usize,
                        format!("{count} nodes in the JSON"),
                    )
                }),
            ),
            (
                format!("--membind={t}: pages on node {t}"),
                s.touch("membind").and_then(|r| r.only_on(t, total_pages)),
            ),
            (
                format!("--preferred={t}: pages on node {t}"),
                s.touch("preferred").and_then(|r| r.only_on(t, total_pages)),
            ),
            (
                format!("--cpunodebind={t}: runs on node {t}'s CPUs"),
                s.touch("cpunodebind").and_then(|r| {
                    let want = self.cpus_of(t);
                    expect(
                        r.cpus == want && want.contains(&r.cpu),
                        format!("ran on CPU {} allowed {:?}, want {want:?}", r.cpu, r.cpus),
                    )
                }),
            ),
            (
                "--physcpubind: runs on that CPU".into(),
                s.touch("physcpubind").and_then(|r| {
                    let want = Self::CPUS - 1;
                    expect(
                        r.cpu == want && r.cpus == [want],
                        format!("ran on CPU {} allowed {:?}, want {want}", r.cpu, r.cpus),
                    )
                }),
            ),
            (
                "--interleave=all spreads pages over every node".into(),
                s.touch("interleave").and_then(|r| {
                    let fair = total_pages / u64::from(self.nodes);
                    let even = (0..self.nodes).all(|n| {
                        let got = r.pages.get(&(n as i32)).copied().unwrap_or(0);
                        got >= fair * 8 / 10 && got <= fair * 12 / 10
                    });
                    expect(
                        even,
                        format!("pages per node {:?}, want ~{fair} each", r.pages),
                    )
                }),
            ),
            (
                format!("ShardedMap placed on node {t} from node 0's CPUs"),
                s.touch("map").and_then(|r| {
                    expect(
                        r.pages.len() == 1 && r.pages.contains_key(&(t as i32)),
                        format!("entry pages per node {:?}, want all on {t}", r.pages),
                    )
                }),
            ),
            (
                format!("numa stat: numa_hit moves on node {t}"),
                self.check_stat(s),
            ),
            (
                "--membind=<absent node> exits 1 naming the valid nodes".into(),
                s.failure("bad-node").and_then(|text| {
                    let bad = self.nodes + 5;
                    let valid = format!("valid nodes: 0-{}", self.nodes - 1);
                    expect(
                        text.contains(&format!("'{bad}'")) && text.contains(&valid),
                        format!("message {text:?} lacks '{bad}' or '{valid}'"),
                    )
                }),
            ),
            (
                "--cpunodebind=x exits 1 naming the token".into(),
                s.failure("bad-token").and_then(|text| {
                    expect(text.contains("'x'"), format!("message {text:?} lacks 'x'"))
                }),
            ),
        ];
        if s.has("numactl-hardware") {
            results.push((
                "--hardware lines equal numactl's".into(),
                compare_hardware(s),
            ));
            results.push((
                "--show lines equal numactl's".into(),
                s.ok("show").and_then(|ours| {
                    let theirs = s.ok("numactl-show")?;
                    expect(ours == theirs, format!("ours {ours:?}\nnumactl {theirs:?}"))
                }),
            ));
        }
        results
    }

    fn check_hardware(&self, s: &Sections) -> Result<(), String> {
        let lines = s.ok("hardware")?;
        let last = self.nodes - 1;
        let available = format!("available: {} nodes (0-{last})", self.nodes);
        expect(
            lines.first() == Some(&available),
            format!("first line {:?}, want {available:?}", lines.first()),
        )?;
        for node in 0..self.nodes {
            let cpus: Vec<String> = self.cpus_of(node).iter().map(u32::to_string).collect();
            let want = format!("node {node} cpus: {}", cpus.join(" "));
            expect(lines.contains(&want), format!("no line {want:?}"))?;
        }
        let matrix_at = lines
            .iter()
            .position(|l| l == "node distances:")
            .ok_or("no 'node distances:' line")?;
        for node in 0..self.nodes {
            let row = lines
                .get(matrix_at + 2 + node as usize)
                .ok_or(format!("no distance row for node {node}"))?;
            let mut fields = row.split_whitespace();
            expect(
                fields.next() == Some(&format!("{node}:")),
                format!("row {row:?}"),
            )?;
            for (other, value) in fields.enumerate() {
                let want = if other as u32 == node { "10" } else { "20" };
                expect(
                    value == want,
                    format!("distance {node}->{other} is {value}, want {want}"),
                )?;
            }
        }
        Ok(())
    }

    fn check_stat(&self, s: &Sections) -> Result<(), String> {
        let hits = |name: &str| -> Result<Vec<f64>, String> {
            let json: serde_json::Value = serde_json::from_str(&s.ok(name)?.join("\n"))
                .map_err(|e| format!("{name}: not JSON: {e}"))?;
            json["rows"]
                .as_array()
                .and_then(|rows| rows.iter().find(|row| row[0] == "numa_hit"))
                .and_then(|row| row[1].as_array())
                .map(|values| values.iter().filter_map(|v| v.as_f64()).collect())
                .ok_or(format!("{name}: no numa_hit row"))
        };
        let before = hits("stat-before")?;
        let after = hits("stat-after")?;
        s.touch("stat-touch")?
            .only_on(self.target(), TOUCH_MIB * 256)?;
        let delta: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let t = self.target() as usize;
        let pages = (TOUCH_MIB * 256) as f64;
        let others = delta
            .iter()
            .enumerate()
            .filter(|&(n, _)| n != t)
            .map(|(_, d)| *d)
            .fold(0.0, f64::max);
        expect(
            delta.get(t).is_some_and(|&d| d >= pages && d > others),
            format!(
                "numa_hit deltas per node {delta:?}, want >= {pages} on node {t} and most there"
            ),
        )
    }
}

/// `--hardware` equal to numactl's, except `free:` values (the guest's own activity
/// between the two runs moves them) which must agree within 16 MB.
fn compare_hardware(s: &Sections) -> Result<(), String> {
    let ours = s.ok("hardware")?;
    let theirs = s.ok("numactl-hardware")?;
    expect(
        ours.len() == theirs.len(),
        format!("ours {ours:?}\nnumactl {theirs:?}"),
    )?;
    for (a, b) in ours.iter().zip(theirs) {
        let free = |line: &str| -> Option<i64> {
            line.split_once(" free: ")?
                .1
                .strip_suffix(" MB")?
                .parse()
                .ok()
        };
        let same = match (free(a), free(b)) {
            (Some(x), Some(y)) => (x - y).abs() <= 16,
            _ => a == b,
        };
        expect(same, format!("ours {a:?}, numactl {b:?}"))?;
    }
    Ok(())
}

fn expect(condition: bool, why: String) -> Result<(), String> {
    if condition {
        Ok(())
    } else {
        Err(why)
    }
}

/// The console cut at the markers: section name -> (output lines, exit status).
struct Sections(BTreeMap<String, (Vec<String>, i32)>);

impl Sections {
    fn parse(console: &str) -> Result<Sections> {
        let mut sections = BTreeMap::new();
        let mut current: Option<(String, Vec<String>)> = None;
        let mut done = false;
        for line in console.lines() {
            if let Some(name) = line.strip_prefix("@@@ begin ") {
                current = Some((name.to_string(), Vec::new()));
            } else if let Some(rest) = line.strip_prefix("@@@ end ") {
                let (name, rc) = rest.split_once(" rc=").context("end marker without rc")?;
                let (begun, lines) = current.take().context("end marker without begin")?;
                ensure!(begun == name, "section {begun} ended as {name}");
                sections.insert(begun, (lines, rc.trim().parse()?));
            } else if line == "@@@ done" {
                done = true;
            } else if let Some((_, lines)) = current.as_mut() {
                if !is_kernel_message(line) {
                    lines.push(line.to_string());
                }
            }
        }
        ensure!(done, "the guest's init did not finish its commands");
        Ok(Sections(sections))
    }

    fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// The output of a command that must have succeeded.
    fn ok(&self, name: &str) -> Result<&Vec<String>, String> {
        match self.0.get(name) {
            Some((lines, 0)) => Ok(lines),
            Some((lines, rc)) => Err(format!("{name} exited {rc}: {}", lines.join(" | "))),
            None => Err(format!("no output for {name}")),
        }
    }

    /// The output of a command that must have exited 1.
    fn failure(&self, name: &str) -> Result<String, String> {
        match self.0.get(name) {
            Some((lines, 1)) => Ok(lines.join("\n")),
            Some((lines, rc)) => Err(format!("{name} exited {rc}, want 1: {}", lines.join(" | "))),
            None => Err(format!("no output for {name}")),
        }
    }

    fn touch(&self, name: &str) -> Result<TouchReport, String> {
        TouchReport::parse(self.ok(name)?).map_err(|e| format!("{name}: {e}"))
    }
}

/// Whether a console line is a kernel message (`[    3.141592] ...`), which can
/// interleave with a command's output.
fn is_kernel_message(line: &str) -> bool {
    line.strip_prefix('[')
        .and_then(|rest| rest.split_once(']'))
        .is_some_and(|(stamp, _)| {
            !stamp.trim().is_empty() && stamp.trim().chars().all(|c| c.is_ascii_digit() || c == '.')
        })
}

/// What the `touch` example printed.
struct TouchReport {
    cpu: u32,
    cpus: Vec<u32>,
    pages: BTreeMap<i32, u64>,
}

impl TouchReport {
    fn parse(lines: &[String]) -> Result<TouchReport, String> {
        let field = |key: &str| {
            lines
                .iter()
                .find_map(|l| l.strip_prefix(key))
                .ok_or(format!("no '{key}' line in {lines:?}"))
        };
        let cpu = field("cpu ")?
            .trim()
            .parse()
            .map_err(|e| format!("cpu: {e}"))?;
        let cpus = parse_list(field("cpus ")?)?;
        let mut pages = BTreeMap::new();
        for pair in field("pages ")?.split_whitespace() {
            let (node, count) = pair
                .split_once(':')
                .ok_or(format!("pages entry {pair:?}"))?;
            pages.insert(
                node.parse().map_err(|e| format!("{pair}: {e}"))?,
                count.parse().map_err(|e| format!("{pair}: {e}"))?,
            );
        }
        Ok(TouchReport { cpu, cpus, pages })
    }

    fn only_on(&self, node: u32, total: u64) -> Result<(), String> {
        let want = BTreeMap::from([(node as i32, total)]);
        expect(
            self.pages == want,
            format!("pages per node {:?}, want {want:?}", self.pages),
        )
    }
}

/// A CPU list like `0-1,3`.
fn parse_list(text: &str) -> Result<Vec<u32>, String> {
    let mut ids = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let number = |s: &str| s.parse::<u32>().map_err(|_| format!("bad list {text:?}"));
        match part.split_once('-') {
            Some((a, b)) => ids.extend(number(a)?..=number(b)?),
            None => ids.push(number(part)?),
        }
    }
    Ok(ids)
}

/// Adds an executable at `guest_path` and the shared libraries ldd says it loads, at
/// the same paths as on the host.
fn add_with_libraries(archive: &mut Archive, program: &Path, guest_path: &str) -> Result<()> {
    archive.file(guest_path, 0o755, &read(program)?);
    let ldd = output(Command::new("ldd").arg(program))?;
    let mut dirs: Vec<String> = Vec::new();
    for library in ldd
        .split_whitespace()
        .filter(|word| word.starts_with('/'))
        .map(Path::new)
    {
        let relative = library.strip_prefix("/")?;
        let mut dir = PathBuf::new();
        for component in relative.parent().into_iter().flat_map(Path::components) {
            dir.push(component);
            let name = dir.to_string_lossy().into_owned();
            if !dirs.contains(&name) && !["usr", "usr/bin"].contains(&name.as_str()) {
                archive.directory(&name);
                dirs.push(name);
            }
        }
        archive.file(&relative.to_string_lossy(), 0o755, &read(library)?);
    }
    Ok(())
}

/// Whether an ELF file names a program interpreter (PT_INTERP), i.e. is dynamic.
fn is_dynamic_elf(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(4096)];
    head.windows(7).any(|w| w == b"/lib64/") || head.windows(5).any(|w| w == b"/lib/")
}

fn which(program: &str) -> Result<PathBuf> {
    crate::which(program).with_context(|| format!("{program} is not on PATH"))
}

fn read(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

fn output(command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("cannot run {:?}", command.get_program()))?;
    ensure!(
        out.status.success(),
        "{:?} failed ({}): {}",
        command.get_program(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The last 40 lines, for error messages.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_skip_kernel_lines_and_need_the_end_marker() {
        let console = "\x1bc boot noise\n@@@ begin show\npolicy: default\n[    3.1] random: crng init done\n@@@ end show rc=0\n@@@ begin bad\nnuma: no\n@@@ end bad rc=1\n@@@ done\n";
        let s = Sections::parse(console).unwrap();
        assert_eq!(s.ok("show").unwrap(), &["policy: default".to_string()]);
        assert_eq!(s.failure("bad").unwrap(), "numa: no");
        assert!(s.ok("bad").is_err());
        assert!(Sections::parse("@@@ begin show\n").is_err());
        assert!(!is_kernel_message("[1, 2]") && is_kernel_message("[   12.5] x"));
    }

    #[test]
    fn touch_reports_parse() {
        let lines: Vec<String> = ["cpu 3", "cpus 2-3", "pages 0:10 1:20"]
            .map(String::from)
            .to_vec();
        let r = TouchReport::parse(&lines).unwrap();
        assert_eq!((r.cpu, r.cpus.clone()), (3, vec![2, 3]));
        assert_eq!(r.pages, BTreeMap::from([(0, 10), (1, 20)]));
        assert!(r.only_on(1, 20).is_err());
    }

    #[test]
    fn guest_shapes() {
        let two = Guest { nodes: 2 };
        assert_eq!((two.cpus_of(1), two.memory_mib()), (vec![2, 3], 512));
        let four = Guest { nodes: 4 };
        assert_eq!((four.cpus_of(3), four.target()), (vec![3], 3));
        assert!(four
            .init_script()
            .contains("run membind numa --membind=3 touch 32\n"));
    }
}
