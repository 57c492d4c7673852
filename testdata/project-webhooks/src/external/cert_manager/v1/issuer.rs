// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! `Issuer` (cert-manager.io/v1), a kind another operator owns: Rust types generated
//! by rustbuilder from the `v1` schema of the CRD `issuers.cert-manager.io`, kept in
//! `config/crd/external/cert-manager.io_issuers.yaml`.
//!
//! Do not edit: the file is written again whenever the types are regenerated. To follow a new release
//! of the CRD, replace that file with it, then run
//!
//! ```sh
//! rustbuilder create api --group cert-manager --version v1 --kind Issuer \
//!   --resource=false --controller=false --external-api-path config/crd/external/cert-manager.io_issuers.yaml
//! ```
//!
//! (`rustbuilder alpha generate` regenerates them too).

use kube::CustomResource;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How the Issuer signs certificates.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "cert-manager.io",
    version = "v1",
    kind = "Issuer",
    plural = "issuers",
    namespaced,
    status = "IssuerStatus"
)]
#[kube(schema = "disabled")]
pub struct IssuerSpec {
    /// Sign with a CA whose key pair is in a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<IssuerSpecCa>,
    /// Sign each certificate with its own key.
    #[serde(
        rename = "selfSigned",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub self_signed: Option<BTreeMap<String, serde_json::Value>>,
}

/// `spec.ca` of a Issuer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IssuerSpecCa {
    /// The Secret that holds the CA's key pair.
    #[serde(rename = "secretName")]
    pub secret_name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IssuerStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<IssuerStatusConditions>>,
}

/// `status.conditions[]` of a Issuer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IssuerStatusConditions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub status: String,
    pub r#type: String,
}
