//! Cleaning up before an object goes: kube's finalizer helper, with the two paths of a reconcile
//! spelled out.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # use kube::Api;
//! # use kube::runtime::controller::Action;
//! use rustbuilder_runtime::finalizer;
//!
//! async fn reconcile(object: Arc<ConfigMap>, api: Api<ConfigMap>) -> Result<Action, finalizer::Error<kube::Error>> {
//!     finalizer::guard(&api, "example.com/cleanup", object, async |object| {
//!         // bring the world in line with `object`
//!         Ok(Action::await_change())
//!     }, async |object| {
//!         // release what `object` holds outside the cluster; the finalizer goes once this succeeds
//!         Ok(Action::await_change())
//!     })
//!     .await
//! }
//! ```

use std::fmt::Debug;
use std::sync::Arc;

use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event, finalizer};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use kube::runtime::finalizer::Error;

/// Runs `apply` for a live object, after making sure it carries the finalizer `name`; runs
/// `cleanup` once the object is being deleted, then removes the finalizer so that the deletion
/// completes. A failed `cleanup` keeps the finalizer (and the object) and is retried like any
/// failed reconcile.
pub async fn guard<K, E>(
    api: &Api<K>,
    name: &str,
    object: Arc<K>,
    apply: impl AsyncFnOnce(Arc<K>) -> Result<Action, E>,
    cleanup: impl AsyncFnOnce(Arc<K>) -> Result<Action, E>,
) -> Result<Action, Error<E>>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    E: std::error::Error + 'static,
{
    finalizer(api, name, object, async |event| match event {
        Event::Apply(object) => apply(object).await,
        Event::Cleanup(object) => cleanup(object).await,
    })
    .await
}

/// Whether `object` is being deleted (it has a deletion timestamp and waits for its finalizers).
pub fn is_deleting<K: Resource>(object: &K) -> bool {
    object.meta().deletion_timestamp.is_some()
}

/// Whether `object` carries the finalizer `name`.
pub fn has<K: Resource>(object: &K, name: &str) -> bool {
    object
        .finalizers()
        .iter()
        .any(|finalizer| finalizer == name)
}
