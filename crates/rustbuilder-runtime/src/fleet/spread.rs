//! [`Spread`]: a controller of objects in the operator's own cluster whose children live in the
//! member clusters of a fleet.
//!
//! The owner is read in the *home* cluster (the process manager's); its children are written in
//! the members its spec selects. An owner reference cannot name an object of another cluster, so
//! the children carry their owner's identity in labels and an annotation instead, and the owner
//! carries a finalizer that deletes its children in the members before it goes, with an annotation
//! listing the members that may hold some.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::{self, Debug};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, ListParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::Error as FinalizerError;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{Instrument, debug, info_span, warn};

use super::{Cluster, Fleet, lock};
use crate::cache::Cache;
use crate::manager::Manager;
use crate::owned::MANAGED_BY_LABEL;
use crate::scope::WatchScope;

/// Label on a child: the name of the home cluster its owner lives in, as given to [`Spread::new`].
pub const OWNER_CLUSTER_LABEL: &str = "fleet.rustbuilder.io/owner-cluster";
/// Label on a child: its owner's kind (`kind` alone, without the group).
pub const OWNER_KIND_LABEL: &str = "fleet.rustbuilder.io/owner-kind";
/// Label on a child: its owner's uid in the home cluster.
pub const OWNER_UID_LABEL: &str = "fleet.rustbuilder.io/owner-uid";
/// Annotation on a child: its owner's `namespace/name` (`name` for a cluster-scoped owner).
pub const OWNER_ANNOTATION: &str = "fleet.rustbuilder.io/owner";
/// How the finalizer a [`Spread`] puts on each owner begins; the plural of the children's kind
/// follows (`fleet.rustbuilder.io/member-configmaps`). The owner's annotation of that name lists the
/// members that may hold its children.
pub const SPREAD_PREFIX: &str = "fleet.rustbuilder.io/member-";

/// How long one member may take to answer a reconcile's requests before it counts as unreachable.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(10);
/// How often an unreachable member is asked whether it is back.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Children of kind `C` in the members of a [`Fleet`], kept by owners of kind `O` in the home
/// cluster. Cheap to clone; clones share their state. Give its [`triggers`](Spread::triggers) to
/// the owner's controller and call [`reconcile`](Spread::reconcile) from its reconcile function:
///
/// ```no_run
/// use std::collections::BTreeMap;
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::ResourceExt;
/// use kube::api::ObjectMeta;
/// use kube::runtime::controller::Action;
/// use rustbuilder_runtime::Manager;
/// use rustbuilder_runtime::fleet::{Cluster, Fleet, Spread, SpreadError};
///
/// type Copies = Spread<ConfigMap, ConfigMap>;
///
/// // Copies each ConfigMap of the home cluster into the members its `clusters` key names.
/// async fn reconcile(owner: Arc<ConfigMap>, spread: Arc<Copies>) -> Result<Action, SpreadError> {
///     let data = owner.data.clone().unwrap_or_default();
///     let selected: Vec<String> = data.get("clusters").map(|c| c.split(',').map(String::from).collect()).unwrap_or_default();
///     let copy = ConfigMap {
///         metadata: ObjectMeta { name: Some(owner.name_any()), ..Default::default() },
///         data: Some(data.clone()),
///         ..Default::default()
///     };
///     spread.reconcile(owner.clone(), |cluster: &Cluster| match selected.iter().any(|s| s == cluster.name()) {
///         true => vec![copy.clone()],
///         false => vec![],
///     }).await
/// }
///
/// # fn f(manager: Manager, fleet: Fleet) {
/// let spread = Spread::new(&fleet, "hub");
/// let controller = manager
///     .controller(manager.api::<ConfigMap>(), "copies")
///     .reconcile_on(spread.triggers())
///     .run(reconcile, Arc::new(spread));
/// manager.controllers().add(controller);
/// # }
/// ```
///
/// What it does:
///
/// - **Children**: [`reconcile`](Spread::reconcile) applies (server-side, as the manager's field
///   manager) the children the function returns for each engaged member, labelled with their
///   owner ([`OWNER_CLUSTER_LABEL`], [`OWNER_KIND_LABEL`], [`OWNER_UID_LABEL`], and
///   `app.kubernetes.io/managed-by`) and annotated with its name ([`OWNER_ANNOTATION`]); a child
///   without a namespace goes into its owner's. The owner's children in a member that are no longer
///   wanted there (the member deselected, a child dropped) are deleted.
/// - **Deletion**: the owner gets the finalizer [`Spread::finalizer`] (e.g.
///   `fleet.rustbuilder.io/member-configmaps`), and an annotation of the same name lists the members
///   that may hold its children, written before a child is made in a member and cleared of a member
///   once the API server lists none there. Once the owner is being deleted, its children are deleted
///   in every engaged member, then the finalizer goes, and with it the owner. A listed member that
///   cannot be reached, or is not engaged (not yet, or no more), keeps the finalizer (and the owner)
///   until its children are deleted; removing a member from the annotation gives its children up.
/// - **Triggers**: each member's children of this spread are watched (one watch per member, by
///   the labels above); a child changed or deleted there reconciles its owner, which repairs it. A
///   member engaged or disengaged reconciles every owner.
/// - **A member down**: the members are written side by side, each within 10 s, so one that does
///   not answer holds up no other. The reconcile then fails (and is retried with the controller's
///   backoff); the member is asked every second whether it is back, and once it is, the owners that
///   failed there are reconciled again at once.
///
/// Children in a cluster that is disengaged stay there until it is engaged again: the spread cannot
/// reach them meanwhile. The children are watched and listed through each member's
/// [`Manager::api`]: with `--watch-namespace`, put them in that namespace. The home cluster's name is a label value (at most 63 characters).
pub struct Spread<O, C>
where
    O: Resource<DynamicType = ()> + 'static,
    C: Resource<DynamicType = ()> + 'static,
{
    inner: Arc<Inner<O, C>>,
}

impl<O, C> Clone for Spread<O, C>
where
    O: Resource<DynamicType = ()> + 'static,
    C: Resource<DynamicType = ()> + 'static,
{
    fn clone(&self) -> Self {
        Spread {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<O, C>
where
    O: Resource<DynamicType = ()> + 'static,
    C: Resource<DynamicType = ()> + 'static,
{
    fleet: Fleet,
    home: String,
    /// The owners, all of which a member's engagement reconciles; by default the process
    /// manager's cache of `O`.
    owners: Mutex<Option<Cache<O>>>,
    /// The readers of [`Spread::triggers`].
    readers: Mutex<Vec<mpsc::UnboundedSender<ObjectRef<O>>>>,
    /// The members being probed, with the owners that failed there.
    probing: Mutex<HashMap<String, HashSet<ObjectRef<O>>>>,
    _child: std::marker::PhantomData<fn() -> C>,
}

impl<O, C> Debug for Spread<O, C>
where
    O: Resource<DynamicType = ()> + 'static,
    C: Resource<DynamicType = ()> + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spread")
            .field("home", &self.inner.home)
            .field("owner", &O::kind(&()))
            .field("child", &C::kind(&()))
            .finish_non_exhaustive()
    }
}

/// Why a [`Spread::reconcile`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpreadError {
    /// Writing the owner in the home cluster (its finalizer or its annotation of members) failed.
    #[error("writing the owner: {0}")]
    Owner(#[source] kube::Error),
    /// Some members failed (each named); the others are done.
    #[error("{}", describe(.0))]
    Members(Vec<MemberError>),
    /// The owner is being deleted, and members that may hold its children are not engaged: these.
    #[error(
        "children may remain in members not engaged: {}; deleted once they are (or remove them from the owner's annotation to give the children up)",
        .0.join(", ")
    )]
    NotEngaged(Vec<String>),
    /// The owner or a child cannot be handled: no name, uid or namespace, or a child of another owner.
    #[error("{0}")]
    Invalid(String),
}

/// What failed in one member.
#[derive(Debug)]
pub struct MemberError {
    /// The member's name.
    pub cluster: String,
    /// The error of its API server, or of reaching it.
    pub error: kube::Error,
}

fn describe(errors: &[MemberError]) -> String {
    let each: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.cluster, e.error))
        .collect();
    format!("failed in members: {}", each.join("; "))
}

impl<O, C> Spread<O, C>
where
    O: Resource<DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
    O::Scope: WatchScope,
    C: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    /// Children in the members of `fleet`, of owners in the cluster the process manager runs in,
    /// which the children name `home` ([`OWNER_CLUSTER_LABEL`]).
    ///
    /// Not for a process run with `--sharding`: its fleet engages only this replica's members, so
    /// the spread would miss the others' (it says so in the log).
    pub fn new(fleet: &Fleet, home: &str) -> Self {
        if fleet.process().shard().is_some() {
            warn!(
                "a spread under --sharding reaches only the members this replica engages; run cross-cluster controllers with --leader-elect"
            );
        }
        Spread {
            inner: Arc::new(Inner {
                fleet: fleet.clone(),
                home: home.to_string(),
                owners: Mutex::new(None),
                readers: Mutex::default(),
                probing: Mutex::default(),
                _child: std::marker::PhantomData,
            }),
        }
    }

    /// The owners a member's engagement reconciles: the cache the owners' controller reads (default:
    /// the process manager's cache of every `O` it watches, [`Manager::cache`]).
    pub fn owners(self, owners: &Cache<O>) -> Self {
        *lock(&self.inner.owners) = Some(owners.clone());
        self
    }

    /// The owners to reconcile, as they need it: give them to the owners' controller with
    /// [`Builder::reconcile_on`](crate::controller::Builder::reconcile_on). Starts following the
    /// fleet's members when first read, until the process manager shuts down.
    pub fn triggers(&self) -> impl Stream<Item = ObjectRef<O>> + Send + 'static + use<O, C> {
        let (sender, receiver) = mpsc::unbounded();
        let spread = self.clone();
        let start = async move {
            let first = {
                let mut readers = lock(&spread.inner.readers);
                readers.push(sender);
                readers.len() == 1
            };
            if first {
                tokio::spawn(spread.follow_members());
            }
            receiver
        };
        futures::stream::once(start).flatten()
    }

    /// Brings the children of `owner` in line with `children`, which names the children wanted in
    /// each engaged member (none: the member has none of this owner's), or, once `owner` is being
    /// deleted, deletes its children in every engaged member and lets it go. See [`Spread`].
    pub async fn reconcile(
        &self,
        owner: Arc<O>,
        children: impl Fn(&Cluster) -> Vec<C>,
    ) -> Result<Action, SpreadError> {
        let process = self.inner.fleet.process().clone();
        let api: Api<O> = O::Scope::api(process.client(), owner.namespace().as_deref());
        let finalizer = Self::finalizer();
        let guarded = crate::finalizer::guard(
            &api,
            &finalizer,
            owner,
            async |owner| self.spread(&owner, &children).await,
            async |owner| self.clean_up(&owner).await,
        )
        .await;
        guarded.map_err(|error| match error {
            FinalizerError::ApplyFailed(error) | FinalizerError::CleanupFailed(error) => error,
            FinalizerError::AddFinalizer(error) | FinalizerError::RemoveFinalizer(error) => {
                SpreadError::Owner(error)
            }
            other => SpreadError::Invalid(other.to_string()),
        })
    }

    /// The children of `owner` in `cluster` as its watch of them holds them (see
    /// [`Spread::triggers`]); the watch starts at the first call in each engagement.
    pub fn children_in(&self, cluster: &Cluster, owner: &O) -> Vec<Arc<C>> {
        let uid = owner.uid().unwrap_or_default();
        let cache = self.cache_in(cluster);
        let children = cache.list().into_iter();
        children
            .filter(|child| uid_of(&**child) == Some(uid.as_str()))
            .collect()
    }

    /// Applies the wanted children in every engaged member, and deletes the unwanted.
    async fn spread(
        &self,
        owner: &O,
        children: &impl Fn(&Cluster) -> Vec<C>,
    ) -> Result<Action, SpreadError> {
        let identity = self.identity(owner)?;
        let mut plans = Vec::new();
        for cluster in self.inner.fleet.engaged() {
            let wanted = children(&cluster);
            let wanted = wanted
                .into_iter()
                .map(|child| identity.label(child))
                .collect::<Result<Vec<C>, SpreadError>>()?;
            plans.push((cluster, wanted));
        }
        // Recorded before any child is made where none may be yet, so that a deletion finds it.
        let recorded = recorded_members(owner, &Self::finalizer());
        let mut record = recorded.clone();
        for (cluster, wanted) in &plans {
            if !wanted.is_empty() {
                record.insert(cluster.name().to_string());
            }
        }
        if record != recorded {
            self.record(owner, &record).await?;
        }
        let (identity, listed) = (&identity, &record);
        let work = plans.into_iter().map(|(cluster, wanted)| async move {
            let recorded = listed.contains(cluster.name());
            let result = within(self.spread_in(&cluster, identity, wanted, recorded)).await;
            (cluster, result)
        });
        let done = futures::future::join_all(work).await;
        let mut kept = record.clone();
        for (cluster, result) in &done {
            if matches!(result, Ok(false)) {
                kept.remove(cluster.name());
            }
        }
        if kept != record {
            self.record(owner, &kept).await?;
        }
        let done = done.into_iter().map(|(c, result)| (c, result.map(|_| ())));
        self.outcome(owner, done.collect())
    }

    /// One member's part of [`Spread::spread`]: whether the member may still hold children of the
    /// owner, which the API server is asked when the member is `recorded` as holding some and none
    /// are wanted there.
    async fn spread_in(
        &self,
        cluster: &Cluster,
        owner: &Identity,
        wanted: Vec<C>,
        recorded: bool,
    ) -> Result<bool, kube::Error> {
        let cache = self.cache_in(cluster);
        if wanted.is_empty() && !recorded && !cache.completeness().is_complete() {
            // No child of the owner can be there (a member is recorded before its first child is
            // made), and the member's watch has not listed yet: it may not answer at all, and an
            // owner that does not select it must not wait for it.
            return Ok(false);
        }
        let field_manager = cluster.manager().name().to_string();
        let mut kept = BTreeSet::new();
        for child in wanted {
            let (namespace, name) = (child.namespace().unwrap_or_default(), child.name_any());
            let current = cache.get(Some(&namespace), &name);
            if let Some(current) = &current
                && uid_of(&**current) != Some(owner.uid.as_str())
            {
                warn!(cluster = cluster.name(), %namespace, %name, "a child of another owner of this name: taken over");
            }
            let api = Api::<C>::namespaced(cluster.client(), &namespace);
            crate::apply::apply(&api, current.as_deref(), &child, &field_manager).await?;
            kept.insert((namespace, name));
        }
        let existing = self.existing(cluster, &cache, &owner.uid).await?;
        let unwanted: Vec<Arc<C>> = existing
            .into_iter()
            .filter(|child| {
                !kept.contains(&(child.namespace().unwrap_or_default(), child.name_any()))
            })
            .collect();
        if !unwanted.is_empty() {
            debug!(
                cluster = cluster.name(),
                count = unwanted.len(),
                "deleting children no longer wanted"
            );
            crate::children::delete(&cluster.client(), &unwanted, PropagationPolicy::Background)
                .await?;
        }
        if !kept.is_empty() {
            return Ok(true);
        }
        // The cache may not hold a child made a moment ago: only the API server says none is left.
        Ok(recorded && !self.listed(cluster, &owner.uid).await?.is_empty())
    }

    /// Deletes the owner's children in every engaged member, and fails while a member that may
    /// hold some is not engaged.
    async fn clean_up(&self, owner: &O) -> Result<Action, SpreadError> {
        let identity = self.identity(owner)?;
        let identity = &identity;
        let recorded = recorded_members(owner, &Self::finalizer());
        let listed = &recorded;
        let work = self
            .inner
            .fleet
            .engaged()
            .into_iter()
            .map(|cluster| async move {
                let result = async {
                    let children = match listed.contains(cluster.name()) {
                        true => self.listed(&cluster, &identity.uid).await?,
                        // None was made there (see `spread_in`): what its watch holds, if it has
                        // listed, without asking a member that may not answer.
                        false => self.watched(&cluster, &identity.uid),
                    };
                    let policy = PropagationPolicy::Background;
                    crate::children::delete(&cluster.client(), &children, policy).await?;
                    Ok(())
                };
                (cluster.clone(), within(result).await)
            });
        let done = futures::future::join_all(work).await;
        let mut left = recorded.clone();
        for (cluster, result) in &done {
            if result.is_ok() {
                left.remove(cluster.name());
            }
        }
        if left != recorded {
            self.record(owner, &left).await?;
        }
        self.outcome(owner, done)?;
        match left.is_empty() {
            true => Ok(Action::await_change()),
            false => Err(SpreadError::NotEngaged(left.into_iter().collect())),
        }
    }

    /// The finalizer on the owners, and the name of their annotation that lists the members that
    /// may hold their children: [`SPREAD_PREFIX`] and the plural of `C`, e.g.
    /// `fleet.rustbuilder.io/member-configmaps`.
    pub fn finalizer() -> String {
        format!("{SPREAD_PREFIX}{}", C::plural(&()))
    }

    /// Writes the members that may hold the owner's children into its annotation.
    async fn record(&self, owner: &O, members: &BTreeSet<String>) -> Result<(), SpreadError> {
        let process = self.inner.fleet.process();
        let api: Api<O> = O::Scope::api(process.client(), owner.namespace().as_deref());
        let value = match members.is_empty() {
            true => serde_json::Value::Null,
            false => members.iter().cloned().collect::<Vec<_>>().join(",").into(),
        };
        let patch =
            serde_json::json!({ "metadata": { "annotations": { Self::finalizer(): value } } });
        let (name, params) = (owner.name_any(), kube::api::PatchParams::default());
        let patch = kube::api::Patch::Merge(&patch);
        api.patch(&name, &params, &patch)
            .await
            .map_err(SpreadError::Owner)?;
        Ok(())
    }

    /// `Ok` if every member succeeded; else the failures, and a probe of each member that did not
    /// answer.
    fn outcome(
        &self,
        owner: &O,
        done: Vec<(Cluster, Result<(), kube::Error>)>,
    ) -> Result<Action, SpreadError> {
        let mut failed = Vec::new();
        for (cluster, result) in done {
            let Err(error) = result else { continue };
            if !matches!(error, kube::Error::Api(_)) {
                self.probe(&cluster, ObjectRef::from_obj(owner));
            }
            failed.push(MemberError {
                cluster: cluster.name().to_string(),
                error,
            });
        }
        match failed.is_empty() {
            true => Ok(Action::await_change()),
            false => Err(SpreadError::Members(failed)),
        }
    }

    fn identity(&self, owner: &O) -> Result<Identity, SpreadError> {
        let manager = self.inner.fleet.process().name();
        Identity::of(owner, &self.inner.home, manager)
    }

    /// The owner's children in `cluster`: from the watch of them once it holds a complete list,
    /// else from the API server.
    async fn existing(
        &self,
        cluster: &Cluster,
        cache: &Cache<C>,
        uid: &str,
    ) -> Result<Vec<Arc<C>>, kube::Error> {
        if cache.completeness().is_complete() {
            let children = cache.list().into_iter();
            return Ok(children.filter(|c| uid_of(&**c) == Some(uid)).collect());
        }
        self.listed(cluster, uid).await
    }

    /// The owner's children in `cluster` as the watch of them holds them; none before it has
    /// listed.
    fn watched(&self, cluster: &Cluster, uid: &str) -> Vec<Arc<C>> {
        let cache = self.cache_in(cluster);
        match cache.completeness().is_complete() {
            true => cache
                .list()
                .into_iter()
                .filter(|c| uid_of(&**c) == Some(uid))
                .collect(),
            false => Vec::new(),
        }
    }

    /// The owner's children in `cluster`, listed by the API server.
    async fn listed(&self, cluster: &Cluster, uid: &str) -> Result<Vec<Arc<C>>, kube::Error> {
        let api = cluster.manager().api::<C>();
        let selector = format!("{},{OWNER_UID_LABEL}={uid}", self.selector());
        let listed = api.list(&ListParams::default().labels(&selector)).await?;
        Ok(listed.items.into_iter().map(Arc::new).collect())
    }

    /// The children of this spread's owners, in any namespace the member's manager watches.
    fn selector(&self) -> String {
        let kind = O::kind(&());
        format!(
            "{OWNER_CLUSTER_LABEL}={},{OWNER_KIND_LABEL}={kind}",
            self.inner.home
        )
    }

    /// The member's cache of this spread's children (shared by every call in its engagement).
    fn cache_in(&self, cluster: &Cluster) -> Cache<C> {
        let config = watcher::Config::default().labels(&self.selector());
        let manager = cluster.manager();
        manager.cache_with(manager.api::<C>(), config)
    }

    fn owner_cache(&self) -> Cache<O> {
        let mut owners = lock(&self.inner.owners);
        let process = self.inner.fleet.process();
        owners.get_or_insert_with(|| process.cache::<O>()).clone()
    }

    /// Tells every reader to reconcile `owner`.
    fn trigger(&self, owner: ObjectRef<O>) {
        let mut readers = lock(&self.inner.readers);
        readers.retain(|reader| reader.unbounded_send(owner.clone()).is_ok());
    }

    fn trigger_all(&self) {
        for owner in self.owner_cache().list() {
            self.trigger(ObjectRef::from_obj(&*owner));
        }
    }

    fn has_readers(&self) -> bool {
        let mut readers = lock(&self.inner.readers);
        readers.retain(|reader| !reader.is_closed());
        !readers.is_empty()
    }

    /// Follows the fleet's members: watches each engagement's children, and reconciles every owner
    /// when a member comes or goes. Ends when the process manager shuts down or no one reads.
    async fn follow_members(self) {
        let process = self.inner.fleet.process().clone();
        let mut membership = self.inner.fleet.membership();
        let mut followed: HashMap<String, Manager> = HashMap::new();
        let shutdown = process.shutdown_signal();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            membership.borrow_and_update();
            let engaged = self.inner.fleet.engaged();
            let mut changed = followed.len() != engaged.len();
            followed.retain(|_, manager| !manager.is_shutting_down());
            for cluster in engaged {
                if followed.contains_key(cluster.name()) {
                    continue;
                }
                changed = true;
                followed.insert(cluster.name().to_string(), cluster.manager().clone());
                let span = info_span!("fleet", cluster = cluster.name());
                tokio::spawn(self.clone().follow_member(cluster).instrument(span));
            }
            if changed {
                self.trigger_all();
            }
            if !self.has_readers() {
                return;
            }
            tokio::select! {
                () = &mut shutdown => return,
                changed = membership.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Reconciles the owner of each child of this spread that changes in `cluster`, and every owner
    /// once the watch of them holds its first list, until the cluster's manager shuts down.
    async fn follow_member(self, cluster: Cluster) {
        let cache = self.cache_in(&cluster);
        let stop = cluster.manager().shutdown_signal();
        let changes = cache.changes().for_each(|change| {
            if let Some(owner) = owner_of::<O, C>(change.object()) {
                self.trigger(owner);
            }
            std::future::ready(())
        });
        let synced = async {
            cache.completeness().wait().await;
            self.trigger_all();
        };
        tokio::select! {
            () = stop => {}
            _ = futures::future::join(changes, synced) => {}
        }
    }

    /// Remembers that reconciling `owner` failed in `cluster` because it did not answer; asks it
    /// every second whether it is back, then reconciles the owners that failed there.
    fn probe(&self, cluster: &Cluster, owner: ObjectRef<O>) {
        let name = cluster.name().to_string();
        {
            let mut probing = lock(&self.inner.probing);
            let started = probing.contains_key(&name);
            probing.entry(name.clone()).or_default().insert(owner);
            if started {
                return;
            }
        }
        let spread = self.clone();
        let (client, stop) = (cluster.client(), cluster.manager().shutdown_signal());
        let span = info_span!("fleet", cluster = %name);
        let probe = async move {
            let back = async {
                loop {
                    tokio::time::sleep(PROBE_INTERVAL).await;
                    if client.apiserver_version().await.is_ok() {
                        return;
                    }
                }
            };
            let back = tokio::select! {
                () = back => true,
                () = stop => false,
            };
            let owners = lock(&spread.inner.probing).remove(&name);
            if back {
                debug!("the member answers again: reconciling the owners that failed there");
                owners.into_iter().flatten().for_each(|o| spread.trigger(o));
            }
        };
        tokio::spawn(probe.instrument(span));
    }
}

/// An owner, as its children name it.
struct Identity {
    home: String,
    kind: String,
    uid: String,
    /// `namespace/name`, or `name`.
    key: String,
    namespace: Option<String>,
    manager: String,
}

impl Identity {
    fn of<O: Resource<DynamicType = ()>>(
        owner: &O,
        home: &str,
        manager: &str,
    ) -> Result<Identity, SpreadError> {
        let meta = owner.meta();
        let (Some(name), Some(uid)) = (&meta.name, &meta.uid) else {
            return Err(SpreadError::Invalid(
                "the owner has no name or uid: read it from the API server".into(),
            ));
        };
        let key = match &meta.namespace {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name.clone(),
        };
        Ok(Identity {
            home: home.to_string(),
            kind: O::kind(&()).into_owned(),
            uid: uid.clone(),
            key,
            namespace: meta.namespace.clone(),
            manager: manager.to_string(),
        })
    }

    /// `child` with its owner's labels and annotation, and its owner's namespace if it has none.
    fn label<C: Resource>(&self, mut child: C) -> Result<C, SpreadError> {
        let meta = child.meta_mut();
        if meta.name.is_none() {
            return Err(SpreadError::Invalid("a child has no metadata.name".into()));
        }
        if meta.namespace.is_none() {
            let Some(namespace) = &self.namespace else {
                return Err(SpreadError::Invalid(
                    "a child of a cluster-scoped owner needs a namespace".into(),
                ));
            };
            meta.namespace = Some(namespace.clone());
        }
        let labels = meta.labels.get_or_insert_with(Default::default);
        labels.insert(OWNER_CLUSTER_LABEL.into(), self.home.clone());
        labels.insert(OWNER_KIND_LABEL.into(), self.kind.clone());
        labels.insert(OWNER_UID_LABEL.into(), self.uid.clone());
        labels.insert(MANAGED_BY_LABEL.into(), self.manager.clone());
        let annotations = meta.annotations.get_or_insert_with(Default::default);
        annotations.insert(OWNER_ANNOTATION.into(), self.key.clone());
        Ok(child)
    }
}

/// The members the owner's annotation `key` lists.
fn recorded_members<O: Resource>(owner: &O, key: &str) -> BTreeSet<String> {
    let annotations = owner.meta().annotations.as_ref();
    let listed = annotations.and_then(|a| a.get(key)).map(String::as_str);
    let members = listed.unwrap_or_default().split(',').map(str::trim);
    members
        .filter(|m| !m.is_empty())
        .map(String::from)
        .collect()
}

/// The owner a child names in its annotation.
fn owner_of<O, C>(child: &C) -> Option<ObjectRef<O>>
where
    O: Resource<DynamicType = ()>,
    C: Resource,
{
    let key = child.meta().annotations.as_ref()?.get(OWNER_ANNOTATION)?;
    Some(match key.split_once('/') {
        Some((namespace, name)) => ObjectRef::new(name).within(namespace),
        None => ObjectRef::new(key),
    })
}

fn uid_of<C: Resource>(child: &C) -> Option<&str> {
    child
        .meta()
        .labels
        .as_ref()?
        .get(OWNER_UID_LABEL)
        .map(String::as_str)
}

/// `work`, failing as unreachable if it takes longer than [`MEMBER_TIMEOUT`].
async fn within<T>(work: impl Future<Output = Result<T, kube::Error>>) -> Result<T, kube::Error> {
    match tokio::time::timeout(MEMBER_TIMEOUT, work).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(
            format!("no answer within {MEMBER_TIMEOUT:?}").into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::ObjectMeta;

    fn named(name: &str, namespace: Option<&str>, uid: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: namespace.map(String::from),
            uid: uid.map(String::from),
            ..Default::default()
        }
    }

    fn configmap(metadata: ObjectMeta) -> ConfigMap {
        ConfigMap {
            metadata,
            ..Default::default()
        }
    }

    #[test]
    fn a_child_names_its_owner_and_lands_in_its_namespace() {
        let owner = configmap(named("web", Some("apps"), Some("u-1")));
        let identity = Identity::of(&owner, "hub", "op").unwrap();
        let child = identity
            .label(configmap(named("web-copy", None, None)))
            .unwrap();
        assert_eq!(child.namespace().as_deref(), Some("apps"));
        let labels = child.labels();
        assert_eq!(labels[OWNER_CLUSTER_LABEL], "hub");
        assert_eq!(labels[OWNER_KIND_LABEL], "ConfigMap");
        assert_eq!(labels[OWNER_UID_LABEL], "u-1");
        assert_eq!(labels[MANAGED_BY_LABEL], "op");
        assert_eq!(child.annotations()[OWNER_ANNOTATION], "apps/web");
        assert_eq!(uid_of(&child), Some("u-1"));
        let found = owner_of::<ConfigMap, _>(&child).unwrap();
        assert_eq!(found, ObjectRef::new("web").within("apps"));
        // A namespace of its own stays.
        let elsewhere = identity
            .label(configmap(named("other", Some("ops"), None)))
            .unwrap();
        assert_eq!(elsewhere.namespace().as_deref(), Some("ops"));
    }

    #[test]
    fn a_cluster_scoped_owner_is_named_alone_and_its_children_need_a_namespace() {
        let owner = Namespace {
            metadata: named("team-a", None, Some("u-2")),
            ..Default::default()
        };
        let identity = Identity::of(&owner, "hub", "op").unwrap();
        let child = identity.label(configmap(named("quota", None, None)));
        assert!(matches!(child, Err(SpreadError::Invalid(_))), "{child:?}");
        let child = identity
            .label(configmap(named("quota", Some("team-a"), None)))
            .unwrap();
        assert_eq!(child.annotations()[OWNER_ANNOTATION], "team-a");
        let found = owner_of::<Namespace, _>(&child).unwrap();
        assert_eq!(found, ObjectRef::new("team-a"));
    }

    #[test]
    fn the_members_recorded_are_read_from_the_owners_annotation() {
        let key = Spread::<ConfigMap, ConfigMap>::finalizer();
        assert_eq!(key, "fleet.rustbuilder.io/member-configmaps");
        let mut owner = configmap(named("web", Some("apps"), Some("u-1")));
        assert!(recorded_members(&owner, &key).is_empty());
        let annotations = [(key.clone(), "bravo, alpha,,charlie".to_string())];
        owner.metadata.annotations = Some(annotations.into_iter().collect());
        let members: Vec<String> = recorded_members(&owner, &key).into_iter().collect();
        assert_eq!(members, ["alpha", "bravo", "charlie"]);
    }

    #[test]
    fn an_owner_not_read_from_the_api_server_is_refused() {
        let owner = configmap(named("web", Some("apps"), None));
        let refused = Identity::of(&owner, "hub", "op");
        assert!(matches!(refused, Err(SpreadError::Invalid(_))));
        let nameless = configmap(ObjectMeta::default());
        assert!(Identity::of(&nameless, "hub", "op").is_err());
    }
}
