//! numastat: the kernel's per-node allocation counters, per-node meminfo, and a
//! process's memory per node (from `/proc/PID/numa_maps`), with deltas between samples.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use serde::Serialize;

use crate::numa_maps::{self, MemoryKind};
use crate::{Topology, TopologyError};

pub mod report;
mod vtab;

/// Named values per node, in the order the kernel lists the names.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Table {
    /// Node numbers, in column order.
    pub nodes: Vec<u32>,
    /// Rows: a name and one value per node.
    pub rows: Vec<(String, Vec<f64>)>,
}

impl Table {
    /// The per-node `numastat` counters (pages), as numastat shows them without options.
    pub fn counters(topology: &Topology) -> Table {
        Self::from_nodes(topology, |node| &node.numastat.0, 1.0)
    }

    /// The per-node `meminfo`, in MiB for the fields the kernel gives in kB.
    pub fn meminfo(topology: &Topology) -> Table {
        let mut table = Self::from_nodes(topology, |node| &node.meminfo.0, 1.0 / 1024.0);
        // Page counts (HugePages_*) carry no unit: undo the kB scaling for them.
        for (name, values) in &mut table.rows {
            if name.starts_with("HugePages_") {
                values.iter_mut().for_each(|v| *v *= 1024.0);
            }
        }
        table
    }

    fn from_nodes(
        topology: &Topology,
        fields: impl Fn(&crate::Node) -> &Vec<(String, u64)>,
        scale: f64,
    ) -> Table {
        let nodes: Vec<u32> = topology.nodes.iter().map(|n| n.id).collect();
        let mut rows: Vec<(String, Vec<f64>)> = Vec::new();
        for (column, node) in topology.nodes.iter().enumerate() {
            for (name, value) in fields(node) {
                let row = match rows.iter().position(|(n, _)| n == name) {
                    Some(row) => row,
                    None => {
                        rows.push((name.clone(), vec![0.0; nodes.len()]));
                        rows.len() - 1
                    }
                };
                rows[row].1[column] = *value as f64 * scale;
            }
        }
        Table { nodes, rows }
    }

    /// This table minus an earlier sample of the same kind (rows and nodes matched by
    /// name; what the earlier one lacks counts from zero).
    pub fn delta(&self, earlier: &Table) -> Table {
        let rows = self
            .rows
            .iter()
            .map(|(name, values)| {
                let before = earlier.rows.iter().find(|(n, _)| n == name);
                let values = values
                    .iter()
                    .zip(&self.nodes)
                    .map(|(value, node)| {
                        let column = earlier.nodes.iter().position(|n| n == node);
                        let old = before.zip(column).map_or(0.0, |((_, v), c)| v[c]);
                        value - old
                    })
                    .collect();
                (name.clone(), values)
            })
            .collect();
        Table {
            nodes: self.nodes.clone(),
            rows,
        }
    }

    /// numastat's output without options: `%-16s` names, `%16s` node columns, integer
    /// values, no total.
    pub fn legacy_text(&self) -> String {
        let mut out = format!("{:16}", "");
        for node in &self.nodes {
            let _ = write!(out, "{:>16}", format!("node{node}"));
        }
        out.push('\n');
        for (name, values) in &self.rows {
            let _ = write!(out, "{name:<16}");
            for value in values {
                let _ = write!(out, "{:>16}", *value as i64);
            }
            out.push('\n');
        }
        out
    }

    /// numastat's `-m`/`-p` layout: a title, `Node N` columns and a Total, two decimals.
    pub fn text_with_total(&self, title: &str) -> String {
        let width = self
            .rows
            .iter()
            .map(|(n, _)| n.len())
            .max()
            .unwrap_or(0)
            .max(5)
            + 1;
        let mut out = format!("\n{title}\n{:width$}", "");
        for node in &self.nodes {
            let _ = write!(out, " {:>15}", format!("Node {node}"));
        }
        let _ = writeln!(out, " {:>15}", "Total");
        let _ = write!(out, "{:width$}", "");
        for _ in 0..=self.nodes.len() {
            let _ = write!(out, " {}", "-".repeat(15));
        }
        out.push('\n');
        for (name, values) in &self.rows {
            let _ = write!(out, "{name:<width$}");
            for value in values {
                let _ = write!(out, " {value:>15.2}");
            }
            let _ = writeln!(out, " {:>15.2}", values.iter().sum::<f64>());
        }
        out
    }
}

/// A process's memory per node, in MiB, from `root/proc/PID/numa_maps` (read by
/// [`numa_maps::parse`]), split as numastat splits it: Huge (hugetlb), Heap, Stack,
/// Private (everything else); each mapping's pages count at its
/// `kernelpagesize_kB`.
pub fn process(root: &Path, pid: u32) -> Result<Table, TopologyError> {
    from_numa_maps(&root.join(format!("proc/{pid}/numa_maps")))
}

/// As [`process`], from a `numa_maps` file.
pub fn from_numa_maps(path: &Path) -> Result<Table, TopologyError> {
    let path = path.to_path_buf();
    let text = fs::read_to_string(&path).map_err(|source| TopologyError::Read {
        path: path.clone(),
        source,
    })?;
    let counts = numa_maps::parse(&text).map_err(|error| TopologyError::Parse {
        path: path.clone(),
        message: error.to_string(),
    })?;
    let mut per_kind: BTreeMap<u32, [f64; 4]> = BTreeMap::new();
    for count in counts {
        // Pages of 4 KiB where the kernel does not say.
        let page_kib = count.page_kib.unwrap_or(4) as f64;
        per_kind.entry(count.node).or_default()[count.kind.index()] +=
            count.pages as f64 * page_kib / 1024.0;
    }
    let nodes: Vec<u32> = per_kind.keys().copied().collect();
    let rows = MemoryKind::ALL
        .iter()
        .map(|kind| {
            let values = nodes.iter().map(|n| per_kind[n][kind.index()]).collect();
            (kind.label().to_string(), values)
        })
        .collect();
    Ok(Table { nodes, rows })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::tests::fixture;

    #[test]
    fn legacy_table_layout() {
        let topology = Topology::read(&fixture("sysfs-3node-cpuless")).unwrap();
        let text = Table::counters(&topology).legacy_text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            format!("{:16}{:>16}{:>16}{:>16}", "", "node0", "node1", "node2")
        );
        assert!(
            lines[1].starts_with("numa_hit                    4614"),
            "{}",
            lines[1]
        );
        assert!(lines.iter().all(|l| l.len() == 64));
    }

    #[test]
    fn deltas_and_totals() {
        let earlier = Table {
            nodes: vec![0, 1],
            rows: vec![("numa_hit".into(), vec![10.0, 20.0])],
        };
        let later = Table {
            nodes: vec![0, 1],
            rows: vec![
                ("numa_hit".into(), vec![15.0, 26.0]),
                ("new".into(), vec![1.0, 0.0]),
            ],
        };
        let delta = later.delta(&earlier);
        assert_eq!(delta.rows[0].1, vec![5.0, 6.0]);
        assert_eq!(delta.rows[1].1, vec![1.0, 0.0]);
        let text = delta.text_with_total("Per-node numastat info:");
        assert!(
            text.contains("numa_hit             5.00            6.00           11.00"),
            "{text}"
        );
    }

    #[test]
    fn process_usage_from_numa_maps() {
        let snapshot =
            from_numa_maps(&fixture("sysfs-3node-cpuless").join("proc/self/numa_maps")).unwrap();
        assert!(!snapshot.nodes.is_empty());
        assert!(snapshot
            .rows
            .iter()
            .any(|(_, v)| v.iter().sum::<f64>() > 0.0));

        let dir = tempfile::tempdir().unwrap();
        let maps = dir.path().join("proc/42");
        fs::create_dir_all(&maps).unwrap();
        fs::write(
            maps.join("numa_maps"),
            "00400000 default file=/bin/x mapped=2 N0=2 kernelpagesize_kB=4\n\
             01000000 default heap anon=512 dirty=512 N0=256 N1=256 kernelpagesize_kB=4\n\
             7ff00000 default stack anon=3 dirty=3 N1=3 kernelpagesize_kB=4\n\
             7fe00000 bind:1 huge anon=1 N1=1 kernelpagesize_kB=2048\n",
        )
        .unwrap();
        let table = process(dir.path(), 42).unwrap();
        assert_eq!(table.nodes, vec![0, 1]);
        let row = |name: &str| {
            table
                .rows
                .iter()
                .find(|(n, _)| n == name)
                .unwrap()
                .1
                .clone()
        };
        assert_eq!(row("Heap"), vec![1.0, 1.0]);
        assert_eq!(row("Huge"), vec![0.0, 2.0]);
        assert_eq!(row("Private"), vec![8.0 / 1024.0, 0.0]);
        assert_eq!(row("Stack"), vec![0.0, 12.0 / 1024.0]);
    }
}
