//! The objects a manager creates, and who controls them.
//!
//! A controller labels what it creates `app.kubernetes.io/managed-by=<manager name>`
//! ([`MANAGED_BY_LABEL`]) and reads it back from [`Manager::owned`](crate::Manager::owned): a shared [`Cache`] of the objects
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

use kube::Client;

use crate::cache::Cache;
pub use crate::ownership::{controlled_by, controller_of};

/// The label that marks the objects a manager creates; its value is the manager's name.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// The objects of kind `K` labelled as created by this manager: a [`Cache`] (it dereferences to one:
/// `get`, `list`, `children_of`, ...), shared by every user of the manager. Made by
/// [`Manager::owned`](crate::Manager::owned); cheap to clone.
pub struct Owned<K>
where
    K: Resource<DynamicType = ()> + 'static,
{
    objects: Cache<K>,
    /// The metadata of the objects of kind `K` not labelled as ours, when asked for.
    others: Option<Cache<PartialObjectMeta<K>>>,
    client: Client,
    /// The manager's name: the value of [`MANAGED_BY_LABEL`] on the objects it creates.
    manager: String,
    /// Starts (or joins) the manager's cache of the metadata `config` selects.
    metadata_cache: MetadataCache<K>,
}

type MetadataCache<K> = Arc<dyn Fn(watcher::Config) -> Cache<PartialObjectMeta<K>> + Send + Sync>;

impl<K: Resource<DynamicType = ()>> Clone for Owned<K> {
    fn clone(&self) -> Self {
        Owned {
            objects: self.objects.clone(),
            others: self.others.clone(),
            client: self.client.clone(),
            manager: self.manager.clone(),
            metadata_cache: self.metadata_cache.clone(),
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
{
    /// The objects of `objects` (the manager's cache of its own objects of `K`). Use
    /// [`Manager::owned`](crate::Manager::owned).
    pub(crate) fn new(
        objects: Cache<K>,
        client: Client,
        manager: &str,
        metadata_cache: impl Fn(watcher::Config) -> Cache<PartialObjectMeta<K>> + Send + Sync + 'static,
    ) -> Self {
        Owned {
            objects,
            others: None,
            client,
            manager: manager.to_string(),
            metadata_cache: Arc::new(metadata_cache),
        }
    }

    /// Also keeps the names (the metadata) of the objects of kind `K` that are not ours, from a second
    /// watch, shared like the first: then [`Owned::find`] knows a free name without an API call.
    /// Worth it when a reconcile looks for an object that usually does not exist yet.
    pub fn with_other_names(mut self) -> Self {
        // `!=` also selects the objects without the label.
        let others = format!("{MANAGED_BY_LABEL}!={}", self.manager);
        let config = watcher::Config::default().labels(&others);
        self.others = Some((self.metadata_cache)(config));
        self
    }
}

/// The label selector of the objects `manager` creates.
pub(crate) fn ours(manager: &str) -> String {
    format!("{MANAGED_BY_LABEL}={manager}")
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
        let api = Api::<K>::namespaced(self.client.clone(), namespace);
        Ok(api.get_opt(name).await?.map(Arc::new))
    }
}
