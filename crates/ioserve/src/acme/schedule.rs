//! When to renew, and how long to wait after a failure.
//!
//! Renewal: at a moment chosen at random in the window the CA suggests (ACME Renewal
//! Information, RFC 9773 section 4.2, so that a CA can spread renewals or call them in
//! early after an incident), else when a third of the lifetime is left (Let's
//! Encrypt's advice; 30 days of a 90-day certificate, 2 days of a 6-day one, 20 s of
//! a 60-s one).
//!
//! Failures: exponential backoff from 1 s with jitter (each wait a random 50-100 % of
//! the step, so replicas and restarted fleets spread out), capped at a tenth of the
//! time the served certificate has left (at least 1 s, at most an hour), so that a
//! short-lived certificate is retried often enough to be renewed before it expires,
//! and at a minute while nothing valid can be served (no certificate yet, or one that
//! expired while the CA was away). A CA's `Retry-After` is a floor: a rate limit's
//! wait is honoured whatever the cap.

use std::time::{Duration, SystemTime};

/// The longest wait between failed attempts.
const MAX_STEP: Duration = Duration::from_secs(3600);

/// The longest wait between failed attempts while nothing valid can be served.
const MAX_STEP_WITHOUT_CERTIFICATE: Duration = Duration::from_secs(60);

/// When a third of the lifetime from `not_before` to `not_after` is left.
pub fn one_third_left(not_before: SystemTime, not_after: SystemTime) -> SystemTime {
    let lifetime = not_after.duration_since(not_before).unwrap_or_default();
    not_after - lifetime / 3
}

/// A moment in the CA's suggested window `[start, end]` chosen by `random` (0 to 1).
pub fn in_window(start: SystemTime, end: SystemTime, random: f64) -> SystemTime {
    let width = end.duration_since(start).unwrap_or_default();
    start + width.mul_f64(random.clamp(0.0, 1.0))
}

/// When a tenth of the lifetime is left: the latest a renewal is scheduled, whatever
/// the CA's window says (RFC 9773 lets a client renew before its window), so that
/// failed attempts have time to be retried before the certificate expires. A window
/// that ends at the expiry (pebble's, for a short-lived certificate) would otherwise
/// let a renewal start in the last second.
pub fn latest(not_before: SystemTime, not_after: SystemTime) -> SystemTime {
    let lifetime = not_after.duration_since(not_before).unwrap_or_default();
    not_after - lifetime / 10
}

/// Waits between failed attempts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Backoff {
    failures: u32,
}

impl Backoff {
    /// The wait after one more failure: `left` is how long the served certificate is
    /// still valid (`None` without a valid one), `retry_after` what the CA asked for,
    /// `random` a number from 0 to 1 for the jitter.
    pub fn after_failure(
        &mut self,
        left: Option<Duration>,
        retry_after: Option<Duration>,
        random: f64,
    ) -> Duration {
        let step = Duration::from_secs(1u64 << self.failures.min(20));
        self.failures = self.failures.saturating_add(1);
        let cap = match left {
            Some(left) => (left / 10).clamp(Duration::from_secs(1), MAX_STEP),
            None => MAX_STEP_WITHOUT_CERTIFICATE,
        };
        let wait = step.min(cap).mul_f64(0.5 + random.clamp(0.0, 1.0) / 2.0);
        wait.max(retry_after.unwrap_or_default())
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Starts over after a success.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_comes_when_a_third_is_left_or_inside_the_window() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let day = Duration::from_secs(86_400);
        assert_eq!(one_third_left(start, start + 90 * day), start + 60 * day);
        assert_eq!(
            one_third_left(start, start + Duration::from_secs(60)),
            start + Duration::from_secs(40)
        );
        let end = start + day;
        assert_eq!(in_window(start, end, 0.0), start);
        assert_eq!(in_window(start, end, 1.0), end);
        assert_eq!(in_window(start, end, 0.5), start + day / 2);
        assert_eq!(in_window(end, start, 0.5), end);
        assert_eq!(
            latest(start, start + Duration::from_secs(60)),
            start + Duration::from_secs(54)
        );
    }

    #[test]
    fn backoff_doubles_with_jitter_and_stays_under_its_caps() {
        let mut backoff = Backoff::default();
        let waits: Vec<u64> = (0..6)
            .map(|_| backoff.after_failure(None, None, 1.0).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32]);
        assert_eq!(
            backoff.after_failure(None, None, 1.0),
            Duration::from_secs(60)
        );
        for _ in 0..30 {
            backoff.after_failure(None, None, 1.0);
        }
        assert_eq!(
            backoff.after_failure(None, None, 1.0),
            MAX_STEP_WITHOUT_CERTIFICATE
        );
        assert_eq!(
            backoff.after_failure(Some(Duration::from_secs(86_400 * 30)), None, 1.0),
            MAX_STEP
        );
        // A 60-second certificate with 20 s left is retried at least every 2 s.
        assert_eq!(
            backoff.after_failure(Some(Duration::from_secs(20)), None, 1.0),
            Duration::from_secs(2)
        );
        // The jitter halves at most.
        assert_eq!(
            backoff.after_failure(Some(Duration::from_secs(20)), None, 0.0),
            Duration::from_secs(1)
        );
        // Retry-After is a floor.
        assert_eq!(
            backoff.after_failure(
                Some(Duration::from_secs(20)),
                Some(Duration::from_secs(120)),
                0.0
            ),
            Duration::from_secs(120)
        );
        backoff.succeeded();
        assert_eq!(backoff.failures(), 0);
        assert_eq!(
            backoff.after_failure(None, None, 0.0),
            Duration::from_millis(500)
        );
    }
}
