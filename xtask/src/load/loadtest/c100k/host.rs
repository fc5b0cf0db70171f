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
use super::mix::{connections_per_address, Mix};

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
    /// The least value the scenario needs: one number, or each of a setting of
    /// several (`net.ipv4.tcp_mem`'s three).
    least: Vec<u64>,
}

/// `net.ipv4.tcp_wmem`'s third value in the kernel's default: 4 MiB.
const DEFAULT_SEND_BUFFER_MOST: u64 = 4 << 20;

/// What the kernel settings are sized from.
struct Sizes {
    /// Connections held at once.
    connections: u64,
    /// Of those, the slow downloads.
    downloading: u64,
    /// Open files each process is to have.
    descriptors: u64,
    /// The machine's memory (MemTotal) in bytes.
    memory: u64,
    /// The most a TCP send buffer grows to (`net.ipv4.tcp_wmem`'s third value).
    send_buffer_most: u64,
    /// The page size, `net.ipv4.tcp_mem`'s unit.
    page: u64,
}

/// The kernel settings that the scenario needs, at their floors.
fn floors(sizes: &Sizes) -> Vec<Floor> {
    let connections = sizes.connections;
    // Pages where TCP's memory pressure starts: the kernel's own sizing (a sixteenth of
    // the memory, tcp_init_mem) for every connection but the slow downloads, and a
    // send buffer's most for each of those (below).
    let pressure = (sizes.memory / 16 + sizes.downloading * sizes.send_buffer_most) / sizes.page;
    let single = |name, least| Floor {
        name,
        least: vec![least],
    };
    vec![
        // The most descriptors one process may have: setrlimit fails past it.
        single("fs.nr_open", sizes.descriptors),
        // Open files of all processes together: the client's sockets, the server's
        // sockets and its files, with room for the rest of the host.
        single("fs.file-max", 4 * connections + 65_536),
        // Listen backlogs (the servers ask for at most this) and half-open
        // connections: the client connects hundreds at a time, and a full queue drops
        // SYNs, which the client then sees as a 1 s retransmission or a timeout.
        single("net.core.somaxconn", 65_535),
        single("net.ipv4.tcp_max_syn_backlog", 65_535),
        // Where connection tracking is loaded, each connection takes an entry.
        single("net.netfilter.nf_conntrack_max", 2 * connections + 65_536),
        // TCP's memory, in pages (low mark, pressure, high mark; the kernel's own
        // are 3/4, 1 and 3/2 of a sixteenth of the memory). A slow download's send
        // queue stays full, and over loopback (64 KiB segments) the kernel sizes a new
        // connection's send buffer from ten of them: 3.9 MB, where a 1,500-byte MTU
        // gives 104 KB (measured on 6.18, a client with a 16 KiB receive buffer). So
        // 1,000 downloads queue about 3.6 GB, which the 6.1 guest of 9.1 GiB, sized
        // for 0.9 GB at most, met with memory pressure for 201 s and 430,623 segments
        // dropped from receive queues; raised so, neither, for either server. That
        // is loopback's doing, not the server's.
        Floor {
            name: "net.ipv4.tcp_mem",
            least: vec![pressure / 4 * 3, pressure, pressure / 4 * 3 * 2],
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

/// Raises the kernel settings that hold `mix` where they are below their floors
/// (saying so on stderr) and this process's open-file limit; the figures for the
/// report. Settings that cannot be raised (not root, or absent) are left, with a
/// warning when they are too low.
pub(crate) fn prepare(mix: &Mix) -> Result<HostLimits> {
    let connections = mix.total();
    let descriptors_wanted = descriptors_for(connections);
    let mut raised = Vec::new();
    // Where TCP's settings cannot be read, neither can tcp_mem be: its floor is then
    // skipped as any absent setting's is, and the kernel's default here does no harm.
    let send_buffer_most = match fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem") {
        Ok(text) => parse_values(&text, 3)
            .with_context(|| format!("net.ipv4.tcp_wmem reads {text:?}, not 3 numbers"))?[2],
        Err(_) => DEFAULT_SEND_BUFFER_MOST,
    };
    let sizes = Sizes {
        connections: connections as u64,
        downloading: mix.downloading as u64,
        descriptors: descriptors_wanted,
        memory: crate::util::meminfo_kib("MemTotal")? * 1024,
        send_buffer_most,
        page: rustix::param::page_size() as u64,
    };
    for floor in floors(&sizes) {
        let path = format!("/proc/sys/{}", floor.name.replace('.', "/"));
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        let now = parse_values(&text, floor.least.len()).with_context(|| {
            format!(
                "{} reads {:?}, not {} number(s)",
                floor.name,
                text.trim(),
                floor.least.len()
            )
        })?;
        let Some(wanted) = raised_to(&now, &floor.least) else {
            continue;
        };
        let (now, wanted) = (join(&now), join(&wanted));
        match fs::write(&path, &wanted) {
            Ok(()) => {
                eprintln!(
                    "xtask loadtest --c100k: raised {} from {now} to {wanted}",
                    floor.name
                );
                raised.push(format!("{}: {now} -> {wanted}", floor.name));
            }
            Err(error) => eprintln!(
                "xtask loadtest --c100k: {} is {now}, below the {wanted} that \
                 {connections} connections need, and cannot be raised: {error}",
                floor.name
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

/// The `count` numbers of a setting's text (`4096\t131072\t6291456\n`), or `None`.
fn parse_values(text: &str, count: usize) -> Option<Vec<u64>> {
    let values: Vec<u64> = text
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    (values.len() == count).then_some(values)
}

/// Each of `now` raised to its floor in `least`, when one of them is below it; `None`
/// when all are at or above (never lowered).
fn raised_to(now: &[u64], least: &[u64]) -> Option<Vec<u64>> {
    let below = now.iter().zip(least).any(|(now, least)| now < least);
    below.then(|| {
        now.iter()
            .zip(least)
            .map(|(now, least)| *now.max(least))
            .collect()
    })
}

/// Values as a setting is written, separated by spaces.
fn join(values: &[u64]) -> String {
    values
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The ephemeral port range, `net.ipv4.ip_local_port_range`.
fn ephemeral_ports() -> Result<RangeInclusive<u16>> {
    let path = "/proc/sys/net/ipv4/ip_local_port_range";
    let text = fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
    parse_port_range(&text).with_context(|| format!("{path} reads {text:?}"))
}

/// `low high`, as ip_local_port_range gives them.
fn parse_port_range(text: &str) -> Result<RangeInclusive<u16>> {
    let ports = parse_values(text, 2).context("not two numbers")?;
    match (u16::try_from(ports[0]), u16::try_from(ports[1])) {
        (Ok(low), Ok(high)) if low <= high => Ok(low..=high),
        _ => anyhow::bail!("not a port range"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floors_grow_with_the_connections_and_the_port_range_parses() {
        let least = |name: &str, connections: usize| {
            let mix = Mix::of(connections);
            floors(&Sizes {
                connections: connections as u64,
                downloading: mix.downloading as u64,
                descriptors: descriptors_for(connections),
                memory: 8 << 30,
                send_buffer_most: 4 << 20,
                page: 4096,
            })
            .into_iter()
            .find(|f| f.name == name)
            .map(|f| f.least)
        };
        // ioserve's 101024 connections, a socket and a file each and an eighth more.
        assert_eq!(descriptors_for(100_000), 3 * 101_024 + 4096);
        assert_eq!(least("fs.nr_open", 100_000), Some(vec![307_168]));
        assert_eq!(least("fs.file-max", 200_000), Some(vec![865_536]));
        assert_eq!(least("net.core.somaxconn", 10), Some(vec![65_535]));
        // 8 GiB: pressure at the kernel's 512 MiB, and 4 MiB more for each of the
        // 1,000 downloads of 100,000.
        assert_eq!(
            least("net.ipv4.tcp_mem", 100_000),
            Some(vec![866_304, 1_155_072, 1_732_608])
        );
        assert_eq!(parse_port_range("32768\t60999\n").unwrap(), 32768..=60999);
        assert!(parse_port_range("60999 32768").is_err());
        assert!(parse_port_range("32768").is_err());
        assert!(parse_port_range("32768 70000").is_err());
    }

    #[test]
    fn settings_are_raised_value_by_value_and_never_lowered() {
        let now = parse_values("98304\t131072\t196608\n", 3).unwrap();
        assert_eq!(now, [98_304, 131_072, 196_608]);
        assert_eq!(parse_values("4096\n", 1), Some(vec![4096]));
        assert_eq!(parse_values("1 2", 3), None);
        assert_eq!(parse_values("1 two 3", 3), None);
        assert_eq!(
            raised_to(&now, &[196_608, 262_144, 393_216]),
            Some(vec![196_608, 262_144, 393_216])
        );
        // Only what is below its floor moves; a setting at or above them all stays.
        assert_eq!(
            raised_to(&[300_000, 100, 500_000], &[196_608, 262_144, 393_216]),
            Some(vec![300_000, 262_144, 500_000])
        );
        assert_eq!(raised_to(&[65_535], &[65_535]), None);
        assert_eq!(join(&[1, 2, 3]), "1 2 3");
    }
}
