//! A cache of the objects a manager creates, and who controls them.
//!
//! [`Owned<K>`] watches the objects of kind `K` that carry the label
//! `app.kubernetes.io/managed-by=<manager name>` ([`MANAGED_BY_LABEL`]): only those, so the manager does
//! not cache every Deployment (say) of the cluster. A controller that creates such objects labels them,
//! reads them with [`Owned::get`] (no API call once cached) and passes the `Owned` to
//! [`Builder::owns`](crate::controller::Builder::owns), so that a change to one reconciles its owner.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::{WatchStreamExt, reflector::store::Writer};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tracing::warn;

use crate::manager::{Manager, WatchScope};

/// The label that marks the objects a manager creates; its value is the manager's name.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// The objects of kind `K` labelled as created by this manager, cached from one watch (managed fields
/// dropped: they are large and rarely read). Made by [`Manager::owned`]; cheap to clone, clones share
/// the cache.
///
/// The manager is not ready (`/readyz`) until the cache holds the first full list.
pub struct Owned<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    inner: Arc<Inner<K>>,
}

struct Inner<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    client: kube::Client,
    store: Store<K>,
    subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<K>>>>,
}

impl<K> Clone for Owned<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn clone(&self) -> Self {
        Owned {
            inner: self.inner.clone(),
        }
    }
}

impl<K> Debug for Owned<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owned")
            .field("cached", &self.inner.store.len())
            .finish_non_exhaustive()
    }
}

impl<K> Owned<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::Scope: WatchScope,
{
    /// Starts the watch in the background (until the manager shuts down). Use [`Manager::owned`].
    pub(crate) fn start(manager: &Manager) -> Self {
        let selector = format!("{MANAGED_BY_LABEL}={}", manager.name());
        let config = watcher::Config::default().labels(&selector);
        let api = manager.api::<K>();
        let writer = Writer::<K>::default();
        let store = writer.as_reader();
        let subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<K>>>> = Arc::default();
        let synced = manager.expect_cache();
        let events = watcher(api, config)
            .default_backoff()
            .modify(|object| object.managed_fields_mut().clear())
            .reflect(writer);
        let fan_out = subscribers.clone();
        let kind = K::kind(&()).to_string();
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
                let touched = match event {
                    watcher::Event::Apply(object)
                    | watcher::Event::InitApply(object)
                    | watcher::Event::Delete(object) => object,
                    watcher::Event::InitDone => {
                        if let Some(synced) = synced.take() {
                            synced.done();
                        }
                        continue;
                    }
                    watcher::Event::Init => continue,
                };
                let mut subscribers = fan_out.lock().unwrap_or_else(|e| e.into_inner());
                subscribers.retain(|subscriber| subscriber.send(touched.clone()).is_ok());
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
            inner: Arc::new(Inner {
                client: manager.client(),
                store,
                subscribers,
            }),
        }
    }
}

impl<K> Owned<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    /// A stream of every object the watch sees change or go, from now on: what a controller's
    /// `owns_stream` takes.
    pub(crate) fn subscribe(&self) -> impl Stream<Item = K> + Send + 'static {
        let (sender, mut receiver) = mpsc::unbounded_channel();
        self.inner
            .subscribers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(sender);
        futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
    }

    /// The cache (a reflector store). Empty until the first list arrives.
    pub fn store(&self) -> &Store<K> {
        &self.inner.store
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
        let key = ObjectRef::new(name).within(namespace);
        if let Some(cached) = self.inner.store.get(&key) {
            return Ok(Some(cached));
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
