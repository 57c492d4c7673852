//! The objects a manager creates, and who controls them.
//!
//! A controller labels what it creates `app.kubernetes.io/managed-by=<manager name>`
//! ([`MANAGED_BY_LABEL`]) and reads it back from [`Manager::owned`]: a shared [`Cache`] of the objects
//! of kind `K` with that label, and only those, so the manager does not cache every Deployment (say)
//! of the cluster. Passed to [`Builder::owns`](crate::controller::Builder::owns), a change to one of
//! them reconciles its owner.
//!
//! Whether a name is free is the one question such a cache cannot answer: an object someone else
//! made has no label of ours. [`Owned::find`] asks the API server then, unless
//! [`Owned::with_other_names`] keeps the names of the others too (a watch of their metadata), so
//! that a free name costs no API call.
//!
//! ```no_run
//! # use k8s_openapi::api::apps::v1::Deployment;
//! # async fn f(manager: rustbuilder_runtime::Manager) -> Result<(), kube::Error> {
//! use rustbuilder_runtime::owned::{self, MANAGED_BY_LABEL};
//!
//! let deployments = manager.owned::<Deployment>().with_other_names();
//! // From the cache: a GET only for a name someone else's Deployment holds.
//! if let Some(deployment) = deployments.find("default", "web").await? {
//!     let ours = deployment.metadata.labels.as_ref().is_some_and(|l| l.contains_key(MANAGED_BY_LABEL));
//!     println!("ours: {ours}, controlled by: {:?}", owned::controller_of(&*deployment).map(|o| &o.name));
//! }
//! # Ok(())
//! # }
//! ```

use std::fmt::{self, Debug};
use std::ops::Deref;
use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;

use crate::cache::Cache;
use crate::manager::Manager;
pub use crate::ownership::{controlled_by, controller_of};
use crate::scope::WatchScope;
use crate::shard::ShardKey;

/// The label that marks the objects a manager creates; its value is the manager's name.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// The objects of kind `K` labelled as created by this manager: a [`Cache`] (it dereferences to one:
/// `get`, `list`, `children_of`, ...), shared by every user of the manager. Made by
/// [`Manager::owned`]; cheap to clone.
pub struct Owned<K>
where
    K: Resource<DynamicType = ()> + 'static,
{
    objects: Cache<K>,
    /// The metadata of the objects of kind `K` not labelled as ours, when asked for.
    others: Option<Cache<PartialObjectMeta<K>>>,
    manager: Manager,
}

impl<K: Resource<DynamicType = ()>> Clone for Owned<K> {
    fn clone(&self) -> Self {
        Owned {
            objects: self.objects.clone(),
            others: self.others.clone(),
            manager: self.manager.clone(),
        }
    }
}

impl<K> Deref for Owned<K>
where
    K: Resource<DynamicType = ()> + 'static,
{
    type Target = Cache<K>;

    fn deref(&self) -> &Cache<K> {
        &self.objects
    }
}

impl<K> Debug for Owned<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owned")
            .field("objects", &self.objects)
            .field("other_names", &self.others.as_ref().map(Cache::len))
            .finish_non_exhaustive()
    }
}

impl<K> Owned<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::Scope: WatchScope,
{
    /// Starts (or joins) the cache of `manager`'s objects of `K`. Use [`Manager::owned`].
    pub(crate) fn start(manager: &Manager) -> Self {
        let config = watcher::Config::default().labels(&ours(manager));
        Owned {
            // With `--sharding`, only the children of this replica's objects: the manager's `apply`
            // labels each with its owner's bucket, and the API server selects by it.
            objects: manager.cache_of_shard(manager.api::<K>(), config, ShardKey::OwnerBucket),
            others: None,
            manager: manager.clone(),
        }
    }

    /// Also keeps the names (the metadata) of the objects of kind `K` that are not ours, from a second
    /// watch, shared like the first: then [`Owned::find`] knows a free name without an API call.
    /// Worth it when a reconcile looks for an object that usually does not exist yet.
    pub fn with_other_names(mut self) -> Self {
        // `!=` also selects the objects without the label.
        let others = format!("{MANAGED_BY_LABEL}!={}", self.manager.name());
        let config = watcher::Config::default().labels(&others);
        let api = self.manager.api::<PartialObjectMeta<K>>();
        self.others = Some(self.manager.cache_with(api, config));
        self
    }
}

fn ours(manager: &Manager) -> String {
    format!("{MANAGED_BY_LABEL}={}", manager.name())
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
    /// The object `namespace/name`: from the cache; else `None` without an API call when
    /// [`Owned::with_other_names`] knows no other object of that name; else by a GET (someone
    /// else's object may have that name, or a watch is listing, the first time or again). Like any cache it can be
    /// an instant behind: an object created a moment ago reads as absent until its watch event
    /// arrives (applying one of ours again is harmless).
    pub async fn find(&self, namespace: &str, name: &str) -> Result<Option<Arc<K>>, kube::Error> {
        if let Some(cached) = self.objects.get(Some(namespace), name) {
            return Ok(Some(cached));
        }
        if let Some(others) = &self.others
            && self.objects.completeness().is_complete()
            && others.completeness().is_complete()
            && others.get(Some(namespace), name).is_none()
        {
            return Ok(None);
        }
        let api = Api::<K>::namespaced(self.manager.client(), namespace);
        Ok(api.get_opt(name).await?.map(Arc::new))
    }
}
