// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! The webhooks of `Memcached` (cache.example.com/v1alpha1) in the running manager: kubectl creates
//! and changes objects, and the API server calls the manager's webhook server before it stores them,
//! as it does in a cluster.

use serde_json::Value;

use crate::{Cluster, cluster};

const NAMESPACE: &str = "memcached-v1alpha1-webhooks";
/// The sample `create api` wrote for this version.
const SAMPLE: &str = "config/samples/cache_v1alpha1_memcached.yaml";
/// The name label the webhooks' examples default and protect, and how kubectl reads it.
const NAME_LABEL: &str = "app.kubernetes.io/name";
const NAME_LABEL_PATH: &str = r"jsonpath={.metadata.labels.app\.kubernetes\.io/name}";

/// The sample as JSON, named `name` in the test's namespace, with the name label `label` (or none).
fn sample(cluster: &Cluster, name: &str, label: Option<&str>) -> Value {
    let json = cluster.kubectl(&["create", "--dry-run=client", "-o", "json", "-f", SAMPLE]);
    let mut object: Value = serde_json::from_str(&json).expect("kubectl prints the sample as JSON");
    object["metadata"]["name"] = name.into();
    object["metadata"]["namespace"] = NAMESPACE.into();
    let labels = &mut object["metadata"]["labels"];
    if let Some(value) = label {
        labels[NAME_LABEL] = value.into();
    } else if let Some(labels) = labels.as_object_mut() {
        labels.remove(NAME_LABEL);
    }
    object
}

/// The name label of the stored object `name`.
fn name_label(cluster: &Cluster, name: &str) -> String {
    let resource = "memcacheds.v1alpha1.cache.example.com";
    cluster.kubectl(&[
        "get",
        resource,
        name,
        "-n",
        NAMESPACE,
        "-o",
        NAME_LABEL_PATH,
    ])
}

#[tokio::test]
async fn the_api_server_calls_the_memcached_webhooks() {
    let cluster = cluster().await;
    let manager = cluster.deploy_manager(&[]).await;
    cluster.kubectl(&["create", "namespace", NAMESPACE]);

    // Defaulting: created without the name label, it is stored with the one the webhook sets.
    cluster.create(&sample(&cluster, "defaulted", None)).await;
    let label = name_label(&cluster, "defaulted");
    assert_eq!(
        label, "memcached",
        "the defaulting webhook did not set the name label"
    );

    // Validation: changing the name label is refused, with the webhook's message.
    cluster
        .create(&sample(&cluster, "validated", Some("memcached")))
        .await;
    let resource = "memcacheds.v1alpha1.cache.example.com/validated";
    let relabel = format!("{NAME_LABEL}=other");
    let args = ["label", "--overwrite", resource, &relabel, "-n", NAMESPACE];
    let (changed, _, message) = cluster.try_kubectl(&args, None);
    assert!(!changed, "the validating webhook let the name label change");
    assert!(message.contains("cannot change once set"), "{message}");
    assert_eq!(name_label(&cluster, "validated"), "memcached");
    // +rustbuilder:scaffold:e2e-webhook-checks
    assert!(manager.stop(), "the manager did not exit 0 on SIGTERM");
}
