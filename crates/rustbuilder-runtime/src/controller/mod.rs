//! Running a controller: kube's [`Controller`] with what every controller of a manager needs.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # use kube::Api;
//! # use kube::runtime::controller::Action;
//! # use rustbuilder_runtime::Manager;
//! async fn reconcile(object: Arc<ConfigMap>, ctx: Arc<()>) -> Result<Action, kube::Error> {
//!     Ok(Action::await_change())
//! }
//!
//! async fn run(manager: Manager) {
//!     manager
//!         .controller(Api::<ConfigMap>::all(manager.client()), "configmap")
//!         .concurrency(4)
//!         .run(reconcile, Arc::new(()))
//!         .await;
//! }
//! ```

use std::any::{Any, TypeId};
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::{Either, ready};
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use k8s_openapi::ClusterResourceScope;
use kube::api::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::{debug, info, warn};

use crate::backoff::ErrorBackoff;
use crate::cache::{self, Cache, Caches, Completeness, Storage};
use crate::events::EventType;
use crate::events::Events;
use crate::metrics::Metrics;
use crate::metrics::{QueueKey, WorkQueue};
use crate::scope::WatchScope;
use crate::shard::Shard;
use crate::shard::ShardKey;
use priority::Trigger;

/// How often readiness looks whether a controller's cache has synced.
const SYNC_POLL: Duration = Duration::from_millis(200);

/// The default number of reconciles a controller runs at once.
pub const DEFAULT_CONCURRENCY: u16 = 1;

mod priority;

type Customization<K> = Box<dyn FnOnce(Controller<K>) -> Controller<K> + Send>;

/// The triggers of one other cache (`owns`, `watches`), subscribed once the controller runs.
type OtherTriggers<K> = Box<dyn FnOnce() -> BoxStream<'static, Trigger<K>> + Send>;

type ErrorPolicy<K> = Arc<dyn Fn(&K, &(dyn std::error::Error + 'static)) -> OnError + Send + Sync>;
/// What a change of an object must change to reconcile it (see [`Builder::predicate`]).
type Predicate<K> = Box<dyn Fn(&K) -> Option<u64> + Send + Sync>;

/// The error of a reconcile that panicked: it fails like one that returned an error (logged, a
/// `ReconcileFailed` event, retried with backoff) and the controller goes on with the other objects.
/// [`Builder::on_error`] sees it as `error.downcast_ref::<Panicked>()`.
#[derive(Clone, Debug, thiserror::Error)]
#[error("reconcile panicked: {message}")]
pub struct Panicked {
    /// The panic's message (`"a panic without a message"` if it had none).
    pub message: String,
}

impl Panicked {
    pub(crate) fn from_payload(payload: &(dyn Any + Send)) -> Self {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        Panicked { message }
    }
}

/// The error of a reconcile cancelled after [`Builder::reconcile_timeout`]: it fails like one that
/// returned an error (logged, a `ReconcileFailed` event, retried with backoff). [`Builder::on_error`]
/// sees it as `error.downcast_ref::<TimedOut>()`.
#[derive(Clone, Debug, thiserror::Error)]
#[error("reconcile cancelled: it ran past its timeout of {0:?}")]
pub struct TimedOut(pub Duration);

/// Why a reconcile failed: its own error, a panic, or its timeout.
#[derive(Debug, thiserror::Error)]
enum Failure<E: std::error::Error + 'static> {
    #[error(transparent)]
    Returned(E),
    #[error(transparent)]
    Panicked(Panicked),
    #[error(transparent)]
    TimedOut(TimedOut),
}

impl<E: std::error::Error + 'static> Failure<E> {
    /// The error as the reconcile function gave it (or the panic), for an error policy.
    fn cause(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            Failure::Returned(error) => error,
            Failure::Panicked(panicked) => panicked,
            Failure::TimedOut(timed_out) => timed_out,
        }
    }
}

/// What a controller does after a reconcile fails; chosen per error by [`Builder::on_error`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnError {
    /// Retry with the controller's per-object exponential backoff (1 s doubling to 5 min): for
    /// errors that pass, such as a conflict or an API server that is briefly away. The default.
    Retry,
    /// Retry after this long, e.g. once a quota is expected to have room again.
    RetryAfter(Duration),
    /// Do not retry: the error lasts until the object changes (an invalid spec, say), and a change
    /// reconciles it again anyway.
    GiveUp,
}

/// What a controller needs from the process it runs in; the manager makes it
/// ([`Manager::controller`](crate::Manager::controller)). A controller knows nothing else of the manager.
#[derive(Clone)]
pub(crate) struct Host {
    /// The shared caches, to start or join the controller's own.
    pub(crate) caches: Arc<Caches>,
    pub(crate) cache_host: cache::Host,
    pub(crate) metrics: Metrics,
    pub(crate) events: Events,
    /// This replica's part of the objects, with `--sharding`.
    pub(crate) shard: Option<Shard>,
    pub(crate) stop: futures::future::Shared<futures::future::BoxFuture<'static, ()>>,
    /// Whether this replica may reconcile (it leads, or there is no leader election).
    pub(crate) leading: tokio::sync::watch::Receiver<bool>,
    /// Tells the manager that the controller's cache holds its first list.
    pub(crate) synced: Arc<dyn Fn() + Send + Sync>,
}

impl Host {
    fn shutdown_signal(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        self.stop.clone()
    }

    /// Waits until this replica may reconcile; `false` if shutdown comes first.
    async fn leading(&self) -> bool {
        let mut leading = self.leading.clone();
        tokio::select! {
            led = leading.wait_for(|leading| *leading) => led.is_ok(),
            () = self.shutdown_signal() => false,
        }
    }
}

/// Builds and runs one controller of a [`Manager`](crate::Manager); made by [`Manager::controller`](crate::Manager::controller).
///
/// The controller reconciles every object of `K` the `Api` lists (read from the manager's shared
/// [`Cache`] of them), and the owners of the objects of each cache given to [`Builder::owns`]. Built in:
///
/// - per-object exponential backoff after errors (1 s doubling to 5 min, reset by a success), so the
///   reconcile function needs no error policy (or choose per error with [`Builder::on_error`]);
/// - a `ReconcileFailed` Warning event on the object for each failure (repeats counted by the
///   event recorder), unless [`Builder::failure_events`] turns them off;
/// - a reconcile that panics fails like one that returns an error ([`Panicked`]), counted in
///   `controller_runtime_reconcile_panics_total`; the controller goes on with the other objects;
/// - no reconcile while a cache it reads is incomplete: its own, and each cache given to
///   [`Builder::owns`], must hold a complete list (not before their first lists, nor while one
///   lists again after its watch expired or its shard changed), so that a reconcile never takes
///   an object still coming for an absent one;
/// - reconcile and work-queue metrics named like controller-runtime's
///   (`controller_runtime_reconcile_total`, `workqueue_depth`, ...; see [`crate::metrics`]);
/// - live changes first: objects from a list (when the controller starts or takes over, or relists
///   after a watch failed) wait behind objects seen changing, no more of them queued at once than
///   [`Builder::concurrency`], so an edit is reconciled next even with thousands listed before it;
/// - a warm standby: with leader election, the caches fill while the replica waits for the Lease,
///   and it reconciles the moment it leads;
/// - readiness: the manager reports ready once this controller's cache has synced;
/// - graceful shutdown: on [`Manager::shutdown`](crate::Manager::shutdown) it takes no new work and returns once the reconciles
///   in flight are done;
/// - a log line per reconcile: `reconciled` (debug) or `reconcile failed` (warning), with the
///   fields `controller` and `object`.
pub struct Builder<K>
where
    K: Resource + Clone + Debug + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    host: Host,
    api: Api<K>,
    name: String,
    watcher_config: watcher::Config,
    concurrency: u16,
    customizations: Vec<Customization<K>>,
    others: Vec<OtherTriggers<K>>,
    /// The caches a reconcile reads besides the controller's own.
    reads: Vec<Completeness>,
    queue: WorkQueue,
    on_error: Option<ErrorPolicy<K>>,
    failure_events: bool,
    reconcile_timeout: Option<Duration>,
    predicate: Option<Predicate<K>>,
}

impl<K> Builder<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    pub(crate) fn new(host: Host, api: Api<K>, name: &str) -> Self {
        Builder {
            queue: host.metrics.work_queue(name),
            host,
            api,
            name: name.to_string(),
            watcher_config: watcher::Config::default(),
            concurrency: DEFAULT_CONCURRENCY,
            customizations: Vec::new(),
            others: Vec::new(),
            reads: Vec::new(),
            on_error: None,
            failure_events: true,
            reconcile_timeout: None,
            predicate: None,
        }
    }

    /// Reconciles the owner (the controller reference) of each object in `children` when it changes
    /// or goes away: usually [`Manager::owned`](crate::Manager::owned), the objects of the kind its controllers own. No reconcile
    /// starts while `children` is incomplete (see [`Cache::completeness`]).
    pub fn owns<O>(mut self, children: &Cache<O>) -> Self
    where
        O: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        self.reads.push(children.completeness());
        let queue = self.queue.clone();
        let children = children.clone();
        // Subscribed once the controller runs: a standby reads nothing until it leads.
        self.others.push(Box::new(move || {
            let owners = children
                .changes_by_origin()
                .flat_map(move |(change, origin)| {
                    let owners = owners_of::<K, O>(change.object());
                    owners.iter().for_each(|owner| queue.add(key_of(owner)));
                    futures::stream::iter(owners.into_iter().map(move |owner| (owner, origin)))
                });
            owners.boxed()
        }));
        self
    }

    /// Reconciles the objects `mapper` names whenever an object in `cache` changes or goes away: a
    /// kind the controller reads without owning it, such as a ConfigMap or Secret its objects name
    /// in their spec (controller-runtime's `Watches` with `EnqueueRequestsFromMapFunc`). The changes
    /// come from the shared `cache` (no watch of its own), take the same place in the work order as
    /// any other trigger and count in the work-queue metrics; no reconcile starts while `cache` is
    /// incomplete.
    ///
    /// The mapper usually looks the referring objects up in the manager's cache of `K`:
    ///
    /// ```no_run
    /// # use k8s_openapi::api::apps::v1::Deployment;
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// # use kube::ResourceExt;
    /// # use kube::runtime::reflector::ObjectRef;
    /// # fn f(manager: rustbuilder_runtime::Manager) {
    /// // Each Deployment names its settings in an annotation; a change of the settings reconciles it.
    /// let deployments = manager.cache::<Deployment>();
    /// let controller = manager
    ///     .controller(manager.api::<Deployment>(), "deployment")
    ///     .watches(&manager.cache::<ConfigMap>(), move |settings: &ConfigMap| {
    ///         let names_it = |d: &Deployment| {
    ///             d.namespace() == settings.namespace()
    ///                 && d.annotations().get("example.com/settings") == Some(&settings.name_any())
    ///         };
    ///         let referring = deployments.list().into_iter().filter(|d| names_it(d));
    ///         referring.map(|d| ObjectRef::from_obj(&*d)).collect::<Vec<_>>()
    ///     });
    /// # }
    /// ```
    pub fn watches<O, I>(
        mut self,
        cache: &Cache<O>,
        mapper: impl Fn(&O) -> I + Send + Sync + 'static,
    ) -> Self
    where
        O: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
        I: IntoIterator<Item = ObjectRef<K>>,
    {
        self.reads.push(cache.completeness());
        let queue = self.queue.clone();
        let cache = cache.clone();
        self.others.push(Box::new(move || {
            let targets = cache.changes_by_origin().flat_map(move |(change, origin)| {
                // A mapper that panics maps this change to nothing; the controller goes on.
                let mapped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    mapper(change.object()).into_iter().collect::<Vec<ObjectRef<K>>>()
                }));
                let targets = mapped.unwrap_or_else(|payload| {
                    let panic = Panicked::from_payload(&*payload);
                    let object = change.object().name_any();
                    warn!(%object, panic = %panic.message, "a watches mapper panicked: the change reconciles nothing");
                    Vec::new()
                });
                targets.iter().for_each(|target| queue.add(key_of(target)));
                futures::stream::iter(targets.into_iter().map(move |target| (target, origin)))
            });
            targets.boxed()
        }));
        self
    }

    /// Reconciles each object `triggers` names, when it names it: for changes this manager's caches
    /// do not see, such as those of objects in other clusters (a fleet's cross-cluster controllers
    /// map the children they keep in member clusters back to their owners this way). A trigger takes
    /// the place of a live change in the work order and counts in the work-queue metrics; an object
    /// the controller's cache does not hold is skipped. Unlike [`Builder::watches`], no reconcile
    /// waits on the source of the triggers.
    pub fn reconcile_on(
        mut self,
        triggers: impl futures::Stream<Item = ObjectRef<K>> + Send + 'static,
    ) -> Self {
        let queue = self.queue.clone();
        self.others.push(Box::new(move || {
            let targets = triggers.map(move |target| {
                queue.add(key_of(&target));
                (target, cache::Origin::Live)
            });
            targets.boxed()
        }));
        self
    }

    /// How many objects may be reconciled at the same time (one object is never reconciled twice at
    /// once). Default [`DEFAULT_CONCURRENCY`]; 0 means no limit.
    pub fn concurrency(mut self, concurrency: u16) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Chooses what follows a failed reconcile, from the object and the error (the reconcile
    /// function's own error type: `error.downcast_ref::<Error>()`). Default: [`OnError::Retry`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// # use rustbuilder_runtime::controller::OnError;
    /// # #[derive(Debug, thiserror::Error)] enum Error { #[error("invalid: {0}")] Invalid(String) }
    /// # fn f(manager: rustbuilder_runtime::Manager) {
    /// let controller = manager
    ///     .controller(manager.api::<ConfigMap>(), "configmap")
    ///     .on_error(|_object, error| match error.downcast_ref::<Error>() {
    ///         Some(Error::Invalid(_)) => OnError::GiveUp,
    ///         None => OnError::Retry,
    ///     });
    /// # }
    /// ```
    pub fn on_error(
        mut self,
        policy: impl Fn(&K, &(dyn std::error::Error + 'static)) -> OnError + Send + Sync + 'static,
    ) -> Self {
        self.on_error = Some(Arc::new(policy));
        self
    }

    /// Cancels a reconcile that runs longer than `timeout` (at its next `.await`), as failed with
    /// [`TimedOut`]: retried with backoff, like any error. Without one (the default), a reconcile
    /// that hangs holds its object, and a worker, until the process stops: a call to an API that
    /// never answers, say. Longer than the slowest reconcile you expect, not shorter.
    pub fn reconcile_timeout(mut self, timeout: Duration) -> Self {
        self.reconcile_timeout = Some(timeout);
        self
    }

    /// Whether a failed reconcile publishes a `ReconcileFailed` Warning event on its object
    /// (default: yes). The failure is logged either way.
    pub fn failure_events(mut self, publish: bool) -> Self {
        self.failure_events = publish;
        self
    }

    /// Reconciles a change of an object of `K` only when `predicate`'s value for it differs from
    /// the one at its last change (or the object is new, or the value is `None`):
    /// [`predicates::generation`](kube::runtime::predicates::generation) skips the changes of
    /// status and metadata, as controller-runtime's `GenerationChangedPredicate` does. The owners
    /// of changed children ([`Builder::owns`]) and the objects a [`Builder::watches`] mapper names
    /// are reconciled whatever it says, and so are retries after errors and requeues.
    ///
    /// ```no_run
    /// # use k8s_openapi::api::apps::v1::Deployment;
    /// # fn f(manager: rustbuilder_runtime::Manager) {
    /// use kube::runtime::predicates;
    ///
    /// let controller = manager
    ///     .controller(manager.api::<Deployment>(), "deployment")
    ///     .predicate(predicates::generation);
    /// # }
    /// ```
    pub fn predicate(
        mut self,
        predicate: impl Fn(&K) -> Option<u64> + Send + Sync + 'static,
    ) -> Self {
        self.predicate = Some(Box::new(predicate));
        self
    }

    /// Which objects of `K` to watch (e.g. a label selector); default all the `Api` lists.
    pub fn watcher_config(mut self, config: watcher::Config) -> Self {
        self.watcher_config = config;
        self
    }

    /// Any further setting of kube's [`Controller`] (e.g. `reconcile_on`), applied before it runs.
    /// For another kind, prefer [`Builder::watches`]: kube's own `watches` opens a watch of its own,
    /// outside the shared caches, the completeness gate, the work order and the queue metrics.
    pub fn with_controller(
        mut self,
        customize: impl FnOnce(Controller<K>) -> Controller<K> + Send + 'static,
    ) -> Self {
        self.customizations.push(Box::new(customize));
        self
    }

    /// Runs the controller until the manager shuts down, then lets in-flight reconciles finish.
    ///
    /// `reconcile` returns an [`Action`] (usually `Action::await_change()`: changes to the object and
    /// its owned objects trigger the next reconcile) or an error, which is logged and retried with
    /// backoff.
    pub async fn run<C, E, F, Fut>(self, reconcile: F, ctx: Arc<C>)
    where
        C: Send + Sync + 'static,
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        K::Scope: WatchScope,
    {
        let Builder {
            host,
            api,
            name,
            watcher_config,
            concurrency,
            customizations,
            others,
            reads,
            queue,
            on_error,
            failure_events,
            reconcile_timeout,
            predicate,
        } = self;
        let config = controller::Config::default().concurrency(concurrency);
        // The watched objects come from the manager's shared cache of them, which webhooks and other
        // controllers may read too. It fills while this replica waits to lead.
        // With `--sharding`, the objects of this replica's part only.
        let cache = host.caches.get_or_start_for(
            &host.cache_host,
            api,
            watcher_config,
            host.shard.as_ref(),
            ShardKey::Uid,
            Storage::Typed,
        );
        let store = cache.store().expect("a typed cache has a store");
        if !host.leading().await {
            return;
        }
        info!(controller = %name, "starting controller");
        let mut passes = predicate.map(Passes::new);
        let objects = cache.changes_by_origin().filter_map({
            let queue = queue.clone();
            move |(change, origin)| {
                if let Some(passes) = &mut passes
                    && !passes.change(&change)
                {
                    return ready(None);
                }
                let object = change.applied().map(|object| {
                    queue.add(queue_key(&*object));
                    (ObjectRef::from_obj(&*object), origin)
                });
                ready(object)
            }
        });
        let triggers = others.into_iter().map(|subscribe| subscribe());
        let triggers = futures::stream::select_all(triggers).boxed();
        let triggers = futures::stream::select(objects, triggers);
        let prioritized =
            priority::Prioritized::new(triggers, store.clone(), concurrency, queue.clone());
        let admitted = prioritized.admitted();
        let mut controller = Controller::for_shared_stream(prioritized, store.clone())
            .with_config(config)
            .graceful_shutdown_on(host.shutdown_signal());
        for customize in customizations {
            controller = customize(controller);
        }
        let synced = Arc::new(AtomicBool::new(false));
        report_synced(host.synced.clone(), controller.store(), synced.clone());

        let backoff = Arc::new(ErrorBackoff::default());
        let reset = backoff.clone();
        let metrics = host.metrics.controller(&name, concurrency);
        let reconcile = Arc::new(reconcile);
        let events = failure_events.then(|| Arc::new(host.events.clone()));
        let working = queue.clone();
        let done = admitted.clone();
        let shard = host.shard.clone();
        let reads: Arc<[Completeness]> =
            std::iter::once(cache.completeness()).chain(reads).collect();
        let stopping = host.clone();
        let checked = move |triggered: Arc<K>, ctx: Arc<C>| {
            let (reconcile, reset, events) = (reconcile.clone(), reset.clone(), events.clone());
            let (queue, done, shard) = (working.clone(), done.clone(), shard.clone());
            let (reads, store, metrics) = (reads.clone(), store.clone(), metrics.clone());
            let shutdown = stopping.shutdown_signal();
            async move {
                let mut shutdown = std::pin::pin!(shutdown);
                let listed = ObjectRef::from_obj(&*triggered);
                let queued = queue_key(&*triggered);
                drop(triggered);
                let skip = || {
                    done.done(&listed);
                    queue.forget(queued);
                    Ok(Action::await_change())
                };
                // Not before every cache the reconcile reads holds a complete list, and then with the
                // object as the cache holds it now. Sharded, only while this replica holds the
                // object, holding it until done (a range given up waits for this reconcile before
                // another replica may start it).
                let (object, permit) = loop {
                    tokio::select! {
                        () = complete(&reads) => {}
                        () = &mut shutdown => return skip(),
                    }
                    let Some(object) = store.get(&listed) else {
                        return skip();
                    };
                    let permit = match &shard {
                        Some(shard) => {
                            match shard.enter(object.meta().uid.as_deref().unwrap_or("")) {
                                Some(permit) => Some(permit),
                                None => return skip(),
                            }
                        }
                        None => None,
                    };
                    // A cache may have started listing again while the permit was taken.
                    if reads.iter().all(Completeness::is_complete) {
                        break (object, permit);
                    }
                };
                let work = queue.start(queued);
                let key = object_key(&*object);
                let uid = object.meta().uid.clone();
                let reference = object.object_ref(&());
                let reconciling = catch_panic(async { reconcile(object, ctx).await });
                let reconciling = within(reconcile_timeout, reconciling);
                // Sharded, a reconcile ends when the replica's fence passes: its writes are no
                // longer safe (another replica may hold the object by now). It also ends when its
                // permit is revoked: its range is being handed over and it ran past the drain
                // deadline; the next holder reconciles the object.
                let (fence_passed, revoked) = match (&shard, &permit) {
                    (Some(shard), Some(permit)) => (
                        Either::Left(shard.fence().passed()),
                        Either::Left(permit.revoked()),
                    ),
                    _ => (
                        Either::Right(std::future::pending()),
                        Either::Right(std::future::pending()),
                    ),
                };
                let result = tokio::select! {
                    biased;
                    () = fence_passed => {
                        warn!(object = %key, "reconcile cancelled: this shard member was not renewed in time");
                        drop(work);
                        return skip();
                    }
                    () = revoked => {
                        warn!(object = %key, "reconcile cancelled: it outlived the drain deadline of its shard range, which goes to another replica");
                        drop(work);
                        return skip();
                    }
                    result = metrics.clone().measure(reconciling) => result,
                };
                drop(work);
                done.done(&listed);
                if matches!(&result, Ok(action) if *action == Action::requeue(Duration::ZERO)) {
                    queue.retry(queued, Duration::ZERO);
                }
                match &result {
                    Ok(_) => reset.reset(&backoff_key(&key, uid.as_deref())),
                    // Where people look first (`kubectl describe`): the error, on the object itself.
                    // Repeats of the same event are counted by the recorder, not re-created.
                    Err(error) => {
                        if matches!(error, Failure::Panicked(_)) {
                            metrics.panicked();
                        }
                        if let Some(events) = events {
                            let note = format!("Reconcile failed: {error}");
                            let warning = EventType::Warning;
                            events
                                .publish(reference, warning, "ReconcileFailed", "Reconcile", &note)
                                .await;
                        }
                    }
                }
                result
            }
            .boxed()
        };
        let controller_name = name.clone();
        let retries = queue.clone();
        let error_policy = move |object: Arc<K>, error: &Failure<E>, _ctx: Arc<C>| {
            let key = object_key(&*object);
            let failures = backoff_key(&key, object.meta().uid.as_deref());
            // A policy that panics retries, as if it had not been given.
            let chosen = on_error.as_ref().map_or(OnError::Retry, |on_error| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    on_error(&object, error.cause())
                }))
                .unwrap_or_else(|payload| {
                    let panic = Panicked::from_payload(&*payload);
                    warn!(controller = %controller_name, object = %key, panic = %panic.message,
                        "the on_error policy panicked: retried");
                    OnError::Retry
                })
            });
            let delay = match chosen {
                OnError::Retry => backoff.next_delay(&failures),
                OnError::RetryAfter(delay) => delay,
                OnError::GiveUp => {
                    backoff.reset(&failures);
                    warn!(controller = %controller_name, object = %key, %error,
                        "reconcile failed; not retried until the object changes");
                    return Action::await_change();
                }
            };
            retries.retry(queue_key(&*object), delay);
            warn!(controller = %controller_name, object = %key, %error, retry_in = ?delay,
                "reconcile failed");
            Action::requeue(delay)
        };
        let running = controller
            .run(checked, error_policy, ctx)
            .for_each(|result| {
                match result {
                    Ok((object, _)) => {
                        let object = display_ref(&object);
                        debug!(controller = %name, %object, "reconciled");
                    }
                    // Logged by the error policy, which knows the retry delay.
                    Err(controller::Error::ReconcilerFailed(..)) => {}
                    // An object deleted while it waited in the queue: nothing to do.
                    Err(controller::Error::ObjectNotFound(object)) => {
                        let gone = ObjectRef::<K>::new(&object.name);
                        admitted.done(&match object.namespace.as_deref() {
                            Some(namespace) => gone.within(namespace),
                            None => gone,
                        });
                        let namespace = object.namespace.as_deref();
                        queue.forget(QueueKey::new(namespace, &object.name));
                        let object = display_ref(&object);
                        debug!(controller = %name, %object, "object gone before its reconcile")
                    }
                    // E.g. a watch failed (CRD not installed, no permission); it is retried.
                    Err(error) => warn!(controller = %name, %error, "controller error"),
                }
                futures::future::ready(())
            });
        // kube's controller starts no reconcile before its cache holds the first list, and when
        // stopped it waits for that list, which may never come (the kind cannot be listed, say). So a
        // controller stopped before its cache synced stops at once: nothing can be in flight.
        let shutdown = host.shutdown_signal();
        let stopped_unsynced = async move {
            shutdown.await;
            // A cache that synced an instant ago is seen here within a polling round.
            tokio::time::sleep(2 * SYNC_POLL).await;
            if synced.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = running => info!(controller = %name, "controller stopped"),
            () = stopped_unsynced => {
                info!(controller = %name, "controller stopped before its cache synced")
            }
        }
    }
}

/// Waits until every cache of `reads` holds a complete list.
async fn complete(reads: &[Completeness]) {
    // Until all are complete at once: one may start listing again while another is awaited.
    while !reads.iter().all(Completeness::is_complete) {
        for read in reads {
            read.wait().await;
        }
    }
}

/// The result of `reconcile`, with a panic (in the call or in the future) as a [`Failure`].
/// `reconciling`, cancelled as [`TimedOut`] after `timeout` if one is set.
async fn within<E, Fut>(timeout: Option<Duration>, reconciling: Fut) -> Result<Action, Failure<E>>
where
    E: std::error::Error + 'static,
    Fut: Future<Output = Result<Action, Failure<E>>>,
{
    match timeout {
        Some(timeout) => tokio::time::timeout(timeout, reconciling)
            .await
            .unwrap_or(Err(Failure::TimedOut(TimedOut(timeout)))),
        None => reconciling.await,
    }
}

async fn catch_panic<E, Fut>(reconcile: Fut) -> Result<Action, Failure<E>>
where
    E: std::error::Error + 'static,
    Fut: Future<Output = Result<Action, E>>,
{
    match std::panic::AssertUnwindSafe(reconcile).catch_unwind().await {
        Ok(result) => result.map_err(Failure::Returned),
        Err(payload) => Err(Failure::Panicked(Panicked::from_payload(&*payload))),
    }
}

/// The objects of kind `K` that own `child` (by owner reference), as kube's controller finds them.
fn owners_of<K, O>(child: &O) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()>,
    K::Scope: 'static,
    O: Resource,
{
    // A cluster-scoped owner has no namespace, whatever its child's.
    let cluster_scoped = TypeId::of::<K::Scope>() == TypeId::of::<ClusterResourceScope>();
    let namespace = child
        .meta()
        .namespace
        .as_deref()
        .filter(|_| !cluster_scoped);
    let owners = child.meta().owner_references.iter().flatten();
    owners
        .filter(|o| o.kind == K::kind(&()) && o.api_version == K::api_version(&()))
        .map(|owner| match namespace {
            Some(namespace) => ObjectRef::new(&owner.name).within(namespace),
            None => ObjectRef::new(&owner.name),
        })
        .collect()
}

/// The work-queue key of the object `object` refers to.
fn key_of<K: Resource>(object: &ObjectRef<K>) -> QueueKey
where
    K::DynamicType: Eq + Hash + Clone,
{
    QueueKey::new(object.namespace.as_deref(), &object.name)
}

/// The key of `object` in the controller's work queue.
fn queue_key<K: Resource>(object: &K) -> QueueKey {
    let meta = object.meta();
    QueueKey::new(
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

/// A [`Builder::predicate`] and its value at each object's last change.
struct Passes<K: Resource<DynamicType = ()> + 'static> {
    predicate: Predicate<K>,
    last: std::collections::HashMap<ObjectRef<K>, u64>,
}

impl<K: Resource<DynamicType = ()>> Passes<K> {
    fn new(predicate: Predicate<K>) -> Self {
        Passes {
            predicate,
            last: std::collections::HashMap::new(),
        }
    }

    /// Whether `change` reconciles its object: a change of the predicate's value, or a first one.
    fn change(&mut self, change: &cache::Change<K>) -> bool {
        let key = ObjectRef::from_obj(&**change.object());
        match change {
            cache::Change::Deleted(_) => {
                self.last.remove(&key);
                true
            }
            cache::Change::Applied(object) => match (self.predicate)(object) {
                Some(value) => self.last.insert(key, value) != Some(value),
                None => true,
            },
        }
    }
}

/// The backoff's key of the object `key` (`namespace/name`) with `uid`: an object deleted and
/// created again under its name starts its backoff afresh.
fn backoff_key(key: &str, uid: Option<&str>) -> String {
    format!("{key}/{}", uid.unwrap_or_default())
}

/// `namespace/name` (or `name` for a cluster-scoped object), to label log lines.
fn object_key<K: Resource>(object: &K) -> String {
    match object.namespace() {
        Some(namespace) => format!("{namespace}/{}", object.name_any()),
        None => object.name_any(),
    }
}

fn display_ref<K: Resource>(object: &kube::runtime::reflector::ObjectRef<K>) -> String
where
    K::DynamicType: Eq + Hash + Clone,
{
    match &object.namespace {
        Some(namespace) => format!("{namespace}/{}", object.name),
        None => object.name.clone(),
    }
}

/// Tells the manager (`report`), and `synced`, once `store` (the controller's cache) holds the first
/// full list.
fn report_synced<K>(report: Arc<dyn Fn() + Send + Sync>, store: Store<K>, synced: Arc<AtomicBool>)
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    tokio::spawn(async move {
        // The controller waits on the same store, and kube-runtime (5.0) wakes only the last of several
        // concurrent waiters: wait in short rounds, so this task looks again regardless.
        loop {
            let round = tokio::time::timeout(SYNC_POLL, store.wait_until_ready()).await;
            match round {
                Ok(Ok(())) => {
                    synced.store(true, Ordering::SeqCst);
                    break report();
                }
                // The controller stopped before its cache filled: it never counts as synced.
                Ok(Err(_)) => break,
                Err(_) => {}
            }
        }
    });
}
