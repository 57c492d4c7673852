// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! `Certificate` (cert-manager.io/v1), a kind another operator owns: Rust types generated
//! by rustbuilder from the `v1` schema of the CRD `certificates.cert-manager.io`, kept in
//! `config/crd/external/cert-manager.io_certificates.yaml`.
//!
//! Do not edit: the file is written again whenever the types are regenerated. To follow a new release
//! of the CRD, replace that file with it, then run
//!
//! ```sh
//! rustbuilder create api --group cert-manager --version v1 --kind Certificate \
//!   --resource=false --controller=false --external-api-path config/crd/external/cert-manager.io_certificates.yaml
//! ```
//!
//! (`rustbuilder alpha generate` regenerates them too).

use kube::CustomResource;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Specification of the desired state of the Certificate resource.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "cert-manager.io",
    version = "v1",
    kind = "Certificate",
    plural = "certificates",
    namespaced,
    status = "CertificateStatus"
)]
#[kube(schema = "disabled")]
pub struct CertificateSpec {
    /// Defines extra output formats of the private key and signed certificate chain.
    #[serde(
        rename = "additionalOutputFormats",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub additional_output_formats: Option<Vec<CertificateSpecAdditionalOutputFormats>>,
    /// Requested common name X509 certificate subject attribute.
    /// NOTE: TLS clients will ignore this value when any subject alternative name is set.
    #[serde(
        rename = "commonName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub common_name: Option<String>,
    /// Requested DNS subject alternative names.
    #[serde(rename = "dnsNames", default, skip_serializing_if = "Option::is_none")]
    pub dns_names: Option<Vec<String>>,
    /// Requested 'duration' (i.e. lifetime) of the Certificate, e.g. `2160h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// Requested basic constraints isCA value.
    #[serde(rename = "isCA", default, skip_serializing_if = "Option::is_none")]
    pub is_ca: Option<bool>,
    /// Reference to the issuer responsible for issuing the certificate.
    /// If the issuer is namespace-scoped, it must be in the same namespace
    /// as the Certificate. If the issuer is cluster-scoped, it can be used
    /// from any namespace.
    #[serde(rename = "issuerRef")]
    pub issuer_ref: CertificateSpecIssuerRef,
    /// Private key options.
    #[serde(
        rename = "privateKey",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub private_key: Option<CertificateSpecPrivateKey>,
    #[serde(
        rename = "renewBefore",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub renew_before: Option<String>,
    /// The maximum number of CertificateRequest revisions that are maintained in
    /// the Certificate's history. Each revision represents a single `CertificateRequest`
    /// created by this Certificate, either when it was created, renewed, or Spec
    /// was changed. Revisions will be removed by oldest first if the number of
    /// revisions exceeds this number.
    ///
    /// If set, revisionHistoryLimit must be a value of `1` or greater.
    /// Default value is `1`.
    #[serde(
        rename = "revisionHistoryLimit",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub revision_history_limit: Option<i32>,
    /// Name of the Secret resource that will be automatically created and managed by this Certificate resource.
    #[serde(rename = "secretName")]
    pub secret_name: String,
    /// Defines annotations and labels to be copied to the Certificate's Secret.
    #[serde(
        rename = "secretTemplate",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub secret_template: Option<CertificateSpecSecretTemplate>,
    /// Requested key usages and extended key usages.
    /// If unset, defaults to:
    /// - digital signature
    /// - key encipherment
    /// - server auth
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usages: Option<Vec<CertificateSpecUsages>>,
}

/// `spec.additionalOutputFormats[]` of a Certificate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CertificateSpecAdditionalOutputFormats {
    /// Type is the name of the format type that should be written to the Secret.
    pub r#type: CertificateSpecAdditionalOutputFormatsType,
}

/// `spec.additionalOutputFormats[].type` of a Certificate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CertificateSpecAdditionalOutputFormatsType {
    #[serde(rename = "DER")]
    Der,
    #[serde(rename = "CombinedPEM")]
    CombinedPem,
}

/// `spec.issuerRef` of a Certificate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CertificateSpecIssuerRef {
    /// Group of the issuer being referred to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind of the issuer being referred to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the issuer being referred to.
    pub name: String,
}

/// `spec.privateKey` of a Certificate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CertificateSpecPrivateKey {
    /// Algorithm is the private key algorithm of the corresponding private key
    /// for this certificate.
    ///
    /// If provided, allowed values are either `RSA`, `ECDSA` or `Ed25519`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<CertificateSpecPrivateKeyAlgorithm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<CertificateSpecPrivateKeyEncoding>,
    #[serde(
        rename = "rotationPolicy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub rotation_policy: Option<CertificateSpecPrivateKeyRotationPolicy>,
    /// Size is the key bit size of the corresponding private key for this certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
}

/// `spec.privateKey.algorithm` of a Certificate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CertificateSpecPrivateKeyAlgorithm {
    #[serde(rename = "RSA")]
    Rsa,
    #[serde(rename = "ECDSA")]
    Ecdsa,
    Ed25519,
}

/// `spec.privateKey.encoding` of a Certificate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CertificateSpecPrivateKeyEncoding {
    #[serde(rename = "PKCS1")]
    Pkcs1,
    #[serde(rename = "PKCS8")]
    Pkcs8,
}

/// `spec.privateKey.rotationPolicy` of a Certificate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CertificateSpecPrivateKeyRotationPolicy {
    Never,
    Always,
}

/// `spec.secretTemplate` of a Certificate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CertificateSpecSecretTemplate {
    /// Annotations is a key value map to be copied to the target Kubernetes Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Labels is a key value map to be copied to the target Kubernetes Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

/// `spec.usages[]` of a Certificate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CertificateSpecUsages {
    #[serde(rename = "signing")]
    Signing,
    #[serde(rename = "digital signature")]
    DigitalSignature,
    #[serde(rename = "key encipherment")]
    KeyEncipherment,
    #[serde(rename = "server auth")]
    ServerAuth,
    #[serde(rename = "client auth")]
    ClientAuth,
}

/// Status of the Certificate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CertificateStatus {
    /// List of status conditions to indicate the status of certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<CertificateStatusConditions>>,
    #[serde(rename = "notAfter", default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<String>,
    #[serde(
        rename = "renewalTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub renewal_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
}

/// `status.conditions[]` of a Certificate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CertificateStatusConditions {
    #[serde(
        rename = "lastTransitionTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(
        rename = "observedGeneration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub status: CertificateStatusConditionsStatus,
    pub r#type: String,
}

/// `status.conditions[].status` of a Certificate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CertificateStatusConditionsStatus {
    True,
    False,
    Unknown,
}
