// Copyright The project-basic Authors
// SPDX-License-Identifier: Apache-2.0

//! project-basic: Kubernetes APIs (`api`) and the controllers that reconcile them (`controller`).
//!
//! The manager binary (`src/main.rs`) runs the controllers; `src/bin/crdgen.rs` prints the CRDs.

pub mod api;
pub mod conditions;
pub mod controller;

/// Everything a reconcile can fail with. `error_policy` decides what happens next (usually a retry with
/// backoff); `metric_label` names the variant in logs and metrics.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),

    #[error("finalizer error: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),

    #[error("invalid object: {0}")]
    Invalid(String),
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Finalizer(_) => "finalizer",
            Error::Invalid(_) => "invalid",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
