// Copyright The project-basic Authors
// SPDX-License-Identifier: Apache-2.0

//! The `Memcached` controller.
//!
//! As scaffolded it marks every Memcached `Ready` for the generation it has seen. Replace the body of
//! `reconcile` with what your operator does, and keep the RBAC markers in line with the API calls you make.

use std::sync::Arc;
use std::time::Duration;

use futures::{Future, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use tracing::{info, warn};

use crate::api::v1alpha1::{Memcached, MemcachedStatus};
use crate::conditions::{condition, now, set_condition};
use crate::{Error, Result};

// The permissions of this controller; `make manifests` turns these markers into config/rbac/role.yaml.
// +rustbuilder:rbac:groups=cache.example.com,resources=memcacheds,verbs=get;list;watch
// +rustbuilder:rbac:groups=cache.example.com,resources=memcacheds/status,verbs=get;patch

/// Identifies this controller's changes in `managedFields` (server-side apply).
const FIELD_MANAGER: &str = "project-basic";

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
}

/// Runs the controller until `shutdown` resolves, then lets in-flight reconciles finish.
pub async fn run(client: Client, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let memcacheds = Api::<Memcached>::all(client.clone());
    Controller::new(memcacheds, watcher::Config::default())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, Arc::new(Context { client }))
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => info!(%object, "reconciled"),
                Err(error) => warn!(%error, "reconcile failed"),
            }
        })
        .await;
}

/// Brings the cluster in line with one Memcached. It runs on every change of the object, so it must be
/// idempotent: compute what should be, compare, and write only the difference.
async fn reconcile(object: Arc<Memcached>, ctx: Arc<Context>) -> Result<Action> {
    // TODO(user): create or update what the Memcached describes here, then report it in the status.
    let status = desired_status(&object, &now());
    if object.status.as_ref() != Some(&status) {
        let namespace = object
            .namespace()
            .ok_or_else(|| Error::Invalid("no namespace".into()))?;
        let api: Api<Memcached> = Api::namespaced(ctx.client.clone(), &namespace);
        let patch = serde_json::json!({
            "apiVersion": Memcached::api_version(&()),
            "kind": Memcached::kind(&()),
            "status": status,
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let name = object.name_any();
        let patch = Patch::Apply(patch);
        api.patch_status(&name, &params, &patch).await?;
    }
    // Nothing to do until the object changes again.
    Ok(Action::await_change())
}

/// Decides what happens after a failed reconcile: here, a retry after a short pause.
fn error_policy(_object: Arc<Memcached>, error: &Error, _ctx: Arc<Context>) -> Action {
    warn!(error = error.metric_label(), "will retry");
    Action::requeue(Duration::from_secs(5))
}

/// The status the scaffold reports: `Ready=True` for the generation it has seen. A pure function of the
/// object (and the clock, passed in), so it is unit-tested below without a cluster.
pub fn desired_status(object: &Memcached, now: &Time) -> MemcachedStatus {
    let generation = object.metadata.generation;
    let mut status = object.status.clone().unwrap_or_default();
    let message = format!("generation {} reconciled", generation.unwrap_or_default());
    let ready = condition("Ready", "True", "Reconciled", message, generation, now);
    set_condition(&mut status.conditions, ready);
    status.observed_generation = generation;
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::v1alpha1::MemcachedSpec;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn a_new_object_becomes_ready() {
        let mut object = Memcached::new("sample", MemcachedSpec::default());
        object.metadata.generation = Some(3);
        let status = desired_status(&object, &at(100));
        assert_eq!(status.observed_generation, Some(3));
        let [ready] = status.conditions.as_slice() else {
            panic!("expected one condition: {:?}", status.conditions);
        };
        assert_eq!(ready.type_, "Ready");
        assert_eq!(ready.status, "True");
    }

    #[test]
    fn a_reconciled_object_needs_no_update() {
        let mut object = Memcached::new("sample", MemcachedSpec::default());
        object.metadata.generation = Some(1);
        object.status = Some(desired_status(&object, &at(100)));
        // Later reconciles compute the same status, so `reconcile` makes no API call.
        assert_eq!(Some(desired_status(&object, &at(200))), object.status);
    }
}
