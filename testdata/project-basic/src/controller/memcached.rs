// Copyright The project-basic Authors
// SPDX-License-Identifier: Apache-2.0

//! The `Memcached` controller.
//!
//! As scaffolded it marks every Memcached `Ready` for the generation it has seen. Replace the body of
//! `reconcile` with what your operator does, and keep the RBAC markers in line with the API calls you make.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use tracing::{info, warn};

use super::{MANAGER_NAME, Manager};
use crate::api::v1alpha1::{Memcached, MemcachedStatus};
use crate::conditions::{condition, now, set_condition};
use crate::{Error, Result};

// The permissions of this controller; `make manifests` turns these markers into config/rbac/role.yaml.
// +rustbuilder:rbac:groups=cache.example.com,resources=memcacheds,verbs=get;list;watch
// +rustbuilder:rbac:groups=cache.example.com,resources=memcacheds/status,verbs=get;patch

/// Names this controller in metrics (`controller="memcached"`) and logs.
const NAME: &str = "memcached";

/// How many objects may be reconciled at the same time (one object is never reconciled twice at once).
const MAX_CONCURRENT_RECONCILES: u16 = 2;

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
}

/// Runs the controller until shutdown is requested, then lets in-flight reconciles finish.
pub async fn run(manager: Manager) {
    let api = Api::<Memcached>::all(manager.client());
    let config = controller::Config::default().concurrency(MAX_CONCURRENT_RECONCILES);
    let controller = Controller::new(api, watcher::Config::default())
        .with_config(config)
        .graceful_shutdown_on(manager.shutdown_signal());
    manager.ready_when_synced(controller.store());
    let metrics = manager
        .metrics()
        .controller(NAME, MAX_CONCURRENT_RECONCILES);
    let ctx = Arc::new(Context {
        client: manager.client(),
    });
    controller
        .run(metrics.instrument(reconcile), error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => info!(controller = NAME, %object, "reconciled"),
                Err(controller::Error::ReconcilerFailed(error, object)) => {
                    warn!(controller = NAME, %object, %error, "reconcile failed")
                }
                // E.g. the watch failed (no permission, API server unreachable); it is retried.
                Err(error) => warn!(controller = NAME, %error, "controller error"),
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
            .ok_or_else(|| Error::InvalidObject("no namespace".into()))?;
        let api: Api<Memcached> = Api::namespaced(ctx.client.clone(), &namespace);
        let patch = serde_json::json!({
            "apiVersion": Memcached::api_version(&()),
            "kind": Memcached::kind(&()),
            "status": status,
        });
        let params = PatchParams::apply(MANAGER_NAME).force();
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
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn a_new_object_becomes_ready() {
        let mut object = Memcached::new("sample", Default::default());
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
        let mut object = Memcached::new("sample", Default::default());
        object.metadata.generation = Some(1);
        object.status = Some(desired_status(&object, &at(100)));
        // Later reconciles compute the same status, so `reconcile` makes no API call.
        assert_eq!(Some(desired_status(&object, &at(200))), object.status);
    }
}
