//! `numactl --show`: the calling process's policy and bindings, in numactl's lines.

use std::fmt::Write as _;

use std::path::Path;

use crate::policy::{self, MemPolicy, Mode};
use crate::{Allowed, IdSet, Topology};

/// What `--show` reports about a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// Its memory policy.
    pub policy: MemPolicy,
    /// For interleave policies, the node the next page goes to.
    pub next_interleave_node: Option<u32>,
    /// Its CPU affinity.
    pub cpus: IdSet,
    /// Its Mems_allowed.
    pub mems_allowed: IdSet,
    /// The policy's mode flags (`MPOL_F_NUMA_BALANCING` after `--balancing
    /// --membind`): numactl then prints the raw mode number and no preferred node.
    pub mode_flags: i32,
}

impl State {
    /// The calling thread's state (sysfs and procfs read under `root`).
    pub fn current(root: &Path) -> Result<State, ShowError> {
        let policy = policy::get_mempolicy()?;
        let next_interleave_node = match policy.mode {
            Mode::Interleave | Mode::WeightedInterleave => policy::next_interleave_node().ok(),
            _ => None,
        };
        Ok(State {
            policy,
            next_interleave_node,
            cpus: policy::cpu_affinity().map_err(ShowError::Affinity)?,
            mems_allowed: Allowed::read(root)?.nodes,
            mode_flags: policy::mempolicy_flags()?,
        })
    }
}

/// Why the state could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ShowError {
    /// get_mempolicy failed.
    #[error(transparent)]
    Policy(#[from] policy::PolicyError),
    /// sched_getaffinity failed.
    #[error("sched_getaffinity: {0}")]
    Affinity(std::io::Error),
    /// Mems_allowed could not be read.
    #[error(transparent)]
    Allowed(#[from] crate::TopologyError),
}

/// The lines numactl 2.0 prints for `--show`, quirks included (after `--localalloc`
/// numactl prints "preferred node: " with no line end).
pub fn report(topology: &Topology, state: &State) -> String {
    let nodes = &state.policy.nodes;
    let first = nodes
        .iter()
        .next()
        .map(|n| n.to_string())
        .unwrap_or_default();
    let next = state
        .next_interleave_node
        .map(|n| n.to_string())
        .unwrap_or_else(|| first.clone());
    let flagged = state.mode_flags != 0;
    let mut out = if flagged {
        // numactl's policy_name() has no name for a mode with flags.
        let raw = state.mode_flags | state.policy.mode_raw();
        format!("policy: [{raw}]\npreferred node: ")
    } else {
        format!("policy: {}\npreferred node: ", state.policy.mode.name())
    };
    match state.policy.mode {
        _ if flagged => {}
        Mode::Default => out.push_str("current\n"),
        Mode::Local => {}
        Mode::Preferred | Mode::Bind => {
            let _ = writeln!(out, "{first}");
        }
        Mode::PreferredMany => {
            let _ = writeln!(out, "{first} (preferred-many)");
        }
        Mode::Interleave | Mode::WeightedInterleave => {
            let _ = writeln!(out, "{next} (interleave next)");
            let _ = writeln!(out, "interleavemask: {}", spaced(nodes));
            let _ = writeln!(out, "interleavenode: {next}");
        }
    }
    let run_nodes = topology.nodes_of_cpus(&state.cpus);
    let membind = match state.policy.mode {
        Mode::Bind if !flagged => nodes.clone(),
        _ => state.mems_allowed.clone(),
    };
    let preferred = match state.policy.mode {
        Mode::Default | Mode::Local => IdSet::new(),
        _ => nodes.clone(),
    };
    let _ = writeln!(out, "physcpubind: {}", spaced(&state.cpus));
    let _ = writeln!(out, "cpubind: {}", spaced(&run_nodes));
    let _ = writeln!(out, "nodebind: {}", spaced(&run_nodes));
    let _ = writeln!(out, "membind: {}", spaced(&membind));
    let _ = writeln!(out, "preferred: {}", spaced(&preferred));
    out
}

/// numactl's mask printing: each member followed by a space.
fn spaced(set: &IdSet) -> String {
    set.iter().map(|id| format!("{id} ")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::tests::fixture;
    use crate::Allowed;

    #[test]
    fn default_policy_on_the_memory_only_fixture() {
        let root = fixture("sysfs-3node-cpuless");
        let topology = Topology::read(&root).unwrap();
        let allowed = Allowed::read(&root).unwrap();
        let state = State {
            policy: MemPolicy {
                mode: Mode::Default,
                nodes: IdSet::new(),
            },
            next_interleave_node: None,
            cpus: allowed.cpus,
            mems_allowed: allowed.nodes,
            mode_flags: 0,
        };
        let expected = std::fs::read_to_string(root.join("numactl-show.txt")).unwrap();
        assert_eq!(report(&topology, &state), expected);
    }

    #[test]
    fn interleave_lines() {
        let topology = Topology::read(&fixture("sysfs-4node")).unwrap();
        let state = State {
            policy: MemPolicy {
                mode: Mode::Interleave,
                nodes: IdSet::parse_list("1-2").unwrap(),
            },
            next_interleave_node: Some(2),
            cpus: IdSet::parse_list("2-5").unwrap(),
            mems_allowed: IdSet::parse_list("0-3").unwrap(),
            mode_flags: 0,
        };
        assert_eq!(
            report(&topology, &state),
            "policy: interleave\npreferred node: 2 (interleave next)\ninterleavemask: 1 2 \n\
             interleavenode: 2\nphyscpubind: 2 3 4 5 \ncpubind: 1 2 \nnodebind: 1 2 \n\
             membind: 0 1 2 3 \npreferred: 1 2 \n"
        );
    }
}
