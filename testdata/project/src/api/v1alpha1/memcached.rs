// Copyright The project Authors
// SPDX-License-Identifier: Apache-2.0

//! The `Memcached` custom resource (`cache.example.com/v1alpha1`).
//!
//! This is the API of your operator: edit `MemcachedSpec` to add what users may ask for and
//! `MemcachedStatus` to add what the controller reports. Doc comments become the field
//! descriptions of the CRD; `#[schemars(...)]` and `#[x_kube(...)]` attributes become its
//! validation. Run `make manifests` after every change to regenerate the CRD YAML.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Desired state of a Memcached: how many Pods of its image to run.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "cache.example.com",
    version = "v1alpha1",
    kind = "Memcached",
    plural = "memcacheds",
    namespaced,
    status = "MemcachedStatus",
    derive = "PartialEq",
    doc = "Memcached runs a Deployment of memcached Pods managed by the operator.",
    // A CEL rule the API server checks, no webhook needed: the name becomes the
    // `app.kubernetes.io/instance` label of the Pods, and a label value holds 63 characters at most.
    validation = Rule::new("self.metadata.name.size() <= 63")
        .message("the name must be at most 63 characters: it labels the Pods"),
    scale(
        spec_replicas_path = ".spec.size",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    // Columns of `kubectl get memcached` (raw JSON: clippy's duplicated_attributes lint
    // misfires on the structured form when two columns share a type).
    printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size","description":"Desired number of Pods"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas","description":"Ready Pods"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedSpec {
    /// Number of Pods to run (1 to 10, default 1).
    // The upper bound guards against typos (`size: 100`); raise it if you need more.
    #[schemars(range(min = 1, max = 10))]
    #[serde(default = "default_size")]
    pub size: i32,
}

/// Default for `spec.size`; the apiserver fills it in when the field is omitted.
fn default_size() -> i32 {
    1
}

/// The same default in Rust: `Memcached::new(name, Default::default())` asks for one Pod.
impl Default for MemcachedSpec {
    fn default() -> Self {
        Self {
            size: default_size(),
        }
    }
}

/// Observed state of a Memcached, written by the controller only.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedStatus {
    /// Available, Progressing and Degraded conditions, one entry per type.
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// The metadata.generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Pods of the Deployment, ready or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Pods of the Deployment that are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// Label selector of the Pods, for the scale subresource (used by autoscalers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}
