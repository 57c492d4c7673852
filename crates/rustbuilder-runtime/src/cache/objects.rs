//! Where a cache keeps its objects: typed, in kube's own [`Store`], or packed.
//!
//! A typed object is quick to read and large: a `Deployment` decoded by serde takes about 9 KB,
//! most of it empty fields of structs (a `PodSpec` is large with nothing in it) and small strings
//! each allocated on its own. Packed, the same object is its JSON compressed with LZ4, against a
//! dictionary: the JSON of the first object the cache packed. The objects of one kind that one
//! controller makes differ in a few names and counts, so each takes a few hundred bytes, decoded
//! again (tens of microseconds) each time it is read. The caches of the objects a
//! manager owns are packed ([`Manager::owned`](crate::Manager::owned)): a controller reads a child
//! once per reconcile of its owner, while the cache holds every one of them all the time. A
//! controller's primary kind stays typed: kube's controller reads it from a [`Store`].
//!
//! A packed cache keeps, beside each object's bytes, the uid of its controller owner, so that the
//! index of children and the lists a late reader starts with need no decoding.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tracing::error;

use crate::ownership::controller_of;

/// The name (and namespace) of `object`, as the caches key their objects: without the uid and
/// resource version [`ObjectRef::from_obj`] copies too, which no lookup compares.
pub(crate) fn key_of<K: Resource<DynamicType = ()>>(object: &K) -> ObjectRef<K> {
    let meta = object.meta();
    let key = ObjectRef::new(meta.name.as_deref().unwrap_or_default());
    match &meta.namespace {
        Some(namespace) => key.within(namespace),
        None => key,
    }
}

/// How a cache keeps its objects.
pub(crate) enum Storage<K> {
    /// Decoded, in kube's [`Store`].
    Typed,
    /// LZ4-compressed JSON, decoded on read.
    Packed(Codec<K>),
}

impl<K> Storage<K> {
    /// Packed storage of objects of kind `K`.
    pub(crate) fn packed() -> Self
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        Storage::Packed(Codec {
            pack: PackedObject::pack::<K>,
            unpack: PackedObject::unpack::<K>,
        })
    }

    pub(crate) fn is_packed(&self) -> bool {
        matches!(self, Storage::Packed(_))
    }
}

/// Packs and unpacks objects of kind `K`: taken where `K`'s serde bounds are known, so that
/// readers of a cache need none.
pub(crate) struct Codec<K> {
    pack: fn(&K, &Dictionary) -> Option<PackedObject>,
    unpack: fn(&PackedObject, &Dictionary) -> Option<K>,
}

/// What a cache's objects are compressed against: the JSON of the first one it packed, set once
/// and kept as long as the cache (every packed object needs it to be read).
type Dictionary = Arc<OnceLock<Box<[u8]>>>;

fn dictionary(dictionary: &Dictionary) -> &[u8] {
    dictionary.get().map_or(&[], |bytes| bytes)
}

impl<K> Clone for Codec<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Codec<K> {}

/// One object as a packed cache keeps it: its JSON, LZ4-compressed, and its controller's uid.
#[derive(Clone)]
pub(crate) struct PackedObject {
    bytes: Arc<[u8]>,
    controller: Option<Arc<str>>,
}

impl PackedObject {
    fn pack<K: Serialize + Resource<DynamicType = ()>>(
        object: &K,
        against: &Dictionary,
    ) -> Option<PackedObject> {
        match serde_json::to_vec(object) {
            Ok(json) => Some(PackedObject {
                bytes: {
                    let against = against.get_or_init(|| json.clone().into_boxed_slice());
                    lz4_flex::block::compress_prepend_size_with_dict(&json, against).into()
                },
                controller: controller_of(object).map(|owner| owner.uid.as_str().into()),
            }),
            // Not seen: what serde decoded from JSON encodes again.
            Err(err) => {
                error!(kind = %K::kind(&()), %err, "cannot encode an object to cache it");
                None
            }
        }
    }

    fn unpack<K: DeserializeOwned>(&self, against: &Dictionary) -> Option<K> {
        let against = dictionary(against);
        let decoded = lz4_flex::block::decompress_size_prepended_with_dict(&self.bytes, against)
            .map_err(|err| err.to_string())
            .and_then(|json| serde_json::from_slice(&json).map_err(|err| err.to_string()));
        decoded
            .inspect_err(|err| error!(%err, "cannot decode a cached object"))
            .ok()
    }

    /// The uid of the object's controller owner, if it has one.
    pub(crate) fn controller(&self) -> Option<&str> {
        self.controller.as_deref()
    }
}

/// The objects of a cache, typed or packed; cheap to clone, clones read the same objects.
pub(crate) enum Objects<K: Resource<DynamicType = ()> + 'static> {
    Typed(Store<K>),
    Packed(Packed<K>),
}

impl<K: Resource<DynamicType = ()>> Clone for Objects<K> {
    fn clone(&self) -> Self {
        match self {
            Objects::Typed(store) => Objects::Typed(store.clone()),
            Objects::Packed(packed) => Objects::Packed(packed.clone()),
        }
    }
}

/// One object of a cache as it is kept, to hand to a reader that may never look at it.
pub(crate) enum Kept<K> {
    Typed(Arc<K>),
    Packed(PackedObject),
}

/// The packed objects of a cache, by reference.
pub(crate) struct Packed<K: Resource<DynamicType = ()> + 'static> {
    objects: Arc<RwLock<HashMap<ObjectRef<K>, PackedObject>>>,
    codec: Codec<K>,
    dictionary: Dictionary,
    /// True once the first list is in; closed when the writer goes.
    ready: watch::Receiver<bool>,
}

impl<K: Resource<DynamicType = ()>> Clone for Packed<K> {
    fn clone(&self) -> Self {
        Packed {
            objects: self.objects.clone(),
            codec: self.codec,
            dictionary: self.dictionary.clone(),
            ready: self.ready.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()>> Packed<K> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<ObjectRef<K>, PackedObject>> {
        // Each write replaces one entry or the whole map: a panic cannot leave it half-written.
        self.objects.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Decodes `packed`.
    pub(crate) fn unpack(&self, packed: &PackedObject) -> Option<K> {
        (self.codec.unpack)(packed, &self.dictionary)
    }
}

impl<K> Objects<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    /// Empty objects kept as `storage` says, and what writes them.
    pub(crate) fn new(storage: Storage<K>) -> (Objects<K>, ObjectsWriter<K>) {
        match storage {
            Storage::Typed => {
                let (store, writer) = reflector::store();
                (Objects::Typed(store), ObjectsWriter::Typed(writer))
            }
            Storage::Packed(codec) => {
                let objects = Arc::new(RwLock::new(HashMap::new()));
                let dictionary = Dictionary::default();
                let (ready, waiting) = watch::channel(false);
                let packed = Packed {
                    objects: objects.clone(),
                    codec,
                    dictionary: dictionary.clone(),
                    ready: waiting,
                };
                let writer = PackedWriter {
                    objects,
                    codec,
                    dictionary,
                    listing: None,
                    ready,
                };
                (Objects::Packed(packed), ObjectsWriter::Packed(writer))
            }
        }
    }

    pub(crate) fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        match self {
            Objects::Typed(store) => store.get(key),
            Objects::Packed(packed) => {
                let found = packed.read().get(key).cloned()?;
                packed.unpack(&found).map(Arc::new)
            }
        }
    }

    /// Whether an object of that name is kept, without decoding it.
    pub(crate) fn contains(&self, key: &ObjectRef<K>) -> bool {
        match self {
            Objects::Typed(store) => store.get(key).is_some(),
            Objects::Packed(packed) => packed.read().contains_key(key),
        }
    }

    /// Every object, decoded.
    pub(crate) fn state(&self) -> Vec<Arc<K>> {
        self.state_filter(|_| true)
    }

    /// The objects `keep` keeps, decoded.
    pub(crate) fn state_filter(&self, keep: impl Fn(&K) -> bool) -> Vec<Arc<K>> {
        match self {
            Objects::Typed(store) => store.state_filter(keep),
            Objects::Packed(packed) => {
                let all: Vec<PackedObject> = packed.read().values().cloned().collect();
                let decoded = all.iter().filter_map(|object| packed.unpack(object));
                decoded
                    .filter(|object| keep(object))
                    .map(Arc::new)
                    .collect()
            }
        }
    }

    /// Every object as it is kept, by name: no decoding.
    pub(crate) fn kept(&self) -> Vec<(ObjectRef<K>, Kept<K>)> {
        match self {
            Objects::Typed(store) => store
                .state()
                .into_iter()
                .map(|object| (key_of(&*object), Kept::Typed(object)))
                .collect(),
            Objects::Packed(packed) => packed
                .read()
                .iter()
                .map(|(key, object)| (key.clone(), Kept::Packed(object.clone())))
                .collect(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Objects::Typed(store) => store.len(),
            Objects::Packed(packed) => packed.read().len(),
        }
    }

    /// Waits until the first list is in; returns early if the writer went (at shutdown).
    pub(crate) async fn wait_until_ready(&self) {
        match self {
            Objects::Typed(store) => {
                let _ = store.wait_until_ready().await;
            }
            Objects::Packed(packed) => {
                let _ = packed.ready.clone().wait_for(|ready| *ready).await;
            }
        }
    }

    /// Decodes `kept`.
    pub(crate) fn unpack(&self, kept: Kept<K>) -> Option<Arc<K>> {
        match (kept, self) {
            (Kept::Typed(object), _) => Some(object),
            (Kept::Packed(object), Objects::Packed(packed)) => packed.unpack(&object).map(Arc::new),
            // A typed cache keeps nothing packed.
            (Kept::Packed(_), Objects::Typed(_)) => None,
        }
    }

    /// The uid of `kept`'s controller owner.
    pub(crate) fn controller_of(kept: &Kept<K>) -> Option<&str> {
        match kept {
            Kept::Typed(object) => controller_of(&**object).map(|owner| owner.uid.as_str()),
            Kept::Packed(object) => object.controller(),
        }
    }
}

/// What writes a cache's objects from its watch's events.
pub(crate) enum ObjectsWriter<K: Resource<DynamicType = ()> + Clone + 'static> {
    Typed(reflector::store::Writer<K>),
    Packed(PackedWriter<K>),
}

pub(crate) struct PackedWriter<K: Resource<DynamicType = ()> + 'static> {
    objects: Arc<RwLock<HashMap<ObjectRef<K>, PackedObject>>>,
    codec: Codec<K>,
    dictionary: Dictionary,
    /// The list coming in, which replaces the objects once whole.
    listing: Option<HashMap<ObjectRef<K>, PackedObject>>,
    ready: watch::Sender<bool>,
}

impl<K> ObjectsWriter<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    /// Records `event`, as kube's store writer does: a list replaces the objects once it is whole.
    pub(crate) fn apply(&mut self, event: &watcher::Event<K>) {
        let writer = match self {
            ObjectsWriter::Typed(writer) => return writer.apply_watcher_event(event),
            ObjectsWriter::Packed(writer) => writer,
        };
        let write = || writer.objects.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(object) => {
                let key = key_of(object);
                match (writer.codec.pack)(object, &writer.dictionary) {
                    Some(packed) => write().insert(key, packed),
                    None => write().remove(&key),
                };
            }
            watcher::Event::Delete(object) => {
                write().remove(&key_of(object));
            }
            watcher::Event::Init => writer.listing = Some(HashMap::new()),
            watcher::Event::InitApply(object) => {
                let listing = writer.listing.get_or_insert_default();
                if let Some(packed) = (writer.codec.pack)(object, &writer.dictionary) {
                    listing.insert(key_of(object), packed);
                }
            }
            watcher::Event::InitDone => {
                let mut listed = writer.listing.take().unwrap_or_default();
                listed.shrink_to_fit();
                *write() = listed;
                writer.ready.send_replace(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    fn config_map(name: &str, value: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                owner_references: Some(vec![OwnerReference {
                    uid: "owner-uid".into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            data: Some([("key".to_string(), value.to_string())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn packed_objects_read_back_as_written_and_a_list_replaces_them_once_whole() {
        let (objects, mut writer) = Objects::<ConfigMap>::new(Storage::packed());
        let (a, b) = (config_map("a", "1"), config_map("b", "2"));
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(a.clone()));
        assert_eq!(objects.len(), 0, "a list counts once it is whole");
        writer.apply(&watcher::Event::InitApply(b.clone()));
        writer.apply(&watcher::Event::InitDone);
        assert_eq!(objects.get(&ObjectRef::from_obj(&a)).as_deref(), Some(&a));

        let a2 = config_map("a", "changed");
        writer.apply(&watcher::Event::Apply(a2.clone()));
        writer.apply(&watcher::Event::Delete(b.clone()));
        assert_eq!(objects.state(), [Arc::new(a2.clone())]);
        assert!(!objects.contains(&ObjectRef::from_obj(&b)));

        // A relist without `a` removes it, but only when it is whole.
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(b.clone()));
        assert!(objects.contains(&ObjectRef::from_obj(&a2)));
        writer.apply(&watcher::Event::InitDone);
        let kept = objects.kept();
        assert_eq!(kept.len(), 1);
        assert_eq!(Objects::controller_of(&kept[0].1), Some("owner-uid"));
        assert_eq!(kept[0].0, ObjectRef::from_obj(&b));
    }

    #[test]
    fn objects_alike_pack_to_their_differences() {
        let dictionary = Dictionary::default();
        let object = |name: &str| {
            let mut object = config_map(name, &"the same long value in every one, ".repeat(20));
            object.metadata.labels = Some([("app".to_string(), name.to_string())].into());
            object
        };
        let first = PackedObject::pack(&object("first"), &dictionary).unwrap();
        let second = object("second");
        let packed = PackedObject::pack(&second, &dictionary).unwrap();
        let alone = lz4_flex::compress_prepend_size(&serde_json::to_vec(&second).unwrap());
        assert!(
            packed.bytes.len() * 4 < alone.len(),
            "{} bytes against the first object, {} alone",
            packed.bytes.len(),
            alone.len()
        );
        assert_eq!(packed.unpack::<ConfigMap>(&dictionary), Some(second));
        assert!(first.unpack::<ConfigMap>(&dictionary).is_some());
    }
}
