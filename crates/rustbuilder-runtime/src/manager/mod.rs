//! The manager: the process that runs an operator's controllers.
//!
//! [`Manager::start`] sets up the process from [`ManagerArgs`]: logging, the API client (in-cluster
//! config, else the current kubeconfig), the health probes and the metrics endpoint (HTTPS, with a
//! self-signed certificate unless one is mounted), and SIGTERM/Ctrl-C handling. [`Controllers::run`] then waits for leadership ([`leader`])
//! when `--leader-elect` is on, runs the controllers until shutdown, lets the reconciles in flight
//! finish and releases the lease.
//!
//! [`Manager`] is also the handle each controller takes: the client, metrics, events, owned-object
//! caches and the shutdown signal. Clone it freely; clones share everything.

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{Instrument, error, info, warn};

use crate::bearer::{Bearer, BearerLayer};
use crate::cache::{self, Cache, Caches, Storage};
use crate::controller::{self, Builder};
use crate::events::Events;
use crate::metrics::Metrics;
use crate::owned::{self, Holds, Owned};
use crate::shard::{Fence, Membership, Shard, ShardKey};
use crate::tls;
use crate::webhook::{self, Webhooks};

pub(crate) mod auth;
pub(crate) mod http;
pub mod leader;
mod limits;

pub use crate::error::{Cause, Error};
pub use crate::scope::WatchScope;
pub use crate::serve::BindAddress;
pub use crate::tls::CertSource;
use leader::{LeaderElection, Timing};

/// The manager's command-line flags, Kubebuilder's, each also settable through the environment
/// variable shown next to it. Flatten them into the operator's own `clap` arguments:
/// `#[command(flatten)] manager: ManagerArgs`.
#[derive(Clone, Debug, clap::Args)]
pub struct ManagerArgs {
    /// Where to serve /metrics, e.g. `:8443` or `127.0.0.1:8080`; `0` turns metrics off.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "0")]
    pub metrics_bind_address: BindAddress,

    /// Serve metrics over HTTPS to authenticated and authorized clients only (TokenReview and
    /// SubjectAccessReview); `false` serves plain HTTP to anyone.
    #[arg(long, env = "METRICS_SECURE", default_value_t = true, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub metrics_secure: bool,

    /// Directory with the metrics serving certificate; without it a self-signed one is made at start.
    #[arg(long, env = "METRICS_CERT_PATH")]
    pub metrics_cert_path: Option<PathBuf>,

    /// Certificate (chain) file in --metrics-cert-path.
    #[arg(long, default_value = "tls.crt")]
    pub metrics_cert_name: String,

    /// Private key file in --metrics-cert-path.
    #[arg(long, default_value = "tls.key")]
    pub metrics_cert_key: String,

    /// Where to serve /healthz and /readyz; `0` turns them off.
    #[arg(long, env = "HEALTH_PROBE_BIND_ADDRESS", default_value = ":8081")]
    pub health_probe_bind_address: BindAddress,

    /// Run the controllers only while holding the leader-election Lease, so that one replica of
    /// several is active.
    #[arg(long, env = "LEADER_ELECT", default_value_t = false, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_elect: bool,

    /// Share the objects of each controller among every replica run with this flag, instead of one
    /// leader doing all the work: each replica reconciles the objects whose uid hashes into its
    /// part, kept in a Lease of its own (see `rustbuilder_runtime::shard`). Replaces --leader-elect.
    #[arg(long, env = "SHARDING", default_value_t = false, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub sharding: bool,

    /// Namespace of the leader-election Lease, and of the shard Leases with --sharding [default: the
    /// pod's namespace, else $POD_NAMESPACE, else `default`].
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// Serve the registered webhooks. `--enable-webhooks=false` (`ENABLE_WEBHOOKS=false`, e.g.
    /// `make run ENABLE_WEBHOOKS=false`) runs the manager without them, as on a workstation with no
    /// serving certificate: the API server cannot call them then, so install no webhook
    /// configuration that points at this process.
    #[arg(long, env = "ENABLE_WEBHOOKS", value_name = "BOOL", action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = true)]
    pub enable_webhooks: bool,

    /// Port of the webhook server (HTTPS, every interface). It only listens when webhooks are
    /// registered.
    #[arg(long, env = "WEBHOOK_PORT", default_value_t = 9443)]
    pub webhook_port: u16,

    /// Directory with the webhook serving certificate, e.g. a mounted `kubernetes.io/tls` Secret
    /// issued by cert-manager.
    #[arg(
        long,
        env = "WEBHOOK_CERT_PATH",
        default_value = "/tmp/k8s-webhook-server/serving-certs"
    )]
    pub webhook_cert_path: PathBuf,

    /// Certificate (chain) file in --webhook-cert-path.
    #[arg(long, default_value = "tls.crt")]
    pub webhook_cert_name: String,

    /// Private key file in --webhook-cert-path.
    #[arg(long, default_value = "tls.key")]
    pub webhook_cert_key: String,

    /// Watch only the objects of this namespace (a namespace-scoped manager, whose RBAC is a Role there)
    /// [default: all namespaces].
    #[arg(long, env = "WATCH_NAMESPACE", value_name = "NAMESPACE")]
    pub watch_namespace: Option<String>,

    /// Path to a kubeconfig file [default: in-cluster config, else `$KUBECONFIG`, else
    /// `~/.kube/config`].
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use [default: its current context].
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// Log filter in `RUST_LOG` syntax, e.g. `info` or `my_operator=debug,kube=info`.
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub log_level: String,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How the manager writes its logs (to stdout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines, coloured on a terminal.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// How long a shutdown waits for the reconciles in flight by default: controller-runtime's
/// `GracefulShutdownTimeout`.
pub const DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// The handle each controller gets: clone it freely, clones share everything.
#[derive(Clone)]
pub struct Manager {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    /// This process among the replicas: `<hostname>_<random>`.
    identity: String,
    client: Client,
    metrics: Metrics,
    stop: watch::Sender<bool>,
    stopped: Shared<BoxFuture<'static, ()>>,
    readiness: Arc<Mutex<Readiness>>,
    /// Further conditions of readiness, each named, added with [`Manager::add_readiness_check`].
    readiness_checks: Mutex<Vec<(String, ReadinessCheck)>>,
    /// `(namespace, lease name)` when leader election is on.
    leader_election: Option<(String, String)>,
    lease_timing: Timing,
    /// Whether this replica may reconcile: at once without leader election, else while it leads.
    leading: watch::Sender<bool>,
    /// This replica's part of the objects, with `--sharding`.
    shard: Option<Shard>,
    /// The fence of the manager's client: with leader election, open while the Lease is renewed
    /// in time (with `--sharding`, while the shard Lease is).
    fence: Fence,
    /// Set by a second SIGTERM or Ctrl-C: stop now, without waiting for reconciles.
    interrupted: watch::Sender<bool>,
    webhooks: Webhooks,
    /// Where [`Controllers::run`] serves the webhooks, if any are registered.
    webhook_server: Option<(BindAddress, tls::CertSource)>,
    /// The one namespace watched, or `None` for all of them.
    watch_namespace: Option<String>,
    /// The controllers added so far; taken by [`Controllers::run`].
    controllers: Mutex<Registry>,
    /// The caches started, shared by everyone who asks for the same one.
    caches: Arc<Caches>,
    /// The caches' watches that keep failing: past a bound, the manager is not ready.
    stalls: cache::Stalls,
    /// How long a shutdown waits for the reconciles in flight.
    graceful_shutdown_timeout: Mutex<Duration>,
    /// What the manager's own events are about: its Pod, when it runs in one.
    event_target: Mutex<Option<ObjectReference>>,
}

/// A condition of readiness beyond the manager's own: `Err` says why not.
type ReadinessCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The manager's controllers: added one by one, then run once, together.
enum Registry {
    Adding(Vec<BoxFuture<'static, ()>>),
    Running,
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Manager")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// Starts the manager process named `name` with the default settings: the same as
    /// `Manager::builder(name).leader_election_id(leader_election_id).start(args)` (see
    /// [`ManagerBuilder`] for what can be changed).
    pub async fn start(
        name: &str,
        leader_election_id: &str,
        args: ManagerArgs,
    ) -> Result<Manager, Error> {
        Manager::builder(name)
            .leader_election_id(leader_election_id)
            .start(args)
            .await
    }

    /// Sets up a manager process named `name` (the field manager of its applies, the reporting
    /// controller of its events, the `app.kubernetes.io/managed-by` value of the objects it
    /// creates): logging, the API client, metrics and leader election, each with a default that
    /// [`ManagerBuilder`] lets the operator change, then [`ManagerBuilder::start`].
    pub fn builder(name: &str) -> ManagerBuilder {
        ManagerBuilder {
            name: name.to_string(),
            leader_election_id: None,
            logging: Logging::Default,
            registry: None,
            client_config: None,
            lease_timing: Timing::default(),
            identity: None,
            graceful_shutdown_timeout: DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT,
        }
    }

    /// A bare manager named `name` around `client`, with fresh metrics: no endpoints, no signal
    /// handling, no leader election. Tests build one per controller under test and call
    /// [`Manager::shutdown`] to stop it.
    pub fn new(name: &str, client: Client) -> Self {
        Manager::with_parts(name, client, Metrics::new(), None, None, new_identity())
    }

    /// Like [`Manager::new`], watching the objects of `namespace` only, as `--watch-namespace` does.
    pub fn in_namespace(name: &str, client: Client, namespace: &str) -> Self {
        let namespace = Some(namespace.to_string());
        let identity = new_identity();
        Manager::with_parts(name, client, Metrics::new(), None, namespace, identity)
    }

    /// Like [`Manager::in_namespace`], a candidate for the leader-election Lease `namespace/lease`
    /// with `timing`: [`Controllers::run`] fills the caches at once and reconciles only while this
    /// manager holds the Lease, as `--leader-elect` does. For tests of a handover between replicas
    /// in one process (the explorer's stalled leader).
    ///
    /// # Errors
    ///
    /// When `timing` is not ordered as [`Timing::check`] requires.
    #[cfg(feature = "testing")]
    pub fn candidate_in_namespace(
        name: &str,
        client: Client,
        namespace: &str,
        lease: &str,
        timing: Timing,
    ) -> Result<Self, leader::InvalidTiming> {
        timing.check()?;
        let election = Some((namespace.to_string(), lease.to_string()));
        let watched = Some(namespace.to_string());
        // Its writes stop at the fence its leadership keeps, as those of a manager from `start` do.
        let fence = Fence::new();
        let default_namespace = client.default_namespace().to_string();
        let sent = tower::service_fn(move |request| {
            let client = client.clone();
            async move {
                let answer = client.send(request).await?;
                Ok::<_, tower::BoxError>(crate::shard::boxed(answer))
            }
        });
        let fenced = tower::Layer::layer(&fence.layer(), sent);
        let client = Client::new(fenced, default_namespace);
        let mut manager = Manager::with_parts(
            name,
            client,
            Metrics::new(),
            election,
            watched,
            new_identity(),
        );
        let inner = Arc::get_mut(&mut manager.inner).expect("a manager not shared yet");
        inner.lease_timing = timing;
        inner.fence = fence;
        Ok(manager)
    }

    fn with_parts(
        name: &str,
        client: Client,
        metrics: Metrics,
        leader_election: Option<(String, String)>,
        watch_namespace: Option<String>,
        identity: String,
    ) -> Self {
        let (stop, mut stop_requested) = watch::channel(false);
        let stopped = async move {
            // An error means the sender is gone, i.e. the manager was dropped: stop as well.
            let _ = stop_requested.wait_for(|stop| *stop).await;
        };
        Manager {
            inner: Arc::new(Inner {
                name: name.to_string(),
                identity,
                client,
                webhooks: Webhooks::with_metrics(metrics.clone()),
                metrics,
                stop,
                stopped: stopped.boxed().shared(),
                readiness: Arc::default(),
                readiness_checks: Mutex::default(),
                leading: watch::channel(leader_election.is_none()).0,
                leader_election,
                shard: None,
                fence: Fence::new(),
                lease_timing: Timing::default(),
                interrupted: watch::channel(false).0,
                webhook_server: None,
                watch_namespace,
                controllers: Mutex::new(Registry::Adding(Vec::new())),
                caches: Arc::default(),
                stalls: cache::Stalls::default(),
                graceful_shutdown_timeout: Mutex::new(DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT),
                event_target: Mutex::new(None),
            }),
        }
    }

    /// The manager's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// This process among the replicas of the operator, `<hostname>_<random>` unless
    /// [`ManagerBuilder::identity`] names it: the holder it writes
    /// into the leader-election Lease, and the comment of its `User-Agent` (so the API server's audit
    /// log tells the replicas apart).
    pub fn identity(&self) -> &str {
        &self.inner.identity
    }

    /// The API client.
    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// The namespace the manager watches (`--watch-namespace`), or `None` when it watches all.
    pub fn watch_namespace(&self) -> Option<&str> {
        self.inner.watch_namespace.as_deref()
    }

    /// An [`Api`] of `K` over what the manager watches: the watched namespace for a namespaced kind
    /// when `--watch-namespace` is set, else the whole cluster. Give it to [`Manager::controller`].
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = ()>,
        K::Scope: WatchScope,
    {
        K::Scope::api(self.client(), self.watch_namespace())
    }

    /// The metrics served on `/metrics`.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The webhooks this manager serves: register defaulters, validators and conversions here before
    /// [`Controllers::run`], which starts the webhook server when at least one is registered.
    pub fn webhooks(&self) -> &Webhooks {
        &self.inner.webhooks
    }

    /// Publishes events as this manager.
    pub fn events(&self) -> Events {
        Events::new(self.client(), self.name())
    }

    /// The cache of every object of `K` the manager watches (see [`Manager::api`]): started at the
    /// first call, shared by every later one (see [`crate::cache`]). Must be called within a Tokio
    /// runtime.
    pub fn cache<K>(&self) -> Cache<K>
    where
        K: Resource<DynamicType = ()>
            + Clone
            + fmt::Debug
            + DeserializeOwned
            + Send
            + Sync
            + 'static,
        K::Scope: WatchScope,
    {
        self.cache_with(self.api::<K>(), watcher::Config::default())
    }

    /// The cache of the objects `api` lists with `config`'s label and field selectors: one per kind,
    /// scope and selectors, started at the first call and shared by every later one. The manager is
    /// not ready until it holds its first list.
    pub fn cache_with<K>(&self, api: Api<K>, config: watcher::Config) -> Cache<K>
    where
        K: Resource<DynamicType = ()>
            + Clone
            + fmt::Debug
            + DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        self.inner
            .caches
            .get_or_start(&self.cache_host(), api, config, Storage::Typed)
    }

    /// [`Manager::cache_with`], holding only this replica's part of the objects (placed by `key`)
    /// when it runs with `--sharding`, and keeping them as `storage` says.
    pub(crate) fn cache_of_shard<K>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        key: ShardKey,
        storage: Storage<K>,
    ) -> Cache<K>
    where
        K: Resource<DynamicType = ()>
            + Clone
            + fmt::Debug
            + DeserializeOwned
            + Send
            + Sync
            + 'static,
        K::Scope: WatchScope,
    {
        let host = self.cache_host();
        let shard = self.shard();
        self.inner
            .caches
            .get_or_start_for(&host, api, config, shard, key, storage)
    }

    /// The cache of the objects of kind `K` this manager's controllers own (see [`Owned`]): every
    /// one the manager watches, labelled or not, so that a child made by hand or by an earlier
    /// version of the operator is its owner's child all the same, as controller-runtime's `Owns`
    /// sees it. Shared like [`Manager::cache_with`] (without `--sharding`, it is
    /// [`Manager::cache`]). Must be called within a Tokio runtime.
    ///
    /// It holds the objects of `K` that are not the operator's too: in a cluster with many of
    /// them, [`Manager::owned_labelled`] keeps less.
    pub fn owned<K>(&self) -> Owned<K>
    where
        K: Resource<DynamicType = ()>
            + Clone
            + fmt::Debug
            + DeserializeOwned
            + Serialize
            + Send
            + Sync
            + 'static,
        K::Scope: WatchScope,
    {
        // With `--sharding`, only this replica's part: each child goes with its controller owner,
        // placed by the cache on receipt (the API server cannot select by an owner).
        let config = watcher::Config::default();
        let objects = self.cache_of_shard(
            self.api::<K>(),
            config,
            ShardKey::ControllerOwner,
            Storage::packed(),
        );
        let holds = match self.shard() {
            None => Holds::Every,
            Some(_) => Holds::Shard,
        };
        self.owned_in(objects, holds)
    }

    /// The cache of the objects of kind `K` labelled `app.kubernetes.io/managed-by=<name>`, the
    /// ones this manager's `apply` labels as its own (see [`Owned`]): the API server selects them,
    /// so the manager neither receives nor keeps the others. Shared like [`Manager::cache_with`].
    /// Must be called within a Tokio runtime.
    ///
    /// Choose it over [`Manager::owned`] when the cluster holds many objects of `K` that are not
    /// the operator's: it saves the memory (and the watch traffic) of those. It does not see a
    /// child without the label (made by hand, or by a version of the operator that did not label
    /// it): that child is not in [`Cache::children_of`](crate::cache::Cache::children_of), its
    /// changes do not reconcile its owner, and it is never repaired or pruned.
    pub fn owned_labelled<K>(&self) -> Owned<K>
    where
        K: Resource<DynamicType = ()>
            + Clone
            + fmt::Debug
            + DeserializeOwned
            + Serialize
            + Send
            + Sync
            + 'static,
        K::Scope: WatchScope,
    {
        let config = watcher::Config::default().labels(&owned::ours(self.name()));
        // With `--sharding`, only the children of this replica's objects: the manager's `apply`
        // labels each with its owner's bucket, and the API server selects by it.
        let objects = self.cache_of_shard(
            self.api::<K>(),
            config,
            ShardKey::OwnerBucket,
            Storage::packed(),
        );
        let holds = match self.shard() {
            None => Holds::Labelled,
            Some(_) => Holds::LabelledShard,
        };
        self.owned_in(objects, holds)
    }

    /// `objects`, holding what `holds` says, as an [`Owned`] cache of this manager.
    fn owned_in<K>(&self, objects: Cache<K>, holds: Holds) -> Owned<K>
    where
        K: Resource<DynamicType = ()>
            + Clone
            + fmt::Debug
            + DeserializeOwned
            + Send
            + Sync
            + 'static,
        K::Scope: WatchScope,
    {
        let manager = self.clone();
        let metadata_cache =
            move |config| manager.cache_with(manager.api::<PartialObjectMeta<K>>(), config);
        Owned::new(objects, holds, self.client(), self.name(), metadata_cache)
    }

    /// A controller of the objects `api` lists, named `name` in logs and metrics
    /// (`controller="<name>"`, by convention the kind in lower case).
    pub fn controller<K>(&self, api: Api<K>, name: &str) -> Builder<K>
    where
        K: Resource<DynamicType = ()>
            + Clone
            + fmt::Debug
            + DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        let readiness = self.inner.readiness.clone();
        let host = controller::Host {
            caches: self.inner.caches.clone(),
            cache_host: self.cache_host(),
            metrics: self.metrics().clone(),
            events: self.events(),
            shard: self.shard().cloned(),
            stop: self.inner.stopped.clone(),
            leading: self.inner.leading.subscribe(),
            synced: Arc::new(move || lock_readiness(&readiness).controllers_synced += 1),
        };
        Builder::new(host, api, name)
    }

    /// Resolves once shutdown is requested. [`controller::Builder`] hands
    /// it to kube's `Controller::graceful_shutdown_on`; other long-running tasks can stop on it too.
    pub fn shutdown_signal(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        self.inner.stopped.clone()
    }

    /// Requests shutdown (as SIGTERM does). Idempotent.
    pub fn shutdown(&self) {
        self.inner.stop.send_replace(true);
    }

    /// Whether shutdown has been requested.
    pub fn is_shutting_down(&self) -> bool {
        *self.inner.stop.borrow()
    }

    /// Whether `/readyz` should succeed, and if not, why. Not ready while starting; a replica waiting
    /// for leadership is ready; once the controllers run, ready when each controller's cache and each
    /// [`Owned`] cache holds its first full list.
    pub fn ready(&self) -> Result<(), String> {
        self.readiness().check()?;
        self.inner.stalls.check()?;
        // Cloned out of the lock: a check may take time, or ask this manager something.
        let checks = self.readiness_checks().clone();
        for (name, check) in checks {
            check().map_err(|reason| format!("{name}: {reason}"))?;
        }
        Ok(())
    }

    /// How long a shutdown waits for the reconciles in flight before [`Controllers::run`] stops
    /// without them (releasing the Lease first) and returns [`Error::ShutdownTimedOut`]; default
    /// [`DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT`], controller-runtime's. Keep it under the pod's
    /// `terminationGracePeriodSeconds`, or the kubelet's SIGKILL comes first and the Lease is left
    /// to expire.
    pub fn set_graceful_shutdown_timeout(&self, timeout: Duration) {
        *self
            .inner
            .graceful_shutdown_timeout
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = timeout;
    }

    /// How long a cache's watch may fail without a break (refused again and again, e.g. after its
    /// Role changed) before [`Manager::ready`] fails, naming the kind and the last error; default
    /// [`cache::STALL_BOUND`]. Every controller reading that cache has stopped meanwhile.
    pub fn set_cache_stall_bound(&self, bound: std::time::Duration) {
        self.inner.stalls.set_bound(bound);
    }

    /// The object the manager's own events are about, usually its Pod: a cache whose watch keeps
    /// failing past the stall bound publishes a `CacheStalled` Warning on it, naming the kind and
    /// the error (`kubectl describe pod` shows it), besides failing readiness. [`ManagerBuilder::start`]
    /// sets it from `POD_NAME`, `POD_NAMESPACE` and `POD_UID`, which the scaffolded Deployment
    /// passes from the Pod's own metadata; without one, the stall is logged only.
    pub fn set_event_target(&self, target: ObjectReference) {
        *self
            .inner
            .event_target
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(target);
    }

    fn event_target(&self) -> Option<ObjectReference> {
        let target = self.inner.event_target.lock();
        target.unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Makes [`Manager::ready`] (and `/readyz`) also wait for `check`, named `name` in the reason
    /// it gives when `check` fails. For parts of the operator whose readiness the manager cannot see,
    /// such as a [`Fleet`](crate::fleet::Fleet)'s clusters.
    pub fn add_readiness_check(
        &self,
        name: &str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        let check: ReadinessCheck = Arc::new(check);
        self.readiness_checks().push((name.to_string(), check));
    }

    /// Whether this replica may reconcile now: always without leader election, else while it holds
    /// the Lease (from the moment [`Controllers::run`] acquires it).
    pub fn is_leading(&self) -> bool {
        *self.inner.leading.borrow()
    }

    /// Waits until this replica may reconcile (see [`Manager::is_leading`]): `true` then, `false` if
    /// shutdown comes first. For work that, like a controller's reconciles, must run on the leader
    /// only.
    pub async fn until_leading(&self) -> bool {
        let mut leading = self.inner.leading.subscribe();
        tokio::select! {
            led = leading.wait_for(|leading| *leading) => led.is_ok(),
            () = self.shutdown_signal() => false,
        }
    }

    /// A bare manager for another cluster, reached with `config`: this one's name (the field
    /// manager of its applies), identity and watched namespace, and its own client, caches,
    /// readiness and shutdown. Its metrics are its own (without the `process_*` ones): whoever
    /// makes it serves them with this one's ([`Metrics::serve_cluster`]). No leader election of
    /// its own: whoever makes it decides when it may run.
    /// `bearer`, if any, is the token the cluster's client sends (taken out of `config`), which
    /// may be replaced while it runs.
    pub(crate) fn for_cluster(
        &self,
        config: kube::Config,
        bearer: Option<&Bearer>,
    ) -> Result<Manager, Error> {
        let metrics = Metrics::of_cluster();
        let (name, identity) = (self.name(), self.identity());
        // With --sharding, the cluster's writes stop at this replica's fence, as its own do.
        let fence = self
            .shard()
            .map_or_else(Fence::new, |shard| shard.fence().clone());
        let client = counted_client(config, &metrics, &fence, name, identity, bearer)?;
        let namespace = self.inner.watch_namespace.clone();
        let identity = identity.to_string();
        Ok(Manager::with_parts(
            name, client, metrics, None, namespace, identity,
        ))
    }

    /// The manager's controllers: `controllers.add(my_controller::run(manager.clone()))` for each,
    /// then `controllers.run().await`. There is one set per manager: every call returns a handle to
    /// it, so `manager.controllers().add(…)` and a later `manager.controllers().run()` run the
    /// controller added.
    pub fn controllers(&self) -> Controllers {
        Controllers {
            manager: self.clone(),
        }
    }

    /// The fence of the manager's client, which leader election keeps open while it leads.
    pub(crate) fn fence(&self) -> &Fence {
        &self.inner.fence
    }

    /// This replica's part of the objects when it runs with `--sharding`: controllers reconcile only
    /// the objects whose uid it holds, and [`Manager::owned`] caches the objects placed by their
    /// controller owner's uid: the children of those objects.
    pub fn shard(&self) -> Option<&Shard> {
        self.inner.shard.as_ref()
    }

    /// What the manager's caches need of it; each counts toward readiness until it holds its first
    /// list.
    pub(crate) fn cache_host(&self) -> cache::Host {
        let readiness = self.inner.readiness.clone();
        cache::Host::new(
            self.name(),
            self.metrics().clone(),
            self.inner.stopped.clone(),
            move || {
                lock_readiness(&readiness).caches_pending += 1;
                let readiness = readiness.clone();
                cache::Synced::new(move || {
                    let mut readiness = lock_readiness(&readiness);
                    readiness.caches_pending = readiness.caches_pending.saturating_sub(1);
                })
            },
            self.inner.stalls.clone(),
        )
    }

    /// Counts one of the controllers added as synced, for one that is no [`Manager::controller`]
    /// (a fleet, whose clusters report through a readiness check of their own).
    pub(crate) fn report_controller_synced(&self) {
        self.readiness().controllers_synced += 1;
    }

    /// Marks whether this process is waiting to become leader: a follower is ready as soon as it serves.
    pub(crate) fn set_waiting_for_leadership(&self, waiting: bool) {
        self.readiness().waiting_for_leadership = waiting;
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        // Pushing to a Vec or swapping the state cannot leave it inconsistent on a panic.
        self.inner
            .controllers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn readiness(&self) -> std::sync::MutexGuard<'_, Readiness> {
        lock_readiness(&self.inner.readiness)
    }

    fn readiness_checks(&self) -> std::sync::MutexGuard<'_, Vec<(String, ReadinessCheck)>> {
        // Pushing to a Vec cannot leave it inconsistent on a panic.
        let checks = self.inner.readiness_checks.lock();
        checks.unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// How a manager process is set up beyond its flags; made by [`Manager::builder`].
///
/// ```no_run
/// use std::time::Duration;
/// use rustbuilder_runtime::manager::{Manager, ManagerArgs, leader::Timing};
/// use rustbuilder_runtime::metrics::prometheus_client::registry::Registry;
///
/// # async fn run(args: ManagerArgs) -> Result<(), rustbuilder_runtime::manager::Error> {
/// let mut registry = Registry::default(); // the operator's own metrics, registered here
/// let manager = Manager::builder("memcached-operator")
///     .leader_election_id("memcached-operator.example.com")
///     .metrics_registry(registry)
///     .lease_timing(Timing {
///         lease_duration: Duration::from_secs(30),
///         renew_deadline: Duration::from_secs(20),
///         retry_period: Duration::from_secs(4),
///     })
///     .start(args)
///     .await?;
/// manager.controllers().run().await
/// # }
/// ```
#[must_use = "a builder does nothing until `start`"]
pub struct ManagerBuilder {
    name: String,
    leader_election_id: Option<String>,
    logging: Logging,
    registry: Option<prometheus_client::registry::Registry>,
    client_config: Option<kube::Config>,
    lease_timing: Timing,
    identity: Option<String>,
    graceful_shutdown_timeout: Duration,
}

/// Who sets the process's tracing subscriber.
enum Logging {
    /// The runtime's, from `--log-level` and `--log-format`.
    Default,
    /// The operator's, set by the builder.
    Subscriber(tracing::Dispatch),
    /// The operator's, set before `start`: nothing to do.
    External,
}

impl fmt::Debug for ManagerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagerBuilder")
            .field("name", &self.name)
            .field("leader_election_id", &self.leader_election_id)
            .field("lease_timing", &self.lease_timing)
            .finish_non_exhaustive()
    }
}

impl ManagerBuilder {
    /// The name of the leader-election Lease used with `--leader-elect`: unique to the operator,
    /// the same for all its replicas [default: the manager's name].
    pub fn leader_election_id(mut self, id: &str) -> Self {
        self.leader_election_id = Some(id.to_string());
        self
    }

    /// Logs through `subscriber` (e.g. a `tracing_subscriber::Registry` with an OpenTelemetry
    /// layer) instead of the runtime's own; `--log-level` and `--log-format` are then up to it.
    pub fn tracing_subscriber(mut self, subscriber: impl Into<tracing::Dispatch>) -> Self {
        self.logging = Logging::Subscriber(subscriber.into());
        self
    }

    /// This process's identity among the replicas (see [`Manager::identity`]), instead of
    /// `<hostname>_<random>`. It must be unique among them: the pod's name is.
    pub fn identity(mut self, identity: &str) -> Self {
        self.identity = Some(identity.to_string());
        self
    }

    /// Installs no tracing subscriber: the operator has set its own before `start`.
    pub fn external_tracing(mut self) -> Self {
        self.logging = Logging::External;
        self
    }

    /// Serves the operator's metrics in `registry` on `/metrics` beside the manager's (see
    /// [`Metrics::with_registry`]).
    pub fn metrics_registry(mut self, registry: prometheus_client::registry::Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Connects with `config` rather than the one `--kubeconfig` and `--context` (or the
    /// environment) describe. Its requests are still counted in the `rest_client_*` metrics.
    pub fn client_config(mut self, config: kube::Config) -> Self {
        self.client_config = Some(config);
        self
    }

    /// The leader-election (and shard) Lease timing [default: [`Timing::default`],
    /// controller-runtime's]. [`ManagerBuilder::start`] fails with [`Error::LeaseTiming`] unless
    /// `lease_duration > renew_deadline > retry_period > 0`.
    pub fn lease_timing(mut self, timing: Timing) -> Self {
        self.lease_timing = timing;
        self
    }

    /// How long a shutdown waits for the reconciles in flight: see
    /// [`Manager::set_graceful_shutdown_timeout`].
    pub fn graceful_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.graceful_shutdown_timeout = timeout;
        self
    }

    /// Starts the manager process: raises the soft limit of open files to the hard one (as Go
    /// does), sets up logging, connects to the API server (waiting for it while it does not
    /// answer), serves the health probes and metrics, and handles signals (SIGTERM or Ctrl-C requests a graceful shutdown; a
    /// second one makes [`Controllers::run`] return [`Error::Interrupted`] at once).
    pub async fn start(self, args: ManagerArgs) -> Result<Manager, Error> {
        self.lease_timing.check()?;
        limits::raise_open_files();
        match self.logging {
            Logging::Default => init_logging(&args)?,
            Logging::Subscriber(dispatch) => {
                // A subscriber set before (e.g. by a test) stays.
                let _ = tracing::dispatcher::set_global_default(dispatch);
            }
            Logging::External => {}
        }
        let metrics = Metrics::with_registry(self.registry.unwrap_or_default());
        let config = match self.client_config {
            Some(config) => config,
            None => client_config(&args).await?,
        };
        let identity = self.identity.unwrap_or_else(new_identity);
        // With --leader-elect (or --sharding), the leader (or member) keeps this fence open while
        // its renewals are in time; a write the client would send after that is refused (see
        // `shard::Fence`).
        let fence = Fence::new();
        let client = counted_client(config, &metrics, &fence, &self.name, &identity, None)?;
        let server = api_server_version(&client).await?;
        info!(version = %server.git_version, "connected to the API server");

        if args.sharding && args.leader_elect {
            return Err(Error::config(
                "--sharding and --leader-elect: choose one (sharding needs no leader)",
            ));
        }
        let leader_election_id = self.leader_election_id.unwrap_or_else(|| self.name.clone());
        let lease_namespace = args
            .leader_election_namespace
            .clone()
            .unwrap_or_else(pod_namespace);
        let leader_election = args
            .leader_elect
            .then(|| (lease_namespace.clone(), leader_election_id.clone()));
        let watch_namespace = watch_namespace(args.watch_namespace.as_deref())?;
        if let Some(namespace) = &watch_namespace {
            info!(namespace, "watching one namespace");
        }
        let mut manager = Manager::with_parts(
            &self.name,
            client,
            metrics,
            leader_election,
            watch_namespace,
            identity,
        );
        let inner = Arc::get_mut(&mut manager.inner).expect("not shared yet");
        inner.webhook_server = webhook_server(&args);
        inner.lease_timing = self.lease_timing;
        inner.graceful_shutdown_timeout = Mutex::new(self.graceful_shutdown_timeout);
        inner.event_target = Mutex::new(own_pod());
        inner.fence = fence.clone();
        if args.sharding {
            // The group is the leader-election id: the same for every replica of this operator.
            let group = shard_group(&leader_election_id);
            let shard = Membership::new(inner.client.clone(), &lease_namespace, &group)
                .identity(&inner.identity)
                .timing(self.lease_timing)?
                .fence(&fence)
                .metrics(&inner.metrics)
                .start();
            info!(
                group,
                identity = inner.identity,
                "sharding: joined the group"
            );
            inner.shard = Some(shard);
        }
        tokio::spawn(shutdown_on_signal(manager.clone()));
        http::serve_probes(&args.health_probe_bind_address, manager.clone()).await?;
        let tls = if args.metrics_secure && !args.metrics_bind_address.is_off() {
            Some(tls::acceptor(metrics_cert(&args))?)
        } else {
            None
        };
        http::serve_metrics(&args.metrics_bind_address, manager.clone(), tls).await?;
        Ok(manager)
    }
}

fn lock_readiness(readiness: &Mutex<Readiness>) -> std::sync::MutexGuard<'_, Readiness> {
    // A panic while holding this lock cannot leave it inconsistent (plain counters).
    readiness
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl From<&Manager> for cache::Host {
    fn from(manager: &Manager) -> Self {
        manager.cache_host()
    }
}

/// Readiness bookkeeping. Not ready at first; a follower is ready while it waits; once controllers run,
/// ready when each has reported its cache synced and no owned-object cache is still filling.
#[derive(Debug, Default)]
struct Readiness {
    waiting_for_leadership: bool,
    /// Every controller has been spawned.
    started: bool,
    controllers: usize,
    controllers_synced: usize,
    caches_pending: usize,
}

impl Readiness {
    fn check(&self) -> Result<(), String> {
        if self.waiting_for_leadership {
            return Ok(());
        }
        if !self.started {
            return Err("starting".into());
        }
        if self.controllers_synced < self.controllers {
            let (synced, controllers) = (self.controllers_synced, self.controllers);
            return Err(format!(
                "{synced} of {controllers} controller caches synced"
            ));
        }
        if self.caches_pending > 0 {
            let pending = self.caches_pending;
            return Err(format!("{pending} owned-object caches not synced"));
        }
        Ok(())
    }
}

/// A handle to the controllers of a [`Manager`], added one by one and then run together. Every
/// handle of a manager (each [`Manager::controllers`] call) reaches the same set.
pub struct Controllers {
    manager: Manager,
}

impl fmt::Debug for Controllers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let registry = self.manager.registry();
        let mut debug = f.debug_struct("Controllers");
        match &*registry {
            Registry::Adding(pending) => debug.field("added", &pending.len()),
            Registry::Running => debug.field("running", &true),
        };
        debug.finish()
    }
}

impl Controllers {
    /// Adds one controller: a future that runs one controller built with [`Manager::controller`] until
    /// shutdown. It starts in [`Controllers::run`].
    ///
    /// # Panics
    ///
    /// Once the controllers run: a controller added then would never start. Add every controller
    /// before calling [`Controllers::run`].
    pub fn add(&self, controller: impl Future<Output = ()> + Send + 'static) {
        match &mut *self.manager.registry() {
            Registry::Adding(pending) => pending.push(controller.boxed()),
            Registry::Running => {
                panic!(
                    "Controllers::add after Controllers::run: add every controller before running"
                )
            }
        }
    }

    /// Runs the controllers until shutdown and returns once they have finished their reconciles in
    /// flight. First starts the webhook server if webhooks are registered (failing with
    /// [`Error::Webhook`] when its certificate is missing). With leader election on, first waits to hold the Lease (returning `Ok` if shutdown comes
    /// first), and releases it at the end.
    ///
    /// Fails with [`Error::LeadershipLost`] at once if the Lease is lost (another replica may already
    /// lead), and with [`Error::ControllerStopped`] if a controller stops or panics on its own (the
    /// others are then shut down). The controllers run once: a second `run` of the same manager
    /// fails with [`Error::Config`].
    pub async fn run(self) -> Result<(), Error> {
        let manager = self.manager.clone();
        let pending = match std::mem::replace(&mut *manager.registry(), Registry::Running) {
            Registry::Adding(pending) => pending,
            Registry::Running => {
                return Err(Error::config("the controllers of this manager already run"));
            }
        };
        // Every replica serves webhooks, the leader or not: the API server calls any of them.
        let _webhook_server = match &manager.inner.webhook_server {
            Some((address, cert)) if !manager.webhooks().is_empty() => {
                let webhooks = manager.webhooks().clone();
                Some(webhook::Server::start(webhooks, address, cert.clone()).await?)
            }
            None if !manager.webhooks().is_empty() => {
                warn!(paths = ?manager.webhooks().paths(), "webhooks are off (--enable-webhooks=false): not serving them");
                None
            }
            _ => None,
        };
        // The controllers start at once, so their caches fill while this replica waits for the
        // Lease; they reconcile only once it leads (`Manager::leading`).
        let running = spawn_and_wait(manager.clone(), pending);
        let mut interrupted = manager.inner.interrupted.subscribe();
        let timeout = *manager
            .inner
            .graceful_shutdown_timeout
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut stop = manager.inner.stop.subscribe();
        let past_timeout = async move {
            let stopping = stop.wait_for(|stop| *stop).await.is_ok();
            match stopping {
                true => tokio::time::sleep(timeout).await,
                false => std::future::pending().await,
            }
        };
        let running = async move {
            tokio::select! {
                stopped = running => stopped,
                _ = interrupted.wait_for(|interrupted| *interrupted) => Err(Error::Interrupted),
                () = past_timeout => Err(Error::ShutdownTimedOut(timeout)),
            }
        };
        let mut running = std::pin::pin!(running);
        let mut leadership = None;
        if let Some((namespace, lease)) = &manager.inner.leader_election {
            let election = LeaderElection::new(&manager, namespace, lease)
                .with_timing(manager.inner.lease_timing)?;
            tokio::select! {
                acquired = election.acquire() => match acquired {
                    Some(acquired) => leadership = Some(acquired),
                    None => info!("stopped before becoming leader"),
                },
                // A controller failed (or an interrupt came) before this replica led.
                stopped = &mut running => return stopped,
            }
            manager.inner.leading.send_replace(leadership.is_some());
        }

        let stopped = match (&mut leadership, manager.shard()) {
            (Some(leadership), _) => tokio::select! {
                stopped = &mut running => stopped,
                () = leadership.lost() => {
                    // Exit at once: another replica may already be leading.
                    error!("leader election lost: exiting");
                    return Err(Error::LeadershipLost);
                }
            },
            // A shard member that loses its place (the API server out of reach past the renew
            // deadline) holds nothing until it renews again, then rejoins: no exit, so a replica
            // does not crash-loop, nor all of them at once, through an outage of the API server.
            (None, _) => running.await,
        };
        // The controllers have stopped: hand this replica's part over at once.
        if let Some(shard) = manager.shard() {
            let lease = manager.inner.lease_timing.lease_duration;
            if tokio::time::timeout(lease, shard.stop()).await.is_err() {
                warn!("the shard Lease was not released within {lease:?}; it will expire");
            }
        }
        // The controllers have stopped: hand the lease over without waiting for it to expire.
        if let Some(leadership) = leadership {
            leadership.release().await;
        }
        match stopped {
            Ok(()) => {
                info!("manager stopped");
                Ok(())
            }
            Err(error) => {
                error!(%error, "manager failed");
                Err(error)
            }
        }
    }
}

/// `id` as a shard group's name, which labels its Leases: a label value has at most 63 characters,
/// letters, digits, `-`, `_` and `.`, and starts and ends with a letter or digit. Another `id` keeps
/// its start and gets a hash of the whole, so that two long ids stay apart.
fn shard_group(id: &str) -> String {
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let alphanumeric_ends = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    if id.len() <= 63 && id.chars().all(valid) && alphanumeric_ends(id) {
        return id.to_string();
    }
    let kept: String = id.chars().filter(|&c| valid(c)).take(54).collect();
    let kept = kept.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let hash = crate::shard::hash(id) as u32;
    match kept {
        "" => format!("{hash:08x}"),
        kept => format!("{kept}-{hash:08x}"),
    }
}

/// A unique name for this process: `<hostname>_<random>`.
fn new_identity() -> String {
    let host = crate::lease::hostname().unwrap_or_else(|| "unknown".into());
    let random = RandomState::new().hash_one(std::process::id());
    format!("{host}_{random:016x}")
}

/// Spawns the controllers and waits for them all to end; the first to stop on its own (or panic)
/// shuts the others down.
async fn spawn_and_wait(
    manager: Manager,
    pending: Vec<BoxFuture<'static, ()>>,
) -> Result<(), Error> {
    let mut tasks = JoinSet::new();
    {
        let mut readiness = manager.readiness();
        readiness.controllers += pending.len();
        readiness.started = true;
    }
    // In the span of whoever runs them (a fleet's cluster, say), so their logs say so.
    for controller in pending {
        tasks.spawn(controller.in_current_span());
    }
    tokio::spawn(report_stalls(manager.clone()).in_current_span());
    info!(controllers = tasks.len(), "controllers started");
    if tasks.is_empty() {
        // A project without controllers yet still runs until it is told to stop.
        manager.shutdown_signal().await;
        return Ok(());
    }
    let mut result = Ok(());
    while let Some(ended) = tasks.join_next().await {
        if let Err(panic) = ended {
            error!(%panic, "a controller panicked");
        } else if manager.is_shutting_down() {
            continue;
        } else {
            error!("a controller stopped on its own");
        }
        result = Err(Error::ControllerStopped);
        manager.shutdown();
    }
    result
}

/// `--watch-namespace` checked: empty means all namespaces; a list is refused (one watch per kind).
fn watch_namespace(flag: Option<&str>) -> Result<Option<String>, Error> {
    match flag.map(str::trim) {
        None | Some("") => Ok(None),
        Some(list) if list.contains(',') => Err(Error::config(format!(
            "--watch-namespace {list:?}: one namespace only (a comma-separated list is not supported); leave it empty to watch all namespaces"
        ))),
        Some(namespace) => Ok(Some(namespace.to_string())),
    }
}

/// Publishes each cache stall once, as it passes the bound, until the manager shuts down: a
/// warning in the log and, with an event target, a `CacheStalled` Warning event on it.
async fn report_stalls(manager: Manager) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    let mut shutdown = std::pin::pin!(manager.shutdown_signal());
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = every.tick() => {}
        }
        for stall in manager.inner.stalls.newly_stalled() {
            warn!(%stall, "a cache stalled: the controllers reading it wait until its watch works");
            if let Some(target) = manager.event_target() {
                let events = manager.events();
                let warning = crate::events::EventType::Warning;
                events
                    .publish(target, warning, "CacheStalled", "Watch", &stall)
                    .await;
            }
        }
    }
}

/// The Pod the manager runs in, from `POD_NAME`, `POD_NAMESPACE` and `POD_UID` (the Downward
/// API), if set.
fn own_pod() -> Option<ObjectReference> {
    let var = |name| std::env::var(name).ok().filter(|value| !value.is_empty());
    Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(var("POD_NAME")?),
        namespace: Some(var("POD_NAMESPACE")?),
        uid: var("POD_UID"),
        ..ObjectReference::default()
    })
}

/// The namespace of the pod this process runs in: the service-account mount's, else `$POD_NAMESPACE`,
/// else `default` (e.g. when run on a workstation).
pub fn pod_namespace() -> String {
    const MOUNTED: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
    let mounted = std::fs::read_to_string(MOUNTED).ok();
    let from_env = || std::env::var("POD_NAMESPACE").ok();
    mounted
        .map(|ns| ns.trim().to_string())
        .filter(|ns| !ns.is_empty())
        .or_else(from_env)
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// The client configuration `--kubeconfig` and `--context` describe; without them, in-cluster
/// config, else the kubeconfig of `$KUBECONFIG` or `~/.kube/config`, as kubectl finds it.
/// The API server's version, asked until it answers: a replica started while the API server is
/// away (an upgrade of the control plane, an outage) waits for it, with backoff up to 5 s, instead
/// of exiting into CrashLoopBackOff. An answer that refuses (bad credentials, say) fails at once.
async fn api_server_version(
    client: &kube::Client,
) -> Result<k8s_openapi::apimachinery::pkg::version::Info, Error> {
    let mut pause = Duration::from_millis(250);
    loop {
        match client.apiserver_version().await {
            Ok(version) => return Ok(version),
            Err(error @ kube::Error::Api(_)) => return Err(error.into()),
            Err(error) => {
                warn!(%error, "the API server does not answer: asking again in {pause:?}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
    }
}

async fn client_config(args: &ManagerArgs) -> Result<kube::Config, Error> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    if args.kubeconfig.is_none() && args.context.is_none() {
        let config = kube::Config::infer().await;
        return Ok(config.map_err(kube::Error::InferConfig)?);
    }
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| Error::config_from(format!("--kubeconfig {}", path.display()), e))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await
        }
        None => kube::Config::from_kubeconfig(&options).await,
    };
    config.map_err(|e| Error::config_from("kubeconfig", e))
}

/// The API client of `config`, its requests counted in `metrics` (`rest_client_*`), its writes
/// refused once `fence` has passed.
fn counted_client(
    mut config: kube::Config,
    metrics: &Metrics,
    fence: &Fence,
    name: &str,
    identity: &str,
    bearer: Option<&Bearer>,
) -> Result<Client, Error> {
    let agent = format!("{name}/{} ({identity})", env!("CARGO_PKG_VERSION"));
    if let Ok(agent) = hyper::header::HeaderValue::from_str(&agent) {
        config.headers.push((hyper::header::USER_AGENT, agent));
    }
    let host = config.cluster_url.authority().map(|a| a.to_string());
    let layer = metrics.client_layer(&host.unwrap_or_default());
    // The fenced writes go through connections of their own, which run only while the fence is
    // open: a write queued when the process pauses is never sent after the fence passed.
    let executor = crate::shard::FencedExecutor::new(fence);
    let writer = kube::client::ClientBuilder::try_from((config.clone(), executor))?
        .with_layer(&BearerLayer::new(bearer))
        .build();
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(builder
        .with_layer(&BearerLayer::new(bearer))
        .with_layer(&fence.layer_with_writer(writer))
        .with_layer(&layer)
        .build())
}

fn init_logging(args: &ManagerArgs) -> Result<(), Error> {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .map_err(|e| Error::config_from(format!("--log-level {}", args.log_level), e))?;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal());
    // A subscriber set before (e.g. by a test) stays.
    let _ = match args.log_format {
        LogFormat::Text => logs.try_init(),
        LogFormat::Json => logs.json().try_init(),
    };
    Ok(())
}

/// Where and with which certificate to serve the webhooks; `None` when they are turned off.
fn webhook_server(args: &ManagerArgs) -> Option<(BindAddress, tls::CertSource)> {
    if !args.enable_webhooks {
        return None;
    }
    let address = format!(":{}", args.webhook_port)
        .parse()
        .expect(":PORT is a bind address");
    let cert = tls::CertSource::Files {
        cert: args.webhook_cert_path.join(&args.webhook_cert_name),
        key: args.webhook_cert_path.join(&args.webhook_cert_key),
    };
    Some((address, cert))
}

fn metrics_cert(args: &ManagerArgs) -> tls::CertSource {
    match &args.metrics_cert_path {
        Some(dir) => tls::CertSource::Files {
            cert: dir.join(&args.metrics_cert_name),
            key: dir.join(&args.metrics_cert_key),
        },
        None => tls::CertSource::SelfSigned(tls::default_names()),
    }
}

/// On SIGTERM (how Kubernetes stops a pod) or Ctrl-C, asks the manager to shut down gracefully. A
/// second signal makes [`Controllers::run`] return at once, and `main` with it.
async fn shutdown_on_signal(manager: Manager) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = match signal(SignalKind::terminate()) {
        Ok(terminate) => terminate,
        Err(error) => {
            warn!(%error, "cannot handle SIGTERM");
            return;
        }
    };
    let mut signalled = async || {
        tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        }
    };
    let first = signalled().await;
    info!(
        signal = first,
        "shutting down: finishing in-flight reconciles"
    );
    manager.shutdown();
    let second = signalled().await;
    warn!(
        signal = second,
        "second signal: stopping at once, without waiting for reconciles"
    );
    manager.inner.interrupted.send_replace(true);
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::time::Duration;

    #[test]
    fn errors_keep_their_causes() {
        let parse = "x".parse::<u8>().unwrap_err();
        let error = Error::config_from("--log-level x", parse.clone());
        assert_eq!(error.to_string(), "invalid configuration: --log-level x");
        let source = std::error::Error::source(&error).expect("the cause is kept");
        assert_eq!(source.to_string(), parse.to_string());
        // `{:?}` (what a `main` returning the error prints) reads as the message and its causes...
        assert_eq!(
            format!("{error:?}"),
            format!("invalid configuration: --log-level x\n  caused by: {parse}")
        );
        // ...and `{:#?}` shows the variant.
        let variant = format!("{error:#?}");
        assert!(variant.starts_with("Config {"), "{variant}");
        assert!(variant.contains("InvalidDigit"), "{variant}");
    }

    #[tokio::test]
    async fn an_invalid_lease_timing_fails_the_start() {
        let timing = leader::Timing {
            lease_duration: Duration::from_secs(10),
            renew_deadline: Duration::from_secs(15),
            retry_period: Duration::from_secs(2),
        };
        let args = Args::try_parse_from(["manager"]).unwrap().manager;
        let started = Manager::builder("timing-test")
            .lease_timing(timing)
            .start(args)
            .await;
        match started {
            Err(Error::LeaseTiming(invalid)) => assert_eq!(invalid.0, timing),
            other => panic!("started with a renew deadline past the lease: {other:?}"),
        }
        assert!(leader::Timing::default().check().is_ok());
    }

    #[test]
    fn readiness() {
        let mut r = Readiness::default();
        assert_eq!(r.check(), Err("starting".into()));
        r.waiting_for_leadership = true;
        assert!(r.check().is_ok(), "a follower is ready");
        r.waiting_for_leadership = false;
        r.controllers = 2;
        r.started = true;
        r.caches_pending = 1;
        assert_eq!(r.check(), Err("0 of 2 controller caches synced".into()));
        r.controllers_synced = 2;
        assert_eq!(r.check(), Err("1 owned-object caches not synced".into()));
        r.caches_pending = 0;
        assert!(r.check().is_ok());
    }

    #[derive(Debug, Parser)]
    struct Args {
        #[command(flatten)]
        manager: ManagerArgs,
    }

    #[test]
    fn flags_and_defaults() {
        let args = Args::try_parse_from(["manager"]).unwrap().manager;
        assert!(args.metrics_bind_address.is_off());
        assert!(args.metrics_secure);
        assert_eq!(args.health_probe_bind_address.to_string(), ":8081");
        assert!(!args.leader_elect);
        assert_eq!(args.log_format, LogFormat::Text);
        assert_eq!(args.webhook_port, 9443);
        let (address, cert) = webhook_server(&args).expect("webhooks are on by default");
        assert_eq!(address.to_string(), ":9443");
        let tls::CertSource::Files { cert, key } = cert else {
            panic!("webhook certificates come from files");
        };
        assert_eq!(
            (cert.to_str(), key.to_str()),
            (
                Some("/tmp/k8s-webhook-server/serving-certs/tls.crt"),
                Some("/tmp/k8s-webhook-server/serving-certs/tls.key")
            )
        );

        let args = Args::try_parse_from([
            "manager",
            "--leader-elect",
            "--metrics-secure=false",
            "--metrics-bind-address=:8443",
            "--log-format=json",
            "--webhook-port=10443",
            "--webhook-cert-path=/certs",
            "--webhook-cert-name=cert.pem",
        ])
        .unwrap()
        .manager;
        assert!(args.leader_elect && !args.metrics_secure);
        assert_eq!(args.metrics_bind_address.to_string(), ":8443");
        assert_eq!(args.log_format, LogFormat::Json);
        let (address, cert) = webhook_server(&args).expect("webhooks are on by default");
        assert_eq!(address.to_string(), ":10443");
        assert!(
            matches!(cert, tls::CertSource::Files { cert, .. } if cert.to_str() == Some("/certs/cert.pem"))
        );
        assert!(Args::try_parse_from(["manager", "--metrics-bind-address=8443"]).is_err());
        // Kubebuilder's switch: off, no server to start (and no certificate needed).
        let off = Args::try_parse_from(["manager", "--enable-webhooks=false"]).unwrap();
        assert!(!off.manager.enable_webhooks && webhook_server(&off.manager).is_none());
        let on = Args::try_parse_from(["manager", "--enable-webhooks"]).unwrap();
        assert!(webhook_server(&on.manager).is_some());
    }

    /// A client for a manager that makes no request (nothing listens on port 1).
    fn offline_client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        Client::try_from(config).unwrap()
    }

    #[tokio::test]
    async fn every_controllers_handle_reaches_the_same_set() {
        let manager = Manager::new("test", offline_client());
        let (started, ran) = tokio::sync::oneshot::channel();
        let stop = manager.shutdown_signal();
        // Added through one handle, run through another.
        manager.controllers().add(async move {
            let _ = started.send(());
            stop.await;
        });
        assert_eq!(
            format!("{:?}", manager.controllers()),
            "Controllers { added: 1 }"
        );
        let running = tokio::spawn(manager.controllers().run());
        let ran = tokio::time::timeout(std::time::Duration::from_secs(10), ran).await;
        assert!(
            matches!(ran, Ok(Ok(()))),
            "the controller added did not run: {ran:?}"
        );

        // They run once: a second run fails, a controller added now panics (it would never run).
        let again = manager.controllers().run().await;
        assert!(matches!(again, Err(Error::Config { .. })), "{again:?}");
        let add = || manager.controllers().add(async {});
        let late = std::panic::catch_unwind(std::panic::AssertUnwindSafe(add));
        assert!(
            late.is_err(),
            "a controller added while running was accepted"
        );

        manager.shutdown();
        running.await.unwrap().unwrap();
    }

    #[test]
    fn shard_groups_are_label_values() {
        assert_eq!(shard_group("project.example.com"), "project.example.com");
        let long = format!("{}.example.com", "a".repeat(70));
        let group = shard_group(&long);
        assert!(group.len() <= 63, "{group}");
        assert!(group.starts_with("aaaa"), "{group}");
        assert_ne!(
            group,
            shard_group(&format!("{}.example.org", "a".repeat(70)))
        );
        assert_eq!(shard_group("_x/y_").len(), "xy-".len() + 8);
    }

    #[test]
    fn errors_debug_as_their_message() {
        assert_eq!(
            format!("{:?}", Error::LeadershipLost),
            "leader election lost"
        );
    }
}
