//! A cache of the objects a manager creates, and who controls them.
//!
//! [`Owned<K>`] watches the objects of kind `K` that carry the label
//! `app.kubernetes.io/managed-by=<manager name>` ([`MANAGED_BY_LABEL`]): only those, so the manager does
//! not cache every Deployment (say) of the cluster. A controller that creates such objects labels them,
//! reads them with [`Owned::get`] (no API call once cached) and passes the `Owned` to
//! [`Builder::owns`](crate::controller::Builder::owns), so that a change to one reconciles its owner.

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
/// Each object is kept as compact JSON without its managed fields (large, and rarely read), and
/// decoded when read: a Deployment takes about a third of the memory its Rust value would. What a
/// change notifies the controller with is the object's metadata alone.
///
/// The manager is not ready (`/readyz`) until the cache holds the first full list.
pub struct Owned<K> {
    inner: Arc<Inner>,
    kind: PhantomData<fn() -> K>,
}

struct Inner {
    client: kube::Client,
    cache: RwLock<Cache>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<ObjectMeta>>>,
}

type ObjectMeta = kube::api::ObjectMeta;

/// Objects by (namespace, name), as JSON.
type Objects = HashMap<(Option<String>, String), Box<[u8]>>;

#[derive(Default)]
struct Cache {
    objects: Objects,
    /// A new full list being received (after a start or an expired watch): it replaces `objects`
    /// when complete, so reads see the previous list until then.
    relisting: Option<Objects>,
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
        self.inner.cache().objects.len()
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

fn key_of<K: Resource>(object: &K) -> (Option<String>, String) {
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
        let selector = format!("{MANAGED_BY_LABEL}={}", manager.name());
        let config = watcher::Config::default().labels(&selector);
        let api = manager.api::<K>();
        let inner = Arc::new(Inner {
            client: manager.client(),
            cache: RwLock::default(),
            subscribers: Mutex::default(),
        });
        let synced = manager.expect_cache();
        let events = watcher(api, config).default_backoff();
        let kind = K::kind(&()).to_string();
        let cache = inner.clone();
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
                if matches!(event, watcher::Event::InitDone)
                    && let Some(synced) = synced.take()
                {
                    synced.done();
                }
                if let Some(changed) = cache.apply(event) {
                    cache.notify(changed);
                }
            }
        };
        let stop = manager.shutdown_signal();
        tokio::spawn(async move {
            tokio::select! {
                () = watching => {}
                () = stop => {}
            }
        });
        Owned {
            inner,
            kind: PhantomData,
        }
    }
}

impl Inner {
    fn cache(&self) -> std::sync::RwLockReadGuard<'_, Cache> {
        self.cache.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one watch event in the cache; returns who the object it touched is and who owns it.
    fn apply<K: Resource + Serialize>(&self, event: watcher::Event<K>) -> Option<ObjectMeta> {
        let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
        let encode = |object: &mut K| {
            object.managed_fields_mut().clear();
            // Serializing a typed Kubernetes object cannot fail; should it, the object is not cached
            // and the next read asks the API server.
            serde_json::to_vec(&*object).ok().map(Vec::into_boxed_slice)
        };
        match event {
            watcher::Event::Init => {
                cache.relisting = Some(Objects::new());
                None
            }
            watcher::Event::InitApply(mut object) => {
                let json = encode(&mut object);
                let relisting = cache.relisting.get_or_insert_default();
                if let Some(json) = json {
                    relisting.insert(key_of(&object), json);
                }
                Some(identity(&object))
            }
            watcher::Event::InitDone => {
                if let Some(objects) = cache.relisting.take() {
                    cache.objects = objects;
                }
                None
            }
            watcher::Event::Apply(mut object) => {
                match encode(&mut object) {
                    Some(json) => cache.objects.insert(key_of(&object), json),
                    None => cache.objects.remove(&key_of(&object)),
                };
                Some(identity(&object))
            }
            watcher::Event::Delete(object) => {
                cache.objects.remove(&key_of(&object));
                Some(identity(&object))
            }
        }
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
        let cache = self.inner.cache();
        let json = cache.objects.get(&key)?;
        match serde_json::from_slice(json) {
            Ok(object) => Some(object),
            Err(error) => {
                warn!(name, %error, "a cached object does not decode; reading it from the API");
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
    /// The object `namespace/name`: from the cache, else (not created yet, created an instant ago, not
    /// labelled, or the cache is still filling) by a GET. `None` if it does not exist.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<K>>, kube::Error> {
        if let Some(cached) = self.cached(Some(namespace), name) {
            return Ok(Some(Arc::new(cached)));
        }
        let api = Api::<K>::namespaced(self.inner.client.clone(), namespace);
        Ok(api.get_opt(name).await?.map(Arc::new))
    }
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
