//! The objects a manager's controllers own, and who controls them.
//!
//! [`Manager::owned`](crate::Manager::owned) is the cache of the kind a controller creates: every
//! object of kind `K` the manager watches, as controller-runtime's `Owns` caches them. A child
//! counts by its controller reference alone, whoever made it: a controller's own apply, someone by
//! hand, or an earlier version of the operator that did not label what it made. Passed to
//! [`Builder::owns`](crate::controller::Builder::owns), a change to one of them reconciles its
//! owner; [`Cache::children_of`] finds them.
//!
//! [`Manager::owned_labelled`](crate::Manager::owned_labelled) is the memory-saving choice: only
//! the objects labelled `app.kubernetes.io/managed-by=<manager name>` ([`MANAGED_BY_LABEL`]), which
//! the API server selects, so the manager neither receives nor keeps the others. Pick it when the
//! cluster holds many objects of the kind that are not the operator's (the Deployments of every
//! other workload, say); the price is that a child without the label is invisible: not among its
//! owner's children, never reconciled for, repaired or pruned, until something labels it.
//!
//! Whether a name is free is one question a labelled cache cannot answer: an object someone else
//! made has no label of ours. [`Owned::find`] asks the API server then, unless
//! [`Owned::with_other_names`] keeps the names of the others too (a watch of their metadata). The
//! default cache holds every name already, and answers from memory.
//!
//! ```no_run
//! # use k8s_openapi::api::apps::v1::Deployment;
//! # async fn f(manager: rustbuilder_runtime::Manager) -> Result<(), kube::Error> {
//! use rustbuilder_runtime::owned::{self, MANAGED_BY_LABEL};
//!
//! let deployments = manager.owned::<Deployment>();
//! // From the cache, ours or not: no API call.
//! if let Some(deployment) = deployments.find("default", "web").await? {
//!     let labelled = deployment.metadata.labels.as_ref().is_some_and(|l| l.contains_key(MANAGED_BY_LABEL));
//!     println!("labelled: {labelled}, controlled by: {:?}", owned::controller_of(&*deployment).map(|o| &o.name));
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

/// The objects of kind `K` a manager's controllers own: a [`Cache`] (it dereferences to one: `get`,
/// `list`, `children_of`, ...), shared by every user of the manager. Made by
/// [`Manager::owned`](crate::Manager::owned) (every object of the kind) or
/// [`Manager::owned_labelled`](crate::Manager::owned_labelled) (only those labelled as the
/// manager's); cheap to clone.
pub struct Owned<K>
where
    K: Resource<DynamicType = ()> + 'static,
{
    objects: Cache<K>,
    /// Which objects `objects` holds.
    holds: Holds,
    /// The metadata of the objects of kind `K` that `objects` does not hold, when asked for.
    others: Option<Cache<PartialObjectMeta<K>>>,
    client: Client,
    /// The manager's name: the value of [`MANAGED_BY_LABEL`] on the objects it creates.
    manager: String,
    /// Starts (or joins) the manager's cache of the metadata `config` selects.
    metadata_cache: MetadataCache<K>,
}

/// Which objects of its kind an [`Owned`] cache holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holds {
    /// Every one the manager watches.
    Every,
    /// Every one labelled as the manager's.
    Labelled,
    /// This replica's part (`--sharding`): the children of its objects, placed by their owner, and
    /// a share of the objects nobody controls.
    Shard,
    /// This replica's part of those labelled as the manager's.
    LabelledShard,
}

type MetadataCache<K> = Arc<dyn Fn(watcher::Config) -> Cache<PartialObjectMeta<K>> + Send + Sync>;

impl<K: Resource<DynamicType = ()>> Clone for Owned<K> {
    fn clone(&self) -> Self {
        Owned {
            objects: self.objects.clone(),
            holds: self.holds,
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
            .field("holds", &self.holds)
            .field("other_names", &self.others.as_ref().map(Cache::len))
            .finish_non_exhaustive()
    }
}

impl<K> Owned<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    /// The objects of `objects` (the manager's cache of `K`, holding what `holds` says). Use
    /// [`Manager::owned`](crate::Manager::owned).
    pub(crate) fn new(
        objects: Cache<K>,
        holds: Holds,
        client: Client,
        manager: &str,
        metadata_cache: impl Fn(watcher::Config) -> Cache<PartialObjectMeta<K>> + Send + Sync + 'static,
    ) -> Self {
        Owned {
            objects,
            holds,
            others: None,
            client,
            manager: manager.to_string(),
            metadata_cache: Arc::new(metadata_cache),
        }
    }

    /// Also keeps the names (the metadata) of the objects of kind `K` this cache does not hold, from
    /// a second watch, shared like the first: then [`Owned::find`] knows a free name without an API
    /// call. Worth it when a reconcile looks for an object that usually does not exist yet.
    ///
    /// Nothing to add for [`Manager::owned`](crate::Manager::owned), which holds every name
    /// already: this returns it as it is. For a labelled cache the second watch holds the objects
    /// without the label; for a replica's part (`--sharding`) it holds the names of every object of
    /// the kind, since those of the other replicas' parts can be taken too.
    pub fn with_other_names(mut self) -> Self {
        let config = match self.holds {
            Holds::Every => return self,
            // `!=` also selects the objects without the label.
            Holds::Labelled => {
                let others = format!("{MANAGED_BY_LABEL}!={}", self.manager);
                watcher::Config::default().labels(&others)
            }
            Holds::Shard | Holds::LabelledShard => watcher::Config::default(),
        };
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
    /// The object `namespace/name`, whoever made it: from the cache; else `None` without an API
    /// call when the cache holds every name (the default, unsharded) or [`Owned::with_other_names`]
    /// knows no other object of that name; else by a GET (someone else's object may have that
    /// name, or a watch is listing, the first time or again). Like any cache it can be an instant
    /// behind: an object created a moment ago reads as absent until its watch event arrives
    /// (applying one of ours again is harmless).
    pub async fn find(&self, namespace: &str, name: &str) -> Result<Option<Arc<K>>, kube::Error> {
        if let Some(cached) = self.objects.get(Some(namespace), name) {
            return Ok(Some(cached));
        }
        let others_know = |others: &Cache<PartialObjectMeta<K>>| {
            others.completeness().is_complete() && others.get(Some(namespace), name).is_none()
        };
        let free = self.objects.completeness().is_complete()
            && match &self.others {
                Some(others) => others_know(others),
                None => self.holds == Holds::Every,
            };
        if free {
            return Ok(None);
        }
        let api = Api::<K>::namespaced(self.client.clone(), namespace);
        Ok(api.get_opt(name).await?.map(Arc::new))
    }
}
