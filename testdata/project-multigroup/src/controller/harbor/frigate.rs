// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! The `Frigate` controller.
//!
//! As scaffolded it marks every Frigate `Ready` for the generation it has seen. Replace the body of
//! [`reconcile`] with what your operator does, and keep the RBAC markers in line with the API calls
//! it makes (`make manifests` turns them into `config/rbac/role.yaml`).

use std::sync::Arc;

use kube::runtime::controller::Action;
use kube::{Api, Client, ResourceExt};
use rustbuilder_runtime::{Manager, apply, conditions};

use crate::api::harbor::v1::{Frigate, FrigateStatus};
use crate::controller::MANAGER_NAME;
use crate::{Error, Result};

// +rustbuilder:rbac:groups=harbor.example.com,resources=frigates,verbs=get;list;watch
// +rustbuilder:rbac:groups=harbor.example.com,resources=frigates/status,verbs=get;patch
// The runtime reports a failed reconcile as an event on the object.
// +rustbuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

/// What every reconcile shares.
pub struct Context {
    /// Client for the Kubernetes API.
    pub client: Client,
}

/// Runs the controller until shutdown is requested, then lets in-flight reconciles finish.
pub async fn run(manager: Manager) {
    let ctx = Arc::new(Context {
        client: manager.client(),
    });
    // Every Frigate the manager watches: cluster-wide, or in `--watch-namespace` only.
    manager
        .controller(manager.api::<Frigate>(), "harbor-frigate")
        .run(reconcile, ctx)
        .await;
}

/// Brings the cluster in line with one Frigate. It runs on every change of the object, so it
/// must be idempotent: compute what should be, compare, and write only the difference. An error
/// is retried with exponential backoff.
pub async fn reconcile(object: Arc<Frigate>, ctx: Arc<Context>) -> Result<Action> {
    // TODO(user): create or update what the Frigate describes here, then report it in the status.
    let namespace = object
        .namespace()
        .ok_or_else(|| Error::InvalidObject("no namespace".into()))?;
    let api = Api::<Frigate>::namespaced(ctx.client.clone(), &namespace);
    // Writes the status only when it differs from what the object reports.
    apply::status(&api, &*object, &desired_status(&object), MANAGER_NAME).await?;
    // Nothing to do until the object changes again.
    Ok(Action::await_change())
}

/// The status the scaffold reports: `Ready=True` for the generation it has seen. A pure function of
/// the object, so it is unit-tested below without a cluster.
pub fn desired_status(object: &Frigate) -> FrigateStatus {
    let generation = object.metadata.generation;
    let mut status = object.status.clone().unwrap_or_default();
    let message = format!("generation {} reconciled", generation.unwrap_or_default());
    let ready = conditions::new("Ready", true, "Reconciled", message, generation);
    conditions::set(&mut status.conditions, ready);
    status.observed_generation = generation;
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_object_becomes_ready() {
        let mut object = Frigate::new("sample", Default::default());
        object.metadata.generation = Some(3);
        let status = desired_status(&object);
        assert_eq!(status.observed_generation, Some(3));
        let [ready] = status.conditions.as_slice() else {
            panic!("expected one condition: {:?}", status.conditions);
        };
        assert_eq!(
            (ready.type_.as_str(), ready.status.as_str()),
            ("Ready", "True")
        );
    }

    #[test]
    fn a_reconciled_object_needs_no_update() {
        let mut object = Frigate::new("sample", Default::default());
        object.metadata.generation = Some(1);
        object.status = Some(desired_status(&object));
        // Later reconciles compute the same status, so `reconcile` writes nothing.
        assert_eq!(Some(desired_status(&object)), object.status);
    }
}
