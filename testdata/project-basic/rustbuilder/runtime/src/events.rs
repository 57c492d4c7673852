//! Kubernetes events on the objects a controller manages, shown by `kubectl describe`.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use tracing::warn;

/// The API's limit on an event note, in bytes.
pub const MAX_NOTE_BYTES: usize = 1024;

/// Publishes events as one reporting controller (the manager's name; the instance is the pod name,
/// `HOSTNAME`, so events tell replicas apart). Repeats of an event are counted by the recorder rather
/// than stored again. Cheap to clone.
///
/// Events are informative: failing to publish one is logged and otherwise ignored, so publishing
/// never fails a reconcile.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

impl Events {
    /// Events reported by `controller`, from the instance named by `HOSTNAME` if set.
    pub fn new(client: Client, controller: &str) -> Self {
        let instance = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty());
        let reporter = Reporter {
            controller: controller.to_string(),
            instance,
        };
        Events {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// A `Normal` event on `object`: something happened as expected. `reason` is CamelCase (what
    /// happened, e.g. `Created`), `action` what the controller did (e.g. `Create`), `note` a sentence for
    /// humans (cut to [`MAX_NOTE_BYTES`]).
    pub async fn normal<K>(&self, object: &K, reason: &str, action: &str, note: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(
            object.object_ref(&()),
            EventType::Normal,
            reason,
            action,
            note,
        )
        .await;
    }

    /// A `Warning` event on `object`: something went wrong or needs attention. See
    /// [`Events::normal`] for the arguments.
    pub async fn warning<K>(&self, object: &K, reason: &str, action: &str, note: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(
            object.object_ref(&()),
            EventType::Warning,
            reason,
            action,
            note,
        )
        .await;
    }

    /// Publishes an event on the object `reference` points to.
    pub async fn publish(
        &self,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(truncate(note, MAX_NOTE_BYTES).to_string()),
            action: action.into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            let object = reference.name.unwrap_or_default();
            warn!(%error, reason, object, "could not publish an event");
        }
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
    fn notes_fit_the_api_limit() {
        assert_eq!(truncate("short", MAX_NOTE_BYTES), "short");
        let long = "é".repeat(600); // 1200 bytes
        let cut = truncate(&long, MAX_NOTE_BYTES);
        assert_eq!(cut.len(), 1024);
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(truncate("", 2), "");
    }
}
