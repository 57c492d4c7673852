//! Per-object exponential backoff after failed reconciles.
//!
//! [`controller::Builder`](crate::controller::Builder) uses one [`ErrorBackoff`] per controller, so a
//! reconcile function needs no error policy of its own.
//!
//! ```
//! use std::time::Duration;
//! use rustbuilder_runtime::backoff::ErrorBackoff;
//!
//! let backoff = ErrorBackoff::default();
//! assert_eq!(backoff.next_delay("default/web"), Duration::from_secs(1));
//! assert_eq!(backoff.next_delay("default/web"), Duration::from_secs(2));
//! backoff.reset("default/web");
//! assert_eq!(backoff.next_delay("default/web"), Duration::from_secs(1));
//! ```

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Retry delays after failed reconciles, per object: 1 s, 2 s, 4 s, ... up to 5 minutes.
///
/// Each failure of an object doubles its next delay; a successful reconcile resets it. A change to the
/// object still triggers a reconcile right away, whatever the delay. The controller keys objects by
/// uid as well as name, so an object deleted and created again starts from 1 s; and an object that
/// has not failed for longer than the longest delay is forgotten (it succeeded, or is gone), so
/// the failures of objects that come and go do not pile up.
#[derive(Debug, Default)]
pub struct ErrorBackoff {
    failures: Mutex<Failures>,
}

#[derive(Debug, Default)]
struct Failures {
    /// Consecutive failures and the last one's time, by key.
    by_key: HashMap<String, (u32, Instant)>,
    /// The number of keys at which the forgotten ones are next swept out.
    sweep_at: usize,
}

impl ErrorBackoff {
    /// The delay after the first failure.
    pub const MIN: Duration = Duration::from_secs(1);
    /// The longest delay.
    pub const MAX: Duration = Duration::from_secs(300);

    /// How long after its last failure a key is forgotten: past the longest delay, its retry has
    /// run (and would have failed again, or succeeded) or its object is gone.
    const FORGET_AFTER: Duration = Duration::from_secs(360);

    /// Records one more failure of `key` and returns how long to wait before retrying.
    pub fn next_delay(&self, key: &str) -> Duration {
        self.next_delay_at(key, Instant::now())
    }

    fn next_delay_at(&self, key: &str, now: Instant) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        // Swept when the map has doubled since the last sweep: amortised, a constant per failure.
        if failures.by_key.len() >= failures.sweep_at {
            failures
                .by_key
                .retain(|_, (_, last)| now.saturating_duration_since(*last) < Self::FORGET_AFTER);
            failures.sweep_at = (failures.by_key.len() * 2).max(64);
        }
        let (count, last) = failures.by_key.entry(key.to_owned()).or_insert((0, now));
        *count = count.saturating_add(1);
        *last = now;
        Self::delay(*count)
    }

    /// Forgets the failures of `key` (after a successful reconcile).
    pub fn reset(&self, key: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.by_key.remove(key);
    }

    /// The number of keys with failures remembered.
    pub fn len(&self) -> usize {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.by_key.len()
    }

    /// Whether no failure is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The delay after `failures` consecutive failures.
    pub fn delay(failures: u32) -> Duration {
        let exponent = failures.saturating_sub(1).min(16);
        Self::MIN.saturating_mul(1 << exponent).min(Self::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        assert_eq!(ErrorBackoff::delay(1), Duration::from_secs(1));
        assert_eq!(ErrorBackoff::delay(2), Duration::from_secs(2));
        assert_eq!(ErrorBackoff::delay(5), Duration::from_secs(16));
        assert_eq!(ErrorBackoff::delay(9), Duration::from_secs(256));
        assert_eq!(ErrorBackoff::delay(10), ErrorBackoff::MAX);
        assert_eq!(ErrorBackoff::delay(u32::MAX), ErrorBackoff::MAX);
    }

    /// 20,000 objects that each fail once and go: what is remembered of them stays bounded by
    /// those that failed within the longest delay.
    #[test]
    fn the_failures_of_objects_that_come_and_go_are_forgotten() {
        let backoff = ErrorBackoff::default();
        let start = Instant::now();
        for n in 0..20_000u64 {
            // One object a tenth of a second: 2,000 s in all, 3,600 within FORGET_AFTER.
            let now = start + Duration::from_millis(100 * n);
            assert_eq!(
                backoff.next_delay_at(&format!("ns/o-{n}/uid-{n}"), now),
                ErrorBackoff::MIN
            );
        }
        assert!(
            backoff.len() <= 2 * 3_600 + 64,
            "{} failures remembered",
            backoff.len()
        );
        // Still failing objects keep their count.
        let later = start + Duration::from_secs(2_000);
        assert_eq!(
            backoff.next_delay_at("ns/o-19999/uid-19999", later),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn backoff_counts_per_object_and_resets() {
        let backoff = ErrorBackoff::default();
        assert_eq!(backoff.next_delay("ns/a"), Duration::from_secs(1));
        assert_eq!(backoff.next_delay("ns/a"), Duration::from_secs(2));
        assert_eq!(backoff.next_delay("ns/b"), Duration::from_secs(1));
        backoff.reset("ns/a");
        assert_eq!(backoff.next_delay("ns/a"), Duration::from_secs(1));
        assert_eq!(backoff.next_delay("ns/b"), Duration::from_secs(2));
    }
}
