//! Deleting what a controller made and no longer wants: finished Jobs beyond a history limit, the
//! Pods of a scaled-down set, the objects of a feature turned off. And reading an owner's children
//! from the API server itself, for the decision a lagging cache must not make.
//!
//! [`delete`] takes objects as a [`Cache`](crate::cache::Cache) holds them (e.g. from
//! [`Cache::children_of`](crate::cache::Cache::children_of)) and deletes each with a
//! [`PropagationPolicy`] for what it owns in turn, and a precondition on its uid: an object
//! re-created under the same name since the cache saw it is left alone.
//!
//! ```no_run
//! # use k8s_openapi::api::batch::v1::{CronJob, Job};
//! # async fn f(manager: rustbuilder_runtime::Manager, cronjob: &CronJob) -> Result<(), kube::Error> {
//! use kube::api::PropagationPolicy;
//! use rustbuilder_runtime::children;
//!
//! // Keep the three newest finished Jobs of a CronJob; delete the rest with their Pods.
//! let mut finished: Vec<_> = manager.owned::<Job>().children_of(cronjob).into_iter()
//!     .filter(|job| job.status.as_ref().is_some_and(|s| s.completion_time.is_some()))
//!     .collect();
//! finished.sort_by_key(|job| job.status.as_ref().and_then(|s| s.completion_time.clone()));
//! let excess = finished.len().saturating_sub(3);
//! children::delete(&manager.client(), &finished[..excess], PropagationPolicy::Background).await?;
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, DeleteParams, ListParams, Preconditions, PropagationPolicy};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::debug;

/// Deletes `objects` (namespaced, each in its own namespace), their dependents as `propagation`
/// says. An object already gone, or replaced by another of the same name, is skipped. Returns how
/// many delete requests the API server accepted.
pub async fn delete<K>(
    client: &Client,
    objects: &[Arc<K>],
    propagation: PropagationPolicy,
) -> Result<usize, kube::Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + DeserializeOwned,
{
    let mut deleted = 0;
    for object in objects {
        let namespace = object.namespace().unwrap_or_default();
        let api = Api::<K>::namespaced(client.clone(), &namespace);
        let params = DeleteParams {
            propagation_policy: Some(propagation.clone()),
            preconditions: object.uid().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let name = object.name_any();
        match api.delete(&name, &params).await {
            Ok(_) => deleted += 1,
            // Gone already (404), or replaced by a new object of that name (409: uid mismatch).
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                debug!(%namespace, %name, code = status.code, "not deleted: gone or replaced");
            }
            Err(error) => return Err(error),
        }
    }
    Ok(deleted)
}

/// The objects of kind `K` that `owner` controls, as the API server holds them now: a consistent
/// LIST of `K` in the owner's namespace, not the cache.
///
/// A cache can be a moment behind (a Job created by the last reconcile whose event has not
/// arrived, a standby that has just taken over with a watch that lags). Most decisions can take
/// that, since the next event corrects them; one that cannot be undone cannot: "no Job runs, so
/// start one" under a `Forbid` policy starts a second Job. Read those children here, just before
/// deciding, and the cache everywhere else: the LIST costs the API server the whole namespace's
/// objects of kind `K`.
pub async fn list_now<K, O>(client: &Client, owner: &O) -> Result<Vec<Arc<K>>, kube::Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + DeserializeOwned,
    O: Resource,
{
    let Some(uid) = owner.meta().uid.as_deref() else {
        return Ok(Vec::new());
    };
    let namespace = owner.meta().namespace.as_deref().unwrap_or_default();
    let api = Api::<K>::namespaced(client.clone(), namespace);
    // No `resourceVersion`: a quorum read, at least as new as every write acknowledged before it.
    let listed = api.list(&ListParams::default()).await?;
    let controlled = |object: &K| {
        let owners = object.meta().owner_references.iter().flatten();
        owners
            .filter(|o| o.controller == Some(true))
            .any(|o| o.uid == uid)
    };
    Ok(listed
        .items
        .into_iter()
        .filter(controlled)
        .map(Arc::new)
        .collect())
}
