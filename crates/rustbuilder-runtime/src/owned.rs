//! A cache of the objects a manager creates, and who controls them.
//!
//! [`Owned<K>`] watches the objects of kind `K` that carry the label
//! `app.kubernetes.io/managed-by=<manager name>` ([`MANAGED_BY_LABEL`]): only those, so the manager does
//! not cache every Deployment (say) of the cluster. A controller that creates such objects labels them,
//! reads them with [`Owned::get`] (no API call once cached) and passes the `Owned` to
//! [`Builder::owns`](crate::controller::Builder::owns), so that a change to one reconciles its owner.
//!
//! A second watch, of metadata only, keeps the names of the other objects of kind `K` (not labelled
//! as ours): so [`Owned::get`] knows, without asking the API server, that a name is free, and still
//! finds an object of that name that someone else made.

use std::collections::HashMap;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, RwLock};

use futures::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tracing::warn;

use crate::manager::{Manager, WatchScope};

/// The label that marks the objects a manager creates; its value is the manager's name.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// The objects of kind `K` labelled as created by this manager, cached from one watch. Made by
/// [`Manager::owned`]; cheap to clone, clones share the cache.
///
/// Each object is kept as compact JSON, compressed, and decoded when read: a Deployment takes about a
/// fifth of the memory its Rust value would. Of its managed fields (large: a tree of every field each
/// writer set) only this manager's own apply entry is kept, which [`apply`](crate::apply) reads to
/// tell what an apply would change (for the Deployment of rustbuilder's deploy-image controller, 1.3 KB
/// compressed instead of 1.0). What a change notifies the controller with is the object's
/// metadata alone.
///
/// Of the other objects of kind `K` only the namespace and name are kept. The manager is not ready
/// (`/readyz`) until both watches hold their first full list.
pub struct Owned<K> {
    inner: Arc<Inner>,
    kind: PhantomData<fn() -> K>,
}

struct Inner {
    client: kube::Client,
    /// The manager's name: the field manager whose `managedFields` entry each object keeps.
    manager: String,
    cache: RwLock<Cache>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<ObjectMeta>>>,
}

type ObjectMeta = kube::api::ObjectMeta;

/// An object's namespace (`None` for a cluster-scoped kind) and name.
type Key = (Option<String>, String);

/// What one watch holds, by key.
struct Listing<V> {
    objects: HashMap<Key, V>,
    /// A new full list being received (after a start or an expired watch): it replaces `objects`
    /// when complete, so reads see the previous list until then.
    relisting: Option<HashMap<Key, V>>,
    /// A full list has been received at least once.
    listed: bool,
}

impl<V> Default for Listing<V> {
    fn default() -> Self {
        Listing {
            objects: HashMap::new(),
            relisting: None,
            listed: false,
        }
    }
}

impl<V> Listing<V> {
    /// Records one watch event, with the value the object is kept as (`None`: not kept).
    fn record<K: Resource>(
        &mut self,
        event: &watcher::Event<K>,
        value: impl FnOnce() -> Option<V>,
    ) {
        match event {
            watcher::Event::Init => self.relisting = Some(HashMap::new()),
            watcher::Event::InitApply(object) => {
                if let Some(value) = value() {
                    let relisting = self.relisting.get_or_insert_default();
                    relisting.insert(key_of(object), value);
                }
            }
            watcher::Event::InitDone => {
                if let Some(objects) = self.relisting.take() {
                    self.objects = objects;
                }
                self.listed = true;
            }
            watcher::Event::Apply(object) => {
                match value() {
                    Some(value) => self.objects.insert(key_of(object), value),
                    None => self.objects.remove(&key_of(object)),
                };
            }
            watcher::Event::Delete(object) => {
                self.objects.remove(&key_of(object));
            }
        }
    }
}

/// Where a watch event stands in the watch's list-then-watch cycle.
#[derive(Clone, Copy)]
enum Phase {
    ListStart,
    Listed,
    ListDone,
    Watched,
}

impl Phase {
    fn of<K>(event: &watcher::Event<K>) -> Phase {
        match event {
            watcher::Event::Init => Phase::ListStart,
            watcher::Event::InitApply(_) => Phase::Listed,
            watcher::Event::InitDone => Phase::ListDone,
            watcher::Event::Apply(_) | watcher::Event::Delete(_) => Phase::Watched,
        }
    }
}

/// When the objects a watch brings are announced to controllers. A (re)list becomes what the cache
/// reads only once complete (`InitDone`), so its objects are announced then: the reconciles they
/// start read them, not the list before (after a partition, that list can be minutes old). A
/// watched change is announced at once.
#[derive(Default)]
struct Announcements {
    relisted: Vec<ObjectMeta>,
}

impl Announcements {
    /// What to announce after an event of `phase` that touched `changed`.
    fn after(&mut self, phase: Phase, changed: Option<ObjectMeta>) -> Vec<ObjectMeta> {
        match phase {
            // A relist that broke off is started again from the top.
            Phase::ListStart => {
                self.relisted.clear();
                Vec::new()
            }
            Phase::Listed => {
                self.relisted.extend(changed);
                Vec::new()
            }
            Phase::ListDone => std::mem::take(&mut self.relisted),
            Phase::Watched => changed.into_iter().collect(),
        }
    }
}

#[derive(Default)]
struct Cache {
    /// Ours (labelled), as compressed JSON.
    objects: Listing<Box<[u8]>>,
    /// The others (not labelled as ours): their keys only.
    others: Listing<()>,
}

impl<K> Clone for Owned<K> {
    fn clone(&self) -> Self {
        Owned {
            inner: self.inner.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> Owned<K> {
    /// How many objects the cache holds. 0 until the first list arrives.
    pub fn len(&self) -> usize {
        self.inner.cache().objects.objects.len()
    }

    /// Whether the cache holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K> Debug for Owned<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owned")
            .field("cached", &self.len())
            .finish_non_exhaustive()
    }
}

/// The part of an object's metadata a controller maps to its owner: name, namespace, owners.
fn identity<K: Resource>(object: &K) -> ObjectMeta {
    let meta = object.meta();
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        owner_references: meta.owner_references.clone(),
        ..ObjectMeta::default()
    }
}

fn key_of<K: Resource>(object: &K) -> Key {
    (object.namespace(), object.name_any())
}

impl<K> Owned<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::Scope: WatchScope,
{
    /// Starts the watch in the background (until the manager shuts down). Use [`Manager::owned`].
    pub(crate) fn start(manager: &Manager) -> Self {
        let ours = format!("{MANAGED_BY_LABEL}={}", manager.name());
        let others = format!("{MANAGED_BY_LABEL}!={}", manager.name());
        let inner = Arc::new(Inner {
            client: manager.client(),
            manager: manager.name().to_string(),
            cache: RwLock::default(),
            subscribers: Mutex::default(),
        });
        let kind = K::kind(&()).to_string();

        let objects = watcher(manager.api::<K>(), watcher::Config::default().labels(&ours));
        let cache = inner.clone();
        let mut announcements = Announcements::default();
        manager.spawn_watch(&kind, objects.default_backoff(), move |event| {
            let phase = Phase::of(&event);
            let changed = cache.record(event);
            for changed in announcements.after(phase, changed) {
                cache.notify(changed);
            }
        });

        // `!=` also selects the objects without the label.
        let names = watcher(
            manager.api::<PartialObjectMeta<K>>(),
            watcher::Config::default().labels(&others),
        );
        let cache = inner.clone();
        manager.spawn_watch(&kind, names.default_backoff(), move |event| {
            cache.write().others.record(&event, || Some(()));
        });

        Owned {
            inner,
            kind: PhantomData,
        }
    }
}

impl Manager {
    /// Runs a watch in the background until shutdown, handing each event to `record`, and marks the
    /// manager's cache synced at the first full list. Errors are logged; the watch retries them.
    fn spawn_watch<T: Send + 'static>(
        &self,
        kind: &str,
        events: impl Stream<Item = Result<watcher::Event<T>, watcher::Error>> + Send + 'static,
        mut record: impl FnMut(watcher::Event<T>) + Send + 'static,
    ) {
        let synced = self.expect_cache();
        let kind = kind.to_string();
        let watching = async move {
            let mut synced = Some(synced);
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(error) => {
                        warn!(kind, %error, "watch of owned objects failed; retrying");
                        continue;
                    }
                };
                let listed = matches!(event, watcher::Event::InitDone);
                record(event);
                if listed && let Some(synced) = synced.take() {
                    synced.done();
                }
            }
        };
        let stop = self.shutdown_signal();
        tokio::spawn(async move {
            tokio::select! {
                () = watching => {}
                () = stop => {}
            }
        });
    }
}

impl Inner {
    fn cache(&self) -> std::sync::RwLockReadGuard<'_, Cache> {
        self.cache.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Cache> {
        self.cache.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one event of the watch of our objects; returns who the object it touched is and who
    /// owns it.
    fn record<K: Resource + Serialize>(&self, mut event: watcher::Event<K>) -> Option<ObjectMeta> {
        let changed = match &mut event {
            watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                // The fields this manager applied tell `apply` which ones it no longer sets, and
                // how each list it owns merges; the other writers' entries are not needed.
                let manager = self.manager.as_str();
                object.managed_fields_mut().retain(|entry| {
                    entry.manager.as_deref() == Some(manager)
                        && entry.operation.as_deref() == Some("Apply")
                        && entry.subresource.as_deref().is_none_or(str::is_empty)
                });
                Some(identity(&*object))
            }
            watcher::Event::Delete(object) => Some(identity(&*object)),
            watcher::Event::Init | watcher::Event::InitDone => None,
        };
        // Serializing a typed Kubernetes object cannot fail; should it, the object is not cached
        // and the next read asks the API server.
        let encode = |object: &K| serde_json::to_vec(object).ok().map(|json| compress(&json));
        let compressed = match &event {
            watcher::Event::InitApply(object) | watcher::Event::Apply(object) => encode(object),
            _ => None,
        };
        self.write().objects.record(&event, || compressed);
        changed
    }

    fn notify(&self, changed: ObjectMeta) {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subscribers.retain(|subscriber| subscriber.send(changed.clone()).is_ok());
    }
}

impl<K> Owned<K>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Send + 'static,
{
    /// A stream of the metadata of every object the watch sees change or go, from now on: what a
    /// controller's `owns_stream` takes (it needs the owner references only).
    pub(crate) fn subscribe(&self) -> impl Stream<Item = PartialObjectMeta<K>> + Send + 'static {
        let (sender, mut receiver) = mpsc::unbounded_channel();
        self.inner
            .subscribers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(sender);
        futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
            .map(ObjectMeta::into_response_partial::<K>)
    }

    /// The object `name` (in `namespace`, for a namespaced kind) as the cache holds it, without
    /// asking the API server; `None` if the cache has not seen it.
    pub fn cached(&self, namespace: Option<&str>, name: &str) -> Option<K> {
        let key = (namespace.map(str::to_string), name.to_string());
        let json = decompress(self.inner.cache().objects.objects.get(&key)?);
        match json.map(|json| serde_json::from_slice(&json)) {
            Ok(Ok(object)) => Some(object),
            Ok(Err(error)) => {
                warn!(name, %error, "a cached object does not decode; reading it from the API");
                None
            }
            Err(error) => {
                warn!(name, %error, "a cached object does not decompress; reading it from the API");
                None
            }
        }
    }
}

impl<K> Owned<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    /// The object `namespace/name`: from the cache; by a GET when someone else's object (not
    /// labelled as ours) has that name or a watch has not listed yet; else `None`, without an API
    /// call. Like any cache it can be an instant behind: an object created a moment ago reads as
    /// absent until its watch event arrives (applying one of ours again is harmless).
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<K>>, kube::Error> {
        if let Some(cached) = self.cached(Some(namespace), name) {
            return Ok(Some(Arc::new(cached)));
        }
        if self.known_absent(namespace, name) {
            return Ok(None);
        }
        let api = Api::<K>::namespaced(self.inner.client.clone(), namespace);
        Ok(api.get_opt(name).await?.map(Arc::new))
    }

    /// Whether both watches have listed and neither holds `namespace/name`.
    fn known_absent(&self, namespace: &str, name: &str) -> bool {
        let key = (Some(namespace.to_string()), name.to_string());
        let cache = self.inner.cache();
        let (ours, others) = (&cache.objects, &cache.others);
        ours.listed
            && others.listed
            && !ours.objects.contains_key(&key)
            && !others.objects.contains_key(&key)
    }
}

/// An object's JSON as the cache keeps it: LZ4-compressed, which takes about 60 % of the bytes for a
/// Deployment, for microseconds per write and read.
fn compress(json: &[u8]) -> Box<[u8]> {
    lz4_flex::compress_prepend_size(json).into_boxed_slice()
}

fn decompress(compressed: &[u8]) -> Result<Vec<u8>, lz4_flex::block::DecompressError> {
    lz4_flex::decompress_size_prepended(compressed)
}

/// The controller of `child`: its owner reference with `controller: true`, if any.
pub fn controller_of<K: Resource>(child: &K) -> Option<&OwnerReference> {
    child
        .meta()
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|owner| owner.controller == Some(true))
}

/// Whether `owner` controls `child`: `child`'s controller reference names `owner`'s uid. False for an
/// owner without a uid (not read from the API).
pub fn controlled_by<C: Resource, O: Resource>(child: &C, owner: &O) -> bool {
    let uid = owner.meta().uid.as_deref();
    uid.is_some() && controller_of(child).map(|o| o.uid.as_str()) == uid
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn owner_ref(uid: &str, controller: Option<bool>) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: uid.into(),
            controller,
            ..Default::default()
        }
    }

    fn child(owners: Vec<OwnerReference>) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some("child".into()),
                owner_references: Some(owners),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn owner(uid: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("owner".into()),
                uid: uid.map(String::from),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn named(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn names(listing: &Listing<()>) -> Vec<&str> {
        let mut names: Vec<&str> = listing.objects.keys().map(|(_, n)| n.as_str()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_relist_is_announced_once_complete_and_a_watched_change_at_once() {
        let mut announcements = Announcements::default();
        let meta = |name: &str| identity(&named(name));
        let announced = |metas: Vec<ObjectMeta>| -> Vec<String> {
            metas.into_iter().filter_map(|m| m.name).collect()
        };
        assert!(announcements.after(Phase::ListStart, None).is_empty());
        assert!(
            announcements
                .after(Phase::Listed, Some(meta("gone")))
                .is_empty()
        );
        // The list broke off and starts again: what it had brought is not announced.
        assert!(announcements.after(Phase::ListStart, None).is_empty());
        assert!(
            announcements
                .after(Phase::Listed, Some(meta("a")))
                .is_empty()
        );
        assert!(
            announcements
                .after(Phase::Listed, Some(meta("b")))
                .is_empty()
        );
        let done = announcements.after(Phase::ListDone, None);
        assert_eq!(announced(done), ["a", "b"]);
        let watched = announcements.after(Phase::Watched, Some(meta("c")));
        assert_eq!(announced(watched), ["c"]);
        assert!(announcements.after(Phase::ListDone, None).is_empty());
    }

    #[test]
    fn a_listing_swaps_in_a_new_list_only_when_complete() {
        let mut listing = Listing::<()>::default();
        let keep = || Some(());
        listing.record(&watcher::Event::<ConfigMap>::Init, keep);
        listing.record(&watcher::Event::InitApply(named("a")), keep);
        assert!(
            !listing.listed && listing.objects.is_empty(),
            "listed too early"
        );
        listing.record(&watcher::Event::<ConfigMap>::InitDone, keep);
        assert!(listing.listed);
        listing.record(&watcher::Event::Apply(named("b")), keep);
        assert_eq!(names(&listing), ["a", "b"]);

        // A relist (the watch expired) that no longer has `a`: reads see the old list until it ends.
        listing.record(&watcher::Event::<ConfigMap>::Init, keep);
        listing.record(&watcher::Event::InitApply(named("b")), keep);
        assert_eq!(names(&listing), ["a", "b"]);
        listing.record(&watcher::Event::<ConfigMap>::InitDone, keep);
        assert_eq!(names(&listing), ["b"]);

        listing.record(&watcher::Event::Delete(named("b")), keep);
        listing.record(&watcher::Event::Apply(named("c")), || None);
        assert!(listing.objects.is_empty(), "{:?}", names(&listing));
    }

    #[test]
    fn cached_json_is_compressed_and_restored() {
        let deployment = Deployment {
            metadata: ObjectMeta {
                name: Some("memcached-sample".into()),
                labels: Some(
                    [
                        ("app.kubernetes.io/name", "memcached"),
                        ("app.kubernetes.io/instance", "memcached-sample"),
                    ]
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        let json = serde_json::to_vec(&deployment).unwrap();
        let kept = compress(&json);
        assert!(
            kept.len() < json.len(),
            "{} bytes kept for {}",
            kept.len(),
            json.len()
        );
        assert_eq!(decompress(&kept).unwrap(), json);
        assert!(
            decompress(&kept[..kept.len() / 2]).is_err(),
            "a cut block decompressed"
        );
    }

    #[test]
    fn controller_references() {
        let plain = child(vec![owner_ref("1", None), owner_ref("2", Some(false))]);
        assert!(controller_of(&plain).is_none());
        assert!(!controlled_by(&plain, &owner(Some("1"))));

        let controlled = child(vec![owner_ref("1", None), owner_ref("2", Some(true))]);
        assert_eq!(controller_of(&controlled).unwrap().uid, "2");
        assert!(controlled_by(&controlled, &owner(Some("2"))));
        assert!(!controlled_by(&controlled, &owner(Some("1"))));
        assert!(!controlled_by(&controlled, &owner(None)));
        assert!(!controlled_by(&child(vec![]), &owner(None)));
    }
}
