//! The machine's NUMA topology, read from sysfs and procfs under a root path, so that
//! tests can point it at snapshots of other machines.
//!
//! Read: `sys/devices/system/node/{online,possible,has_cpu,has_memory}` and, per node,
//! `nodeN/{cpulist,meminfo,distance,numastat,vmstat}`; `proc/self/status` for the
//! process's allowed CPUs and nodes. Node numbers may be sparse; node sizes are what
//! each node's meminfo says (they need not add up to MemTotal); meminfo and counter
//! fields are kept as found, unknown ones included.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::IdSet;

/// Why the topology cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// A file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A file does not have the expected form.
    #[error("unexpected contents in {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Named counters in file order, as in `numastat`, `vmstat` and `meminfo`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters(pub Vec<(String, u64)>);

impl Counters {
    /// The value of a field.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

/// One NUMA node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The node number.
    pub id: u32,
    /// Its CPUs (none for a memory-only node).
    pub cpus: IdSet,
    /// Its `meminfo` fields, in kB where the kernel says kB.
    pub meminfo: Counters,
    /// Distance to each online node, by node number (10 = local).
    pub distances: BTreeMap<u32, u32>,
    /// Its `numastat` counters (pages).
    pub numastat: Counters,
    /// Its `vmstat` counters.
    pub vmstat: Counters,
}

impl Node {
    /// Total memory in bytes (`MemTotal`), if the kernel reports it.
    pub fn size_bytes(&self) -> Option<u64> {
        self.meminfo.get("MemTotal").map(|kb| kb * 1024)
    }

    /// Free memory in bytes (`MemFree`), if the kernel reports it.
    pub fn free_bytes(&self) -> Option<u64> {
        self.meminfo.get("MemFree").map(|kb| kb * 1024)
    }
}

/// The NUMA topology of a machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Nodes the kernel could bring online.
    pub possible: IdSet,
    /// Nodes online now.
    pub online: IdSet,
    /// Online nodes with CPUs.
    pub with_cpus: IdSet,
    /// Online nodes with memory.
    pub with_memory: IdSet,
    /// The nodes that have a sysfs directory, in increasing order.
    pub nodes: Vec<Node>,
}

/// What the calling process may use, from `/proc/self/status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowed {
    /// `Cpus_allowed_list`.
    pub cpus: IdSet,
    /// `Mems_allowed_list`.
    pub nodes: IdSet,
}

impl Topology {
    /// Reads the running system's topology (root `/`).
    pub fn system() -> Result<Topology, TopologyError> {
        Topology::read(Path::new("/"))
    }

    /// Reads the topology from `root/sys/devices/system/node`.
    pub fn read(root: &Path) -> Result<Topology, TopologyError> {
        let base = root.join("sys/devices/system/node");
        let set = |name: &str| -> Result<IdSet, TopologyError> {
            let path = base.join(name);
            parse_list_file(&path)
        };
        let online = set("online")?;
        let mut ids: Vec<u32> = fs::read_dir(&base)
            .map_err(|source| TopologyError::Read {
                path: base.clone(),
                source,
            })?
            .filter_map(|entry| {
                entry
                    .ok()?
                    .file_name()
                    .to_str()?
                    .strip_prefix("node")?
                    .parse()
                    .ok()
            })
            .collect();
        ids.sort_unstable();
        let nodes = ids
            .into_iter()
            .map(|id| read_node(&base.join(format!("node{id}")), id, &online))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Topology {
            possible: set("possible")?,
            with_cpus: set("has_cpu")?,
            with_memory: set("has_memory")?,
            online,
            nodes,
        })
    }

    /// The node with this number.
    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The numbers of the nodes that have a sysfs directory.
    pub fn node_ids(&self) -> IdSet {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// The nodes whose CPUs include any of `cpus`.
    pub fn nodes_of_cpus(&self, cpus: &IdSet) -> IdSet {
        self.nodes
            .iter()
            .filter(|n| !n.cpus.intersection(cpus).is_empty())
            .map(|n| n.id)
            .collect()
    }
}

impl Allowed {
    /// Reads `root/proc/self/status`.
    pub fn read(root: &Path) -> Result<Allowed, TopologyError> {
        let path = root.join("proc/self/status");
        let text = read(&path)?;
        let field = |name: &str| -> Result<IdSet, TopologyError> {
            let value = text
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .ok_or_else(|| TopologyError::Parse {
                    path: path.clone(),
                    message: format!("no {name} field"),
                })?;
            IdSet::parse_list(value).map_err(|e| TopologyError::Parse {
                path: path.clone(),
                message: e.to_string(),
            })
        };
        Ok(Allowed {
            cpus: field("Cpus_allowed_list")?,
            nodes: field("Mems_allowed_list")?,
        })
    }
}

fn read_node(dir: &Path, id: u32, online: &IdSet) -> Result<Node, TopologyError> {
    let distance_path = dir.join("distance");
    let distances: Vec<u32> = read(&distance_path)?
        .split_whitespace()
        .map(|d| d.parse())
        .collect::<Result<_, _>>()
        .map_err(|e| TopologyError::Parse {
            path: distance_path.clone(),
            message: format!("{e}"),
        })?;
    // The kernel lists one distance per online node, in node order.
    if distances.len() != online.len() {
        return Err(TopologyError::Parse {
            path: distance_path,
            message: format!(
                "{} distances for {} online nodes",
                distances.len(),
                online.len()
            ),
        });
    }
    Ok(Node {
        id,
        cpus: parse_list_file(&dir.join("cpulist"))?,
        meminfo: parse_meminfo(&dir.join("meminfo"))?,
        distances: online.iter().zip(distances).collect(),
        numastat: parse_counters(&dir.join("numastat"))?,
        vmstat: parse_counters_optional(&dir.join("vmstat"))?,
    })
}

fn read(path: &Path) -> Result<String, TopologyError> {
    fs::read_to_string(path).map_err(|source| TopologyError::Read {
        path: path.to_owned(),
        source,
    })
}

fn parse_list_file(path: &Path) -> Result<IdSet, TopologyError> {
    IdSet::parse_list(&read(path)?).map_err(|e| TopologyError::Parse {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// `Node 0 MemTotal:  502476 kB` lines; the unit is dropped (kB, or none for counts).
fn parse_meminfo(path: &Path) -> Result<Counters, TopologyError> {
    let text = read(path)?;
    let mut fields = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let parsed = line.split_once(':').and_then(|(key, value)| {
            let name = key.split_whitespace().last()?;
            let number = value.split_whitespace().next()?.parse().ok()?;
            Some((name.to_string(), number))
        });
        fields.push(parsed.ok_or_else(|| TopologyError::Parse {
            path: path.to_owned(),
            message: format!("bad line '{line}'"),
        })?);
    }
    Ok(Counters(fields))
}

/// `name value` lines.
fn parse_counters(path: &Path) -> Result<Counters, TopologyError> {
    let text = read(path)?;
    let mut fields = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let parsed = words.next().zip(words.next().and_then(|v| v.parse().ok()));
        let (name, value) = parsed.ok_or_else(|| TopologyError::Parse {
            path: path.to_owned(),
            message: format!("bad line '{line}'"),
        })?;
        fields.push((name.to_string(), value));
    }
    Ok(Counters(fields))
}

/// As [`parse_counters`], empty when the file does not exist (older kernels).
fn parse_counters_optional(path: &Path) -> Result<Counters, TopologyError> {
    if path.exists() {
        parse_counters(path)
    } else {
        Ok(Counters::default())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) use testdata::numa_snapshot as fixture;

    #[test]
    fn four_nodes() {
        let topology = Topology::read(&fixture("sysfs-4node")).unwrap();
        assert_eq!(topology.online.to_string(), "0-3");
        assert_eq!(topology.nodes.len(), 4);
        let node0 = topology.node(0).unwrap();
        assert_eq!(node0.cpus.to_string(), "0-1");
        assert_eq!(node0.distances.get(&0), Some(&10));
        assert!(node0.numastat.get("numa_hit").is_some());
        assert!(node0.size_bytes().unwrap() > node0.free_bytes().unwrap());
        assert_eq!(
            topology
                .nodes_of_cpus(&IdSet::parse_list("1-2").unwrap())
                .to_string(),
            "0-1"
        );
    }

    #[test]
    fn memory_only_node() {
        let topology = Topology::read(&fixture("sysfs-3node-cpuless")).unwrap();
        assert_eq!(topology.with_cpus.to_string(), "0-1");
        assert_eq!(topology.with_memory.to_string(), "0-2");
        let node2 = topology.node(2).unwrap();
        assert!(node2.cpus.is_empty());
        assert_eq!(node2.size_bytes(), Some(257_692 * 1024));
        assert_eq!(
            node2.distances.values().copied().collect::<Vec<_>>(),
            [30, 40, 10]
        );
        let allowed = Allowed::read(&fixture("sysfs-3node-cpuless")).unwrap();
        assert_eq!(
            (allowed.cpus.to_string(), allowed.nodes.to_string()),
            ("0-3".into(), "0-2".into())
        );
    }

    #[test]
    fn sparse_numbering_and_unknown_fields() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("sys/devices/system/node");
        for (name, text) in [
            ("online", "0,2\n"),
            ("possible", "0-3\n"),
            ("has_cpu", "0,2\n"),
            ("has_memory", "0,2\n"),
        ] {
            fs::create_dir_all(&base).unwrap();
            fs::write(base.join(name), text).unwrap();
        }
        for (id, distance) in [(0, "10 20\n"), (2, "20 10\n")] {
            let node = base.join(format!("node{id}"));
            fs::create_dir_all(&node).unwrap();
            fs::write(node.join("cpulist"), format!("{id}\n")).unwrap();
            fs::write(node.join("distance"), distance).unwrap();
            fs::write(node.join("numastat"), "numa_hit 5\nnew_counter 7\n").unwrap();
            fs::write(
                node.join("meminfo"),
                format!("Node {id} MemTotal: 1024 kB\nNode {id} MemFree: 512 kB\nNode {id} FutureField: 3\n"),
            )
            .unwrap();
        }
        let topology = Topology::read(dir.path()).unwrap();
        assert_eq!(topology.node_ids().to_string(), "0,2");
        let node2 = topology.node(2).unwrap();
        assert_eq!(node2.distances, BTreeMap::from([(0, 20), (2, 10)]));
        assert_eq!(node2.meminfo.get("FutureField"), Some(3));
        assert_eq!(node2.numastat.get("new_counter"), Some(7));
        assert!(
            node2.vmstat.0.is_empty(),
            "no vmstat file: empty, not an error"
        );

        fs::write(base.join("node2/distance"), "20\n").unwrap();
        let error = Topology::read(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("node2/distance") && error.contains("1 distances for 2 online nodes"),
            "{error}"
        );
    }
}
