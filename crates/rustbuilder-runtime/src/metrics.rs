//! Prometheus metrics of the manager, named like controller-runtime's so existing dashboards and alerts
//! work: reconcile counts, errors, durations and busy workers per controller, each controller's work
//! queue, the API client's requests, the leader-election status, and the usual `process_*` metrics. The
//! manager serves them on `/metrics` (`--metrics-bind-address`).
//!
//! ## The work queue and the API client
//!
//! kube-runtime keeps its queue of objects to reconcile to itself, so the `workqueue_*` series
//! (labels `name` and `controller`, both the controller's name) are measured around it: a controller
//! sees the triggers it gets, and when each reconcile starts and ends.
//! Where they differ from controller-runtime's:
//!
//! | series | here |
//! |---|---|
//! | `workqueue_adds_total` | objects that start waiting for a reconcile: a watch event of the object, a change of an object it owns ([`Builder::owns`](crate::controller::Builder::owns)), a retry (counted when scheduled, not when due). A trigger of an object already waiting is merged, not counted, as in controller-runtime. Not seen: triggers of streams added with [`Builder::with_controller`](crate::controller::Builder::with_controller), and requeues a reconcile asks for with `Action::requeue(…)` (kube-runtime does not tell their delay) |
//! | `workqueue_depth` | objects waiting whose time has come (a retry counts from when it is due) |
//! | `workqueue_queue_duration_seconds` | from an object's first trigger (or its retry's due time) to the start of its reconcile; reconciles of triggers not seen are not observed |
//! | `workqueue_work_duration_seconds` | how long each reconcile takes (as `controller_runtime_reconcile_time_seconds`) |
//! | `workqueue_retries_total` | reconciles that failed, and `Action::requeue(Duration::ZERO)` (controller-runtime's `Requeue: true`), each scheduled again |
//! | `workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds` | the time spent so far by the reconciles in flight, in total and the longest, at the scrape |
//!
//! `rest_client_requests_total{code,method,host}` and `rest_client_request_duration_seconds{verb,host}`
//! count and time the requests of the client [`Manager::start`](crate::manager::Manager::start)
//! builds ([`Metrics::client_layer`]): one per request as the operator's code sends it, so a request
//! kube's client retries (e.g. after a 429) counts once, with its last answer; `code` is `<error>`
//! when no answer came. A watch counts when its response starts, and its duration is the time to
//! that point.
//!
//! ## Caches
//!
//! `cache_incomplete{kind}` counts the caches of a kind that hold no complete list now: until their
//! first list, and again from a relist (after 410 Gone, or a change of a shard's ranges) until it
//! ends. Controllers reading such a cache wait; a value that stays above 0 is a cache that cannot
//! list.
//!
//! ## Shards
//!
//! A member of a shard group ([`crate::shard`]) reports `shard_members{group}` (the live members it
//! sees), `shard_active_share{group}` (the share of the hash space it works on, 0 to 1),
//! `shard_handovers_total{group,direction}` (ranges `acquired` and `released`) and, per sharded cache,
//! `shard_objects{group,kind,key}` (the objects it holds; `key` is `uid`, or `controller_owner` for a
//! cache of owned objects).
//!
//! ## Fleets
//!
//! Each engaged cluster of a [`Fleet`](crate::fleet::Fleet) counts into metrics of its own, served
//! with the process's while the cluster is engaged: the same families, each of its series labelled
//! `cluster="<name>"` first, and `fleet_cluster_ready{cluster}` (1 once its caches have synced).
//! The process's own series keep their labels. `fleet_clusters{state}` counts the clusters of the
//! process's fleets by state: `announced`, `waiting` (for their turn to list), `engaged`, `silent`.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod client;
mod clusters;
mod queue;
mod shard;

pub use client::{ClientMetricsLayer, ClientMetricsService};
use client::{ClientSeries, REQUEST_DURATION_BUCKETS};
pub(crate) use clusters::ReadyCheck;
pub(crate) use clusters::ServedCluster;
use clusters::ServedClusters;
use queue::QueueSeries;
pub(crate) use queue::{QueueKey, WorkQueue};
pub(crate) use shard::ShardSeries;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::runtime::controller::Action;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The Prometheus client the metrics are built on, for the operator's own metrics (see
/// [`Metrics::with_registry`]).
pub use prometheus_client;

/// Upper bounds of the reconcile-duration buckets, in seconds: 5 ms to 60 s.
const RECONCILE_TIME_BUCKETS: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    controller: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookCodeLabels {
    webhook: String,
    code: String,
}

/// Upper bounds of the webhook-latency buckets, in seconds: 5 ms to 10 s (the API server waits at
/// most 30 s, 10 by default).
const WEBHOOK_LATENCY_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
    controller: String,
}

/// Upper bounds of the work-queue duration buckets, in seconds: controller-runtime's, 10 ns to
/// 1000 s by factors of ten.
const QUEUE_DURATION_BUCKETS: [f64; 12] = [
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0,
];

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// The `workqueue_*` families, and the queues whose gauges are set at each scrape.
#[derive(Clone)]
struct QueueFamilies {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: Family<QueueLabels, Histogram, fn() -> Histogram>,
    work_duration: Family<QueueLabels, Histogram, fn() -> Histogram>,
    unfinished: Family<QueueLabels, FloatGauge>,
    longest: Family<QueueLabels, FloatGauge>,
    retries: Family<QueueLabels, Counter>,
    queues: Arc<Mutex<Vec<WorkQueue>>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

/// All metrics of the process. Cheap to clone: clones share the same values.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    reconciles: Family<OutcomeLabels, Counter>,
    errors: Family<ControllerLabels, Counter>,
    panics: Family<ControllerLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    active_workers: Family<ControllerLabels, Gauge>,
    max_workers: Family<ControllerLabels, Gauge>,
    leader: Family<LeaseLabels, Gauge>,
    cache_incomplete: Family<KindLabels, Gauge>,
    fleet_clusters: Family<StateLabels, Gauge>,
    webhook_requests: Family<WebhookCodeLabels, Counter>,
    webhook_latency: Family<WebhookLabels, Histogram, fn() -> Histogram>,
    queue: QueueFamilies,
    client: ClientSeries,
    shard: ShardSeries,
    /// The clusters of fleets whose series are served with these ([`Metrics::serve_cluster`]).
    clusters: Arc<ServedClusters>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// A fresh registry with every series of the manager, at zero.
    pub fn new() -> Self {
        Self::with_registry(Registry::default())
    }

    /// Every series of the manager, at zero, added to `registry`: the operator's own metrics,
    /// registered there beforehand (or in a sub-registry with its own prefix), are served on
    /// `/metrics` beside them.
    ///
    /// ```
    /// use prometheus_client::metrics::counter::Counter;
    /// use prometheus_client::registry::Registry;
    /// use rustbuilder_runtime::metrics::Metrics;
    ///
    /// let mut registry = Registry::default();
    /// let backups = Counter::<u64>::default();
    /// registry
    ///     .sub_registry_with_prefix("memcached")
    ///     .register("backups", "Backups taken", backups.clone());
    /// let metrics = Metrics::with_registry(registry);
    /// backups.inc();
    /// assert!(metrics.encode().contains("memcached_backups_total 1"));
    /// ```
    pub fn with_registry(registry: Registry) -> Self {
        Self::build(registry, true)
    }

    /// The metrics of one cluster of a fleet: the manager's families without the `process_*` ones,
    /// which the process serves once.
    pub(crate) fn of_cluster() -> Self {
        Self::build(Registry::default(), false)
    }

    fn build(mut registry: Registry, process: bool) -> Self {
        let reconciles = Family::default();
        // Counters get the `_total` suffix when encoded.
        registry.register(
            "controller_runtime_reconcile",
            "Reconciles per controller and result (success, requeue, requeue_after, error)",
            reconciles.clone(),
        );
        let errors = Family::default();
        registry.register(
            "controller_runtime_reconcile_errors",
            "Reconciles per controller that returned an error",
            errors.clone(),
        );
        let panics = Family::default();
        registry.register(
            "controller_runtime_reconcile_panics",
            "Reconciles per controller that panicked (counted as errors too)",
            panics.clone(),
        );
        let reconcile_time: Family<_, _, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(RECONCILE_TIME_BUCKETS));
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "How long reconciles take, per controller",
            reconcile_time.clone(),
        );
        let active_workers = Family::default();
        registry.register(
            "controller_runtime_active_workers",
            "Reconciles running right now, per controller",
            active_workers.clone(),
        );
        let cache_incomplete = Family::default();
        registry.register(
            "cache_incomplete",
            "Caches of the kind without a complete list now (listing, or relisting after 410 Gone)",
            cache_incomplete.clone(),
        );
        let max_workers = Family::default();
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "How many reconciles a controller may run at once (0: no limit)",
            max_workers.clone(),
        );
        let leader = Family::default();
        registry.register(
            "leader_election_master_status",
            "1 while this process holds the leader-election lease, else 0",
            leader.clone(),
        );
        let webhook_requests = Family::default();
        registry.register(
            "controller_runtime_webhook_requests",
            "Webhook calls per path (webhook) and HTTP status code",
            webhook_requests.clone(),
        );
        let webhook_latency: Family<_, _, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(WEBHOOK_LATENCY_BUCKETS));
        registry.register(
            "controller_runtime_webhook_latency_seconds",
            "How long webhook calls take to answer, per path",
            webhook_latency.clone(),
        );
        let queue = QueueFamilies::register(&mut registry);
        let client = ClientSeries {
            requests: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(REQUEST_DURATION_BUCKETS)),
        };
        registry.register(
            "rest_client_requests",
            "API requests of the manager's client, per HTTP status code, method and host",
            client.requests.clone(),
        );
        registry.register(
            "rest_client_request_duration_seconds",
            "How long the API server takes to answer the manager's client, per method (verb) and host",
            client.duration.clone(),
        );
        let shard = ShardSeries::register(&mut registry);
        let fleet_clusters = Family::default();
        if process {
            registry.register_collector(Box::new(ProcessCollector));
            registry.register(
                "fleet_clusters",
                "Clusters of the process's fleets by state: announced (by their providers), waiting (for their turn to make their first lists), engaged, silent (disengaged until their API server answers)",
                fleet_clusters.clone(),
            );
        }
        Metrics {
            registry: Arc::new(registry),
            reconciles,
            errors,
            panics,
            reconcile_time,
            active_workers,
            max_workers,
            leader,
            cache_incomplete,
            fleet_clusters,
            webhook_requests,
            webhook_latency,
            queue,
            client,
            shard,
            clusters: Arc::default(),
        }
    }

    /// Serves the series of `cluster`'s metrics (one cluster of a fleet) with these, each labelled
    /// `cluster="<name>"`, and `fleet_cluster_ready{cluster}` from `ready`, until the returned
    /// guard is dropped. The families are the same, so a cluster's reconciles are counted in
    /// `controller_runtime_reconcile_total{cluster="east",…}` beside the process's own series,
    /// which keep their labels. Of two clusters served under one name, the first is served.
    pub(crate) fn serve_cluster(
        &self,
        name: &str,
        cluster: Metrics,
        ready: ReadyCheck,
    ) -> ServedCluster {
        self.clusters.add(name, cluster, ready)
    }

    /// The work queue of the controller `name`, whose `workqueue_*` series (at zero) appear at once.
    pub(crate) fn work_queue(&self, name: &str) -> WorkQueue {
        let labels = QueueLabels {
            name: name.to_string(),
            controller: name.to_string(),
        };
        let families = &self.queue;
        let queue = WorkQueue::new(QueueSeries {
            depth: families.depth.get_or_create(&labels).clone(),
            adds: families.adds.get_or_create(&labels).clone(),
            queue_duration: families.queue_duration.get_or_create(&labels).clone(),
            work_duration: families.work_duration.get_or_create(&labels).clone(),
            unfinished: families.unfinished.get_or_create(&labels).clone(),
            longest: families.longest.get_or_create(&labels).clone(),
            retries: families.retries.get_or_create(&labels).clone(),
        });
        let mut queues = families.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues.push(queue.clone());
        queue
    }

    /// A [`tower`] layer for kube's `ClientBuilder` that records the `rest_client_*` series of the
    /// requests to the API server at `host` (`host:port`, the label value).
    pub fn client_layer(&self, host: &str) -> ClientMetricsLayer {
        ClientMetricsLayer::new(self.client.clone(), host)
    }

    /// The metrics of one controller, named by its kind in lower case (e.g. `memcached`). Its series
    /// appear at once, at zero, so that rates and alerts work before the first reconcile.
    pub fn controller(&self, name: &str, max_concurrent_reconciles: u16) -> ControllerMetrics {
        let labels = ControllerLabels {
            controller: name.to_string(),
        };
        let outcome = |result| {
            let labels = OutcomeLabels {
                controller: name.to_string(),
                result,
            };
            self.reconciles.get_or_create(&labels).clone()
        };
        self.max_workers
            .get_or_create(&labels)
            .set(i64::from(max_concurrent_reconciles));
        ControllerMetrics(Arc::new(ControllerSeries {
            success: outcome("success"),
            requeue: outcome("requeue"),
            requeue_after: outcome("requeue_after"),
            error: outcome("error"),
            errors: self.errors.get_or_create(&labels).clone(),
            panics: self.panics.get_or_create(&labels).clone(),
            time: self.reconcile_time.get_or_create(&labels).clone(),
            active: self.active_workers.get_or_create(&labels).clone(),
        }))
    }

    /// The `shard_*` series.
    pub(crate) fn shard(&self) -> &ShardSeries {
        &self.shard
    }

    /// The `fleet_clusters{state}` gauge, which the fleets move.
    pub(crate) fn fleet_clusters(&self, state: &'static str) -> Gauge {
        self.fleet_clusters
            .get_or_create(&StateLabels { state })
            .clone()
    }

    /// The `cache_incomplete{kind}` gauge, which the caches of `kind` move.
    pub(crate) fn cache_incomplete(&self, kind: &str) -> Gauge {
        let labels = KindLabels {
            kind: kind.to_string(),
        };
        self.cache_incomplete.get_or_create(&labels).clone()
    }

    /// Sets `leader_election_master_status{name=lease}`.
    pub fn set_leader(&self, lease: &str, leading: bool) {
        let labels = LeaseLabels {
            name: lease.to_string(),
        };
        self.leader.get_or_create(&labels).set(i64::from(leading));
    }

    /// Counts one webhook call on `path` answered with HTTP `code` after `elapsed`.
    pub fn observe_webhook(&self, path: &str, code: u16, elapsed: Duration) {
        let labels = WebhookCodeLabels {
            webhook: path.to_string(),
            code: code.to_string(),
        };
        self.webhook_requests.get_or_create(&labels).inc();
        let labels = WebhookLabels {
            webhook: path.to_string(),
        };
        let latency = self.webhook_latency.get_or_create(&labels);
        latency.observe(elapsed.as_secs_f64());
    }

    /// Every metric in the Prometheus text format (OpenMetrics flavour, see [`CONTENT_TYPE`]),
    /// with the series of the engaged clusters of the process's fleets, each labelled `cluster`.
    pub fn encode(&self) -> String {
        self.clusters.merge_into(self.encode_own())
    }

    /// These metrics alone, without the clusters served.
    fn encode_own(&self) -> String {
        let queues = self.queue.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues.iter().for_each(WorkQueue::refresh);
        drop(queues);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

impl QueueFamilies {
    fn register(registry: &mut Registry) -> Self {
        let histogram: fn() -> Histogram = || Histogram::new(QUEUE_DURATION_BUCKETS);
        let families = QueueFamilies {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(histogram),
            work_duration: Family::new_with_constructor(histogram),
            unfinished: Family::default(),
            longest: Family::default(),
            retries: Family::default(),
            queues: Arc::default(),
        };
        registry.register(
            "workqueue_depth",
            "Objects waiting for a reconcile whose time has come, per controller",
            families.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Objects that started waiting for a reconcile, per controller",
            families.adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long an object waits from its trigger to the start of its reconcile",
            families.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long reconciles take, per controller",
            families.work_duration.clone(),
        );
        registry.register(
            "workqueue_unfinished_work_seconds",
            "Time spent so far by the reconciles in flight, in total",
            families.unfinished.clone(),
        );
        registry.register(
            "workqueue_longest_running_processor_seconds",
            "Time spent so far by the longest-running reconcile in flight",
            families.longest.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Reconciles scheduled again after an error or an immediate requeue, per controller",
            families.retries.clone(),
        );
        families
    }
}

/// The media type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Records the reconciles of one controller; see [`ControllerMetrics::instrument`].
#[derive(Clone)]
pub struct ControllerMetrics(Arc<ControllerSeries>);

struct ControllerSeries {
    success: Counter,
    requeue: Counter,
    requeue_after: Counter,
    error: Counter,
    errors: Counter,
    panics: Counter,
    time: Histogram,
    active: Gauge,
}

impl ControllerMetrics {
    /// Wraps a reconcile function so that every call is counted by result, timed, and shown in
    /// `active_workers` while it runs. Pass the result to `Controller::run` in place of the function.
    pub fn instrument<K, C, E, Fut>(
        &self,
        reconcile: impl Fn(Arc<K>, Arc<C>) -> Fut,
    ) -> impl FnMut(Arc<K>, Arc<C>) -> BoxFuture<'static, Result<Action, E>>
    where
        E: 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let metrics = self.clone();
        move |object, ctx| metrics.clone().measure(reconcile(object, ctx)).boxed()
    }

    /// Counts, times and shows in `active_workers` one reconcile.
    pub(crate) async fn measure<E>(
        self,
        reconciling: impl Future<Output = Result<Action, E>>,
    ) -> Result<Action, E> {
        let _worker = self.worker();
        let started = Instant::now();
        let result = reconciling.await;
        self.record(result.as_ref().map_err(|_| ()), started.elapsed());
        result
    }

    /// Counts one finished reconcile: `Ok(action)` as success or a requeue, `Err` as an error.
    pub(crate) fn record(&self, result: Result<&Action, ()>, took: Duration) {
        let series = &self.0;
        series.time.observe(took.as_secs_f64());
        match result {
            Ok(action) if *action == Action::await_change() => series.success.inc(),
            Ok(action) if *action == Action::requeue(Duration::ZERO) => series.requeue.inc(),
            Ok(_) => series.requeue_after.inc(),
            Err(()) => {
                series.error.inc();
                series.errors.inc()
            }
        };
    }

    /// Counts a reconcile that panicked (its error is counted by [`record`](Self::record)).
    pub(crate) fn panicked(&self) {
        self.0.panics.inc();
    }

    /// Counts a running reconcile until the returned guard is dropped (also when it is cancelled).
    fn worker(&self) -> ActiveWorker {
        self.0.active.inc();
        ActiveWorker(self.0.active.clone())
    }
}

struct ActiveWorker(Gauge);

impl Drop for ActiveWorker {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// `process_*` metrics read from `/proc/self` at each scrape (nothing on other systems).
#[derive(Debug)]
struct ProcessCollector;

impl prometheus_client::collector::Collector for ProcessCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;

        let Some(process) = proc::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(process.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "User and system CPU time spent, in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                process.resident_memory_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                process.virtual_memory_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch, in seconds",
                process.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Open file descriptors",
                process.open_fds,
            ),
            (
                "process_max_fds",
                "Limit of open file descriptors",
                process.max_fds,
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

/// Reading `/proc`, Linux only.
mod proc {
    use std::fs;

    /// `/proc` counts CPU time in clock ticks of USER_HZ, which is 100 on every Linux architecture
    /// Kubernetes runs on.
    const TICKS_PER_SECOND: f64 = 100.0;

    pub struct Process {
        pub cpu_seconds: f64,
        pub resident_memory_bytes: f64,
        pub virtual_memory_bytes: f64,
        pub start_time_seconds: f64,
        pub open_fds: f64,
        pub max_fds: f64,
    }

    pub fn read() -> Option<Process> {
        let stat = fs::read_to_string("/proc/self/stat").ok()?;
        // The command name (field 2) may hold spaces; the fields we need come after its `)`.
        // Counted from field 3 (state) at index 0: utime is field 14, stime 15, starttime 22.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks = |field: usize| fields.get(field - 3)?.parse::<f64>().ok();
        let status = fs::read_to_string("/proc/self/status").ok()?;
        let kib = |key: &str| {
            let line = status.lines().find(|l| l.starts_with(key))?;
            line[key.len()..]
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        };
        let boot_time = fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse::<f64>()
            .ok()?;
        let open_fds = fs::read_dir("/proc/self/fd").ok()?.count() as f64;
        let max_fds = fs::read_to_string("/proc/self/limits")
            .ok()?
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3)?.parse::<f64>().ok())
            .unwrap_or(f64::NAN);
        Some(Process {
            cpu_seconds: (ticks(14)? + ticks(15)?) / TICKS_PER_SECOND,
            resident_memory_bytes: kib("VmRSS:")? * 1024.0,
            virtual_memory_bytes: kib("VmSize:")? * 1024.0,
            start_time_seconds: boot_time + ticks(22)? / TICKS_PER_SECOND,
            open_fds,
            max_fds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

    #[tokio::test]
    async fn counts_reconciles_by_result() {
        let metrics = Metrics::new();
        let controller = metrics.controller("example", 3);
        let mut reconcile =
            controller.instrument(|outcome: Arc<Result<Action, String>>, _ctx: Arc<()>| {
                let outcome = (*outcome).clone();
                async move { outcome }
            });
        let ctx = Arc::new(());
        for outcome in [
            Ok(Action::await_change()),
            Ok(Action::await_change()),
            Ok(Action::requeue(Duration::from_secs(5))),
            Ok(Action::requeue(Duration::ZERO)),
            Err("boom".to_string()),
        ] {
            let _ = reconcile(Arc::new(outcome), ctx.clone()).await;
        }
        let text = metrics.encode();
        for (series, value) in [
            (r#"result="success""#, "2"),
            (r#"result="requeue_after""#, "1"),
            (r#"result="requeue""#, "1"),
            (r#"result="error""#, "1"),
        ] {
            let found = text.lines().find(|l| {
                l.starts_with("controller_runtime_reconcile_total{") && l.contains(series)
            });
            assert_eq!(
                found.and_then(|l| l.rsplit(' ').next()),
                Some(value),
                "{series} in\n{text}"
            );
        }
        let errors = line(&text, "controller_runtime_reconcile_errors_total{");
        assert_eq!(
            errors,
            Some(r#"controller_runtime_reconcile_errors_total{controller="example"} 1"#)
        );
        let count = line(&text, "controller_runtime_reconcile_time_seconds_count{");
        assert!(count.is_some_and(|l| l.ends_with(" 5")), "{text}");
        let max = line(&text, "controller_runtime_max_concurrent_reconciles{");
        assert!(max.is_some_and(|l| l.ends_with(" 3")), "{text}");
        let active = line(&text, "controller_runtime_active_workers{");
        assert!(active.is_some_and(|l| l.ends_with(" 0")), "{text}");
    }

    #[tokio::test]
    async fn counts_active_workers_while_reconciling() {
        let metrics = Metrics::new();
        let controller = metrics.controller("example", 1);
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let released = futures::FutureExt::shared(released);
        let mut reconcile = controller.instrument(move |_: Arc<()>, _: Arc<()>| {
            let released = released.clone();
            async move {
                let _ = released.await;
                Ok::<_, std::convert::Infallible>(Action::await_change())
            }
        });
        let running = tokio::spawn(reconcile(Arc::new(()), Arc::new(())));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let active = |text: &str| {
            line(text, "controller_runtime_active_workers{").map(|l| l.ends_with(" 1"))
        };
        assert_eq!(active(&metrics.encode()), Some(true));
        release.send(()).unwrap();
        running.await.unwrap().unwrap();
        assert_eq!(active(&metrics.encode()), Some(false));
    }

    #[test]
    fn leader_status_and_process_metrics() {
        let metrics = Metrics::new();
        metrics.set_leader("leader.example.com", true);
        let text = metrics.encode();
        assert!(text.contains(r#"leader_election_master_status{name="leader.example.com"} 1"#));
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
        ] {
            assert!(line(&text, name).is_some(), "{name} missing in\n{text}");
        }
        let rss = line(&text, "process_resident_memory_bytes ").unwrap();
        let rss: f64 = rss.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(rss > 1e6, "implausible RSS {rss}");
    }
}
