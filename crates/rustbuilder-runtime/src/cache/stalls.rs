//! Watches that keep failing: a cache whose watch is refused again and again (its Role revoked, a
//! relist after 410 Gone that the API server keeps refusing) stops every controller that reads it,
//! while the process looks healthy. Each cache reports its failures here; past a bound, the
//! manager's readiness names the cache and the last error.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a cache's watch may fail without a break before readiness fails: longer than an API
/// server takes to restart, shorter than an operator should go blind unnoticed.
pub const DEFAULT_BOUND: Duration = Duration::from_secs(120);

/// A failure this long ago or older no longer counts as "still failing": kube's watcher retries at
/// least every 30 s, so a watch that works again reports nothing for longer than that.
const STILL_FAILING: Duration = Duration::from_secs(65);

/// The watches failing now, by cache, and the bound past which readiness reports them.
#[derive(Clone, Debug)]
pub(crate) struct Stalls(Arc<Mutex<Failing>>);

#[derive(Debug)]
struct Failing {
    bound: Duration,
    by_cache: BTreeMap<u64, Failure>,
}

#[derive(Debug)]
struct Failure {
    kind: String,
    since: Instant,
    last: Instant,
    error: String,
    /// Whether [`Stalls::newly_stalled`] has handed this failure out.
    reported: bool,
}

impl Failure {
    fn stalled(&self, bound: Duration) -> bool {
        self.since.elapsed() > bound && self.last.elapsed() < STILL_FAILING
    }

    fn describe(&self) -> String {
        let seconds = self.since.elapsed().as_secs();
        format!(
            "the watch of {} has failed for {seconds} s: {}",
            self.kind, self.error
        )
    }
}

impl Default for Stalls {
    fn default() -> Self {
        Stalls(Arc::new(Mutex::new(Failing {
            bound: DEFAULT_BOUND,
            by_cache: BTreeMap::new(),
        })))
    }
}

impl Stalls {
    fn failing(&self) -> MutexGuard<'_, Failing> {
        // A map updated in one statement cannot be left inconsistent by a panic.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sets how long a watch may fail without a break before [`Stalls::check`] reports it.
    pub(crate) fn set_bound(&self, bound: Duration) {
        self.failing().bound = bound;
    }

    /// What a new cache of `kind` reports through.
    pub(crate) fn reporter(&self, kind: &str) -> Reporter {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Reporter {
            stalls: self.clone(),
            cache: NEXT.fetch_add(1, Ordering::Relaxed),
            kind: kind.to_string(),
        }
    }

    /// `Err` naming each cache whose watch has failed without a break for longer than the bound,
    /// and failed again lately, with its last error.
    pub(crate) fn check(&self) -> Result<(), String> {
        let failing = self.failing();
        let stalled: Vec<String> = failing
            .by_cache
            .values()
            .filter(|f| f.stalled(failing.bound))
            .map(Failure::describe)
            .collect();
        match stalled.is_empty() {
            true => Ok(()),
            false => Err(stalled.join("; ")),
        }
    }

    /// What [`Stalls::check`] reports and no earlier call returned: each stall once, until its
    /// watch works again.
    pub(crate) fn newly_stalled(&self) -> Vec<String> {
        let mut failing = self.failing();
        let bound = failing.bound;
        let new = failing
            .by_cache
            .values_mut()
            .filter(|f| !f.reported && f.stalled(bound));
        new.map(|f| {
            f.reported = true;
            f.describe()
        })
        .collect()
    }
}

/// One cache's part of [`Stalls`]: its failure ends when it is dropped (the cache stopped).
pub(crate) struct Reporter {
    stalls: Stalls,
    cache: u64,
    kind: String,
}

impl Reporter {
    /// The watch failed (again) with `error`.
    pub(crate) fn failed(&self, error: &str) {
        let now = Instant::now();
        let mut failing = self.stalls.failing();
        let failure = failing
            .by_cache
            .entry(self.cache)
            .or_insert_with(|| Failure {
                kind: self.kind.clone(),
                since: now,
                last: now,
                error: String::new(),
                reported: false,
            });
        failure.last = now;
        failure.error = error.to_string();
    }

    /// The watch delivered an event: it works.
    pub(crate) fn working(&self) {
        self.stalls.failing().by_cache.remove(&self.cache);
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.working();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_failing_past_the_bound_is_reported_until_it_works() {
        let stalls = Stalls::default();
        stalls.set_bound(Duration::from_millis(20));
        let configmaps = stalls.reporter("ConfigMap");
        configmaps.failed("forbidden");
        assert!(stalls.check().is_ok(), "reported before the bound");
        std::thread::sleep(Duration::from_millis(30));
        configmaps.failed("forbidden: no list");
        let reported = stalls.check().unwrap_err();
        assert!(reported.contains("the watch of ConfigMap has failed for 0 s: forbidden: no list"));
        assert_eq!(stalls.newly_stalled(), [reported]);
        assert!(
            stalls.newly_stalled().is_empty(),
            "a stall handed out twice"
        );
        configmaps.working();
        assert!(stalls.check().is_ok());
        configmaps.failed("again");
        std::thread::sleep(Duration::from_millis(30));
        drop(configmaps);
        assert!(stalls.check().is_ok(), "a stopped cache is not reported");
    }
}
