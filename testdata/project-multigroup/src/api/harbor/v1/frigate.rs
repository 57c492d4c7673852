// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! The `Frigate` API (harbor.example.com/v1).
//!
//! Edit `FrigateSpec` (what users ask for) and `FrigateStatus` (what the controller observed), then run
//! `make manifests`: doc comments become field descriptions and schemars attributes become validation in
//! the CRD.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The desired state of a Frigate.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "harbor.example.com",
    version = "v1",
    kind = "Frigate",
    plural = "frigates",
    namespaced,
    status = "FrigateStatus",
    doc = "Frigate is the Schema for the frigates API.",
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct FrigateSpec {
    /// An example field; replace it with the fields of your API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foo: Option<String>,
}

/// The observed state of a Frigate.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrigateStatus {
    /// The latest observations of the object's state, one per `type` (e.g. `Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,

    /// The `metadata.generation` the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
