// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! project-cronjob: Kubernetes APIs (`api`) and the controllers that reconcile them (`controller`).
//!
//! `src/main.rs` runs the controllers on rustbuilder's runtime; `src/bin/crdgen.rs` writes the CRDs.

pub mod api;
pub mod controller;
pub mod webhook;
// +rustbuilder:scaffold:modules

/// Everything that can make a reconcile fail. The runtime logs it, counts it in
/// `controller_runtime_reconcile_errors_total` and retries the object with exponential backoff. Add
/// variants as your reconcilers gain new ways to fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Kubernetes client failed: configuration, connection, or an API call.
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),

    /// An object could not be converted to or from JSON.
    #[error("serialization error: {0}")]
    Serialization(#[from] serde_json::Error),

    /// An object lacks something the controller needs (a name, a namespace, a uid).
    #[error("invalid object: {0}")]
    InvalidObject(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
