//! Per-client rate limiting: a token bucket per source address, in a fixed-size table
//! so that a flood of spoofed addresses costs no memory, only the eviction of idle
//! entries (chrony's client log makes the same trade).
//!
//! The table is set-associative: an address hashes to one set of [`WAYS`] entries,
//! each set behind its own small lock (workers rarely meet on one). A new address
//! replaces the entry of its set that was seen longest ago. A client over its rate
//! gets one Kiss-o'-Death RATE reply per interval and silence otherwise, so the KoD
//! itself cannot be used to amplify a flood.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher as _;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries per set.
pub const WAYS: usize = 4;

/// What to do with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Answer it.
    Pass,
    /// Over the rate: answer with a Kiss-o'-Death RATE.
    Kiss,
    /// Over the rate, and a KoD went out less than an interval ago: drop it.
    Drop,
}

/// The limit: a mean of one request per `interval`, with bursts of `burst`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limit {
    /// The mean interval between requests one address may send.
    pub interval: Duration,
    /// How many requests may come back to back.
    pub burst: u32,
}

impl Limit {
    /// The poll exponent (log2 seconds) a KoD tells the client to use: the interval,
    /// rounded up to a power of two.
    pub fn poll_exponent(&self) -> i8 {
        let seconds = self.interval.as_secs_f64().max(1.0);
        seconds.log2().ceil().min(17.0) as i8
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    address: IpAddr,
    tokens: f64,
    seen: Instant,
    kissed: Option<Instant>,
}

/// The table of buckets.
#[derive(Debug)]
pub struct RateLimiter {
    limit: Limit,
    sets: Box<[Mutex<[Option<Entry>; WAYS]>]>,
    hasher: RandomState,
}

impl RateLimiter {
    /// A table tracking up to `sets * WAYS` addresses (`sets` at least 1).
    pub fn new(limit: Limit, sets: usize) -> RateLimiter {
        RateLimiter {
            limit,
            sets: (0..sets.max(1)).map(|_| Mutex::new([None; WAYS])).collect(),
            hasher: RandomState::new(),
        }
    }

    /// The limit this table applies.
    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// Accounts one request from `address` at `now`.
    pub fn check(&self, address: IpAddr, now: Instant) -> Verdict {
        let address = canonical(address);
        let set = &self.sets[(self.hasher.hash_one(address) as usize) % self.sets.len()];
        // A poisoned lock only means another worker panicked mid-update of plain
        // numbers; the entries are still usable.
        let mut set = set.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let burst = f64::from(self.limit.burst.max(1));
        let per_second = 1.0 / self.limit.interval.as_secs_f64().max(1e-9);
        let slot = match set
            .iter()
            .position(|e| e.is_some_and(|e| e.address == address))
        {
            Some(slot) => slot,
            None => {
                let slot = set
                    .iter()
                    .position(Option::is_none)
                    .unwrap_or_else(|| oldest(&set[..]));
                set[slot] = Some(Entry {
                    address,
                    tokens: burst,
                    seen: now,
                    kissed: None,
                });
                slot
            }
        };
        let entry = set[slot].as_mut().expect("slot was just found or filled");
        let elapsed = now.saturating_duration_since(entry.seen).as_secs_f64();
        entry.tokens = (entry.tokens + elapsed * per_second).min(burst);
        entry.seen = now;
        if entry.tokens >= 1.0 {
            entry.tokens -= 1.0;
            return Verdict::Pass;
        }
        match entry.kissed {
            Some(at) if now.saturating_duration_since(at) < self.limit.interval => Verdict::Drop,
            _ => {
                entry.kissed = Some(now);
                Verdict::Kiss
            }
        }
    }
}

/// An IPv4 client on a dual-stack socket is the same client as on an IPv4 socket.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

fn oldest(set: &[Option<Entry>]) -> usize {
    set.iter()
        .enumerate()
        .min_by_key(|(_, e)| e.map(|e| e.seen))
        .map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const LIMIT: Limit = Limit {
        interval: Duration::from_secs(2),
        burst: 3,
    };

    fn client(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, n))
    }

    #[test]
    fn a_burst_passes_then_one_kiss_then_silence_until_tokens_return() {
        let limiter = RateLimiter::new(LIMIT, 64);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.check(client(1), t0), Verdict::Pass);
        }
        assert_eq!(limiter.check(client(1), t0), Verdict::Kiss);
        assert_eq!(
            limiter.check(client(1), t0 + Duration::from_millis(500)),
            Verdict::Drop
        );
        // Another client is not affected.
        assert_eq!(limiter.check(client(2), t0), Verdict::Pass);
        // One interval later, one token is back.
        let later = t0 + Duration::from_millis(2100);
        assert_eq!(limiter.check(client(1), later), Verdict::Pass);
        assert_eq!(limiter.check(client(1), later), Verdict::Kiss);
    }

    #[test]
    fn mapped_ipv4_is_the_same_client() {
        let limiter = RateLimiter::new(LIMIT, 1);
        let t0 = Instant::now();
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
        for _ in 0..3 {
            assert_eq!(limiter.check(mapped, t0), Verdict::Pass);
        }
        assert_eq!(limiter.check(client(1), t0), Verdict::Kiss);
        assert_eq!(
            limiter.check(IpAddr::V6(Ipv6Addr::LOCALHOST), t0),
            Verdict::Pass
        );
    }

    #[test]
    fn the_table_is_bounded_and_evicts_the_longest_idle() {
        // One set of four ways: a fifth address evicts the one seen longest ago.
        let limiter = RateLimiter::new(LIMIT, 1);
        let t0 = Instant::now();
        for n in 1..=4 {
            for _ in 0..3 {
                limiter.check(client(n), t0 + Duration::from_millis(u64::from(n)));
            }
        }
        limiter.check(client(5), t0 + Duration::from_millis(10));
        // Client 1 was evicted: it starts with a full burst again.
        assert_eq!(
            limiter.check(client(1), t0 + Duration::from_millis(11)),
            Verdict::Pass
        );
        // Client 4 was not: it is still out of tokens.
        assert_eq!(
            limiter.check(client(4), t0 + Duration::from_millis(12)),
            Verdict::Kiss
        );
        // A flood of new addresses never grows the table.
        for n in 0..=255 {
            limiter.check(client(n), t0);
        }
        assert_eq!(limiter.sets.len(), 1);
    }

    #[test]
    fn poll_exponents() {
        let limit = |secs| Limit {
            interval: Duration::from_secs_f64(secs),
            burst: 1,
        };
        assert_eq!(limit(0.1).poll_exponent(), 0);
        assert_eq!(limit(2.0).poll_exponent(), 1);
        assert_eq!(limit(8.0).poll_exponent(), 3);
        assert_eq!(limit(9.0).poll_exponent(), 4);
    }
}
