//! Owned objects selected on the API server: each carries its owner's *bucket* in a label.
//!
//! The API server's `shardSelector` hashes an object's own uid, so it cannot pick the children of a
//! member's objects. A label can: a child written by a member of a shard group (by
//! [`apply`](crate::apply::apply) or [`apply_scalable`](crate::apply::apply_scalable)) carries
//! [`BUCKET_LABEL`]`=<bucket>`, where the bucket is the top byte of its controller owner's hash, in
//! two hex digits. A member then lists and watches its children with `<label> in (<buckets>)`: the
//! 256 buckets each cover 1/256 of the hash space, so the selection holds the member's part and, at
//! its two ends, a few objects of its neighbours, which the cache drops by the exact hash.
//!
//! Only [`Manager::owned_labelled`](crate::Manager::owned_labelled) caches select by the label;
//! [`Manager::owned`](crate::Manager::owned) ones place each child by its controller reference as
//! it arrives. In a labelled cache, a child without the bucket label (written before the replicas
//! were sharded, or by other code) is not selected until its owner's next reconcile applies it with
//! the label: every object is reconciled when a member starts its range, so that happens at once.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};

use kube::Resource;

use super::range::{Ranges, hash};
use crate::ownership::controller_of;

/// The label holding the bucket of a child's controller owner: two hex digits, `00` to `ff`.
pub const BUCKET_LABEL: &str = "rustbuilder.io/shard-bucket";

/// Whether this process is a member of a shard group, so that what it applies is labelled.
static LABEL_CHILDREN: AtomicBool = AtomicBool::new(false);

/// From now on, the children this process applies carry their owner's bucket. Called when it joins
/// a shard group; never undone (a label of a stopped member is harmless).
pub(crate) fn label_children() {
    LABEL_CHILDREN.store(true, Ordering::Relaxed);
}

/// The bucket of `hash` as the label writes it: its top byte in two hex digits.
pub fn bucket(hash: u64) -> String {
    format!("{:02x}", hash >> 56)
}

/// The label selector term that holds every object of `ranges`' buckets, or `None` when the ranges
/// cover the whole space (then every object is wanted, labelled or not).
pub(crate) fn selector(ranges: &Ranges) -> Option<String> {
    if ranges.is_full() {
        return None;
    }
    let mut buckets: Vec<u64> = Vec::new();
    for range in ranges.ranges() {
        let last = u64::try_from(range.end() - 1).expect("a range ends at 2^64 at most");
        for top in range.start() >> 56..=last >> 56 {
            if buckets.last() != Some(&top) {
                buckets.push(top);
            }
        }
    }
    let values: Vec<String> = buckets.iter().map(|top| format!("{top:02x}")).collect();
    Some(format!("{BUCKET_LABEL} in ({})", values.join(",")))
}

/// `desired` with its controller owner's bucket label, when this process is a shard member and
/// `desired` has a controller owner; else `desired` itself.
pub(crate) fn labelled<K: Resource + Clone>(desired: &K) -> Cow<'_, K> {
    if !LABEL_CHILDREN.load(Ordering::Relaxed) {
        return Cow::Borrowed(desired);
    }
    let Some(owner) = controller_of(desired) else {
        return Cow::Borrowed(desired);
    };
    let value = bucket(hash(&owner.uid));
    let labels = desired.meta().labels.as_ref();
    if labels.and_then(|l| l.get(BUCKET_LABEL)) == Some(&value) {
        return Cow::Borrowed(desired);
    }
    let mut object = desired.clone();
    object
        .meta_mut()
        .labels
        .get_or_insert_with(Default::default)
        .insert(BUCKET_LABEL.to_string(), value);
    Cow::Owned(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::Range;

    #[test]
    fn a_part_selects_the_buckets_it_touches() {
        // A third of the space: 0x00.. up to 0x5555...55 (excluded) touches buckets 00 to 55.
        let third = Ranges::from(Range::part(0, 3));
        let first = selector(&third).unwrap();
        assert!(first.starts_with("rustbuilder.io/shard-bucket in (00,01,"));
        assert!(first.ends_with(",54,55)"), "{first}");
        // The next third starts inside bucket 55: both select it, and the cache keeps each object once.
        let second = selector(&Ranges::from(Range::part(1, 3))).unwrap();
        assert!(second.contains("in (55,56,"), "{second}");
        assert!(second.ends_with(",aa)"), "{second}");
        let last = selector(&Ranges::from(Range::part(2, 3))).unwrap();
        assert!(last.ends_with(",fe,ff)"), "{last}");
        assert_eq!(selector(&Ranges::full()), None);
    }

    #[test]
    fn ranges_in_one_bucket_select_it_once() {
        let two = Ranges::new([
            Range::new(0x1000, 0x2000).unwrap(),
            Range::new(0x3000, 0x4000).unwrap(),
        ]);
        assert_eq!(
            selector(&two).unwrap(),
            "rustbuilder.io/shard-bucket in (00)"
        );
    }

    #[test]
    fn a_member_labels_children_with_their_owners_bucket() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: "abc".into(),
            controller: Some(true),
            ..Default::default()
        };
        let mut child = ConfigMap::default();
        child.metadata.owner_references = Some(vec![owner]);
        let orphan = ConfigMap::default();

        label_children();
        let labelled_child = labelled(&child);
        let labels = labelled_child.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[BUCKET_LABEL], "e7"); // hash("abc") = 0xe71f...
        assert!(matches!(labelled(&*labelled_child), Cow::Borrowed(_)));
        assert!(matches!(labelled(&orphan), Cow::Borrowed(_)));
    }

    #[test]
    fn the_bucket_is_the_hash_top_byte() {
        assert_eq!(bucket(0xe71f_a219_0541_574b), "e7");
        assert_eq!(bucket(0x0100_0000_0000_0000), "01");
        assert_eq!(bucket(0), "00");
    }
}
