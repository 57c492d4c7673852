//! Shared caches of Kubernetes objects, on kube's own [`Store`], or packed.
//!
//! A [`Cache<K>`] holds the objects of kind `K` that one watch lists: all those a manager watches
//! ([`Manager::cache`](crate::Manager::cache)), or those matching a label or field selector ([`Manager::cache_with`](crate::Manager::cache_with),
//! [`Manager::owned`](crate::Manager::owned)). The manager keeps one cache per kind, scope and selector: every controller,
//! webhook or task that asks for the same one shares its watch and its memory, as
//! controller-runtime's informers are shared.
//!
//! A cache answers without asking the API server: [`Cache::get`] by name, [`Cache::list`],
//! [`Cache::matching`] a label selector, and [`Cache::children_of`] an owner (an index by controller
//! owner reference, for the Jobs of a CronJob or the Pods of a set). [`Cache::store`] hands out the
//! [`Store`] itself, for kube's own helpers. [`Cache::changes`] streams what the watch sees, as
//! [`Builder::owns`](crate::controller::Builder::owns) uses it to reconcile owners: each reader
//! gets the latest state of every object that changed since it last read, so a reader that falls
//! behind holds one entry per object and never holds up the watch or the other readers.
//!
//! A cache keeps each object as the API server sends it but for what no reader needs: the copy of
//! the object `kubectl apply` leaves in its `last-applied-configuration` annotation, and the
//! `managedFields` entries of other field managers (the manager's own applies stay, for
//! [`apply`](crate::apply)).
//!
//! A cache is *complete* while it holds a full list of what it watches now ([`Cache::completeness`]):
//! not before its first list, nor while it lists again (after the watch expired, or, sharded,
//! after its ranges changed). A controller reconciles only while every cache it reads is complete.
//!
//! ```no_run
//! # use k8s_openapi::api::batch::v1::Job;
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # fn f(manager: rustbuilder_runtime::Manager, owner: &ConfigMap) {
//! let jobs = manager.owned::<Job>();
//! for job in jobs.children_of(owner) {
//!     println!("{}", kube::ResourceExt::name_any(&*job));
//! }
//! # }
//! ```
//!
//! Objects are kept as kube decodes them, less their managed fields (a large tree of every field
//! each writer set): only this manager's own apply entries (the object's and its status') stay, as
//! JSON text, which [`apply`](crate::apply) reads to tell what an apply would change.
//!
//! The caches of owned objects ([`Manager::owned`](crate::Manager::owned)) keep each one *packed*:
//! its JSON, LZ4-compressed, decoded again when read ([`Cache::is_packed`]). A typed object is quick
//! to read and large (a `Deployment` is a struct of many empty fields and small strings each
//! allocated on its own); packed it takes a fraction of that, for tens of microseconds per read. A
//! controller reads a child once per reconcile of its owner while the cache holds every child all
//! the time, so owned caches are packed; the others, which kube's controller reads from a
//! [`Store`], stay typed.

use std::any::{Any, TypeId};
use std::collections::{HashMap, VecDeque};
use std::fmt::{self, Debug};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::task::{Poll, Waker};

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
use kube::api::Api;
use kube::core::{Selector, SelectorExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tracing::{Instrument, info, warn};

use futures::future::{BoxFuture, Shared as SharedFuture};

use crate::metrics::Metrics;
use crate::ownership::controller_of;
use prometheus_client::metrics::gauge::Gauge;

pub(crate) mod objects;
mod stalls;

use crate::shard::{Ranges, Shard, ShardKey, ShardState};
pub(crate) use objects::Storage;
use objects::{Kept, Objects, ObjectsWriter, PackedObject, key_of};
pub use stalls::DEFAULT_BOUND as STALL_BOUND;
pub(crate) use stalls::Stalls;

/// What a cache needs from the process it runs in: the field manager whose apply entries it keeps,
/// the metrics, when to stop, and whom to tell once it holds its first list. The manager makes one
/// (`Cache::sharded(&manager, …)` turns the manager into one); a cache knows nothing else of it.
#[derive(Clone)]
pub struct Host {
    field_manager: String,
    metrics: Metrics,
    stop: SharedFuture<BoxFuture<'static, ()>>,
    expect_sync: Arc<dyn Fn() -> Synced + Send + Sync>,
    stalls: Stalls,
}

impl Host {
    /// A host whose caches keep `field_manager`'s apply entries, count into `metrics`, stop when
    /// `stop` resolves, each call `expect_sync` once when they start and the [`Synced`] it
    /// returns once they hold their first list, and report a watch that keeps failing to `stalls`.
    pub(crate) fn new(
        field_manager: &str,
        metrics: Metrics,
        stop: SharedFuture<BoxFuture<'static, ()>>,
        expect_sync: impl Fn() -> Synced + Send + Sync + 'static,
        stalls: Stalls,
    ) -> Host {
        Host {
            field_manager: field_manager.to_string(),
            metrics,
            stop,
            expect_sync: Arc::new(expect_sync),
            stalls,
        }
    }
}

/// What a cache calls once it holds its first list (the manager counts it for readiness).
pub(crate) struct Synced(Box<dyn FnOnce() + Send>);

impl Synced {
    pub(crate) fn new(done: impl FnOnce() + Send + 'static) -> Synced {
        Synced(Box::new(done))
    }

    fn done(self) {
        (self.0)()
    }
}

/// What a cache's watch saw happen to one object.
#[derive(Debug)]
pub enum Change<K> {
    /// Created or changed (or listed again after the watch restarted).
    Applied(Arc<K>),
    /// Deleted, as last seen (or missing from a list made after the watch restarted).
    Deleted(Arc<K>),
}

/// How a change reached the cache: seen live on the watch, or in a list (the first list, a relist,
/// or the objects a late reader of [`Cache::changes`] starts with). Controllers reconcile live
/// changes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    Live,
    Listed,
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        match self {
            Change::Applied(object) => Change::Applied(object.clone()),
            Change::Deleted(object) => Change::Deleted(object.clone()),
        }
    }
}

impl<K> Change<K> {
    /// The object, as applied or as last seen before its deletion.
    pub fn object(&self) -> &Arc<K> {
        match self {
            Change::Applied(object) | Change::Deleted(object) => object,
        }
    }

    /// The object, applied or deleted.
    pub fn into_object(self) -> Arc<K> {
        match self {
            Change::Applied(object) | Change::Deleted(object) => object,
        }
    }

    /// The object if it was applied, `None` if it was deleted.
    pub fn applied(self) -> Option<Arc<K>> {
        match self {
            Change::Applied(object) => Some(object),
            Change::Deleted(_) => None,
        }
    }
}

/// The objects of kind `K` one watch lists, shared by everyone who asks the manager for it: cheap to
/// clone, clones read the same cache. Made by [`Manager::cache`](crate::Manager::cache), [`Manager::cache_with`](crate::Manager::cache_with) and
/// [`Manager::owned`](crate::Manager::owned); it fills in the background until the manager shuts down, and the manager is
/// not ready (`/readyz`) until it holds its first full list.
pub struct Cache<K>
where
    K: Resource<DynamicType = ()> + 'static,
{
    shared: Arc<Shared<K>>,
}

struct Shared<K>
where
    K: Resource<DynamicType = ()> + 'static,
{
    objects: Objects<K>,
    owners: RwLock<OwnerIndex<K>>,
    subscribers: Mutex<Vec<Weak<Subscriber<K>>>>,
    listed: AtomicBool,
    /// Whether the store holds a complete list now.
    complete: watch::Sender<Listed>,
    /// Sharded: the member's state, whose held ranges a complete list must cover.
    shard: Option<watch::Receiver<ShardState>>,
}

/// How complete a cache's list is, as its watch last told.
#[derive(Clone, Debug, Default, PartialEq)]
struct Listed {
    /// The last list the watch started has ended.
    complete: bool,
    /// Sharded: the ranges that list holds.
    ranges: Option<Ranges>,
}

/// Whether a cache holds a complete list of what it watches now: after its first list, and not
/// while it lists again (its watch expired, or, sharded, its ranges changed and the objects of the
/// new ones are still coming). From [`Cache::completeness`]; cheap to clone, and the same for
/// every kind, so one reader can wait on caches of several kinds.
#[derive(Clone)]
pub struct Completeness {
    listed: watch::Receiver<Listed>,
    shard: Option<watch::Receiver<ShardState>>,
}

impl Completeness {
    /// Whether the cache is complete now.
    pub fn is_complete(&self) -> bool {
        let listed = self.listed.borrow();
        listed.complete
            && match &self.shard {
                Some(shard) => listed.ranges.as_ref() == Some(&shard.borrow().held),
                None => true,
            }
    }

    /// Waits until the cache is complete. Returns at once if it is, and also if the cache has
    /// stopped (at shutdown).
    pub async fn wait(&self) {
        let mut listed = self.listed.clone();
        let mut shard = self.shard.clone();
        loop {
            listed.borrow_and_update();
            if let Some(shard) = &mut shard {
                shard.borrow_and_update();
            }
            if self.is_complete() {
                return;
            }
            let shard_changed = async {
                match &mut shard {
                    Some(shard) => shard.changed().await,
                    None => std::future::pending().await,
                }
            };
            let stopped = tokio::select! {
                changed = listed.changed() => changed.is_err(),
                changed = shard_changed => changed.is_err(),
            };
            if stopped {
                return;
            }
        }
    }
}

impl Debug for Completeness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completeness")
            .field("complete", &self.is_complete())
            .finish_non_exhaustive()
    }
}

/// One reader of [`Cache::changes`]: the objects that changed since it last read, each once, with
/// its latest change. Bounded by the number of objects, however far the reader falls behind.
struct Subscriber<K: Resource<DynamicType = ()> + 'static> {
    pending: Mutex<Pending<K>>,
    /// The cache's objects, to decode a packed one when it is read.
    objects: Objects<K>,
}

struct Pending<K: Resource<DynamicType = ()> + 'static> {
    /// Objects in the order they first changed since the last read.
    order: VecDeque<ObjectRef<K>>,
    latest: HashMap<ObjectRef<K>, (Unread<K>, Origin)>,
    /// The reader waiting for the next change.
    waker: Option<Waker>,
}

/// A change a reader has not read yet: an object listed from a packed cache stays packed until
/// then, so that a list handed to many readers costs no decoding until each reads it.
enum Unread<K> {
    Change(Change<K>),
    Listed(PackedObject),
}

impl<K> Clone for Unread<K> {
    fn clone(&self) -> Self {
        match self {
            Unread::Change(change) => Unread::Change(change.clone()),
            Unread::Listed(object) => Unread::Listed(object.clone()),
        }
    }
}

impl<K> From<Kept<K>> for Unread<K> {
    fn from(kept: Kept<K>) -> Self {
        match kept {
            Kept::Typed(object) => Unread::Change(Change::Applied(object)),
            Kept::Packed(object) => Unread::Listed(object),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone> Subscriber<K> {
    fn new(objects: Objects<K>) -> Self {
        Subscriber {
            pending: Mutex::new(Pending {
                order: VecDeque::new(),
                latest: HashMap::new(),
                waker: None,
            }),
            objects,
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending<K>> {
        // A push or pop cannot leave the queue half-updated.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `change`, replacing an unread change of the same object: seen live, it stays live.
    fn push(&self, key: ObjectRef<K>, change: (Unread<K>, Origin)) {
        use std::collections::hash_map::Entry;
        let mut pending = self.pending();
        match pending.latest.entry(key) {
            Entry::Occupied(mut unread) => {
                let live = unread.get().1 == Origin::Live || change.1 == Origin::Live;
                let origin = if live { Origin::Live } else { Origin::Listed };
                unread.insert((change.0, origin));
            }
            Entry::Vacant(vacant) => {
                let key = vacant.key().clone();
                vacant.insert(change);
                pending.order.push_back(key);
            }
        }
        if let Some(waker) = pending.waker.take() {
            waker.wake();
        }
    }

    fn poll_next(&self, cx: &mut std::task::Context<'_>) -> Poll<(Change<K>, Origin)> {
        let mut pending = self.pending();
        while let Some(key) = pending.order.pop_front() {
            let change = match pending.latest.remove(&key) {
                Some((Unread::Change(change), origin)) => (change, origin),
                Some((Unread::Listed(object), origin)) => {
                    // Undecodable (never seen): nothing to read.
                    let Some(object) = self.objects.unpack(Kept::Packed(object)) else {
                        continue;
                    };
                    (Change::Applied(object), origin)
                }
                None => continue,
            };
            return Poll::Ready(change);
        }
        pending.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl<K: Resource<DynamicType = ()>> Clone for Cache<K> {
    fn clone(&self) -> Self {
        Cache {
            shared: self.shared.clone(),
        }
    }
}

impl<K> Debug for Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("kind", &K::kind(&()))
            .field("cached", &self.len())
            .finish_non_exhaustive()
    }
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    /// The object `name` (in `namespace`, for a namespaced kind), if the cache holds it. From a
    /// packed cache, decoded: each call gives a copy of its own.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        let key = ObjectRef::new(name);
        let key = match namespace {
            Some(namespace) => key.within(namespace),
            None => key,
        };
        self.shared.objects.get(&key)
    }

    /// Every object the cache holds, in no particular order. A packed cache decodes each one for
    /// the call, as it does for [`Cache::list_in`] and [`Cache::matching`]: on an owned cache,
    /// [`Cache::children_of`] and [`Cache::get`] decode only what they return.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.shared.objects.state()
    }

    /// The objects of `namespace`.
    pub fn list_in(&self, namespace: &str) -> Vec<Arc<K>> {
        let namespace = Some(namespace);
        self.shared
            .objects
            .state_filter(|object| object.meta().namespace.as_deref() == namespace)
    }

    /// The objects whose labels `selector` selects, e.g.
    /// `Selector::from_iter([("app.kubernetes.io/name", "memcached")])`.
    pub fn matching(&self, selector: &Selector) -> Vec<Arc<K>> {
        self.shared
            .objects
            .state_filter(|object| selector.matches(object.labels()))
    }

    /// The objects `owner` controls (whose controller reference names its uid), from an index: no
    /// scan of the cache. Empty for an owner without a uid (not read from the API).
    pub fn children_of<O: Resource>(&self, owner: &O) -> Vec<Arc<K>> {
        let Some(uid) = owner.meta().uid.as_deref() else {
            return Vec::new();
        };
        let keys: Vec<ObjectRef<K>> = {
            let owners = self.shared.owners();
            owners
                .children
                .get(uid)
                .into_iter()
                .flatten()
                .cloned()
                .collect()
        };
        keys.iter()
            .filter_map(|key| self.shared.objects.get(key))
            .collect()
    }

    /// How many objects the cache holds: 0 until the first list arrives.
    pub fn len(&self) -> usize {
        self.shared.objects.len()
    }

    /// Whether the cache holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the cache has received a full list at least once. It may be listing again now:
    /// [`Cache::completeness`] tells whether it holds a complete list now.
    pub fn is_synced(&self) -> bool {
        self.shared.listed.load(Ordering::SeqCst)
    }

    /// Whether the cache holds a complete list now, to look at or wait for.
    pub fn completeness(&self) -> Completeness {
        Completeness {
            listed: self.shared.complete.subscribe(),
            shard: self.shared.shard.clone(),
        }
    }

    /// Waits until the cache holds its first full list.
    pub async fn synced(&self) {
        // Only fails to become ready if its watch stopped, i.e. at shutdown.
        self.shared.objects.wait_until_ready().await;
    }

    /// kube's [`Store`] under this cache, e.g. for `Controller::for_shared_stream`; `None` for a
    /// packed cache (those of [`Manager::owned`](crate::Manager::owned)), which keeps no typed
    /// objects: ask [`Manager::cache`](crate::Manager::cache) for one of the kind.
    pub fn store(&self) -> Option<Store<K>> {
        match &self.shared.objects {
            Objects::Typed(store) => Some(store.clone()),
            Objects::Packed(_) => None,
        }
    }

    /// Whether the cache keeps its objects packed, decoded on read.
    pub fn is_packed(&self) -> bool {
        matches!(self.shared.objects, Objects::Packed(_))
    }

    /// Whether `self` and `other` are one cache (one watch).
    pub fn same_as(&self, other: &Cache<K>) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// What the watch sees from now on, first every object the cache holds already (as
    /// [`Change::Applied`]), so that a late reader misses nothing. After a watch restart the objects of
    /// the new list come once it is complete, with a [`Change::Deleted`] for each object gone meanwhile.
    ///
    /// An object that changes several times before the reader reads gives one change, its latest:
    /// a reader that falls behind costs one entry per object, and never holds up the watch or the
    /// other readers. Dropping the stream unsubscribes.
    pub fn changes(&self) -> impl Stream<Item = Change<K>> + Send + 'static + use<K>
    where
        K: Send + Sync,
    {
        self.changes_by_origin().map(|(change, _)| change)
    }

    /// [`Cache::changes`], each with how the cache saw it.
    pub(crate) fn changes_by_origin(
        &self,
    ) -> impl Stream<Item = (Change<K>, Origin)> + Send + 'static + use<K>
    where
        K: Send + Sync,
    {
        let subscriber = Arc::new(Subscriber::new(self.shared.objects.clone()));
        // Subscribed and filled under one lock: a change the watch records meanwhile is either in
        // the snapshot or pushed after it (or both), never lost.
        {
            let mut subscribers = self.shared.subscribers();
            subscribers.push(Arc::downgrade(&subscriber));
            for (key, object) in self.shared.objects.kept() {
                subscriber.push(key, (object.into(), Origin::Listed));
            }
        }
        futures::stream::poll_fn(move |cx| subscriber.poll_next(cx).map(Some))
    }
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    /// Starts the watch of `api` with `config` in the background, until the host stops, keeping
    /// the objects as `storage` says.
    fn start(host: &Host, api: Api<K>, config: watcher::Config, storage: Storage<K>) -> Self {
        let (objects, writer) = Objects::new(storage);
        let shared = Arc::new(Shared::new(objects, None));
        let field_manager = host.field_manager.clone();
        let events = watcher(api, config)
            .default_backoff()
            .modify(move |object| trim(object, &field_manager));
        let incomplete = host.metrics.cache_incomplete(&K::kind(&()));
        let filling = fill(
            events,
            writer,
            shared.clone(),
            (host.expect_sync)(),
            None,
            incomplete,
            host.stalls.reporter(&K::kind(&())),
        );
        let stop = host.stop.clone();
        // In the span of whoever started the cache (a fleet's cluster, say), so its logs say so.
        let task = async move {
            tokio::select! {
                () = filling => {}
                () = stop => {}
            }
        };
        tokio::spawn(task.in_current_span());
        Cache { shared }
    }
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::Scope: crate::scope::WatchScope,
{
    /// A cache of the objects of `api` (with `config`'s selectors) in the ranges `shard` holds,
    /// placed by `key` (see [`crate::shard`]): its watch lists again, with the new ranges,
    /// whenever they change, and its subscribers see the objects of ranges given up as deleted.
    /// It uses the API server's shard selector when the server has it ([`ShardKey::Uid`] only),
    /// and filters on the client otherwise. Not shared: keep the one returned.
    ///
    /// [`ShardKey::Uid`]: crate::shard::ShardKey::Uid
    pub fn sharded(
        host: impl Into<Host>,
        api: Api<K>,
        config: watcher::Config,
        shard: &Shard,
        key: ShardKey,
    ) -> Self {
        Cache::sharded_in(&host.into(), api, config, shard, key, Storage::Typed)
    }

    fn sharded_in(
        host: &Host,
        api: Api<K>,
        config: watcher::Config,
        shard: &Shard,
        key: ShardKey,
        storage: Storage<K>,
    ) -> Self {
        let (objects, writer) = Objects::new(storage);
        let shared = Arc::new(Shared::new(objects.clone(), Some(shard.state())));
        let cached: crate::shard::watch::Cached<K> = Arc::new(move |key| objects.contains(key));
        let counted = Arc::downgrade(&shared);
        let count = move || counted.upgrade().map(|shared| shared.objects.len());
        let kind = K::kind(&());
        let series = host.metrics.shard();
        series.count_objects(shard.group(), &kind, key.label(), count);
        let field_manager = host.field_manager.clone();
        let namespace = shard.namespace().to_string();
        // The ranges of the list the watch is making, for the cache to tell which ones it holds.
        let listing = Arc::new(Mutex::new(Ranges::none()));
        let state = shard.state();
        let events =
            crate::shard::watch::events(api, config, state, key, cached, namespace, &listing)
                .modify(move |object| trim(object, &field_manager));
        let incomplete = host.metrics.cache_incomplete(&kind);
        let filling = fill(
            events,
            writer,
            shared.clone(),
            (host.expect_sync)(),
            Some(listing),
            incomplete,
            host.stalls.reporter(&kind),
        );
        let stop = host.stop.clone();
        // In the span of whoever started the cache (a fleet's cluster, say), so its logs say so.
        let task = async move {
            tokio::select! {
                () = filling => {}
                () = stop => {}
            }
        };
        tokio::spawn(task.in_current_span());
        Cache { shared }
    }
}

/// The annotation `kubectl apply` (client-side) writes: a copy of the whole object as last applied,
/// which no controller reads.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What a cache keeps of an object: all of it but the copy `kubectl apply` leaves in
/// [`LAST_APPLIED`] (as large as the object again), and of its managed fields only the entries of
/// `field_manager`'s applies (to the object and to its `status`), their `fieldsV1` as JSON text: a
/// tree of maps takes as much memory as the rest of a Deployment (about 11 KB each), its text a tenth
/// of that. [`apply`](crate::apply) reads either.
fn trim<K: Resource>(object: &mut K, field_manager: &str) {
    let annotations = &mut object.meta_mut().annotations;
    if let Some(map) = annotations {
        map.remove(LAST_APPLIED);
        if map.is_empty() {
            *annotations = None;
        }
    }
    let fields = object.managed_fields_mut();
    fields.retain(|entry| {
        entry.manager.as_deref() == Some(field_manager)
            && entry.operation.as_deref() == Some("Apply")
            && entry
                .subresource
                .as_deref()
                .is_none_or(|s| s.is_empty() || s == "status")
    });
    for entry in fields {
        if let Some(FieldsV1(tree)) = &mut entry.fields_v1
            && !tree.is_string()
        {
            *tree = serde_json::Value::String(tree.to_string());
        }
    }
}

/// Records each watch event in the store and the owner index, then hands the changes to the
/// subscribers. Sharded, `listing` holds the ranges of the list the watch is making. `incomplete`
/// counts this cache while it holds no complete list; `stall` hears of each failure of the watch,
/// and of each event after.
async fn fill<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    mut writer: ObjectsWriter<K>,
    shared: Arc<Shared<K>>,
    synced: Synced,
    listing: Option<Arc<Mutex<Ranges>>>,
    incomplete: Gauge,
    stall: stalls::Reporter,
) where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let kind = K::kind(&()).to_string();
    let mut synced = Some(synced);
    let mut incomplete = Incomplete::new(incomplete);
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => {
                stall.working();
                event
            }
            Err(error) => {
                warn!(kind, %error, "watch failed; retrying");
                stall.failed(&error.to_string());
                // 410 Gone: events were missed, and the watcher lists again after its backoff
                // (a second or more). Until that list ends the cache is known to be stale, not
                // complete: a controller reading it waits instead of acting on the past.
                if matches!(&error, watcher::Error::WatchError(status) if status.code == 410) {
                    shared
                        .complete
                        .send_if_modified(|listed| std::mem::replace(&mut listed.complete, false));
                    incomplete.set(true);
                }
                continue;
            }
        };
        // What a completed relist replaces, to tell who is gone.
        let before = matches!(event, watcher::Event::InitDone).then(|| shared.objects.kept());
        writer.apply(&event);
        let changes: Vec<(ObjectRef<K>, Unread<K>, Origin)> = match event {
            watcher::Event::Apply(object) => {
                let key = key_of(&object);
                let controller = controller_of(&object).map(|owner| owner.uid.as_str());
                shared.owners_mut().insert(&key, controller);
                // Typed, the store's copy; packed, the event's own object, not decoded again.
                let applied = match &shared.objects {
                    Objects::Typed(store) => store.get(&key),
                    Objects::Packed(_) => Some(Arc::new(object)),
                };
                let applied =
                    applied.map(|o| (key, Unread::Change(Change::Applied(o)), Origin::Live));
                applied.into_iter().collect()
            }
            watcher::Event::Delete(object) => {
                let key = key_of(&object);
                shared.owners_mut().remove(&key);
                let deleted = Unread::Change(Change::Deleted(Arc::new(object)));
                vec![(key, deleted, Origin::Live)]
            }
            watcher::Event::Init => {
                // The store keeps the old list until the new one is whole, but the objects that
                // changed meanwhile (or, sharded, those of new ranges) are not in it.
                shared
                    .complete
                    .send_if_modified(|listed| std::mem::replace(&mut listed.complete, false));
                incomplete.set(true);
                Vec::new()
            }
            watcher::Event::InitApply(_) => Vec::new(),
            watcher::Event::InitDone => {
                // The owner index holds the new list before anyone is told the cache is complete:
                // a reader woken by that reads the children of the list, not of the one before.
                let listed = shared.objects.kept();
                let controllers = listed
                    .iter()
                    .map(|(key, object)| (key, Objects::controller_of(object)));
                shared.owners_mut().rebuild(controllers);
                shared.listed.store(true, Ordering::SeqCst);
                let ranges = listing
                    .as_ref()
                    .map(|l| l.lock().unwrap_or_else(|e| e.into_inner()).clone());
                shared.complete.send_replace(Listed {
                    complete: true,
                    ranges,
                });
                incomplete.set(false);
                if let Some(synced) = synced.take() {
                    info!(kind, objects = listed.len(), "cache synced");
                    synced.done();
                }
                let gone = before.into_iter().flatten();
                let gone = gone.filter(|(key, _)| !shared.objects.contains(key));
                let gone = gone.filter_map(|(key, old)| {
                    let old = shared.objects.unpack(old)?;
                    Some((key, Unread::Change(Change::Deleted(old))))
                });
                let gone: Vec<_> = gone.collect();
                let listed = listed.into_iter().map(|(key, object)| (key, object.into()));
                let listed = listed.chain(gone);
                listed.map(|(key, c)| (key, c, Origin::Listed)).collect()
            }
        };
        for (key, change, origin) in changes {
            shared.dispatch(key, (change, origin));
        }
    }
}

/// A cache's count in `cache_incomplete`: one while it holds no complete list, none once it has
/// stopped.
struct Incomplete {
    gauge: Gauge,
    counted: bool,
}

impl Incomplete {
    fn new(gauge: Gauge) -> Self {
        gauge.inc();
        Incomplete {
            gauge,
            counted: true,
        }
    }

    fn set(&mut self, incomplete: bool) {
        if incomplete != self.counted {
            match incomplete {
                true => self.gauge.inc(),
                false => self.gauge.dec(),
            };
            self.counted = incomplete;
        }
    }
}

impl Drop for Incomplete {
    fn drop(&mut self) {
        self.set(false);
    }
}

impl<K> Shared<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    fn new(objects: Objects<K>, shard: Option<watch::Receiver<ShardState>>) -> Self {
        Shared {
            objects,
            owners: RwLock::new(OwnerIndex::default()),
            subscribers: Mutex::default(),
            listed: AtomicBool::new(false),
            complete: watch::Sender::new(Listed::default()),
            shard,
        }
    }

    fn owners(&self) -> std::sync::RwLockReadGuard<'_, OwnerIndex<K>> {
        // Each update leaves the index whole: a panic elsewhere cannot leave it half-written.
        self.owners.read().unwrap_or_else(|e| e.into_inner())
    }

    fn owners_mut(&self) -> std::sync::RwLockWriteGuard<'_, OwnerIndex<K>> {
        self.owners.write().unwrap_or_else(|e| e.into_inner())
    }

    fn subscribers(&self) -> std::sync::MutexGuard<'_, Vec<Weak<Subscriber<K>>>> {
        self.subscribers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands `change` to every subscriber, without waiting for any; forgets the ones gone.
    fn dispatch(&self, key: ObjectRef<K>, change: (Unread<K>, Origin)) {
        let mut subscribers = self.subscribers();
        subscribers.retain(|subscriber| match subscriber.upgrade() {
            Some(subscriber) => {
                subscriber.push(key.clone(), change.clone());
                true
            }
            None => false,
        });
    }
}

/// Who controls whom: the objects of the cache by the uid of their controller owner.
///
/// Most owners control one object or a few (a Deployment, a CronJob's recent Jobs), so each owner's
/// children are a `Vec`, not a set: a set allocates room for several entries even for one, and the
/// index is one entry per object of the cache. An owner's uid is held once, shared by both maps.
struct OwnerIndex<K: Resource<DynamicType = ()> + 'static> {
    children: HashMap<Arc<str>, Vec<ObjectRef<K>>>,
    owner_of: HashMap<ObjectRef<K>, Arc<str>>,
}

impl<K: Resource<DynamicType = ()>> Default for OwnerIndex<K> {
    fn default() -> Self {
        OwnerIndex {
            children: HashMap::new(),
            owner_of: HashMap::new(),
        }
    }
}

impl<K: Resource<DynamicType = ()>> OwnerIndex<K> {
    /// Records that `key` is controlled by the owner of uid `controller`, or by none.
    fn insert(&mut self, key: &ObjectRef<K>, controller: Option<&str>) {
        // Most changes of an object leave its controller as it was: nothing to do.
        if self.owner_of.get(key).map(|uid| &**uid) == controller {
            return;
        }
        self.remove(key);
        if let Some(uid) = controller {
            let uid = match self.children.get_key_value(uid) {
                Some((uid, _)) => uid.clone(),
                None => Arc::from(uid),
            };
            self.children
                .entry(uid.clone())
                .or_default()
                .push(key.clone());
            self.owner_of.insert(key.clone(), uid);
        }
    }

    /// Forgets `key`. A scan of its owner's children: short for all but owners of thousands.
    fn remove(&mut self, key: &ObjectRef<K>) {
        let Some(uid) = self.owner_of.remove(key) else {
            return;
        };
        if let Some(children) = self.children.get_mut(&uid) {
            if let Some(at) = children.iter().position(|child| child == key) {
                children.swap_remove(at);
            }
            if children.is_empty() {
                self.children.remove(&uid);
            }
        }
    }

    /// Starts over with these objects, each by the uid of its controller owner. The map of owners
    /// is sized at once for the objects that have one: grown entry by entry, it would hold its old
    /// table and one twice the size at every doubling. (How many owners they have is not known
    /// before: one may control thousands.)
    fn rebuild<'a>(
        &mut self,
        objects: impl IntoIterator<Item = (&'a ObjectRef<K>, Option<&'a str>)>,
    ) {
        let controlled: Vec<(&ObjectRef<K>, &str)> = objects
            .into_iter()
            .filter_map(|(key, controller)| Some((key, controller?)))
            .collect();
        *self = OwnerIndex {
            children: HashMap::new(),
            owner_of: HashMap::with_capacity(controlled.len()),
        };
        for (key, controller) in controlled {
            self.insert(key, Some(controller));
        }
    }
}

/// The caches a manager has started, one per kind, scope and selector.
#[derive(Default)]
pub(crate) struct Caches {
    started: Mutex<HashMap<CacheKey, Box<dyn Any + Send + Sync>>>,
}

/// What makes two caches the same: the kind, the `Api`'s scope (its URL) and the selectors.
#[derive(Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    kind: TypeId,
    url: String,
    labels: Option<String>,
    fields: Option<String>,
    /// How the cache is sharded ([`crate::shard::ShardKey::label`]), if it is.
    shard: Option<&'static str>,
    /// Whether it keeps its objects packed: a packed and a typed cache of one watch are two.
    packed: bool,
}

impl Caches {
    /// The cache of `api` with `config`, keeping its objects as `storage` says: the one started
    /// before for the same kind, scope, selectors and storage, else a new one.
    pub(crate) fn get_or_start<K>(
        &self,
        host: &Host,
        api: Api<K>,
        config: watcher::Config,
        storage: Storage<K>,
    ) -> Cache<K>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    {
        let key = CacheKey {
            kind: TypeId::of::<K>(),
            url: api.resource_url().to_string(),
            labels: config.label_selector.clone(),
            fields: config.field_selector.clone(),
            shard: None,
            packed: storage.is_packed(),
        };
        // Inserting into a map cannot leave it inconsistent: a poisoned lock is still usable.
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cache) = started
            .get(&key)
            .and_then(|cache| cache.downcast_ref::<Cache<K>>())
        {
            return cache.clone();
        }
        let cache = Cache::start(host, api, config, storage);
        started.insert(key, Box::new(cache.clone()));
        cache
    }

    /// The cache of `api` with `config` holding the objects of `shard`'s ranges (placed by `key`),
    /// as `storage` says: the one started before for the same kind, scope, selectors, key and
    /// storage, else a new one.
    pub(crate) fn get_or_start_sharded<K>(
        &self,
        host: &Host,
        api: Api<K>,
        config: watcher::Config,
        shard: &Shard,
        key: ShardKey,
        storage: Storage<K>,
    ) -> Cache<K>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
        K::Scope: crate::scope::WatchScope,
    {
        let cache_key = CacheKey {
            kind: TypeId::of::<K>(),
            url: api.resource_url().to_string(),
            labels: config.label_selector.clone(),
            fields: config.field_selector.clone(),
            shard: Some(key.label()),
            packed: storage.is_packed(),
        };
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cache) = started
            .get(&cache_key)
            .and_then(|cache| cache.downcast_ref::<Cache<K>>())
        {
            return cache.clone();
        }
        let cache = Cache::sharded_in(host, api, config, shard, key, storage);
        started.insert(cache_key, Box::new(cache.clone()));
        cache
    }

    /// With `shard`, the cache of its part of `api`'s objects (placed by `key`); without, the cache
    /// of them all; either keeping them as `storage` says.
    pub(crate) fn get_or_start_for<K>(
        &self,
        host: &Host,
        api: Api<K>,
        config: watcher::Config,
        shard: Option<&Shard>,
        key: ShardKey,
        storage: Storage<K>,
    ) -> Cache<K>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
        K::Scope: crate::scope::WatchScope,
    {
        match shard {
            Some(shard) => self.get_or_start_sharded(host, api, config, shard, key, storage),
            None => self.get_or_start(host, api, config, storage),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    fn child(name: &str, controller_uid: Option<&str>) -> ConfigMap {
        let owner = controller_uid.map(|uid| OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: uid.into(),
            controller: Some(true),
            ..Default::default()
        });
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                owner_references: owner.map(|owner| vec![owner]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn children(index: &OwnerIndex<ConfigMap>, uid: &str) -> Vec<String> {
        let mut names: Vec<String> = index
            .children
            .get(uid)
            .into_iter()
            .flatten()
            .map(|key| key.name.clone())
            .collect();
        names.sort();
        names
    }

    /// Watch events sent by a test.
    type Events =
        tokio::sync::mpsc::UnboundedSender<Result<watcher::Event<ConfigMap>, watcher::Error>>;

    /// A cache of ConfigMaps filled from the events the test sends, and its `cache_incomplete` gauge.
    fn filled_by_hand() -> (Cache<ConfigMap>, Events, Gauge) {
        let (objects, writer) = Objects::<ConfigMap>::new(Storage::Typed);
        let shared = Arc::new(Shared::new(objects, None));
        let cache = Cache {
            shared: shared.clone(),
        };
        let (send, receive) = tokio::sync::mpsc::unbounded_channel();
        let events = futures::stream::unfold(receive, |mut receive| async move {
            let event = receive.recv().await?;
            Some((event, receive))
        });
        let gauge = Gauge::default();
        let synced = Synced::new(|| {});
        let stall = Stalls::default().reporter("ConfigMap");
        tokio::spawn(fill(
            events,
            writer,
            shared,
            synced,
            None,
            gauge.clone(),
            stall,
        ));
        (cache, send, gauge)
    }

    /// A reconcile woken by the end of a list (the cache turning complete) reads the children of
    /// an owner at once: the owner index must hold that list by then. Many objects make the
    /// window between the two long enough to see, on the multi-threaded runtime.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cache_turns_complete_only_once_its_owner_index_holds_the_list() {
        let (cache, send, gauge) = filled_by_hand();
        let mut owner = child("owner", None);
        owner.metadata.uid = Some("1".into());

        // Readers waiting for completeness, as controllers' admissions do. (Of several woken at
        // once, tokio lets the other worker thread take all but the last: they run meanwhile.)
        let readers: Vec<_> = (0..8)
            .map(|_| {
                let (cache, owner) = (cache.clone(), owner.clone());
                let completeness = cache.completeness();
                tokio::spawn(async move {
                    completeness.wait().await;
                    cache.children_of(&owner).len()
                })
            })
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        send.send(Ok(watcher::Event::Init)).unwrap();
        for n in 0..30_000 {
            let owner = if n == 0 { Some("1") } else { Some("2") };
            send.send(Ok(watcher::Event::InitApply(child(
                &format!("c{n}"),
                owner,
            ))))
            .unwrap();
        }
        send.send(Ok(watcher::Event::InitDone)).unwrap();
        for reader in readers {
            let seen = reader.await.unwrap();
            assert_eq!(
                seen, 1,
                "a reader woken by completeness saw {seen} children, not the 1 listed"
            );
        }
        assert_eq!(
            gauge.get(),
            0,
            "a complete cache counts as incomplete no more"
        );
    }

    /// From a 410 Gone on, the cache is known to miss events: incomplete until the relist ends,
    /// not only once it begins (after the watcher's backoff).
    #[tokio::test]
    async fn a_cache_is_incomplete_from_a_410_to_the_end_of_the_relist() {
        let (cache, send, gauge) = filled_by_hand();
        let settle = || tokio::time::sleep(std::time::Duration::from_millis(20));
        for event in [watcher::Event::Init, watcher::Event::InitDone] {
            send.send(Ok(event)).unwrap();
        }
        settle().await;
        assert!(cache.completeness().is_complete() && gauge.get() == 0);

        let gone =
            kube::core::Status::failure("too old resource version", "Expired").with_code(410);
        send.send(Err(watcher::Error::WatchError(Box::new(gone))))
            .unwrap();
        settle().await;
        assert!(
            !cache.completeness().is_complete(),
            "complete right after a 410"
        );
        assert_eq!(gauge.get(), 1);
        send.send(Ok(watcher::Event::Init)).unwrap();
        settle().await;
        assert_eq!(gauge.get(), 1, "counted once while relisting");
        send.send(Ok(watcher::Event::InitDone)).unwrap();
        settle().await;
        assert!(cache.completeness().is_complete() && gauge.get() == 0);
    }

    #[test]
    fn the_owner_index_follows_changes_of_controller() {
        let mut index = OwnerIndex::default();
        let a = child("a", Some("1"));
        let b = child("b", Some("1"));
        let controller = |object: &ConfigMap| controller_of(object).map(|o| o.uid.clone());
        let insert = |index: &mut OwnerIndex<ConfigMap>, object: &ConfigMap| {
            index.insert(&ObjectRef::from_obj(object), controller(object).as_deref());
        };
        insert(&mut index, &a);
        insert(&mut index, &b);
        assert_eq!(children(&index, "1"), ["a", "b"]);
        // A change that keeps the controller (most changes) lists the child once still.
        insert(&mut index, &a);
        assert_eq!(children(&index, "1"), ["a", "b"]);

        // `b` changes hands, then loses its controller; `a` goes.
        let b_moved = child("b", Some("2"));
        insert(&mut index, &b_moved);
        assert_eq!(children(&index, "1"), ["a"]);
        assert_eq!(children(&index, "2"), ["b"]);
        let b_free = child("b", None);
        insert(&mut index, &b_free);
        index.remove(&ObjectRef::from_obj(&a));
        assert!(index.children.is_empty() && index.owner_of.is_empty());

        index.rebuild([(&ObjectRef::from_obj(&child("c", None)), Some("3"))]);
        assert_eq!(children(&index, "3"), ["c"]);
    }

    #[test]
    fn the_last_applied_copy_is_dropped_and_other_annotations_kept() {
        let mut object = child("a", None);
        let annotations = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        object.metadata.annotations = annotations(&[(LAST_APPLIED, "{}"), ("team", "blue")]);
        trim(&mut object, "us");
        assert_eq!(
            object.metadata.annotations,
            annotations(&[("team", "blue")])
        );
        object.metadata.annotations = annotations(&[(LAST_APPLIED, "{}")]);
        trim(&mut object, "us");
        assert_eq!(object.metadata.annotations, None);
    }

    #[test]
    fn only_the_managers_own_apply_entries_are_kept() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let entry =
            |manager: &str, operation: &str, subresource: Option<&str>| ManagedFieldsEntry {
                manager: Some(manager.into()),
                operation: Some(operation.into()),
                subresource: subresource.map(String::from),
                ..Default::default()
            };
        let mut object = child("a", None);
        object.metadata.managed_fields = Some(vec![
            entry("kubectl", "Apply", None),
            entry("us", "Update", None),
            entry("us", "Apply", Some("status")),
            entry("us", "Apply", Some("scale")),
            entry("us", "Apply", None),
        ]);
        object.metadata.managed_fields.as_mut().unwrap()[4].fields_v1 =
            Some(FieldsV1(serde_json::json!({"f:data": {"f:a": {}}})));
        trim(&mut object, "us");
        let kept = object.metadata.managed_fields.unwrap();
        let mut expected = entry("us", "Apply", None);
        expected.fields_v1 = Some(FieldsV1(r#"{"f:data":{"f:a":{}}}"#.into()));
        assert_eq!(kept, [entry("us", "Apply", Some("status")), expected]);
    }
}
