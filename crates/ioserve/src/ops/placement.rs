//! `--numa`: one group of workers per NUMA node (seeds 000 and 001 together). Each
//! node gets one worker per CPU this process may run on; each worker thread is
//! restricted to its node's CPUs and prefers its node's memory, so what it allocates
//! and first touches (its stack, its malloc arena, read buffers, the page cache it
//! fills) lands on that node, placed through the numa crate's policies.
//!
//! The memory policy is `preferred`, not `bind`: a full node spills to the others
//! instead of making the kernel reclaim or OOM-kill a server that could have used
//! remote memory. `--numa-nodes LIST` (numactl's node grammar: `0,2`, `1-3`, `!0`,
//! `all`) restricts the nodes.

use std::fmt;

use ioserve_numa::policy::{self, MemPolicy, Mode, PolicyError};
use ioserve_numa::{IdSet, IdSetError, Topology, TopologyError};

/// Where one worker runs and allocates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerPlace {
    /// Its node.
    pub node: u32,
    /// The node's CPUs it may run on.
    pub cpus: IdSet,
    /// The CPU it is pinned to with `--pin` (its own CPU of the node).
    pub own_cpu: u32,
}

/// Why `--numa` cannot place the workers. The causes are part of the message, not
/// error sources, so that a report of the chain does not say them twice.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// The topology could not be read.
    #[error("--numa: cannot read the NUMA topology: {0}")]
    Topology(TopologyError),
    /// The CPUs this process may run on could not be read.
    #[error("--numa: cannot read this process's CPU affinity: {0}")]
    Affinity(std::io::Error),
    /// One node: nothing to place.
    #[error(
        "--numa: this host has one NUMA node (node {node}); per-node workers need two or \
         more (run without --numa)"
    )]
    OneNode {
        /// The only node.
        node: u32,
    },
    /// `--numa-nodes` does not parse or names absent nodes.
    #[error("--numa-nodes: {0}")]
    Nodes(IdSetError),
    /// Chosen nodes without a CPU this process may run on.
    #[error(
        "--numa-nodes: node(s) {nodes} have no CPU this process may run on (CPU-less \
         memory nodes, or outside its cpuset); nodes with usable CPUs: {usable}"
    )]
    NoCpus {
        /// The nodes without usable CPUs.
        nodes: IdSet,
        /// The nodes that have some.
        usable: IdSet,
    },
}

/// One worker per usable CPU of each chosen node (all nodes when `nodes` is `None`),
/// in node order. `allowed_cpus` are the CPUs this process may run on.
pub fn plan(
    topology: &Topology,
    allowed_cpus: &IdSet,
    nodes: Option<&str>,
) -> Result<Vec<WorkerPlace>, PlacementError> {
    let present = topology.node_ids();
    if present.len() < 2 {
        return Err(PlacementError::OneNode {
            node: present.iter().next().unwrap_or(0),
        });
    }
    let usable_cpus = |node: u32| -> IdSet {
        topology
            .node(node)
            .map(|n| n.cpus.intersection(allowed_cpus))
            .unwrap_or_default()
    };
    let usable: IdSet = present
        .iter()
        .filter(|&n| !usable_cpus(n).is_empty())
        .collect();
    let chosen = match nodes {
        None => usable.clone(),
        Some(list) => {
            IdSet::parse_spec(list, "node", &present, &present).map_err(PlacementError::Nodes)?
        }
    };
    let without: IdSet = chosen
        .iter()
        .filter(|&n| usable_cpus(n).is_empty())
        .collect();
    if !without.is_empty() {
        return Err(PlacementError::NoCpus {
            nodes: without,
            usable,
        });
    }
    Ok(chosen
        .iter()
        .flat_map(|node| {
            let cpus = usable_cpus(node);
            cpus.iter()
                .map(|own_cpu| WorkerPlace {
                    node,
                    cpus: cpus.clone(),
                    own_cpu,
                })
                .collect::<Vec<_>>()
        })
        .collect())
}

/// [`plan`] for this host and process.
pub fn plan_here(nodes: Option<&str>) -> Result<Vec<WorkerPlace>, PlacementError> {
    let topology = Topology::system().map_err(PlacementError::Topology)?;
    let allowed = policy::cpu_affinity().map_err(PlacementError::Affinity)?;
    plan(&topology, &allowed, nodes)
}

impl WorkerPlace {
    /// Restricts the calling thread to this place: its node's CPUs (or, with `pin`,
    /// its own CPU) and a preference for its node's memory.
    pub fn apply(&self, pin: bool) -> Result<(), PolicyError> {
        let cpus = if pin {
            std::iter::once(self.own_cpu).collect()
        } else {
            self.cpus.clone()
        };
        policy::set_cpu_affinity(&cpus)?;
        policy::set_mempolicy(&MemPolicy {
            mode: Mode::Preferred,
            nodes: std::iter::once(self.node).collect(),
        })
    }
}

impl fmt::Display for WorkerPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} (CPUs {})", self.node, self.cpus)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology(name: &str) -> Topology {
        Topology::read(&testdata::numa_snapshot(name)).unwrap()
    }

    fn all(cpus: &str) -> IdSet {
        IdSet::parse_list(cpus).unwrap()
    }

    #[test]
    fn one_worker_per_cpu_of_each_node() {
        let four = topology("sysfs-4node");
        let places = plan(&four, &all("0-7"), None).unwrap();
        assert_eq!(places.len(), 8);
        assert_eq!(places[2].node, 1);
        assert_eq!(places[2].cpus, all("2-3"));
        assert_eq!(places[3].own_cpu, 3);
        let two = plan(&four, &all("0-7"), Some("1,3")).unwrap();
        let nodes: Vec<u32> = two.iter().map(|p| p.node).collect();
        assert_eq!(nodes, [1, 1, 3, 3]);
        let inverted = plan(&four, &all("0-7"), Some("!0-2")).unwrap();
        assert_eq!(inverted.len(), 2);
        // A cpuset that leaves node 0 one CPU gives it one worker.
        let narrowed = plan(&four, &all("1-7"), None).unwrap();
        assert_eq!((narrowed[0].node, narrowed[0].cpus.clone()), (0, all("1")));
    }

    #[test]
    fn errors_name_the_input_and_what_is_allowed() {
        let four = topology("sysfs-4node");
        let absent = plan(&four, &all("0-7"), Some("9")).unwrap_err().to_string();
        assert!(
            absent.contains("'9'") && absent.contains("valid nodes: 0-3"),
            "{absent}"
        );
        let outside = plan(&four, &all("0-3"), Some("2")).unwrap_err().to_string();
        assert!(
            outside.contains("node(s) 2 have no CPU") && outside.contains("usable CPUs: 0-1"),
            "{outside}"
        );
        let cpuless = topology("sysfs-3node-cpuless");
        let memory_only = plan(&cpuless, &all("0-3"), Some("2"))
            .unwrap_err()
            .to_string();
        assert!(memory_only.contains("node(s) 2"), "{memory_only}");
        // Without --numa-nodes the CPU-less node is simply left out.
        assert_eq!(plan(&cpuless, &all("0-3"), None).unwrap().len(), 4);
    }
}
