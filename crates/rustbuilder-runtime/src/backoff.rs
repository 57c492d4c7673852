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
use std::time::Duration;

/// Retry delays after failed reconciles, per object: 1 s, 2 s, 4 s, ... up to 5 minutes.
///
/// Each failure of an object doubles its next delay; a successful reconcile resets it. A change to the
/// object still triggers a reconcile right away, whatever the delay.
#[derive(Debug, Default)]
pub struct ErrorBackoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl ErrorBackoff {
    /// The delay after the first failure.
    pub const MIN: Duration = Duration::from_secs(1);
    /// The longest delay.
    pub const MAX: Duration = Duration::from_secs(300);

    /// Records one more failure of `key` and returns how long to wait before retrying.
    pub fn next_delay(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let count = failures.entry(key.to_owned()).or_default();
        *count = count.saturating_add(1);
        Self::delay(*count)
    }

    /// Forgets the failures of `key` (after a successful reconcile).
    pub fn reset(&self, key: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.remove(key);
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
