// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! The Getting Started journey with `Memcached`, end to end: the manager runs as its own ServiceAccount;
//! everything else is done with kubectl, as a user would.

use crate::{Cluster, cluster, eventually};

/// A namespace that only admits Pods meeting the restricted Pod Security Standard.
const NAMESPACE: &str = "memcached-e2e";
const NAME: &str = "my-memcached";
const API_VERSION: &str = "cache.example.com/v1alpha1";
const KIND: &str = "Memcached";
const RESOURCE: &str = "memcacheds.cache.example.com";

/// Fields of the Deployment the journey watches.
const READY: &str = "{.status.readyReplicas}";
const REPLICAS: &str = "{.spec.replicas}";
const UID: &str = "{.metadata.uid}";
const IMAGE: &str = "{.spec.template.spec.containers[0].image}";

/// What "someone" changes on the Deployment by hand.
const EDIT: &str = r#"{"spec":{"replicas":5,"template":{"spec":{"containers":[
    {"name":"memcached","image":"example.invalid/other:1"}]}}}}"#;

/// Reads one field of an object with a JSONPath; empty when the object or the field is missing.
/// Any other kubectl failure fails the test.
fn field(cluster: &Cluster, resource: &str, path: &str) -> String {
    let jsonpath = format!("jsonpath={path}");
    let args = [
        "get",
        resource,
        NAME,
        "-n",
        NAMESPACE,
        "--ignore-not-found",
        "-o",
        &jsonpath,
    ];
    cluster.kubectl(&args)
}

/// Waits until a field of an object has the wanted value.
async fn wait_for(cluster: &Cluster, resource: &str, path: &str, wanted: &str) {
    let what = format!("{resource} {NAME} {path} = {wanted}");
    eventually(&what, async || {
        (field(cluster, resource, path) == wanted).then_some(())
    })
    .await;
}

fn apply(cluster: &Cluster, size: u32) {
    let manifest = format!(
        "apiVersion: {API_VERSION}\nkind: {KIND}\nmetadata:\n  name: {NAME}\n  namespace: {NAMESPACE}\nspec:\n  size: {size}\n"
    );
    cluster.kubectl_with_input(&["apply", "-f", "-"], Some(&manifest));
}

#[tokio::test]
async fn the_getting_started_journey() {
    let cluster = cluster().await;
    let manager = cluster.deploy_manager(&[]).await;
    cluster.kubectl(&["create", "namespace", NAMESPACE]);
    let restricted = "pod-security.kubernetes.io/enforce=restricted";
    cluster.kubectl(&["label", "namespace", NAMESPACE, restricted]);
    let target = format!("{RESOURCE}/{NAME}");
    let in_namespace = |args: &[&str]| {
        let args = [args, &["-n", NAMESPACE]].concat();
        cluster.kubectl(&args)
    };

    // Create one of size 3: it becomes Available with a Deployment of 3 ready Pods, which the
    // restricted namespace admitted.
    apply(&cluster, 3);
    let until_available = "--for=condition=Available";
    in_namespace(&["wait", until_available, "--timeout=120s", &target]);
    wait_for(&cluster, "deployment", READY, "3").await;
    let listed = in_namespace(&["get", RESOURCE]);
    let available = listed.contains(NAME) && listed.contains("True");
    assert!(available, "kubectl get shows:\n{listed}");
    let pods = in_namespace(&["get", "pods", "-o", "name"]);
    assert_eq!(pods.lines().count(), 3, "pods:\n{pods}");

    // Resize through the spec, down and back up.
    apply(&cluster, 1);
    wait_for(&cluster, "deployment", READY, "1").await;
    apply(&cluster, 3);
    wait_for(&cluster, "deployment", READY, "3").await;

    // The scale subresource: `kubectl scale` works on the custom resource.
    in_namespace(&["scale", &target, "--replicas=2"]);
    wait_for(&cluster, "deployment", REPLICAS, "2").await;

    // Someone deletes the Deployment: the operator recreates it.
    let uid = field(&cluster, "deployment", UID);
    in_namespace(&["delete", "deployment", NAME]);
    eventually("the Deployment to be recreated", async || {
        let new_uid = field(&cluster, "deployment", UID);
        (!new_uid.is_empty() && new_uid != uid).then_some(())
    })
    .await;

    // Someone edits its replicas and image: the operator reverts both.
    let image = field(&cluster, "deployment", IMAGE);
    in_namespace(&["patch", "deployment", NAME, "-p", EDIT]);
    wait_for(&cluster, "deployment", REPLICAS, "2").await;
    wait_for(&cluster, "deployment", IMAGE, &image).await;

    // A bad size is refused by the API server with a readable message.
    let size_zero = r#"{"spec":{"size":0}}"#;
    let merge = "--type=merge";
    let patch = ["patch", &target, "-n", NAMESPACE, merge, "-p", size_zero];
    let (accepted, _, message) = cluster.try_kubectl(&patch, None);
    assert!(!accepted, "size 0 was accepted");
    let readable = message.contains("should be greater than or equal to 1");
    assert!(readable, "{message}");

    // Deleting it garbage-collects its Deployment.
    in_namespace(&["delete", &target, "--timeout=60s"]);
    wait_for(&cluster, "deployment", "{.metadata.name}", "").await;

    cluster.make("uninstall");
    assert!(manager.stop(), "the manager did not exit 0 on SIGTERM");
}
