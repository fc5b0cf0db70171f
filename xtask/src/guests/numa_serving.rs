//! ioserve placed by numa, checked in the numa-vm guests: `ioserve --numa` runs one
//! worker group per node, each worker thread allowed only its node's CPUs (from
//! /proc/PID/task/*/status and stat), downloads succeed, and with `--numa-nodes` the
//! anonymous memory the workers add while serving lands on the chosen node
//! (/proc/PID/numa_maps before and after); an absent node is a clear error.

use std::collections::BTreeMap;

use crate::guests::{expect, same_sums, Outcome, Script, Sections};

/// MiB of the served file, and the read strategy's buffer: the first request takes a
/// 4 MiB buffer (allocated and zeroed by a worker, so placed by its policy) that stays
/// in the pool. The memory is measured from the startup log line, before any request.
const FILE_MIB: u32 = 8;
const CHUNK: &str = "4M";
const DOWNLOADS: u32 = 4;

/// The shape the checks need: the nodes and each one's CPUs.
pub(crate) struct Layout {
    pub(crate) nodes: u32,
    pub(crate) cpus_of: Vec<Vec<u32>>,
}

impl Layout {
    /// The node `--numa-nodes` picks: the last, never the boot CPU's.
    fn target(&self) -> u32 {
        self.nodes - 1
    }

    /// Serves with `--numa` (every node), then with `--numa-nodes TARGET`, recording
    /// the threads, checksums and memory, then the error case.
    pub(crate) fn add_commands(&self, script: &mut Script) {
        let t = self.target();
        script
            .shell(&format!(
                "dd if=/dev/urandom of=/srv/file bs=1M count={FILE_MIB} 2>/dev/null"
            ))
            .shell(
                "threads() { for task in /proc/$1/task/*; do \
                 echo \"$(cat $task/comm) $(sed -n 's/^Cpus_allowed_list:\\t*//p' $task/status) \
                 $(cut -d' ' -f39 $task/stat)\"; done; }",
            )
            .shell(
                "ready() { for i in $(seq 100); do \
                 wget -q --spider http://127.0.0.1:$1/file && return 0; sleep 0.2; done; return 1; }",
            )
            // Each worker thread is named when it is spawned and restricts itself to its
            // node's CPUs once it runs: `placed PID N` prints `placed` once N worker
            // threads exist and none still has every CPU, else what it saw.
            .shell(
                "placed() { all=$(cat /sys/devices/system/cpu/online); n=0; unplaced=0; \
                 for task in /proc/$1/task/*; do case $(cat $task/comm) in ioserve-n*) n=$((n+1)); \
                 [ \"$(sed -n 's/^Cpus_allowed_list:\\t*//p' $task/status)\" = \"$all\" ] && unplaced=$((unplaced+1));; esac; done; \
                 if [ $n -eq $2 ] && [ $unplaced -eq 0 ]; then echo placed; \
                 else echo \"$n worker threads of $2, $unplaced with every CPU\"; fi; }",
            )
            .shell(&format!(
                "download() {{ for i in $(seq {DOWNLOADS}); do \
                 wget -q -O /tmp/got http://127.0.0.1:$1/file || return 1; done; sha256sum /srv/file /tmp/got; }}"
            ))
            // Every node.
            .shell("ioserve /srv --listen 127.0.0.1:8080 --numa 2>/tmp/all.log & all=$!")
            .shell("ready 8080")
            .settle(
                "numa-all-placed",
                &format!("placed $all {}", self.cpus_of.iter().map(Vec::len).sum::<usize>()),
                "placed",
                60,
            )
            .run("numa-all-download", "download 8080")
            .run("numa-all-threads", "threads $all")
            .shell("kill $all; wait $all")
            // One node, memory measured around the downloads.
            .shell(&format!(
                "ioserve /srv --listen 127.0.0.1:8081 --numa-nodes {t} --strategy read \
                 --chunk-size {CHUNK} 2>/tmp/one.log & one=$!"
            ))
            .shell(
                "for i in $(seq 100); do grep -q 'worker group' /tmp/one.log && break; sleep 0.1; done",
            )
            .run("numa-one-before", "cat /proc/$one/numa_maps")
            .shell("ready 8081")
            .settle(
                "numa-one-placed",
                &format!("placed $one {}", self.cpus_of[t as usize].len()),
                "placed",
                60,
            )
            .run("numa-one-download", "download 8081")
            .run("numa-one-after", "cat /proc/$one/numa_maps")
            .run("numa-one-threads", "threads $one")
            .shell("kill $one; wait $one")
            .run(
                "numa-absent",
                &format!("ioserve /srv --numa-nodes {}", self.nodes + 3),
            );
    }

    pub(crate) fn check(&self, s: &Sections) -> Vec<(String, Outcome)> {
        let t = self.target();
        let every: Vec<u32> = (0..self.nodes).collect();
        vec![
            (
                "ioserve --numa: downloads match".into(),
                check_download(s, "numa-all-download"),
            ),
            (
                "ioserve --numa: a worker per CPU, each on its node's CPUs".into(),
                s.settled("numa-all-placed", "placed").and_then(|_| {
                    s.ok("numa-all-threads")
                        .and_then(|lines| self.check_threads(lines, &every))
                }),
            ),
            (
                format!("ioserve --numa-nodes {t}: downloads match"),
                check_download(s, "numa-one-download"),
            ),
            (
                format!("ioserve --numa-nodes {t}: workers only on node {t}'s CPUs"),
                s.settled("numa-one-placed", "placed").and_then(|_| {
                    s.ok("numa-one-threads")
                        .and_then(|lines| self.check_threads(lines, &[t]))
                }),
            ),
            (
                format!("ioserve --numa-nodes {t}: memory added while serving is on node {t}"),
                self.check_memory(s),
            ),
            (
                "ioserve --numa-nodes <absent> exits 1 naming the valid nodes".into(),
                s.failure("numa-absent").and_then(|text| {
                    crate::guests::numa_vm::names_absent_node(&text, self.nodes + 3, self.nodes)
                }),
            ),
        ]
    }

    /// Worker threads (`ioserve-nN-wI`): as many per node as it has CPUs, for exactly
    /// `nodes`; each allowed only its node's CPUs and last run on one of them.
    fn check_threads(&self, lines: &[String], nodes: &[u32]) -> Outcome {
        let mut per_node: BTreeMap<u32, usize> = BTreeMap::new();
        for line in lines {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [comm, allowed, last_cpu] = fields[..] else {
                return Err(format!("thread line {line:?}"));
            };
            let Some(node) = comm
                .strip_prefix("ioserve-n")
                .and_then(|rest| rest.split_once("-w"))
                .and_then(|(node, _)| node.parse::<u32>().ok())
            else {
                continue;
            };
            let want = self
                .cpus_of
                .get(node as usize)
                .ok_or(format!("{comm}: no node {node}"))?;
            let allowed = crate::guests::numa_vm::parse_list(allowed)?;
            let last: u32 = last_cpu.parse().map_err(|_| format!("{line:?}"))?;
            expect(
                &allowed == want && want.contains(&last),
                format!(
                    "{comm} allowed CPUs {allowed:?}, last ran on {last}; node {node} has {want:?}"
                ),
            )?;
            *per_node.entry(node).or_default() += 1;
        }
        let want: BTreeMap<u32, usize> = nodes
            .iter()
            .map(|&n| (n, self.cpus_of[n as usize].len()))
            .collect();
        expect(
            per_node == want,
            format!("workers per node {per_node:?}, want {want:?}"),
        )
    }

    /// The growth of the process's anonymous memory per node across the downloads: the
    /// read buffer on the target node, and at least 80 % of all growth there (the
    /// access-log writer thread is not a worker and allocates where it runs: ~0.25 MiB
    /// here).
    fn check_memory(&self, s: &Sections) -> Outcome {
        let before = anonymous_mib(s.ok("numa-one-before")?);
        let after = anonymous_mib(s.ok("numa-one-after")?);
        let growth: BTreeMap<u32, f64> = after
            .iter()
            .map(|(node, mib)| (*node, mib - before.get(node).copied().unwrap_or(0.0)))
            .collect();
        let on_target = growth.get(&self.target()).copied().unwrap_or(0.0);
        let total: f64 = growth.values().filter(|g| **g > 0.0).sum();
        expect(
            on_target >= 3.5 && on_target >= 0.8 * total,
            format!(
                "MiB added per node {growth:?}, want a {CHUNK} buffer and >= 80% on node {}",
                self.target()
            ),
        )
    }
}

fn check_download(s: &Sections, name: &str) -> Outcome {
    same_sums(s.ok(name)?)
}

/// Anonymous memory (MiB) per node in the lines of a /proc/PID/numa_maps: every
/// mapping that is not a file's (the heap, the stacks, anonymous mappings such as the
/// read buffer). A file's pages are left out: the program's code, faulted in as serving
/// reaches new paths, is in the page cache wherever the binary was first read (here by
/// the run on every node before), not where this process's policy places what it
/// allocates. In a CI run a larger binary (more code on the serving path) made those
/// pages a quarter of the growth, on node 0.
fn anonymous_mib(lines: &[String]) -> BTreeMap<u32, f64> {
    let mut mib = BTreeMap::new();
    for line in lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.iter().any(|field| field.starts_with("file=")) {
            continue;
        }
        let page_kib: f64 = fields
            .iter()
            .find_map(|field| field.strip_prefix("kernelpagesize_kB="))
            .and_then(|kib| kib.parse().ok())
            .unwrap_or(4.0);
        for field in &fields {
            let Some((node, pages)) = field.strip_prefix('N').and_then(|f| f.split_once('='))
            else {
                continue;
            };
            if let (Ok(node), Ok(pages)) = (node.parse::<u32>(), pages.parse::<f64>()) {
                *mib.entry(node).or_default() += pages * page_kib / 1024.0;
            }
        }
    }
    mib
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_must_sit_on_their_nodes() {
        let layout = Layout {
            nodes: 2,
            cpus_of: vec![vec![0, 1], vec![2, 3]],
        };
        let lines = |text: &str| -> Vec<String> { text.lines().map(String::from).collect() };
        let good = lines("ioserve 0-3 0\nioserve-n0-w0 0-1 1\nioserve-n0-w1 0-1 0\nioserve-n1-w2 2-3 2\nioserve-n1-w3 2-3 3");
        assert_eq!(layout.check_threads(&good, &[0, 1]), Ok(()));
        assert!(layout.check_threads(&good, &[1]).is_err());
        let strayed = lines("ioserve-n1-w0 2-3 0\nioserve-n1-w1 2-3 3");
        assert!(layout.check_threads(&strayed, &[1]).is_err());
        let maps = lines(
            "55d0c0a00000 default file=/usr/bin/ioserve mapped=300 N0=300 kernelpagesize_kB=4\n\
             55d0c1000000 default heap anon=256 dirty=256 N0=64 N1=192 kernelpagesize_kB=4\n\
             7f0000000000 default anon=1024 dirty=1024 N1=1024 kernelpagesize_kB=4\n\
             7f1000000000 default stack anon=3 dirty=3 N0=3 kernelpagesize_kB=4",
        );
        assert_eq!(
            anonymous_mib(&maps),
            BTreeMap::from([(0, 67.0 * 4.0 / 1024.0), (1, 1216.0 * 4.0 / 1024.0)])
        );
    }
}
