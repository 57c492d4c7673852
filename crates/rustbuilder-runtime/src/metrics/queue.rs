//! The `workqueue_*` metrics of a controller, measured around kube-runtime's scheduler.
//!
//! kube-runtime keeps its queue of objects to reconcile to itself, so a [`WorkQueue`] follows it from
//! outside: it sees the triggers the controller gets (its watch, the changes of owned objects mapped
//! to their owners, the retries after errors), when each reconcile starts and when it ends. An object
//! waits from its first trigger (or the time a retry is due) until its reconcile starts; further
//! triggers while it waits are merged into one wait, as kube-runtime (and controller-runtime's queue)
//! merges them.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// An object of a controller, as a hash of its namespace and name (no allocation per trigger).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) struct QueueKey(u64);

impl QueueKey {
    pub(crate) fn new(namespace: Option<&str>, name: &str) -> Self {
        // SipHash with fixed keys: the same object gets the same key in every part of the process.
        let mut hasher = std::hash::DefaultHasher::new();
        namespace.hash(&mut hasher);
        name.hash(&mut hasher);
        QueueKey(hasher.finish())
    }
}

/// The series of one controller's queue, labelled `name` and `controller`.
#[derive(Clone)]
pub(crate) struct QueueSeries {
    pub(crate) depth: Gauge,
    pub(crate) adds: Counter,
    pub(crate) queue_duration: Histogram,
    pub(crate) work_duration: Histogram,
    pub(crate) unfinished: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub(crate) longest: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub(crate) retries: Counter,
}

/// Follows one controller's queue; cheap to clone, clones share it.
#[derive(Clone)]
pub(crate) struct WorkQueue(Arc<Inner>);

struct Inner {
    series: QueueSeries,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Objects waiting for a reconcile, and since when (or from when, for a retry not yet due).
    waiting: HashMap<QueueKey, Instant>,
    /// Objects being reconciled, and since when.
    running: HashMap<QueueKey, Instant>,
}

impl WorkQueue {
    pub(crate) fn new(series: QueueSeries) -> Self {
        WorkQueue(Arc::new(Inner {
            series,
            state: Mutex::default(),
        }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Two maps of instants: a panic cannot leave them inconsistent.
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An object is to be reconciled now: a watch event, a change of an object it owns.
    pub(crate) fn add(&self, key: QueueKey) {
        self.add_at(key, Instant::now());
    }

    /// An object is to be reconciled once `due`; an object already waiting keeps the earlier time.
    fn add_at(&self, key: QueueKey, due: Instant) {
        use std::collections::hash_map::Entry;
        match self.state().waiting.entry(key) {
            Entry::Occupied(mut waiting) => {
                let earliest = waiting.get_mut();
                *earliest = (*earliest).min(due);
            }
            Entry::Vacant(vacant) => {
                vacant.insert(due);
                self.0.series.adds.inc();
            }
        }
    }

    /// A reconcile asked to run again at once, or failed and is retried after `delay`.
    pub(crate) fn retry(&self, key: QueueKey, delay: Duration) {
        self.0.series.retries.inc();
        self.add_at(key, Instant::now() + delay);
    }

    /// An object left the queue without a reconcile (kube-runtime found it gone).
    pub(crate) fn forget(&self, key: QueueKey) {
        self.state().waiting.remove(&key);
    }

    /// How many objects wait (due or not).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.state().waiting.len()
    }

    /// A reconcile of `key` starts; it ends when the returned guard is dropped.
    pub(crate) fn start(&self, key: QueueKey) -> Working {
        let now = Instant::now();
        let mut state = self.state();
        // A reconcile whose trigger was not seen (e.g. a requeue kube-runtime scheduled for a
        // reconcile's `Action`) has no waiting time to tell.
        if let Some(since) = state.waiting.remove(&key) {
            let waited = now.saturating_duration_since(since);
            self.0.series.queue_duration.observe(waited.as_secs_f64());
        }
        state.running.insert(key, now);
        Working {
            queue: self.clone(),
            key,
            started: now,
        }
    }

    /// Sets the gauges that depend on the time: depth (objects whose wait is due), the time spent
    /// so far by the reconciles in flight and the longest of them.
    pub(crate) fn refresh(&self) {
        self.refresh_at(Instant::now());
    }

    fn refresh_at(&self, now: Instant) {
        let state = self.state();
        let due = state
            .waiting
            .values()
            .filter(|since| **since <= now)
            .count();
        let running = state
            .running
            .values()
            .map(|started| now.saturating_duration_since(*started));
        let (total, longest) = running.fold((Duration::ZERO, Duration::ZERO), |(t, l), d| {
            (t + d, l.max(d))
        });
        let series = &self.0.series;
        series.depth.set(i64::try_from(due).unwrap_or(i64::MAX));
        series.unfinished.set(total.as_secs_f64());
        series.longest.set(longest.as_secs_f64());
    }
}

/// A reconcile in flight; ends its work time when dropped (also when cancelled).
pub(crate) struct Working {
    queue: WorkQueue,
    key: QueueKey,
    started: Instant,
}

impl Drop for Working {
    fn drop(&mut self) {
        self.queue.state().running.remove(&self.key);
        let took = self.started.elapsed().as_secs_f64();
        self.queue.0.series.work_duration.observe(took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::histogram::Histogram;

    fn series() -> QueueSeries {
        QueueSeries {
            depth: Gauge::default(),
            adds: Counter::default(),
            queue_duration: Histogram::new([1.0]),
            work_duration: Histogram::new([1.0]),
            unfinished: Gauge::default(),
            longest: Gauge::default(),
            retries: Counter::default(),
        }
    }

    /// How many values `histogram` has observed, as its encoding tells.
    fn count(histogram: &Histogram) -> u64 {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("h", "", histogram.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let count = text.lines().find_map(|l| l.strip_prefix("h_count "));
        count.and_then(|c| c.parse().ok()).expect("a count")
    }

    #[test]
    fn keys_name_one_object() {
        let a = QueueKey::new(Some("default"), "a");
        assert_eq!(a, QueueKey::new(Some("default"), "a"));
        assert_ne!(a, QueueKey::new(Some("other"), "a"));
        assert_ne!(a, QueueKey::new(None, "a"));
        assert_ne!(
            QueueKey::new(Some("ab"), "c"),
            QueueKey::new(Some("a"), "bc")
        );
    }

    #[test]
    fn triggers_of_a_waiting_object_merge() {
        let s = series();
        let queue = WorkQueue::new(s.clone());
        let (a, b) = (QueueKey::new(None, "a"), QueueKey::new(None, "b"));
        queue.add(a);
        queue.add(a);
        queue.add(b);
        assert_eq!(
            s.adds.get(),
            2,
            "a second trigger of a waiting object is no add"
        );
        queue.refresh();
        assert_eq!(s.depth.get(), 2);

        let working = queue.start(a);
        assert_eq!(count(&s.queue_duration), 1);
        queue.refresh();
        assert_eq!(s.depth.get(), 1);
        // A trigger while it runs: it waits again, for the next reconcile.
        queue.add(a);
        assert_eq!(s.adds.get(), 3);
        drop(working);
        assert_eq!(count(&s.work_duration), 1);
        queue.forget(b);
        queue.forget(a);
        queue.refresh();
        assert_eq!(s.depth.get(), 0);
    }

    #[test]
    fn a_retry_waits_until_it_is_due() {
        let s = series();
        let queue = WorkQueue::new(s.clone());
        let a = QueueKey::new(None, "a");
        let now = Instant::now();
        queue.retry(a, Duration::from_secs(5));
        assert_eq!((s.retries.get(), s.adds.get()), (1, 1));
        queue.refresh_at(now);
        assert_eq!(s.depth.get(), 0, "not due yet");
        queue.refresh_at(now + Duration::from_secs(6));
        assert_eq!(s.depth.get(), 1, "due");
        // A trigger before it is due: it waits from now.
        queue.add(a);
        queue.refresh();
        assert_eq!(s.depth.get(), 1);
        assert_eq!(s.adds.get(), 1);
    }

    #[test]
    fn reconciles_in_flight_count_their_time() {
        let s = series();
        let queue = WorkQueue::new(s.clone());
        let now = Instant::now();
        let first = queue.start(QueueKey::new(None, "a"));
        let second = queue.start(QueueKey::new(None, "b"));
        queue.refresh_at(now + Duration::from_secs(10));
        let unfinished = s.unfinished.get();
        assert!((19.9..=20.1).contains(&unfinished), "{unfinished}");
        let longest = s.longest.get();
        assert!((9.9..=10.1).contains(&longest), "{longest}");
        drop((first, second));
        queue.refresh();
        assert_eq!((s.unfinished.get(), s.longest.get()), (0.0, 0.0));
        assert_eq!(
            count(&s.queue_duration),
            0,
            "no trigger seen: no waiting time"
        );
    }
}
