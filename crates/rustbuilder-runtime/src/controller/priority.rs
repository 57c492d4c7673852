//! The order in which a controller's work reaches kube's queue: objects seen changing live go first;
//! objects from a list (the first one when a replica starts or takes over, a relist after a watch
//! restart) wait behind them, no more of them in the queue at once than the controller runs.
//!
//! kube's queue runs requests in the order they arrive. After a restart, the list of 5,000 objects
//! would arrive first and a user's edit 5,000th; here it waits for at most `concurrency` reconciles.

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::cache::Origin;
use crate::metrics::WorkQueue;

/// A request to reconcile one object, and how its cause was seen.
pub(super) type Trigger<K> = (ObjectRef<K>, Origin);

/// The listed objects handed to kube's queue and not reconciled yet, each holding one unit of room.
pub(super) struct Admitted<K: Resource<DynamicType = ()> + 'static>(
    Mutex<HashMap<ObjectRef<K>, OwnedSemaphorePermit>>,
);

impl<K: Resource<DynamicType = ()>> Admitted<K> {
    /// The object was reconciled (or found gone): its room goes to the next listed object.
    pub(super) fn done(&self, object: &ObjectRef<K>) {
        self.entries().remove(object);
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<K>, OwnedSemaphorePermit>> {
        // A map insert or remove cannot be left half done by a panic.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The triggers of a controller, live ones first, as the objects kube's controller reconciles.
pub(super) struct Prioritized<K: Resource<DynamicType = ()> + 'static> {
    triggers: futures::stream::BoxStream<'static, Trigger<K>>,
    ended: bool,
    store: Store<K>,
    /// Listed objects not handed on yet, oldest first; an object taken live meanwhile leaves
    /// `waiting` and is skipped when its turn comes.
    backlog: VecDeque<ObjectRef<K>>,
    waiting: HashSet<ObjectRef<K>>,
    room: Arc<Semaphore>,
    acquiring: Option<BoxFuture<'static, OwnedSemaphorePermit>>,
    admitted: Arc<Admitted<K>>,
    /// Told of the triggers dropped because their object is gone (an owner deleted before its
    /// children, say), which no reconcile will take out of the queue.
    queue: WorkQueue,
}

impl<K> Prioritized<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    /// Orders `triggers` for a controller running `concurrency` reconciles at once (0: no limit,
    /// so nothing waits and nothing needs ordering), reading the objects from `store`.
    pub(super) fn new(
        triggers: impl Stream<Item = Trigger<K>> + Send + 'static,
        store: Store<K>,
        concurrency: u16,
        queue: WorkQueue,
    ) -> Self {
        let room = match concurrency {
            0 => Semaphore::MAX_PERMITS,
            n => usize::from(n),
        };
        Prioritized {
            triggers: triggers.boxed(),
            ended: false,
            store,
            backlog: VecDeque::new(),
            waiting: HashSet::new(),
            room: Arc::new(Semaphore::new(room)),
            acquiring: None,
            admitted: Arc::new(Admitted(Mutex::default())),
            queue,
        }
    }

    /// The object `object` refers to, if the cache holds it; else it leaves the queue.
    fn get(&self, object: &ObjectRef<K>) -> Option<Arc<K>> {
        let found = self.store.get(object);
        if found.is_none() {
            self.queue.forget(super::key_of(object));
        }
        found
    }

    /// What the reconcile wrapper tells when a listed object is done.
    pub(super) fn admitted(&self) -> Arc<Admitted<K>> {
        self.admitted.clone()
    }
}

impl<K> Stream for Prioritized<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    type Item = Arc<K>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Arc<K>>> {
        let this = self.get_mut();
        // Take every trigger that is ready: live ones go on at once, listed ones to the backlog.
        while !this.ended {
            match this.triggers.poll_next_unpin(cx) {
                Poll::Ready(Some((object, Origin::Live))) => {
                    this.waiting.remove(&object);
                    if let Some(object) = this.get(&object) {
                        return Poll::Ready(Some(object));
                    }
                }
                Poll::Ready(Some((object, Origin::Listed))) => {
                    if this.waiting.insert(object.clone()) {
                        this.backlog.push_back(object);
                    }
                }
                Poll::Ready(None) => this.ended = true,
                Poll::Pending => break,
            }
        }
        // Then the backlog, as far as there is room.
        while let Some(next) = this.backlog.front() {
            if !this.waiting.contains(next) {
                this.backlog.pop_front();
                continue;
            }
            let room = this.room.clone();
            let acquiring = this.acquiring.get_or_insert_with(|| {
                let permit = room
                    .acquire_owned()
                    .map(|p| p.expect("the semaphore is never closed"));
                permit.boxed()
            });
            let Poll::Ready(permit) = acquiring.poll_unpin(cx) else {
                return Poll::Pending;
            };
            this.acquiring = None;
            let next = this.backlog.pop_front().expect("looked at above");
            this.waiting.remove(&next);
            if let Some(object) = this.get(&next) {
                this.admitted.entries().insert(next, permit);
                return Poll::Ready(Some(object));
            }
        }
        if this.ended {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::channel::mpsc;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;

    fn config_map(name: &str) -> ConfigMap {
        let mut object = ConfigMap::default();
        object.metadata.name = Some(name.into());
        object.metadata.namespace = Some("default".into());
        object
    }

    fn queue() -> WorkQueue {
        crate::metrics::Metrics::new().work_queue("test")
    }

    fn key(name: &str) -> ObjectRef<ConfigMap> {
        ObjectRef::new(name).within("default")
    }

    async fn next_name(stream: &mut Prioritized<ConfigMap>) -> Option<String> {
        let next = tokio::time::timeout(Duration::from_millis(50), stream.next()).await;
        next.ok().flatten().and_then(|o| o.metadata.name.clone())
    }

    #[tokio::test]
    async fn live_changes_pass_listed_objects_waiting_for_room() {
        let (store, mut writer) = reflector::store();
        for name in ["a", "b", "c", "d"] {
            writer.apply_watcher_event(&Event::Apply(config_map(name)));
        }
        let (triggers, received) = mpsc::unbounded();
        let mut stream = Prioritized::new(received, store, 1, queue());
        let admitted = stream.admitted();
        for name in ["a", "b", "c"] {
            triggers
                .unbounded_send((key(name), Origin::Listed))
                .unwrap();
        }
        // One listed object at a time (concurrency 1): `a` goes, `b` waits for room.
        assert_eq!(next_name(&mut stream).await.as_deref(), Some("a"));
        assert_eq!(next_name(&mut stream).await, None);
        // A live change goes at once, ahead of `b` and `c`; `c`'s live change takes it out of the
        // backlog.
        triggers.unbounded_send((key("d"), Origin::Live)).unwrap();
        triggers.unbounded_send((key("c"), Origin::Live)).unwrap();
        assert_eq!(next_name(&mut stream).await.as_deref(), Some("d"));
        assert_eq!(next_name(&mut stream).await.as_deref(), Some("c"));
        assert_eq!(next_name(&mut stream).await, None);
        // `a` is done: room for `b`, and the backlog is then empty (`c` went live).
        admitted.done(&key("a"));
        assert_eq!(next_name(&mut stream).await.as_deref(), Some("b"));
        admitted.done(&key("b"));
        assert_eq!(next_name(&mut stream).await, None);
        // A listed object named twice waits once.
        triggers.unbounded_send((key("a"), Origin::Listed)).unwrap();
        triggers.unbounded_send((key("a"), Origin::Listed)).unwrap();
        assert_eq!(next_name(&mut stream).await.as_deref(), Some("a"));
        admitted.done(&key("a"));
        assert_eq!(next_name(&mut stream).await, None);
    }

    #[tokio::test]
    async fn objects_gone_from_the_cache_are_skipped_and_leave_the_queue() {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&Event::Apply(config_map("kept")));
        let (triggers, received) = mpsc::unbounded();
        let work = queue();
        let mut stream = Prioritized::new(received, store, 1, work.clone());
        // Both were triggered (an owner's child changed, say); only `kept` is in the cache.
        for name in ["gone", "kept"] {
            work.add(crate::metrics::QueueKey::new(Some("default"), name));
        }
        triggers
            .unbounded_send((key("gone"), Origin::Listed))
            .unwrap();
        triggers
            .unbounded_send((key("gone"), Origin::Live))
            .unwrap();
        triggers
            .unbounded_send((key("kept"), Origin::Listed))
            .unwrap();
        assert_eq!(next_name(&mut stream).await.as_deref(), Some("kept"));
        assert_eq!(
            work.waiting(),
            1,
            "`gone` left the queue, `kept` waits for its reconcile"
        );
        drop(triggers);
        stream.admitted().done(&key("kept"));
        assert_eq!(stream.next().await, None);
    }
}
