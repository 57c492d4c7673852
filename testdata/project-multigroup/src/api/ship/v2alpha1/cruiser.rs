// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! The `Cruiser` API (ship.example.com/v2alpha1).
//!
//! Edit `CruiserSpec` (what users ask for) and `CruiserStatus` (what the controller observed), then run
//! `make manifests`: doc comments become field descriptions and schemars attributes become validation in
//! the CRD.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The desired state of a Cruiser.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "ship.example.com",
    version = "v2alpha1",
    kind = "Cruiser",
    plural = "cruisers",
    status = "CruiserStatus",
    doc = "Cruiser is the Schema for the cruisers API.",
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CruiserSpec {
    /// An example field; replace it with the fields of your API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foo: Option<String>,
}

/// The observed state of a Cruiser.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CruiserStatus {
    /// The latest observations of the object's state, one per `type` (e.g. `Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,

    /// The `metadata.generation` the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
