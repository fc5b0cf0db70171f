//! Pacing: how many body bytes a connection may send now (`--limit-rate`, after
//! `--limit-rate-after` bytes at full speed), as nginx's `limit_rate` does.
//!
//! A [`Pacer`] is a token bucket that [`crate::io::output::Output`] consults before each
//! write and each sendfile(2) call, so every IO strategy is paced by the same mechanism,
//! and sendfile keeps its zero-copy path: a call is simply handed a smaller count. When
//! the bucket is empty, the response sleeps on the tokio timer until the next refill.
//!
//! The bucket refills at the rate and holds at most an eighth of a second's worth, so a
//! keep-alive connection that idles does not save up a burst.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// The most a full bucket holds, as a fraction of the rate: an eighth of a second.
const BURST_DIVISOR: u64 = 8;

/// The smallest bucket, so that a very low rate still sends whole packets.
const MIN_BURST: u64 = 1460;

/// The pacing settings of the moment: SIGHUP may change them between responses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaceLimits {
    /// Body bytes per second; 0 means unlimited.
    pub rate: u64,
    /// Body bytes of the connection sent at full speed before the rate applies.
    pub after: u64,
}

/// The pacing state of one connection: its bucket and the body bytes it has sent.
#[derive(Debug)]
pub struct Pacer {
    limits: PaceLimits,
    /// Body bytes sent on this connection so far.
    sent: u64,
    /// Bytes that may go now at the rate (fractions kept for exact refills).
    tokens: f64,
    /// When `tokens` was last refilled.
    refilled: Instant,
    /// Time this connection has spent waiting for tokens, over all its responses.
    waited: Duration,
    /// The pause under way, if one is: how long it lasts.
    pause: Option<Duration>,
    /// The timer of the pauses, made at the first.
    timer: Option<Pin<Box<Sleep>>>,
}

impl Pacer {
    /// A pacer for a new connection, with a full bucket.
    pub fn new(limits: PaceLimits) -> Pacer {
        Pacer {
            limits,
            sent: 0,
            tokens: burst(limits.rate) as f64,
            refilled: Instant::now(),
            waited: Duration::ZERO,
            pause: None,
            timer: None,
        }
    }

    /// The pacer of a connection's next response under `limits`: the connection's own,
    /// made at its first response with a rate and kept across the later ones (the
    /// bucket and `after` are the connection's), or none while no rate applies.
    pub fn for_response(pacer: &mut Option<Box<Pacer>>, limits: PaceLimits) -> Option<&mut Pacer> {
        match pacer {
            Some(pacer) => pacer.set_limits(limits),
            None if limits.rate > 0 => *pacer = Some(Box::new(Pacer::new(limits))),
            None => {}
        }
        pacer.as_deref_mut().filter(|pacer| pacer.limits.rate > 0)
    }

    /// Applies the settings of the moment to the responses that follow.
    pub fn set_limits(&mut self, limits: PaceLimits) {
        if limits != self.limits {
            self.refill();
            self.limits = limits;
            self.tokens = self.tokens.min(burst(limits.rate) as f64);
        }
    }

    /// Time spent waiting for the rate so far on this connection.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// How many of `want` body bytes may go now, without waiting: 0 when the bucket is
    /// empty.
    pub fn allowed_now(&mut self, want: usize) -> usize {
        if self.limits.rate == 0 {
            return want;
        }
        if let Some(free) = self.limits.after.checked_sub(self.sent).filter(|&f| f > 0) {
            return want.min(usize::try_from(free).unwrap_or(usize::MAX));
        }
        self.refill();
        want.min(self.tokens as usize)
    }

    /// How many of `want` (at least 1) body bytes may go now, waiting on the timer until
    /// the bucket holds enough for a useful send: `want`, or a full bucket if less.
    pub async fn allowed(&mut self, want: usize) -> usize {
        std::future::poll_fn(|cx| self.poll_allowed(cx, want)).await
    }

    /// [`Pacer::allowed`] as a poll function: a pause it starts is kept here (its timer
    /// too, made at the first pause and moved for each later one), so that the
    /// futures of the writes it paces hold nothing of it. A pause whose future is
    /// dropped is still owed: the next call waits for its end.
    pub fn poll_allowed(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<usize> {
        loop {
            if let (Some(pause), Some(timer)) = (self.pause, self.timer.as_mut()) {
                std::task::ready!(timer.as_mut().poll(cx));
                self.pause = None;
                self.waited += pause;
                return Poll::Ready(self.allowed_now(want).max(1));
            }
            if self.limits.rate == 0 || self.sent < self.limits.after {
                return Poll::Ready(self.allowed_now(want));
            }
            let now = self.allowed_now(want);
            let enough = want.min(usize::try_from(burst(self.limits.rate)).unwrap_or(usize::MAX));
            if now >= enough {
                return Poll::Ready(now);
            }
            let missing = (enough as f64 - self.tokens).max(0.0);
            let pause = Duration::from_secs_f64(missing / self.limits.rate as f64);
            let until = Instant::now() + pause;
            match &mut self.timer {
                Some(timer) => timer.as_mut().reset(until),
                None => self.timer = Some(Box::pin(tokio::time::sleep_until(until))),
            }
            self.pause = Some(pause);
        }
    }

    /// Records `n` body bytes sent (at most what was allowed).
    pub fn spend(&mut self, n: usize) {
        let n = n as u64;
        let free = self.limits.after.saturating_sub(self.sent);
        self.sent += n;
        if self.limits.rate > 0 {
            self.tokens -= n.saturating_sub(free) as f64;
        }
    }

    /// Adds the tokens earned since the last refill, up to a full bucket.
    fn refill(&mut self) {
        let now = Instant::now();
        let earned = now.duration_since(self.refilled).as_secs_f64() * self.limits.rate as f64;
        self.tokens = (self.tokens + earned).min(burst(self.limits.rate) as f64);
        self.refilled = now;
    }
}

/// The capacity of the bucket at `rate`.
fn burst(rate: u64) -> u64 {
    (rate / BURST_DIVISOR).max(MIN_BURST)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(rate: u64, after: u64) -> PaceLimits {
        PaceLimits { rate, after }
    }

    #[tokio::test]
    async fn unlimited_allows_everything_at_once() {
        let mut pacer = Pacer::new(limits(0, 0));
        assert_eq!(pacer.allowed(10 << 20).await, 10 << 20);
        pacer.spend(10 << 20);
        assert_eq!(pacer.allowed(10 << 20).await, 10 << 20);
        assert_eq!(pacer.waited(), Duration::ZERO);
    }

    #[tokio::test]
    async fn a_rate_spreads_bytes_over_time() {
        let rate = 4 << 20;
        let mut pacer = Pacer::new(limits(rate, 0));
        let start = Instant::now();
        let mut left = 1usize << 20;
        while left > 0 {
            let n = pacer.allowed(left).await;
            assert!(n as u64 <= burst(rate), "{n} is more than a bucket");
            pacer.spend(n);
            left -= n;
        }
        let took = start.elapsed();
        // 1 MiB at 4 MiB/s, less the first full bucket (an eighth of a second): it
        // cannot be faster.
        assert!(took >= Duration::from_millis(120), "{took:?}");
        let waited = pacer.waited();
        assert!(
            waited <= took && waited >= Duration::from_millis(100),
            "{waited:?}"
        );
    }

    #[tokio::test]
    async fn the_first_bytes_after_go_at_full_speed() {
        let mut pacer = Pacer::new(limits(1, 1 << 20));
        assert_eq!(pacer.allowed(3 << 20).await, 1 << 20);
        pacer.spend(1 << 20);
        assert_eq!(pacer.waited(), Duration::ZERO);
        // Then only the bucket, and then the rate (a byte a second).
        let n = pacer.allowed(1 << 20).await;
        assert_eq!(n as u64, MIN_BURST);
        pacer.spend(n);
        assert_eq!(pacer.allowed_now(1), 0);
    }

    #[tokio::test]
    async fn an_idle_connection_saves_no_more_than_a_bucket() {
        let rate = 8 << 20;
        let mut pacer = Pacer::new(limits(rate, 0));
        let n = pacer.allowed_now(usize::MAX);
        pacer.spend(n);
        // Idle for long enough to earn more than two buckets.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(pacer.allowed_now(usize::MAX) as u64, burst(rate));
    }
}
