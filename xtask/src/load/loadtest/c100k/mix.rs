//! What the c100k scenario opens: the kinds of connection, how many of each a total
//! makes, and the source addresses in 127.0.0.0/8 that spread them past the ephemeral
//! ports of one address.

use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

use serde::Serialize;

/// A kind of connection the scenario holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// HTTP/1.1 keep-alive after one GET of the 4 KiB file, then silent.
    IdleHttp1,
    /// The same over TLS (ALPN http/1.1): what the server keeps per idle TLS session.
    IdleTls,
    /// HTTP/2 over TLS (ALPN h2) after one GET of the 4 KiB file, its other streams
    /// unused.
    Http2,
    /// A download of a large file read at [`DOWNLOAD_BYTES_PER_TICK`] every
    /// [`DOWNLOAD_TICK_MS`] through a small receive buffer.
    Downloading,
}

impl Kind {
    /// Every kind, in the order the report gives them.
    pub(crate) const ALL: [Kind; 4] = [
        Kind::IdleHttp1,
        Kind::IdleTls,
        Kind::Http2,
        Kind::Downloading,
    ];

    /// What the report calls it.
    pub(crate) fn title(self) -> &'static str {
        match self {
            Kind::IdleHttp1 => "idle HTTP/1.1",
            Kind::IdleTls => "idle TLS (HTTP/1.1)",
            Kind::Http2 => "HTTP/2 over TLS",
            Kind::Downloading => "slow download (64 KiB/s)",
        }
    }

    /// Whether it connects to the HTTPS server.
    pub(crate) fn over_tls(self) -> bool {
        matches!(self, Kind::IdleTls | Kind::Http2)
    }
}

/// Bytes a slow download reads per tick.
pub(crate) const DOWNLOAD_BYTES_PER_TICK: usize = 16 << 10;

/// Milliseconds between a slow download's reads: 16 KiB every 250 ms is 64 KiB/s.
pub(crate) const DOWNLOAD_TICK_MS: u64 = 250;

/// How many connections of each kind a total makes: 90 % idle HTTP/1.1, 9 % HTTP/2,
/// 1 % slow downloads, rounded, each at least one (idle TLS is not in the mix; its
/// memory is measured alone, with as many as HTTP/2 has).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Mix {
    /// Idle HTTP/1.1 keep-alive connections.
    pub idle_http1: usize,
    /// HTTP/2 connections over TLS.
    pub http2: usize,
    /// Slow downloads.
    pub downloading: usize,
}

impl Mix {
    /// The mix of `total` connections (at least 3: one of each kind).
    pub(crate) fn of(total: usize) -> Mix {
        let total = total.max(3);
        let share = |percent: usize| ((total * percent + 50) / 100).max(1);
        let (http2, downloading) = (share(9), share(1));
        Mix {
            idle_http1: total - http2 - downloading,
            http2,
            downloading,
        }
    }

    /// All its connections.
    pub(crate) fn total(&self) -> usize {
        self.idle_http1 + self.http2 + self.downloading
    }

    /// Its kinds with their counts, as the full mix opens them.
    pub(crate) fn batches(&self) -> [(Kind, usize); 3] {
        [
            (Kind::IdleHttp1, self.idle_http1),
            (Kind::Http2, self.http2),
            (Kind::Downloading, self.downloading),
        ]
    }

    /// How many connections of `kind` its memory measurement opens: the kind's share,
    /// and for idle TLS the HTTP/2 share.
    pub(crate) fn measured(&self, kind: Kind) -> usize {
        match kind {
            Kind::IdleHttp1 => self.idle_http1,
            Kind::IdleTls | Kind::Http2 => self.http2,
            Kind::Downloading => self.downloading,
        }
    }
}

/// The items of `counts` (each as many times as its count) in the order to open them:
/// each item's repeats spread evenly through the whole, the i-th of n at (i + 1/2) / n
/// of the way (ties in the order given), so that no kind waits behind the others and
/// a limit reached near the end takes its share of each.
pub(crate) fn interleaved<T: Copy>(counts: &[(T, usize)]) -> Vec<T> {
    let mut placed: Vec<(f64, T)> = counts
        .iter()
        .flat_map(|&(item, n)| (0..n).map(move |i| ((2 * i + 1) as f64 / (2 * n) as f64, item)))
        .collect();
    placed.sort_by(|a, b| a.0.total_cmp(&b.0));
    placed.into_iter().map(|(_, item)| item).collect()
}

/// The first source address; the ones after it follow. Clear of 127.0.0.1, where the
/// servers listen and the polite client connects from.
const FIRST_SOURCE: Ipv4Addr = Ipv4Addr::new(127, 0, 1, 1);

/// The most connections given one source address.
const MOST_PER_ADDRESS: usize = 10_000;

/// Connections given each source address when the ephemeral ports are `ports`.
///
/// Each connection binds its source address with port 0 before it connects (neither
/// rustix nor socket2 offers `IP_BIND_ADDRESS_NO_PORT`, and xtask makes no raw
/// syscalls), so the kernel reserves a port of that address for it, whatever the
/// destination. Linux hands out bound ports from one half of the range (by parity)
/// first and scans that half to its end before it takes the other: a third of the
/// range keeps each address inside the first half with room to spare, and at most
/// [`MOST_PER_ADDRESS`].
pub(crate) fn connections_per_address(ports: RangeInclusive<u16>) -> usize {
    let count = ports.len();
    (count / 3).clamp(1, MOST_PER_ADDRESS)
}

/// The source address of connection `index` of a batch, `per_address` connections
/// to an address: 127.0.1.1 for the first ones, then 127.0.1.2, and so on.
pub(crate) fn source_address(index: usize, per_address: usize) -> Ipv4Addr {
    let step = (index / per_address.max(1)) as u32;
    Ipv4Addr::from(u32::from(FIRST_SOURCE) + step)
}

/// How many source addresses `connections` take, `per_address` to an address.
pub(crate) fn addresses_for(connections: usize, per_address: usize) -> usize {
    connections.div_ceil(per_address.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_90_9_1_rounded_with_one_of_each_kind_at_least() {
        let mix = Mix::of(100_000);
        assert_eq!(
            (mix.idle_http1, mix.http2, mix.downloading),
            (90_000, 9_000, 1_000)
        );
        assert_eq!(mix.total(), 100_000);
        let mix = Mix::of(3_000);
        assert_eq!(
            (mix.idle_http1, mix.http2, mix.downloading),
            (2_700, 270, 30)
        );
        // 9 % of 1234 is 111.06, 1 % is 12.34.
        let mix = Mix::of(1_234);
        assert_eq!(
            (mix.idle_http1, mix.http2, mix.downloading),
            (1_111, 111, 12)
        );
        let mix = Mix::of(10);
        assert_eq!((mix.idle_http1, mix.http2, mix.downloading), (8, 1, 1));
        assert_eq!(Mix::of(0).total(), 3, "one of each kind");
        assert_eq!(mix.measured(Kind::IdleTls), mix.http2);
        assert_eq!(
            mix.batches().iter().map(|(_, n)| n).sum::<usize>(),
            mix.total()
        );
    }

    #[test]
    fn the_kinds_are_opened_interleaved() {
        assert_eq!(
            interleaved(&[('a', 4), ('b', 2)]),
            ['a', 'b', 'a', 'a', 'b', 'a']
        );
        // A tie (a's second and b's only at the middle) keeps the order given.
        assert_eq!(interleaved(&[('a', 3), ('b', 1)]), ['a', 'a', 'b', 'a']);
        assert_eq!(interleaved(&[('a', 0), ('b', 2)]), ['b', 'b']);
        let mix = Mix::of(100_000);
        let order = interleaved(&mix.batches());
        assert_eq!(order.len(), 100_000);
        let last_thousand = &order[99_000..];
        let downloads = last_thousand
            .iter()
            .filter(|k| **k == Kind::Downloading)
            .count();
        assert_eq!(downloads, 10, "1 % of any stretch");
    }

    #[test]
    fn sources_spread_over_loopback_addresses_a_third_of_the_ports_each() {
        // Linux's default ephemeral range, 28232 ports.
        let per_address = connections_per_address(32768..=60999);
        assert_eq!(per_address, 9_410);
        assert_eq!(connections_per_address(1024..=65535), MOST_PER_ADDRESS);
        assert_eq!(connections_per_address(40000..=40001), 1);
        assert_eq!(source_address(0, 10_000), Ipv4Addr::new(127, 0, 1, 1));
        assert_eq!(source_address(9_999, 10_000), Ipv4Addr::new(127, 0, 1, 1));
        assert_eq!(source_address(10_000, 10_000), Ipv4Addr::new(127, 0, 1, 2));
        // Past x.x.1.255 into the next octet, still in 127.0.0.0/8.
        assert_eq!(source_address(255 * 2, 2), Ipv4Addr::new(127, 0, 2, 0));
        assert_eq!(addresses_for(100_000, 9_410), 11);
        assert_eq!(addresses_for(200_000, 10_000), 20);
        assert_eq!(addresses_for(1, 10_000), 1);
        assert!(source_address(199_999, 1).is_loopback());
    }
}
