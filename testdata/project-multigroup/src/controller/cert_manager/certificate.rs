// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! The `Certificate` controller.
//!
//! `Certificate` (cert-manager.io) is another operator's kind: the project does not define it, that
//! operator installs its CRD. Its Rust types are generated from the CRD into
//! `crate::external::cert_manager::v1`. The controller watches every Certificate in the cluster and, as
//! scaffolded, only logs the ones that change. Replace the body of [`reconcile`] with what your operator does, and
//! keep the RBAC markers in line with the API calls it makes (`make manifests` turns them into
//! `config/rbac/role.yaml`).

use std::sync::Arc;

use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use rustbuilder_runtime::Manager;
use tracing::info;

use crate::Result;
use crate::external::cert_manager::v1::Certificate;

// +rustbuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch
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
    // Every Certificate the manager watches: cluster-wide, or in `--watch-namespace` only.
    manager
        .controller(manager.api::<Certificate>(), "cert-manager-certificate")
        .run(reconcile, ctx)
        .await;
}

/// Reacts to one Certificate. It runs on every change of the object (and again after an error, with
/// exponential backoff), so it must be idempotent: compute what should be, compare, and write only the
/// difference, with `ctx.client`.
pub async fn reconcile(object: Arc<Certificate>, _ctx: Arc<Context>) -> Result<Action> {
    // TODO(user): act on the Certificate here.
    info!(
        name = %object.name_any(),
        namespace = %object.namespace().unwrap_or_default(),
        generation = ?object.metadata.generation,
        "Certificate changed"
    );
    // Nothing to do until the object changes again.
    Ok(Action::await_change())
}
