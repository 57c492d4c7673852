//! A tiny custom resource for the tests: `widgets.test.example.com`.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a Widget.
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
