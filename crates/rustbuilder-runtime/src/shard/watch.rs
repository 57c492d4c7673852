//! The watch under a sharded cache: restarted with the member's ranges whenever they change.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tracing::{info, warn};

use super::bucket;
use super::client::{Filtering, applies_selector, selecting_client};
use super::member::ShardState;
use super::range::{Ranges, hash};
use crate::ownership::controller_of;
use crate::scope::WatchScope;

/// Which uid puts an object in a shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardKey {
    /// Its own: for the kind a controller reconciles. The API server can select by it.
    Uid,
    /// Its controller owner's (its own if it has none): for the objects a controller creates, so
    /// that they live in the same shard as their owner. The API server cannot select by it, so the
    /// cache filters on the client: it saves memory, not watch traffic.
    ControllerOwner,
    /// Its controller owner's, like [`ShardKey::ControllerOwner`], for objects that carry their
    /// owner's bucket ([`BUCKET_LABEL`](super::BUCKET_LABEL), written by the runtime's `apply` in a
    /// shard member): the API server selects them by that label, so a member receives about its
    /// part of them. An object without the label is not seen.
    OwnerBucket,
}

impl ShardKey {
    /// The key as the `key` label of `shard_objects` names it: `uid` or `controller_owner`.
    pub fn label(self) -> &'static str {
        match self {
            ShardKey::Uid => "uid",
            ShardKey::ControllerOwner => "controller_owner",
            ShardKey::OwnerBucket => "owner_bucket",
        }
    }

    /// The hash that places `object` in a shard.
    pub fn hash_of<K: Resource>(self, object: &K) -> u64 {
        let own = || object.meta().uid.as_deref().unwrap_or_default();
        let uid = match self {
            ShardKey::Uid => own(),
            ShardKey::ControllerOwner | ShardKey::OwnerBucket => {
                controller_of(object).map_or_else(own, |o| &o.uid)
            }
        };
        hash(uid)
    }
}

type Events<K> = BoxStream<'static, Result<Event<K>, watcher::Error>>;

/// Whether the cache holds an object of that name.
pub(crate) type Cached<K> = Arc<dyn Fn(&ObjectRef<K>) -> bool + Send + Sync>;

/// The events of a watch of `api` with `config` that keeps to the ranges `state` holds, starting
/// over (a new list, which replaces the store's contents) each time they change. `cached` tells
/// whether the cache holds an object, to turn one that moves out of the ranges into a deletion; `listing` is set
/// to the ranges of each watch as it starts, so that the cache knows which ranges a list it
/// completes holds.
pub(crate) fn events<K>(
    api: Api<K>,
    config: watcher::Config,
    mut state: watch::Receiver<ShardState>,
    key: ShardKey,
    cached: Cached<K>,
    lease_namespace: String,
    listing: &Arc<Mutex<Ranges>>,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::Scope: WatchScope,
{
    let kind = K::kind(&()).to_string();
    let listing = listing.clone();
    let start = async move {
        let filtering = match key {
            ShardKey::ControllerOwner => Filtering::Client,
            ShardKey::OwnerBucket => {
                info!(
                    kind,
                    "sharded watches: the owner's bucket label, selected server-side"
                );
                Filtering::Client
            }
            ShardKey::Uid => filtering_of(&api, &lease_namespace).await,
        };
        let held = state.borrow_and_update().held.clone();
        *lock(&listing) = held.clone();
        let current = watch_ranges(&api, &config, filtering, &held, key, &cached);
        let switching = Switching {
            listing,
            api,
            config,
            filtering,
            key,
            cached,
            state,
            held,
            current,
            kind,
        };
        stream::unfold(switching, Switching::next)
    };
    stream::once(start).flatten()
}

/// Whether the API server will select `api`'s objects by shard: asked of `api`'s kind, and of the
/// shard group's Leases (in `lease_namespace`) since custom resources do not say (see
/// [`detect`](super::detect)). Logs the answer.
async fn filtering_of<K>(api: &Api<K>, lease_namespace: &str) -> Filtering
where
    K: Resource<DynamicType = ()> + Clone,
{
    let kind = K::kind(&()).to_string();
    let leases: Api<Lease> = Api::namespaced(api.clone().into_client(), lease_namespace);
    let filtering = match (applies_selector(api).await, applies_selector(&leases).await) {
        (Ok(true), _) | (_, Ok(true)) => Filtering::Server,
        (Err(error), Err(_)) => {
            warn!(kind, %error, "cannot tell whether the API server selects shards");
            Filtering::Client
        }
        _ => Filtering::Client,
    };
    info!(kind, "sharded watches: {filtering}");
    filtering
}

/// The state of [`events`]: the watch of the ranges held now.
struct Switching<K: Resource<DynamicType = ()> + 'static> {
    api: Api<K>,
    config: watcher::Config,
    filtering: Filtering,
    key: ShardKey,
    cached: Cached<K>,
    state: watch::Receiver<ShardState>,
    held: Ranges,
    current: Events<K>,
    kind: String,
    listing: Arc<Mutex<Ranges>>,
}

fn lock(ranges: &Mutex<Ranges>) -> std::sync::MutexGuard<'_, Ranges> {
    // Replacing a value cannot leave it half-written.
    ranges.lock().unwrap_or_else(|e| e.into_inner())
}

impl<K> Switching<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::Scope: WatchScope,
{
    async fn next(mut self) -> Option<(Result<Event<K>, watcher::Error>, Self)> {
        loop {
            tokio::select! {
                biased;
                changed = self.state.changed() => {
                    // The member is gone: keep what the cache holds.
                    changed.ok()?;
                    let held = self.state.borrow_and_update().held.clone();
                    if held != self.held {
                        info!(kind = self.kind, ranges = %held, "the shard changed; listing again");
                        *lock(&self.listing) = held.clone();
                        self.current = watch_ranges(&self.api, &self.config, self.filtering, &held, self.key, &self.cached);
                        self.held = held;
                    }
                }
                event = self.current.next() => return Some((event?, self)),
            }
        }
    }
}

/// The events of a watch that keeps to `held`.
fn watch_ranges<K>(
    api: &Api<K>,
    config: &watcher::Config,
    filtering: Filtering,
    held: &Ranges,
    key: ShardKey,
    cached: &Cached<K>,
) -> Events<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::Scope: WatchScope,
{
    if held.is_empty() {
        // An empty list: the cache empties and counts as synced.
        let empty = [Ok(Event::Init), Ok(Event::InitDone)];
        return stream::iter(empty).chain(stream::pending()).boxed();
    }
    let api = match held.selector() {
        Some(selector) if filtering == Filtering::Server && !held.is_full() => {
            let client = selecting_client(&api.clone().into_client(), &selector);
            K::Scope::api(client, api.namespace())
        }
        _ => api.clone(),
    };
    let mut config = config.clone();
    if let (ShardKey::OwnerBucket, Some(buckets)) = (key, bucket::selector(held)) {
        config.label_selector = Some(match config.label_selector.take() {
            Some(labels) => format!("{labels},{buckets}"),
            None => buckets,
        });
    }
    let (held, cached) = (held.clone(), cached.clone());
    // Filtered here too when the server selects: the same hash (or buckets that hold a little more).
    watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            let kept = match event {
                Ok(event) => keep(event, &held, key, &cached).map(Ok),
                Err(error) => Some(Err(error)),
            };
            futures::future::ready(kept)
        })
        .boxed()
}

/// The event as the cache of `held` sees it: an object outside the ranges is left out, or
/// deleted if the cache holds it (it moved out, e.g. to another owner).
fn keep<K>(event: Event<K>, held: &Ranges, key: ShardKey, cached: &Cached<K>) -> Option<Event<K>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    let inside = |object: &K| held.contains(key.hash_of(object));
    let cached = |object: &K| cached(&ObjectRef::from_obj(object));
    match event {
        Event::Apply(object) if inside(&object) => Some(Event::Apply(object)),
        Event::Apply(object) | Event::Delete(object) if cached(&object) => {
            Some(Event::Delete(object))
        }
        Event::Delete(object) if inside(&object) => Some(Event::Delete(object)),
        Event::InitApply(object) if inside(&object) => Some(Event::InitApply(object)),
        Event::Apply(_) | Event::Delete(_) | Event::InitApply(_) => None,
        Event::Init => Some(Event::Init),
        Event::InitDone => Some(Event::InitDone),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    use crate::shard::Range;

    fn object(name: &str, uid: &str, owner: Option<&str>) -> ConfigMap {
        let owner = owner.map(|uid| OwnerReference {
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
                uid: Some(uid.into()),
                owner_references: owner.map(|owner| vec![owner]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// A uid whose hash lies in `range`, and one whose hash does not.
    fn uids(range: &Range) -> (String, String) {
        let mut inside = None;
        let mut outside = None;
        for i in 0.. {
            let uid = format!("uid-{i}");
            if range.contains(hash(&uid)) {
                inside.get_or_insert(uid);
            } else {
                outside.get_or_insert(uid);
            }
            if let (Some(inside), Some(outside)) = (&inside, &outside) {
                return (inside.clone(), outside.clone());
            }
        }
        unreachable!()
    }

    #[test]
    fn owned_objects_follow_their_owner() {
        let half = Range::part(0, 2);
        let (inside, outside) = uids(&half);
        let child = object("child", &outside, Some(&inside));
        assert!(half.contains(ShardKey::ControllerOwner.hash_of(&child)));
        assert!(!half.contains(ShardKey::Uid.hash_of(&child)));
        let orphan = object("orphan", &inside, None);
        assert!(half.contains(ShardKey::ControllerOwner.hash_of(&orphan)));
    }

    #[test]
    fn events_outside_the_ranges_are_left_out_or_become_deletions() {
        let held = Ranges::from(Range::part(0, 2));
        let (inside, outside) = uids(&held.ranges()[0]);
        let (reader, mut writer) = kube::runtime::reflector::store();
        let key = ShardKey::ControllerOwner;
        let cached: Cached<_> = Arc::new(move |key| reader.get(key).is_some());
        let kept = |event| keep(event, &held, key, &cached);

        let ours = object("a", "x", Some(&inside));
        assert!(matches!(
            kept(Event::InitApply(ours.clone())),
            Some(Event::InitApply(_))
        ));
        assert!(matches!(
            kept(Event::Apply(ours.clone())),
            Some(Event::Apply(_))
        ));
        let theirs = object("b", "y", Some(&outside));
        assert!(kept(Event::InitApply(theirs.clone())).is_none());
        assert!(kept(Event::Apply(theirs.clone())).is_none());
        assert!(kept(Event::Delete(theirs)).is_none());

        // `a` is cached, then handed to an owner of another shard: gone from this one.
        writer.apply_watcher_event(&Event::Apply(ours));
        let moved = object("a", "x", Some(&outside));
        assert!(matches!(
            kept(Event::Apply(moved.clone())),
            Some(Event::Delete(_))
        ));
        assert!(matches!(kept(Event::Delete(moved)), Some(Event::Delete(_))));
        assert!(matches!(kept(Event::InitDone), Some(Event::InitDone)));
    }
}
