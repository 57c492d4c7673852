//! What time it is, as a controller sees it: the system clock in production, a clock the test moves
//! in tests.
//!
//! A controller that acts on a schedule (a CronJob's next run, a certificate's renewal) reads the
//! time through a [`Clock`] it is given, and asks to be reconciled again at the next moment that
//! matters with [`requeue_at`]:
//!
//! ```
//! use std::time::Duration;
//! use rustbuilder_runtime::clock::{Clock, FakeClock, requeue_at};
//! use k8s_openapi::jiff::Timestamp;
//!
//! let clock = FakeClock::new("2026-01-01T00:00:00Z".parse().unwrap());
//! let next_run: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap();
//! assert_eq!(requeue_at(next_run, &clock), kube::runtime::controller::Action::requeue(Duration::from_secs(300)));
//! clock.advance(Duration::from_secs(600));
//! // A moment already past: at once.
//! assert_eq!(requeue_at(next_run, &clock), kube::runtime::controller::Action::requeue(Duration::ZERO));
//! ```

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::runtime::controller::Action;

/// A source of the current time.
pub trait Clock: Debug + Send + Sync + 'static {
    /// The time now.
    fn now(&self) -> Timestamp;
}

/// The system's clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that stands still until it is set or moved: tests decide what time it is. Clones share
/// the time.
#[derive(Clone, Debug)]
pub struct FakeClock {
    now: Arc<Mutex<Timestamp>>,
}

impl FakeClock {
    /// A clock showing `now`.
    pub fn new(now: Timestamp) -> Self {
        FakeClock {
            now: Arc::new(Mutex::new(now)),
        }
    }

    /// Sets the time.
    pub fn set(&self, now: Timestamp) {
        *self.lock() = now;
    }

    /// Moves the time forward by `by`.
    ///
    /// # Panics
    ///
    /// If the time would leave the range a `Timestamp` holds (year ±9999).
    pub fn advance(&self, by: Duration) {
        let mut now = self.lock();
        *now = now
            .checked_add(SignedDuration::try_from(by).expect("a duration a clock can move by"))
            .expect("a time within ±9999 years");
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Timestamp> {
        // A timestamp is written whole: a poisoned lock still holds a valid one.
        self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        *self.lock()
    }
}

/// Reconcile again at `at` by `clock`'s time (at once if `at` has passed): the [`Action`] for a
/// reconcile that waits for a moment rather than for a change.
pub fn requeue_at(at: Timestamp, clock: &(impl Clock + ?Sized)) -> Action {
    let wait = at.duration_since(clock.now());
    Action::requeue(Duration::try_from(wait).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_clock_behind_a_trait_object_schedules_too() {
        // Controllers keep their clock as `Arc<dyn Clock>`, to take the system's or a test's.
        let fake = FakeClock::new("2026-01-01T00:00:00Z".parse().unwrap());
        let clock: Arc<dyn Clock> = Arc::new(fake.clone());
        let at: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        assert_eq!(
            requeue_at(at, clock.as_ref()),
            Action::requeue(Duration::from_secs(60))
        );
        fake.advance(Duration::from_secs(30));
        assert_eq!(
            requeue_at(at, clock.as_ref()),
            Action::requeue(Duration::from_secs(30))
        );
    }
}
