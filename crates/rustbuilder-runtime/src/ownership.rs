//! Who controls an object: its controller reference. A leaf every layer reads (caches index
//! children by it, shards follow it, the owned-object cache checks it); re-exported by
//! [`owned`](crate::owned).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

/// The controller of `child`: its owner reference with `controller: true`, if any.
pub fn controller_of<K: Resource>(child: &K) -> Option<&OwnerReference> {
    child
        .meta()
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|owner| owner.controller == Some(true))
}

/// Whether `owner` controls `child`: `child`'s controller reference names `owner`'s uid. False for an
/// owner without a uid (not read from the API).
pub fn controlled_by<C: Resource, O: Resource>(child: &C, owner: &O) -> bool {
    let uid = owner.meta().uid.as_deref();
    uid.is_some() && controller_of(child).map(|o| o.uid.as_str()) == uid
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn owner_ref(uid: &str, controller: Option<bool>) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: uid.into(),
            controller,
            ..Default::default()
        }
    }

    fn child(owners: Vec<OwnerReference>) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some("child".into()),
                owner_references: Some(owners),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn owner(uid: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("owner".into()),
                uid: uid.map(String::from),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn controller_references() {
        let plain = child(vec![owner_ref("1", None), owner_ref("2", Some(false))]);
        assert!(controller_of(&plain).is_none());
        assert!(!controlled_by(&plain, &owner(Some("1"))));

        let controlled = child(vec![owner_ref("1", None), owner_ref("2", Some(true))]);
        assert_eq!(controller_of(&controlled).unwrap().uid, "2");
        assert!(controlled_by(&controlled, &owner(Some("2"))));
        assert!(!controlled_by(&controlled, &owner(Some("1"))));
        assert!(!controlled_by(&controlled, &owner(None)));
        assert!(!controlled_by(&child(vec![]), &owner(None)));
    }
}
