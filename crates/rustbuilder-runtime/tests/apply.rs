//! `apply` and `apply_scalable` on a real API server: which request each change costs, and who owns
//! the size afterwards (the API server's `managedFields`).

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::Api;
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::apply::{self, Applied};
use serde_json::json;
use support::requests;

const MANAGER: &str = "scaler";

fn deployment(replicas: i32, tier: &str) -> Deployment {
    let labels = json!({ "app": "web", "tier": tier });
    serde_json::from_value(json!({
        "metadata": { "name": "web", "namespace": "default", "labels": labels },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "nginx:1.27" }] },
            },
        },
    }))
    .unwrap()
}

/// The `managedFields` entry of `MANAGER` that owns `spec.replicas`: its operation and subresource.
fn size_owner(deployment: &Deployment) -> Vec<(String, String)> {
    let entries = deployment.metadata.managed_fields.iter().flatten();
    entries
        .filter(|entry| entry.manager.as_deref() == Some(MANAGER))
        .filter(|entry| {
            let fields = entry.fields_v1.as_ref().map(|f| &f.0);
            fields
                .and_then(|f| f.pointer("/f:spec/f:replicas"))
                .is_some()
        })
        .map(|entry| {
            let operation = entry.operation.clone().unwrap_or_default();
            (operation, entry.subresource.clone().unwrap_or_default())
        })
        .collect()
}

/// (server-side applies, other patches) of Deployments the API server has answered so far.
async fn writes(client: &kube::Client) -> (u64, u64) {
    let applies = requests(client, "APPLY", "deployments").await;
    (applies, requests(client, "PATCH", "deployments").await)
}

#[tokio::test]
async fn a_resize_goes_through_scale_and_any_other_change_is_applied() {
    let env = TestEnv::builder().start().await;
    let client = env.client();
    let api: Api<Deployment> = Api::namespaced(client.clone(), "default");

    // Nothing yet: created by an apply.
    let before = writes(&client).await;
    let created = apply::apply_scalable(&api, None, &deployment(1, "a"), MANAGER).await;
    assert!(created.unwrap().is_changed());
    assert_eq!(writes(&client).await, (before.0 + 1, before.1));
    let current = api.get("web").await.unwrap();
    assert_eq!(size_owner(&current), [("Apply".into(), String::new())]);

    // Only the size differs: one merge patch of `scale`, and the result is what the server holds.
    let before = writes(&client).await;
    let resized = apply::apply_scalable(&api, Some(&current), &deployment(3, "a"), MANAGER).await;
    let Applied::Changed(resized) = resized.unwrap() else {
        panic!("a resize changes the Deployment");
    };
    assert_eq!(writes(&client).await, (before.0, before.1 + 1));
    let current = api.get("web").await.unwrap();
    assert_eq!(current.spec.as_ref().unwrap().replicas, Some(3));
    assert_eq!(resized.spec.as_ref().unwrap().replicas, Some(3));
    assert_eq!(resized.resource_version(), current.resource_version());
    assert_eq!(size_owner(&current), [("Update".into(), "scale".into())]);

    // Converged: nothing is written.
    let before = writes(&client).await;
    let same = apply::apply_scalable(&api, Some(&current), &deployment(3, "a"), MANAGER).await;
    assert!(!same.unwrap().is_changed());
    assert_eq!(writes(&client).await, before);

    // The size and a label: the whole object is applied, and the apply owns the size again.
    let before = writes(&client).await;
    let applied = apply::apply_scalable(&api, Some(&current), &deployment(2, "b"), MANAGER).await;
    assert!(applied.unwrap().is_changed());
    assert_eq!(writes(&client).await, (before.0 + 1, before.1));
    let current = api.get("web").await.unwrap();
    assert_eq!(current.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(current.labels()["tier"], "b");
    assert!(
        size_owner(&current).contains(&("Apply".into(), String::new())),
        "{:?}",
        size_owner(&current)
    );
}
