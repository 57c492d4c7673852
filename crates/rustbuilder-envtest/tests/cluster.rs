//! Cluster mode: Deployments get Ready pods on kwok nodes, and the garbage
//! collector deletes what a deleted owner owned.

mod widget;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{CustomResourceExt, Resource, ResourceExt};
use rustbuilder_envtest::TestEnv;
use widget::{Widget, WidgetSpec};

const NS: &str = "apps";

#[tokio::test]
async fn deployment_becomes_ready_and_is_garbage_collected_with_its_owner() {
    let env = TestEnv::builder()
        .crd(Widget::crd())
        .cluster(true)
        .start()
        .await;
    env.create_namespace(NS).await;
    let pp = PostParams::default();
    let widgets: Api<Widget> = Api::namespaced(env.client(), NS);
    let owner = widgets
        .create(&pp, &Widget::new("owner", WidgetSpec { size: 3 }))
        .await
        .unwrap();

    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "web", "ownerReferences": [owner.controller_owner_ref(&()).unwrap()] },
        "spec": {
            "replicas": 3,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "registry.k8s.io/pause:3.10" }] },
            },
        },
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(env.client(), NS);
    let created = deployments.create(&pp, &deployment).await.unwrap();

    let three_ready =
        |d: Option<&Deployment>| d.and_then(|d| d.status.as_ref()?.ready_replicas) == Some(3);
    let ready = await_condition(deployments.clone(), "web", three_ready);
    tokio::time::timeout(Duration::from_secs(90), ready)
        .await
        .expect("the Deployment never had 3 ready replicas")
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(env.client(), NS);
    let pods = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 3);
    for pod in &pods {
        let status = pod.status.as_ref().unwrap();
        assert_eq!(
            status.phase.as_deref(),
            Some("Running"),
            "pod {}",
            pod.name_any()
        );
        assert!(
            pod.spec
                .as_ref()
                .unwrap()
                .node_name
                .as_ref()
                .unwrap()
                .starts_with("kwok-node-")
        );
    }

    widgets
        .delete("owner", &DeleteParams::default())
        .await
        .unwrap();
    let uid = created.uid().unwrap();
    let gone = await_condition(deployments, "web", conditions::is_deleted(&uid));
    tokio::time::timeout(Duration::from_secs(60), gone)
        .await
        .expect("the garbage collector never deleted the owned Deployment")
        .unwrap();
}
