//! Kubernetes events on the objects a controller manages, shown by `kubectl describe`.
//!
//! ```no_run
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # fn f(manager: rustbuilder_runtime::Manager, object: &ConfigMap) {
//! let events = manager.events();
//! events.normal(object, "Copied", "Apply", "Copied the settings to the workload");
//! events.warning(object, "CopyConflict", "Apply", "A ConfigMap of that name is someone else's");
//! # }
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
pub use kube::runtime::events::EventType;
use kube::{Client, Resource};
use serde_json::json;
use tracing::warn;

/// The API's limit on an event note, in bytes.
pub const MAX_NOTE_BYTES: usize = 1024;

/// How long a published event is remembered: a repeat within this time is counted on the first one
/// (its `series`) instead of stored again, as client-go's and kube's recorders do.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(6 * 60);

/// How often the memory of published events drops what is older than [`REPEAT_WINDOW`].
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// Publishes events as one reporting controller (the manager's name; the instance is the pod name,
/// `HOSTNAME`, so events tell replicas apart). A repeat of an event (same object, type, reason and
/// action) within [`REPEAT_WINDOW`] is counted on the first one rather than stored again. Cheap to
/// clone: clones share that memory.
///
/// Only the time and count of each recent event are kept, not the event: a controller of 1,000
/// objects holds about a hundred KiB for them, not megabytes.
///
/// Events are informative: failing to publish one is logged and otherwise ignored, so publishing
/// never fails a reconcile.
#[derive(Clone)]
pub struct Events {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    controller: String,
    instance: String,
    published: Mutex<Published>,
}

/// The events published within the repeat window, by what makes an event a repeat.
struct Published {
    events: HashMap<Key, Recent>,
    /// The reasons and actions of those events, each held once: a controller has a few words for
    /// thousands of events.
    words: HashSet<Arc<str>>,
    swept: Instant,
}

/// What makes an event a repeat of another: the same object, type, reason and action.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    regarding: Regarding,
    type_: EventType,
    reason: Arc<str>,
    action: Arc<str>,
}

/// The object an event is about: its uid, as a number when it is a UUID (the API server's are), or
/// `kind/namespace/name` for a reference without one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Regarding {
    Uuid([u64; 2]),
    Other(Box<str>),
}

impl Regarding {
    fn of(reference: &ObjectReference) -> Self {
        match &reference.uid {
            Some(uid) => match uuid(uid) {
                Some(number) => Regarding::Uuid(number),
                None => Regarding::Other(uid.as_str().into()),
            },
            None => Regarding::Other(
                format!(
                    "{}/{}/{}",
                    reference.kind.as_deref().unwrap_or_default(),
                    reference.namespace.as_deref().unwrap_or_default(),
                    reference.name.as_deref().unwrap_or_default()
                )
                .into(),
            ),
        }
    }
}

/// The 128 bits of a UUID written `8-4-4-4-12` in hex digits.
fn uuid(text: &str) -> Option<[u64; 2]> {
    if text.len() != 36 {
        return None;
    }
    let mut bits: u128 = 0;
    for (at, c) in text.chars().enumerate() {
        if matches!(at, 8 | 13 | 18 | 23) {
            if c != '-' {
                return None;
            }
            continue;
        }
        bits = bits << 4 | u128::from(c.to_digit(16)?);
    }
    Some([(bits >> 64) as u64, bits as u64])
}

/// A recent event. Its name is not kept: it is the regarding object's name and the time of the
/// first event ([`Events::event_name`]), and its namespace the object's, both known again when the
/// event repeats. With its key, each of the thousands remembered takes under a hundred bytes.
struct Recent {
    /// When the first event was created, in nanoseconds since the Unix epoch.
    created: i64,
    count: i32,
    last: Instant,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("controller", &self.inner.controller)
            .finish_non_exhaustive()
    }
}

impl Events {
    /// Events reported by `controller`, from the instance named by `HOSTNAME` if set.
    pub fn new(client: Client, controller: &str) -> Self {
        let instance = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty());
        Events {
            inner: Arc::new(Inner {
                client,
                controller: controller.to_string(),
                instance: instance.unwrap_or_else(|| controller.to_string()),
                published: Mutex::new(Published {
                    events: HashMap::new(),
                    words: HashSet::new(),
                    swept: Instant::now(),
                }),
            }),
        }
    }

    /// A `Normal` event on `object`: something happened as expected. `reason` is CamelCase (what
    /// happened, e.g. `Created`), `action` what the controller did (e.g. `Create`), `note` a sentence for
    /// humans (cut to [`MAX_NOTE_BYTES`]).
    ///
    /// Published in the background: the caller does not wait for the API server (a reconcile that
    /// creates an object would otherwise spend a third of its time on the event). Must be called
    /// within a Tokio runtime; await [`Events::publish`] to wait for the write.
    pub fn normal<K>(&self, object: &K, reason: &str, action: &str, note: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        self.spawn(
            object.object_ref(&()),
            EventType::Normal,
            reason,
            action,
            note,
        );
    }

    /// A `Warning` event on `object`: something went wrong or needs attention. See
    /// [`Events::normal`] for the arguments; also published in the background.
    pub fn warning<K>(&self, object: &K, reason: &str, action: &str, note: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        self.spawn(
            object.object_ref(&()),
            EventType::Warning,
            reason,
            action,
            note,
        );
    }

    fn spawn(
        &self,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let (events, reason, action) = (self.clone(), reason.to_string(), action.to_string());
        let note = truncate(note, MAX_NOTE_BYTES).to_string();
        tokio::spawn(async move {
            events
                .publish(reference, type_, &reason, &action, &note)
                .await;
        });
    }

    /// Publishes an event on the object `reference` points to: creates it, or, for a repeat within
    /// [`REPEAT_WINDOW`], raises the count of the first one. The first note is the one shown.
    pub async fn publish(
        &self,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let now = Instant::now();
        let (key, repeat) =
            self.inner
                .repeat_of(Regarding::of(&reference), type_, reason, action, now);
        let published = match repeat {
            Some((created, count)) => self.count(&reference, created, count).await,
            None => Err(()),
        };
        let published = match published {
            Ok(recent) => Ok(recent),
            // The first time, or the first event is gone (deleted, or expired on the server).
            Err(()) => self.create(&reference, type_, reason, action, note).await,
        };
        match published {
            Ok(recent) => self.inner.remember(key, recent, now),
            Err(error) => {
                let object = reference.name.unwrap_or_default();
                warn!(%error, reason, object, "could not publish an event");
            }
        }
    }

    async fn create(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<Recent, kube::Error> {
        let now = Timestamp::now();
        // Nanoseconds since 1970 fit in 64 bits until 2262.
        let created = now.as_nanosecond() as i64;
        let event = Event {
            metadata: ObjectMeta {
                name: Some(self.event_name(reference, created)),
                namespace: Some(Self::namespace_of(reference).to_string()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(format!("{type_:?}")),
            reason: Some(reason.to_string()),
            action: Some(action.to_string()),
            note: Some(truncate(note, MAX_NOTE_BYTES).to_string()),
            regarding: Some(reference.clone()),
            reporting_controller: Some(self.inner.controller.clone()),
            reporting_instance: Some(self.inner.instance.clone()),
            ..Default::default()
        };
        let api =
            Api::<Event>::namespaced(self.inner.client.clone(), Self::namespace_of(reference));
        api.create(&PostParams::default(), &event).await?;
        Ok(Recent {
            created,
            count: 1,
            last: Instant::now(),
        })
    }

    /// Raises the count of the event on `reference` first created at `created` to `count + 1`.
    async fn count(
        &self,
        reference: &ObjectReference,
        created: i64,
        count: i32,
    ) -> Result<Recent, ()> {
        let series = EventSeries {
            count: count + 1,
            last_observed_time: MicroTime(Timestamp::now()),
        };
        let api =
            Api::<Event>::namespaced(self.inner.client.clone(), Self::namespace_of(reference));
        let patch = Patch::Merge(json!({ "series": series }));
        let name = self.event_name(reference, created);
        match api.patch(&name, &PatchParams::default(), &patch).await {
            Ok(_) => Ok(Recent {
                created,
                count: count + 1,
                last: Instant::now(),
            }),
            Err(_) => Err(()),
        }
    }

    /// The name of the event on `reference` created at `created` (nanoseconds): the object's name
    /// (the controller's for a reference without one) and the time in hex, unique per object.
    fn event_name(&self, reference: &ObjectReference, created: i64) -> String {
        let regarding = reference.name.as_deref().unwrap_or(&self.inner.controller);
        format!("{regarding}.{created:x}")
    }

    /// Events live in the namespace of the object they regard; those of cluster-scoped objects in
    /// `default`.
    fn namespace_of(reference: &ObjectReference) -> &str {
        reference.namespace.as_deref().unwrap_or("default")
    }
}

impl Inner {
    fn published(&self) -> std::sync::MutexGuard<'_, Published> {
        self.published.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The key of an event, and when the event it repeats was created and its count, if one was
    /// published within the window.
    fn repeat_of(
        &self,
        regarding: Regarding,
        type_: EventType,
        reason: &str,
        action: &str,
        now: Instant,
    ) -> (Key, Option<(i64, i32)>) {
        let mut published = self.published();
        let key = Key {
            regarding,
            type_,
            reason: published.word(reason),
            action: published.word(action),
        };
        let repeat = published
            .events
            .get(&key)
            .filter(|recent| now.duration_since(recent.last) < REPEAT_WINDOW)
            .map(|recent| (recent.created, recent.count));
        (key, repeat)
    }

    fn remember(&self, key: Key, recent: Recent, now: Instant) {
        let mut published = self.published();
        if now.duration_since(published.swept) >= SWEEP_EVERY {
            published
                .events
                .retain(|_, recent| now.duration_since(recent.last) < REPEAT_WINDOW);
            // The words no remembered event (nor one being published) uses any more.
            published.words.retain(|word| Arc::strong_count(word) > 1);
            published.swept = now;
        }
        published.events.insert(key, recent);
    }
}

impl Published {
    /// `text` as the one copy of it the events share.
    fn word(&mut self, text: &str) -> Arc<str> {
        if let Some(word) = self.words.get(text) {
            return word.clone();
        }
        let word: Arc<str> = Arc::from(text);
        self.words.insert(word.clone());
        word
    }
}

/// The longest prefix of `text` that fits in `max_bytes`, cut at a character boundary.
pub fn truncate(text: &str, max_bytes: usize) -> &str {
    let mut end = text.len().min(max_bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_that_are_uuids_are_kept_as_numbers() {
        assert_eq!(
            uuid("0f8fad5b-d9cb-469f-a165-70867728950e"),
            Some([0x0f8f_ad5b_d9cb_469f, 0xa165_7086_7728_950e])
        );
        for not_uuid in [
            "owner-uid",
            "0f8fad5b-d9cb-469f-a165-70867728950",
            "0f8fad5bxd9cb-469f-a165-70867728950e",
            "0f8fad5b-d9cb-469f-a165-70867728950g",
        ] {
            assert_eq!(uuid(not_uuid), None, "{not_uuid}");
        }
        let reference = |uid: Option<&str>| ObjectReference {
            kind: Some("ConfigMap".into()),
            namespace: Some("ns".into()),
            name: Some("a".into()),
            uid: uid.map(Into::into),
            ..Default::default()
        };
        assert_eq!(
            Regarding::of(&reference(Some("owner-uid"))),
            Regarding::Other("owner-uid".into())
        );
        assert_eq!(
            Regarding::of(&reference(None)),
            Regarding::Other("ConfigMap/ns/a".into())
        );
    }

    #[test]
    fn notes_fit_the_api_limit() {
        assert_eq!(truncate("short", MAX_NOTE_BYTES), "short");
        let long = "é".repeat(600); // 1200 bytes
        let cut = truncate(&long, MAX_NOTE_BYTES);
        assert_eq!(cut.len(), 1024);
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(truncate("", 2), "");
    }
}
