// Copyright The project Authors
// SPDX-License-Identifier: Apache-2.0

//! project: Kubernetes APIs (`api`) and the controllers that reconcile them (`controller`).
//!
//! The manager binary (`src/main.rs`) runs the controllers with what `manager` provides (shared handle,
//! health probes, metrics endpoint, leader election) and records `metrics`; `src/bin/crdgen.rs` prints
//! the CRDs.

pub mod api;
pub mod conditions;
pub mod controller;
pub mod manager;
pub mod metrics;

/// Everything that can make a reconcile fail. `error_policy` decides what happens next (a retry with
/// backoff); `metric_label` names the variant in logs and metrics. Add variants as your reconcilers gain new
/// ways to fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Kubernetes client failed: configuration, connection, or an API call.
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),

    /// Adding or removing a finalizer, or the reconcile it wraps, failed.
    #[error("finalizer error: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),

    /// An object could not be converted to or from JSON.
    #[error("serialization error: {0}")]
    Serialization(#[from] serde_json::Error),

    /// An object lacks something the controller needs (a name, a namespace, a uid).
    #[error("invalid object: {0}")]
    InvalidObject(String),

    /// An object the controller would manage already belongs to someone else.
    #[error("conflict: {0}")]
    Conflict(String),
}

impl Error {
    /// A short, stable name of the error kind, for log fields and metric labels.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Finalizer(_) => "finalizer",
            Error::Serialization(_) => "serialization",
            Error::InvalidObject(_) => "invalid_object",
            Error::Conflict(_) => "conflict",
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
