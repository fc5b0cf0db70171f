//! `--max-conns-per-ip`: the connections open now from each client address, as nginx's
//! `limit_conn` keyed by `$binary_remote_addr` (an IPv6 client is its full address, no
//! /64 grouping). An IPv4 client on a dual-stack IPv6 listener (`::ffff:a.b.c.d`) is
//! counted as its IPv4 address, so it is one client whichever listener it reaches.
//!
//! Every connection is counted, whatever the limit, so that a reload that sets or
//! lowers it applies to the connections already open. The count lives in a sharded
//! map: an accept touches one shard's lock, briefly.

use std::net::IpAddr;
use std::sync::Arc;

use dashmap::DashMap;

/// Open connections per client address.
#[derive(Debug, Default)]
pub(crate) struct PerIpConnections {
    open: DashMap<IpAddr, usize>,
}

impl PerIpConnections {
    /// Counts a new connection from `ip`. Returns its place in the count (dropping it
    /// gives the place back, however the connection ends) and whether it is within
    /// `limit` (0: no limit). A connection over the limit is counted too while it is
    /// being refused.
    pub fn admit(self: &Arc<Self>, ip: IpAddr, limit: usize) -> (PerIpSlot, bool) {
        let open = {
            let mut count = self.open.entry(ip).or_insert(0);
            *count += 1;
            *count
        };
        let slot = PerIpSlot {
            connections: Arc::clone(self),
            ip,
        };
        (slot, limit == 0 || open <= limit)
    }

    /// Connections open now from `ip`.
    #[cfg(test)]
    fn open(&self, ip: IpAddr) -> usize {
        self.open.get(&ip).map_or(0, |count| *count)
    }
}

/// A connection's place in the count of its address; removed when dropped.
#[derive(Debug)]
pub(crate) struct PerIpSlot {
    connections: Arc<PerIpConnections>,
    ip: IpAddr,
}

impl Drop for PerIpSlot {
    fn drop(&mut self) {
        // The last connection of an address removes its entry: the map holds only the
        // addresses connected now.
        self.connections.open.remove_if_mut(&self.ip, |_, count| {
            *count -= 1;
            *count == 0
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_is_limited_alone_and_drops_free_places() {
        let connections = Arc::new(PerIpConnections::default());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "2001:db8::1".parse().unwrap();
        let (first, ok1) = connections.admit(a, 2);
        let (second, ok2) = connections.admit(a, 2);
        let (third, ok3) = connections.admit(a, 2);
        let (other, ok_b) = connections.admit(b, 2);
        assert_eq!((ok1, ok2, ok3, ok_b), (true, true, false, true));
        assert_eq!(connections.open(a), 3);
        drop(third);
        drop(first);
        assert_eq!(connections.open(a), 1);
        let (_fourth, ok4) = connections.admit(a, 2);
        assert!(ok4);
        drop(second);
        drop(other);
        assert_eq!(connections.open(b), 0);
        assert!(
            !connections.open.contains_key(&b),
            "an address with none is removed"
        );
    }

    #[test]
    fn zero_means_no_limit() {
        let connections = Arc::new(PerIpConnections::default());
        let ip: IpAddr = "192.0.2.9".parse().unwrap();
        let slots: Vec<_> = (0..100).map(|_| connections.admit(ip, 0)).collect();
        assert!(slots.iter().all(|(_, admitted)| *admitted));
        assert_eq!(connections.open(ip), 100);
    }
}
