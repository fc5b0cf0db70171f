//! `cargo xtask numa-vm`: `numa` on a real multi-node kernel.
//!
//! This machine has one NUMA node, so binding can only be tested for real in a guest:
//! Debian's kernel under qemu-system-x86_64 (TCG) with 2 and with 4 virtual nodes (the
//! two guests booted side by side), and an initramfs holding busybox-static, a
//! statically linked `numa`, the `touch` example (which reports its CPU and the nodes
//! of its pages) and, when the host has it, Debian's numactl with its libraries, and
//! ioserve (whose `--numa` placement [`crate::numa_serving`] checks). The guest's init
//! runs a fixed list of commands between markers on the serial console and powers off;
//! the checks are made here, on the captured console.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};

use crate::guests::numa_serving;
use crate::guests::{
    self as guest, expect, Arch, Checks, Initramfs, Machine, Outcome, Script, Sections,
};
use crate::util::ioserve_process::IoserveBinary;

/// MiB the `touch` runs allocate: 8192 pages, far above the guest's background noise.
const TOUCH_MIB: u64 = 32;

/// Boots the 2- and 4-node guests and checks numa in each, with `binary`'s ioserve.
pub(crate) fn run(binary: &IoserveBinary) -> Result<()> {
    ensure!(
        cfg!(target_arch = "x86_64"),
        "numa-vm boots an x86_64 guest with x86_64 binaries of numa: run it on x86_64"
    );
    let arch = Arch::X86_64;
    arch.ensure_tools()?;
    let kernel = guest::debian_kernel(arch)?;
    let binaries = Binaries::build(arch)?;
    let ioserve = binary.get()?;
    let mut guests = Vec::new();
    let mut layouts = Vec::new();
    for nodes in [2, 4] {
        let shape = Guest { nodes, cpus: 4 };
        let mut initramfs = Initramfs::new(arch)?;
        binaries.add_to(&mut initramfs)?;
        if let Some(numactl) = crate::util::which("numactl") {
            initramfs.program_with_libraries(&numactl, "usr/bin/numactl")?;
        }
        initramfs.host_program("ioserve", &ioserve)?;
        let serving = numa_serving::Layout {
            nodes,
            cpus_of: (0..nodes).map(|n| shape.cpus_of(n)).collect(),
        };
        let mut script = Script::default();
        shape.add_commands(&mut script);
        serving.add_commands(&mut script);
        guests.push((shape.machine(arch, ""), initramfs.finish(&script)));
        layouts.push((shape, serving));
    }
    // Each guest runs on one host thread (single-threaded TCG): booted side by side
    // they use every core, and CI waits for the slower one instead of both in turn.
    let started = Instant::now();
    let booted = guest::boot_together("numa-vm", &kernel, &guests);
    eprintln!(
        "xtask numa-vm: the guests done in {:.1?}",
        started.elapsed()
    );
    let mut checks = Checks::new("numa-vm");
    for ((shape, serving), sections) in layouts.iter().zip(booted) {
        let sections = sections?;
        let nodes = shape.nodes;
        checks.add(&format!("x86_64 {nodes} nodes"), shape.check(&sections));
        checks.add(&format!("x86_64 {nodes} nodes"), serving.check(&sections));
    }
    checks.finish()
}

/// Paths of the statically linked numa programs.
pub(crate) struct Binaries {
    numa: PathBuf,
    touch: PathBuf,
}

impl Binaries {
    /// The cargo arguments that select `numa` and the `touch` example (which reports its
    /// CPU and the nodes of its pages).
    pub(crate) const ARGS: &'static [&'static str] = &[
        "--package",
        "ioserve-numa",
        "--bin",
        "numa",
        "--example",
        "touch",
    ];

    /// Builds them for `arch`, statically linked.
    pub(crate) fn build(arch: Arch) -> Result<Binaries> {
        Ok(Binaries::at(&guest::static_build(
            arch,
            "numa and touch",
            Binaries::ARGS,
        )?))
    }

    /// Where a build with [`Binaries::ARGS`] put them (its profile directory `out`).
    pub(crate) fn at(out: &Path) -> Binaries {
        Binaries {
            numa: out.join("numa"),
            touch: out.join("examples/touch"),
        }
    }

    pub(crate) fn add_to(&self, initramfs: &mut Initramfs) -> Result<()> {
        initramfs.program("numa", &self.numa)?;
        initramfs.program("touch", &self.touch)?;
        Ok(())
    }
}

/// One guest shape: `nodes` nodes sharing 1 GiB and `cpus` CPUs evenly.
pub(crate) struct Guest {
    pub(crate) nodes: u32,
    pub(crate) cpus: u32,
}

impl Guest {
    /// The CPUs of `node`.
    fn cpus_of(&self, node: u32) -> Vec<u32> {
        let per_node = self.cpus / self.nodes;
        (node * per_node..(node + 1) * per_node).collect()
    }

    /// The node the binding checks aim at: the last one, never the boot CPU's.
    fn target(&self) -> u32 {
        self.nodes - 1
    }

    fn memory_mib(&self) -> u32 {
        1024 / self.nodes
    }

    /// The machine of this shape; `append` adds to the kernel command line.
    pub(crate) fn machine(&self, arch: Arch, append: &str) -> Machine {
        Machine {
            arch,
            name: format!("{}-{}node", arch.debian(), self.nodes),
            nodes: (0..self.nodes)
                .map(|_| (self.cpus / self.nodes, self.memory_mib()))
                .collect(),
            // Huge pages would make page counts per node depend on alignment.
            append: format!("transparent_hugepage=never {append}"),
            timeout: Duration::from_secs(240),
            // Multi-threaded TCG starved the amd64-2node guest's timer once (RCU stalls,
            // no power-off within the timeout), as it did clock-vm's (see
            // `Machine::single_threaded`).
            single_threaded: true,
        }
    }

    /// The commands init runs, each as (section name, command line).
    /// Argument lists run by both Debian's numactl and `numa` (the drop-in checks on a
    /// kernel with several nodes): exit status and output must agree. `{shmid}` differs
    /// per tool so that each makes its own segment.
    fn same_as_numactl(&self) -> Vec<String> {
        let t = self.target();
        vec![
            format!("-m {t} -s"),
            format!("-p {t} -s"),
            "-i all -s".into(),
            format!("-b -m 0,{t} -s"),
            format!("-N {t} -s"),
            format!("-m {t} -N same -s"),
            "-a -C 0 -s".into(),
            format!("-i 0 -m {t} true"),
            format!("-m {t} -a true"),
            "-L 64k -I {shmid} -S /tmp/numactl-key -i all -T -D".into(),
            format!("-L 64k -I {{shmid}} -S /tmp/numactl-key -m {t} -T -d"),
        ]
    }

    fn commands(&self) -> Vec<(String, String)> {
        let t = self.target();
        let bad = self.nodes + 5;
        let pairs = self
            .same_as_numactl()
            .into_iter()
            .enumerate()
            .flat_map(|(i, args)| {
                [
                    (
                        format!("pair-{i}"),
                        format!("numa {}", args.replace("{shmid}", "1")),
                    ),
                    (
                        format!("numactl-pair-{i}"),
                        format!("numactl {}", args.replace("{shmid}", "2")),
                    ),
                ]
            });
        let mut commands: Vec<(String, String)> = vec![
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
                format!("numa --physcpubind={} touch 1", self.cpus - 1),
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
            // Run only when the initramfs has numactl.
            ("numactl-hardware".into(), "numactl --hardware".into()),
            ("numactl-show".into(), "numactl --show".into()),
        ];
        commands.extend(pairs);
        commands
    }

    /// The node list the kernel shows once every node is online (`0-3`).
    fn online_nodes(&self) -> String {
        format!("0-{}", self.nodes - 1)
    }

    /// Adds the commands to `script`; numactl's only where the guest has it.
    pub(crate) fn add_commands(&self, script: &mut Script) {
        // Every later check reads the topology: wait for the kernel to show every node
        // and CPU online rather than trusting that boot has finished bringing them up.
        script
            .settle(
                "nodes-online",
                "cat /sys/devices/system/node/online",
                &self.online_nodes(),
                60,
            )
            .settle(
                "cpus-online",
                "cat /sys/devices/system/cpu/online",
                &format!("0-{}", self.cpus - 1),
                60,
            );
        script.shell(": > /tmp/numactl-key");
        for (name, command) in self.commands() {
            if command.starts_with("numactl") {
                script.shell(&format!("[ -x /usr/bin/numactl ] && run {name} {command}"));
            } else {
                script.run(&name, &command);
            }
        }
    }

    /// Every check, by name, with why it failed.
    pub(crate) fn check(&self, s: &Sections) -> Vec<(String, Outcome)> {
        let t = self.target();
        let mut results = vec![
            (
                format!("nodes {} online", self.online_nodes()),
                s.settled("nodes-online", &self.online_nodes()).map(drop),
            ),
            (
                format!("CPUs 0-{} online", self.cpus - 1),
                s.settled("cpus-online", &format!("0-{}", self.cpus - 1))
                    .map(drop),
            ),
            ("--hardware".to_string(), self.check_hardware(s)),
        ];
        results.extend(self.placement_checks(s));
        results.push((
            format!("numa stat: numa_hit moves on node {t}"),
            self.check_stat(s),
        ));
        results.extend(self.command_line_checks(s));
        results.extend(self.numactl_checks(s));
        results
    }

    /// Where the policy and binding options put pages and threads.
    fn placement_checks(&self, s: &Sections) -> Vec<(String, Outcome)> {
        let t = self.target();
        let total_pages = TOUCH_MIB * 256;
        vec![
            (
                format!("--membind={t}: pages on node {t}"),
                touch(s, "membind").and_then(|r| r.only_on(t, total_pages)),
            ),
            (
                format!("--preferred={t}: pages on node {t}"),
                touch(s, "preferred").and_then(|r| r.only_on(t, total_pages)),
            ),
            (
                format!("--cpunodebind={t}: runs on node {t}'s CPUs"),
                touch(s, "cpunodebind").and_then(|r| {
                    let want = self.cpus_of(t);
                    expect(
                        r.cpus == want && want.contains(&r.cpu),
                        format!("ran on CPU {} allowed {:?}, want {want:?}", r.cpu, r.cpus),
                    )
                }),
            ),
            (
                "--physcpubind: runs on that CPU".into(),
                touch(s, "physcpubind").and_then(|r| {
                    let want = self.cpus - 1;
                    expect(
                        r.cpu == want && r.cpus == [want],
                        format!("ran on CPU {} allowed {:?}, want {want}", r.cpu, r.cpus),
                    )
                }),
            ),
            (
                "--interleave=all spreads pages over every node".into(),
                touch(s, "interleave").and_then(|r| {
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
                touch(s, "map").and_then(|r| {
                    expect(
                        r.pages.len() == 1 && r.pages.contains_key(&(t as i32)),
                        format!("entry pages per node {:?}, want all on {t}", r.pages),
                    )
                }),
            ),
        ]
    }

    /// `--hardware --json`, and bad lists refused with a useful message.
    fn command_line_checks(&self, s: &Sections) -> Vec<(String, Outcome)> {
        vec![
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
                "--membind=<absent node> exits 1 naming the valid nodes".into(),
                s.failure("bad-node")
                    .and_then(|text| names_absent_node(&text, self.nodes + 5, self.nodes)),
            ),
            (
                "--cpunodebind=x exits 1 naming the token".into(),
                s.failure("bad-token").and_then(|text| {
                    expect(text.contains("'x'"), format!("message {text:?} lacks 'x'"))
                }),
            ),
        ]
    }

    /// `numa` against Debian's numactl, where the guest has numactl.
    fn numactl_checks(&self, s: &Sections) -> Vec<(String, Outcome)> {
        if !s.has("numactl-hardware") {
            return Vec::new();
        }
        let mut results = vec![
            (
                "--hardware lines equal numactl's".to_string(),
                compare_hardware(s),
            ),
            (
                "--show lines equal numactl's".into(),
                s.ok("show").and_then(|ours| {
                    let theirs = s.ok("numactl-show")?;
                    expect(ours == theirs, format!("ours {ours:?}\nnumactl {theirs:?}"))
                }),
            ),
        ];
        for (i, args) in self.same_as_numactl().iter().enumerate() {
            results.push((
                format!("numa {args} as numactl"),
                same_result(s, &format!("pair-{i}"), &format!("numactl-pair-{i}")),
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
        touch(s, "stat-touch")?.only_on(self.target(), TOUCH_MIB * 256)?;
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

/// `--show`'s next interleave node moves with every page the process allocates, so
/// two programs disagree on it: the number is left out of the comparison.
fn without_interleave_next(line: &str) -> String {
    if line.ends_with("(interleave next)") {
        "preferred node: N (interleave next)".into()
    } else if line.starts_with("interleavenode: ") {
        "interleavenode: N".into()
    } else {
        line.to_string()
    }
}

/// The same exit status, and for a success the same output (numactl's notices about
/// the segments it creates name their id, which differs on purpose). `--dump-nodes`
/// lines are compared as a sorted list of nodes: the kernel starts the interleave of a
/// shared segment at a node that depends on the segment's inode number.
fn same_result(s: &Sections, ours: &str, theirs: &str) -> Result<(), String> {
    let (Some((a, rc_a)), Some((b, rc_b))) = (s.result(ours), s.result(theirs)) else {
        return Err(format!("no output for {ours} or {theirs}"));
    };
    expect(
        rc_a == rc_b,
        format!("ours exited {rc_a}, numactl {rc_b}: ours {a:?}, numactl {b:?}"),
    )?;
    if *rc_a != 0 {
        return Ok(());
    }
    let kept = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| !l.starts_with("numactl: Creating"))
            .map(|l| without_interleave_next(l))
            .collect()
    };
    let nodes_sorted = |mut lines: Vec<String>| -> Vec<String> {
        let is_node_line = |l: &String| {
            l.len() > 35
                && l.as_bytes()[16] == b'-'
                && l[33..].starts_with(": ")
                && l[35..].bytes().all(|b| b.is_ascii_digit())
        };
        if lines.iter().all(is_node_line) {
            lines = lines.iter().map(|l| l[35..].to_string()).collect();
            lines.sort();
        }
        lines
    };
    let (a, b) = (nodes_sorted(kept(a)), nodes_sorted(kept(b)));
    expect(a == b, format!("ours {a:?}\nnumactl {b:?}"))
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

/// What the `touch` example printed in section `name`.
fn touch(s: &Sections, name: &str) -> Result<TouchReport, String> {
    TouchReport::parse(s.ok(name)?).map_err(|e| format!("{name}: {e}"))
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
pub(crate) fn parse_list(text: &str) -> Result<Vec<u32>, String> {
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

/// Whether `text`, the error for node `bad` of a guest with `nodes` nodes, quotes the
/// node and says which are valid (numactl's grammar and message, from the numa crate).
pub(crate) fn names_absent_node(text: &str, bad: u32, nodes: u32) -> Outcome {
    let valid = format!("valid nodes: 0-{}", nodes - 1);
    expect(
        text.contains(&format!("'{bad}'")) && text.contains(&valid),
        format!("message {text:?} lacks '{bad}' or '{valid}'"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let two = Guest { nodes: 2, cpus: 4 };
        assert_eq!((two.cpus_of(1), two.memory_mib()), (vec![2, 3], 512));
        let four = Guest { nodes: 4, cpus: 4 };
        assert_eq!((four.cpus_of(3), four.target()), (vec![3], 3));
        let mut script = Script::default();
        four.add_commands(&mut script);
        assert!(script
            .init()
            .contains("run membind numa --membind=3 touch 32\n"));
        let arm = Guest { nodes: 2, cpus: 2 };
        assert_eq!(arm.machine(Arch::Aarch64, "").nodes, [(1, 512), (1, 512)]);
    }
}
