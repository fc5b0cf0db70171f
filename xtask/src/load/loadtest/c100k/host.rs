//! The host's limits for holding the c100k scenario's connections: the kernel settings
//! that 100,000 loopback connections need, raised where they are too low (never
//! lowered), and this process's descriptor limit, which the servers it starts after
//! inherit.

use std::fs;
use std::ops::RangeInclusive;

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::super::memory::raise_limit_to;
use super::super::servers::Sizing;
use super::mix::connections_per_address;

/// What the host allows, as the report says it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct HostLimits {
    /// The open-file limit of this process and the servers it starts.
    pub descriptors: u64,
    /// The descriptors each process was to have.
    pub descriptors_wanted: u64,
    /// The ephemeral port range (`net.ipv4.ip_local_port_range`).
    pub ephemeral_ports: (u16, u16),
    /// Connections given each source address.
    pub per_address: usize,
    /// The kernel settings raised, as `name: before -> after`.
    pub raised: Vec<String>,
}

/// A kernel setting under /proc/sys and the least it must be.
struct Floor {
    /// Its path under /proc/sys, with dots for slashes (`fs.nr_open`).
    name: &'static str,
    /// The least value the scenario needs.
    least: u64,
}

/// The kernel settings that `connections` held at once need, at their floors, for
/// processes of `descriptors` open files each.
fn floors(connections: usize, descriptors: u64) -> Vec<Floor> {
    let connections = connections as u64;
    vec![
        // The most descriptors one process may have: setrlimit fails past it.
        Floor {
            name: "fs.nr_open",
            least: descriptors,
        },
        // Open files of all processes together: the client's sockets, the server's
        // sockets and its files, with room for the rest of the host.
        Floor {
            name: "fs.file-max",
            least: 4 * connections + 65_536,
        },
        // Listen backlogs (the servers ask for at most this) and half-open
        // connections: the client connects hundreds at a time, and a full queue drops
        // SYNs, which the client then sees as a 1 s retransmission or a timeout.
        Floor {
            name: "net.core.somaxconn",
            least: 65_535,
        },
        Floor {
            name: "net.ipv4.tcp_max_syn_backlog",
            least: 65_535,
        },
        // Where connection tracking is loaded, each connection takes an entry.
        Floor {
            name: "net.netfilter.nf_conntrack_max",
            least: 2 * connections + 65_536,
        },
    ]
}

/// Descriptors each process needs to hold `connections`: the client a socket per
/// connection; ioserve a socket and a file per connection of its sized limit and an
/// eighth more for refusals, with its open-file caches; nginx's workers set their own.
pub(crate) fn descriptors_for(connections: usize) -> u64 {
    let sizing = Sizing::for_connections(connections);
    3 * sizing.connections as u64 + 4096
}

/// Raises the kernel settings that hold `connections` where they are below their
/// floors (saying so on stderr) and this process's open-file limit; the figures for
/// the report. Settings that cannot be raised (not root, or absent) are left, with a
/// warning when they are too low.
pub(crate) fn prepare(connections: usize) -> Result<HostLimits> {
    let descriptors_wanted = descriptors_for(connections);
    let mut raised = Vec::new();
    for floor in floors(connections, descriptors_wanted) {
        let path = format!("/proc/sys/{}", floor.name.replace('.', "/"));
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        let now: u64 = text
            .trim()
            .parse()
            .with_context(|| format!("{} reads {:?}, not a number", floor.name, text.trim()))?;
        if now >= floor.least {
            continue;
        }
        match fs::write(&path, floor.least.to_string()) {
            Ok(()) => {
                eprintln!(
                    "xtask loadtest --c100k: raised {} from {now} to {}",
                    floor.name, floor.least
                );
                raised.push(format!("{}: {now} -> {}", floor.name, floor.least));
            }
            Err(error) => eprintln!(
                "xtask loadtest --c100k: {} is {now}, below the {} that {connections} \
                 connections need, and cannot be raised: {error}",
                floor.name, floor.least
            ),
        }
    }
    let descriptors = raise_limit_to(descriptors_wanted);
    if descriptors < descriptors_wanted {
        eprintln!(
            "xtask loadtest --c100k: the open-file limit is {descriptors}, below the \
             {descriptors_wanted} that {connections} connections need: connections past \
             it will fail"
        );
    }
    let ports = ephemeral_ports()?;
    Ok(HostLimits {
        descriptors,
        descriptors_wanted,
        ephemeral_ports: (*ports.start(), *ports.end()),
        per_address: connections_per_address(ports),
        raised,
    })
}

/// The ephemeral port range, `net.ipv4.ip_local_port_range`.
fn ephemeral_ports() -> Result<RangeInclusive<u16>> {
    let path = "/proc/sys/net/ipv4/ip_local_port_range";
    let text = fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
    parse_port_range(&text).with_context(|| format!("{path} reads {text:?}"))
}

/// `low high`, as ip_local_port_range gives them.
fn parse_port_range(text: &str) -> Result<RangeInclusive<u16>> {
    let mut ports = text.split_whitespace().map(str::parse::<u16>);
    match (ports.next(), ports.next()) {
        (Some(Ok(low)), Some(Ok(high))) if low <= high => Ok(low..=high),
        _ => anyhow::bail!("not a port range"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floors_grow_with_the_connections_and_the_port_range_parses() {
        let least = |name: &str, connections: usize| {
            floors(connections, descriptors_for(connections))
                .into_iter()
                .find(|f| f.name == name)
                .map(|f| f.least)
        };
        // ioserve's 101024 connections, a socket and a file each and an eighth more.
        assert_eq!(descriptors_for(100_000), 3 * 101_024 + 4096);
        assert_eq!(least("fs.nr_open", 100_000), Some(307_168));
        assert_eq!(least("fs.file-max", 200_000), Some(865_536));
        assert_eq!(least("net.core.somaxconn", 10), Some(65_535));
        assert_eq!(parse_port_range("32768\t60999\n").unwrap(), 32768..=60999);
        assert!(parse_port_range("60999 32768").is_err());
        assert!(parse_port_range("32768").is_err());
    }
}
