//! `numactl --hardware`, line for line, and the same facts as JSON.

use std::fmt::Write as _;

use serde::Serialize;

use crate::Topology;

/// The report `numactl --hardware` prints (numactl 2.0.x), byte for byte.
///
/// Sizes are MemTotal and MemFree of each node shifted down to MiB, as numactl does;
/// the available-nodes summary uses numactl's own range notation.
pub fn report(topology: &Topology) -> String {
    let ids = topology.node_ids();
    // numactl's range notation for this line is IdSet's list form (`0-1,3`).
    let mut out = format!("available: {} nodes ({ids})\n", ids.len());
    for node in &topology.nodes {
        let _ = write!(out, "node {} cpus:", node.id);
        for cpu in node.cpus.iter() {
            let _ = write!(out, " {cpu}");
        }
        out.push('\n');
        let _ = writeln!(
            out,
            "node {} size: {}",
            node.id,
            megabytes(node.size_bytes())
        );
        let _ = writeln!(
            out,
            "node {} free: {}",
            node.id,
            megabytes(node.free_bytes())
        );
    }
    let first = ids.iter().next();
    let has_distances = topology
        .nodes
        .last()
        .zip(first)
        .and_then(|(last, first)| last.distances.get(&first))
        .is_some_and(|&d| d != 0);
    if !has_distances {
        out.push_str("No distance information available.\n");
        return out;
    }
    out.push_str("node distances:\nnode ");
    for id in ids.iter() {
        let _ = write!(out, "{id:>3} ");
    }
    out.push('\n');
    for node in &topology.nodes {
        let _ = write!(out, "{:>3}: ", node.id);
        for id in ids.iter() {
            let _ = write!(out, "{:>3} ", node.distances.get(&id).copied().unwrap_or(0));
        }
        out.push('\n');
    }
    out
}

/// numactl's `fmt_mem`: `458 MB`, or `<not available>`.
fn megabytes(bytes: Option<u64>) -> String {
    match bytes {
        Some(bytes) => format!("{} MB", bytes >> 20),
        None => "<not available>".to_string(),
    }
}

/// The `--hardware --json` document.
#[derive(Debug, Serialize)]
pub struct HardwareJson {
    /// One entry per node.
    pub nodes: Vec<NodeJson>,
}

/// One node in [`HardwareJson`].
#[derive(Debug, Serialize)]
pub struct NodeJson {
    /// Node number.
    pub id: u32,
    /// CPU numbers.
    pub cpus: Vec<u32>,
    /// MemTotal in bytes.
    pub size_bytes: Option<u64>,
    /// MemFree in bytes.
    pub free_bytes: Option<u64>,
    /// Distance to each node, in the order of `nodes`.
    pub distances: Vec<u32>,
}

impl HardwareJson {
    /// The JSON view of a topology.
    pub fn new(topology: &Topology) -> HardwareJson {
        let ids = topology.node_ids();
        HardwareJson {
            nodes: topology
                .nodes
                .iter()
                .map(|node| NodeJson {
                    id: node.id,
                    cpus: node.cpus.iter().collect(),
                    size_bytes: node.size_bytes(),
                    free_bytes: node.free_bytes(),
                    distances: ids
                        .iter()
                        .map(|id| node.distances.get(&id).copied().unwrap_or(0))
                        .collect(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::tests::fixture;

    #[test]
    fn report_of_the_memory_only_node_fixture() {
        let topology = Topology::read(&fixture("sysfs-3node-cpuless")).unwrap();
        let report = report(&topology);
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines[0], "available: 3 nodes (0-2)");
        assert_eq!(lines[7], "node 2 cpus:");
        assert_eq!(lines[8], "node 2 size: 251 MB");
        assert_eq!(lines[9], "node 2 free: 243 MB");
        assert_eq!(
            &lines[10..],
            [
                "node distances:",
                "node   0   1   2 ",
                "  0:  10  21  30 ",
                "  1:  21  10  40 ",
                "  2:  30  40  10 "
            ]
        );
    }

    #[test]
    fn json_has_the_same_facts() {
        let topology = Topology::read(&fixture("sysfs-3node-cpuless")).unwrap();
        let json = serde_json::to_value(HardwareJson::new(&topology)).unwrap();
        assert_eq!(json["nodes"][2]["cpus"], serde_json::json!([]));
        assert_eq!(
            json["nodes"][2]["distances"],
            serde_json::json!([30, 40, 10])
        );
        assert_eq!(json["nodes"][2]["size_bytes"], 257_692 * 1024);
    }
}
