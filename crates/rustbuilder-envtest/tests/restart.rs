//! Stopping and starting one component of a running env: kube-apiserver comes back on its port with
//! every object (they live in etcd), etcd comes back with its data, clients made before keep working,
//! and a restarted kube-controller-manager works again.

mod widget;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::await_condition;
use kube::{CustomResourceExt, ResourceExt};
use rustbuilder_envtest::{Component, TestEnv};
use widget::{Widget, WidgetSpec};

/// A client of its own from the env's kubeconfig, made before any restart.
async fn client_from(env: &TestEnv) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(env.kubeconfig()).unwrap();
    let options = KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await;
    kube::Client::try_from(config.unwrap()).unwrap()
}

fn running(env: &TestEnv) -> Vec<&'static str> {
    env.pids().into_iter().map(|(name, _)| name).collect()
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(
        serde_json::json!({ "metadata": { "name": name }, "data": { "k": "v" } }),
    )
    .unwrap()
}

#[tokio::test]
async fn the_apiserver_comes_back_on_its_port_with_every_object() {
    let mut env = TestEnv::builder().crd(Widget::crd()).start().await;
    let before = client_from(&env).await;
    let kubeconfig = std::fs::read_to_string(env.kubeconfig()).unwrap();
    let widgets: Api<Widget> = Api::default_namespaced(before.clone());
    let pp = PostParams::default();
    let created = widgets
        .create(&pp, &Widget::new("kept", WidgetSpec { size: 2 }))
        .await
        .unwrap();
    let old_pid = env.pids()[1].1;

    env.stop(Component::KubeApiserver).await;
    assert_eq!(running(&env), ["etcd"]);
    assert!(!std::path::Path::new(&format!("/proc/{old_pid}")).exists());
    // Really down: the request fails instead of reaching some other server.
    let down = tokio::time::timeout(Duration::from_secs(10), widgets.get("kept")).await;
    assert!(matches!(down, Ok(Err(_))), "{down:?}");

    env.start_component(Component::KubeApiserver).await;
    assert_eq!(running(&env), ["etcd", "kube-apiserver"]);
    assert_ne!(env.pids()[1].1, old_pid);
    // The same port and credentials: the kubeconfig is unchanged.
    assert_eq!(
        std::fs::read_to_string(env.kubeconfig()).unwrap(),
        kubeconfig
    );
    // The client made before the restart reads the object, with its uid: it survived in etcd.
    let kept = widgets.get("kept").await.unwrap();
    assert_eq!((kept.uid(), kept.spec.size), (created.uid(), 2));
    widgets
        .create(&pp, &Widget::new("after", WidgetSpec { size: 1 }))
        .await
        .unwrap();
    let listed = widgets.list(&Default::default()).await.unwrap();
    let mut names: Vec<String> = listed.iter().map(ResourceExt::name_any).collect();
    names.sort();
    assert_eq!(names, ["after", "kept"]);
}

#[tokio::test]
async fn etcd_killed_and_started_again_keeps_its_data() {
    let mut env = TestEnv::start().await;
    let configmaps: Api<ConfigMap> = Api::default_namespaced(env.client());
    let pp = PostParams::default();
    configmaps.create(&pp, &config_map("kept")).await.unwrap();

    env.kill(Component::Etcd).await;
    assert_eq!(running(&env), ["kube-apiserver"]);
    env.start_component(Component::Etcd).await; // returns once /readyz answers again
    assert_eq!(running(&env), ["etcd", "kube-apiserver"]);
    let kept = configmaps.get("kept").await.unwrap();
    assert_eq!(kept.data.unwrap()["k"], "v");
    configmaps.create(&pp, &config_map("after")).await.unwrap();
}

#[tokio::test]
async fn a_restarted_controller_manager_works_again() {
    let mut env = TestEnv::start_cluster().await;
    let component: Component = "kube-controller-manager".parse().unwrap();
    assert_eq!(component, Component::KubeControllerManager);
    env.stop(component).await;
    assert!(!running(&env).contains(&"kube-controller-manager"));
    env.start_component(component).await;
    assert!(running(&env).contains(&"kube-controller-manager"));
    // Only the controller-manager creates a new namespace's `default` ServiceAccount.
    env.create_namespace("after-restart").await;
    let sas: Api<ServiceAccount> = Api::namespaced(env.client(), "after-restart");
    let made = await_condition(sas, "default", |sa: Option<&ServiceAccount>| sa.is_some());
    tokio::time::timeout(Duration::from_secs(30), made)
        .await
        .unwrap()
        .unwrap();
}

#[test]
fn components_are_named_like_their_binaries() {
    for component in Component::ALL {
        assert_eq!(component.name().parse::<Component>(), Ok(component));
        assert_eq!(component.to_string(), component.name());
    }
    assert!("apiserver".parse::<Component>().is_err());
}

#[tokio::test]
#[should_panic(expected = "this env has no kwok")]
async fn components_of_cluster_mode_only_exist_there() {
    let mut env = TestEnv::start().await;
    env.stop(Component::Kwok).await;
}
