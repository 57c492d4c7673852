//! A tiny custom resource to exercise the envtest harness.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a Widget (`widgets.test.example.com`).
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "test.example.com",
    version = "v1",
    kind = "Widget",
    namespaced
)]
pub struct WidgetSpec {
    pub size: i32,
}
