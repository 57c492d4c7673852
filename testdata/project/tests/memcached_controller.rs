// Copyright The project Authors
// SPDX-License-Identifier: Apache-2.0

//! The `Memcached` controller against a real apiserver (envtest).
//!
//! Needs the control-plane binaries: `make test` provides them through `KUBEBUILDER_ASSETS`.
//! Add a test here for each behaviour you add to the controller.

mod envtest;

use std::{collections::BTreeMap, time::Duration};

use envtest::TestEnv;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::Namespace,
    events::v1::Event,
    rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::json;

use project::api::v1alpha1::Memcached;
use project::controller::memcached;
use project::controller::{MANAGER_NAME, Manager};

/// The image the tests run; with the fake nodes of `start_cluster` no image is pulled.
const IMAGE: &str = memcached::DEFAULT_IMAGE;
/// The resource as kubectl names it, unambiguous among every API of the cluster.
const RESOURCE: &str = "memcacheds.cache.example.com";
const TIMEOUT: Duration = Duration::from_secs(90);

/// Polls `check` until it returns `Some`, failing the test after [`TIMEOUT`].
async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn new_object(name: &str, size: i32) -> Memcached {
    let mut object = Memcached::new(name, Default::default());
    object.spec.size = size;
    object
}

/// The status of the condition `type_`, if the object reports it.
fn condition<'a>(object: &'a Memcached, type_: &str) -> Option<&'a str> {
    let status = object.status.as_ref()?;
    let condition = status.conditions.iter().find(|c| c.type_ == type_)?;
    Some(condition.status.as_str())
}

fn api_error<T: std::fmt::Debug>(result: kube::Result<T>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The apiserver enforces the CRD's schema: defaults and bounds of `spec.size`.
#[tokio::test]
async fn the_apiserver_validates_memcacheds() {
    let env = TestEnv::start().await;
    let api: Api<Memcached> = Api::namespaced(env.client(), "default");
    let pp = PostParams::default();

    for (size, expected) in [
        (0, "greater than or equal to 1"),
        (-3, "greater than or equal to 1"),
        (11, "less than or equal to 10"),
    ] {
        let status = api_error(api.create(&pp, &new_object("bad", size)).await);
        assert_eq!(status.code, 422, "size {size}: {status:?}");
        assert!(
            status.message.contains("spec.size") && status.message.contains(expected),
            "size {size}: unclear message {:?}",
            status.message
        );
    }

    // Omitted size: the apiserver applies the default of 1.
    let created: Memcached = {
        let raw = json!({
            "apiVersion": "cache.example.com/v1alpha1",
            "kind": "Memcached",
            "metadata": { "name": "defaulted" },
            "spec": {},
        });
        let params = PatchParams::apply("test");
        api.patch("defaulted", &params, &Patch::Apply(&raw))
            .await
            .unwrap()
    };
    assert_eq!(created.spec.size, 1);

    // The scale subresource writes spec.size, and the same bounds apply to it.
    let scaled = api
        .patch_scale(
            "defaulted",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 4 } })),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(4));
    assert_eq!(api.get("defaulted").await.unwrap().spec.size, 4);
    let status = api_error(
        api.patch_scale(
            "defaulted",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 50 } })),
        )
        .await,
    );
    assert_eq!(status.code, 422, "{status:?}");
}

/// A server-side apply that changes nothing does not write: the resourceVersion stays the
/// same, for the main resource and for the status subresource. (The controller also skips
/// such calls entirely; this checks the fallback is safe.)
#[tokio::test]
async fn a_no_op_server_side_apply_does_not_write() {
    let env = TestEnv::start().await;
    let api: Api<Memcached> = Api::namespaced(env.client(), "default");
    let params = PatchParams::apply(MANAGER_NAME).force();
    let body = json!({
        "apiVersion": "cache.example.com/v1alpha1",
        "kind": "Memcached",
        "metadata": { "name": "steady", "labels": { "a": "b" } },
        "spec": { "size": 2 },
    });
    let status = json!({
        "apiVersion": "cache.example.com/v1alpha1",
        "kind": "Memcached",
        "status": {
            "observedGeneration": 1,
            "replicas": 2,
            "conditions": [{
                "type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                "message": "Deployment steady has minimum availability",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1,
            }],
        },
    });
    api.patch("steady", &params, &Patch::Apply(&body))
        .await
        .unwrap();
    let first = api
        .patch_status("steady", &params, &Patch::Apply(&status))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await; // managedFields times have seconds
    let again = api
        .patch("steady", &params, &Patch::Apply(&body))
        .await
        .unwrap();
    let again_status = api
        .patch_status("steady", &params, &Patch::Apply(&status))
        .await
        .unwrap();
    assert_eq!(again.resource_version(), first.resource_version());
    assert_eq!(again_status.resource_version(), first.resource_version());
}

/// Grants `subject` exactly what the `+rustbuilder:rbac` markers of the controller declare.
async fn grant_marker_rbac(client: &Client, namespace: &str, service_account: &str) {
    let source = include_str!("../src/controller/memcached.rs");
    let rules: Vec<PolicyRule> = source
        .lines()
        .filter_map(|line| line.trim().strip_prefix("// +rustbuilder:rbac:"))
        .map(|marker| {
            let fields: BTreeMap<&str, Vec<String>> = marker
                .split(',')
                .filter_map(|field| field.split_once('='))
                .map(|(key, value)| (key, value.split(';').map(String::from).collect()))
                .collect();
            let list = |key: &str| fields.get(key).cloned().unwrap_or_default();
            PolicyRule {
                api_groups: Some(list("groups")),
                resources: Some(list("resources")),
                verbs: list("verbs"),
                ..Default::default()
            }
        })
        .collect();
    assert!(rules.len() >= 5, "markers not found: {rules:?}");
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some("manager-role".into()),
            ..Default::default()
        },
        rules: Some(rules),
        ..Default::default()
    };
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "manager-rolebinding" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "manager-role" },
        "subjects": [{ "kind": "ServiceAccount", "name": service_account, "namespace": namespace }],
    }))
    .unwrap();
    let pp = PostParams::default();
    Api::<ClusterRole>::all(client.clone())
        .create(&pp, &role)
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&pp, &binding)
        .await
        .unwrap();
}

/// Requests the apiserver served for `resource`/`subresource` with one of `verbs`, from its
/// `apiserver_request_total` metric. Server-side apply is counted as verb `APPLY`.
async fn request_count(client: &Client, verbs: &[&str], resource: &str, subresource: &str) -> u64 {
    let request = kube::core::Request::new("")
        .get("metrics", &Default::default())
        .unwrap();
    let text = client.request_text(request).await.unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("apiserver_request_total{"))
        .filter_map(|line| line.split_once("} "))
        .filter(|(labels, _)| {
            let has = |key: &str, value: &str| labels.contains(&format!("{key}=\"{value}\""));
            verbs.iter().any(|verb| has("verb", verb))
                && has("resource", resource)
                && has("subresource", subresource)
        })
        .map(|(_, value)| value.trim().parse::<f64>().unwrap_or(0.0) as u64)
        .sum()
}

/// Reconciliations the manager has counted (`controller_runtime_reconcile_total`, every result).
fn reconciles(manager: &Manager) -> u64 {
    manager
        .metrics()
        .encode()
        .lines()
        .filter(|line| line.starts_with("controller_runtime_reconcile_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Writes of any kind.
const WRITES: &[&str] = &["POST", "PUT", "PATCH", "APPLY", "DELETE"];

async fn events_for(client: &Client, namespace: &str, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

/// Waits for an event with `reason` about the object `name` (events are published just
/// after the change they describe).
async fn wait_for_event(client: &Client, namespace: &str, name: &str, reason: &str) {
    eventually(&format!("a {reason} event"), async || {
        let events = events_for(client, namespace, name).await;
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some(reason))
            .then_some(())
    })
    .await;
}

/// The whole life of a Memcached, with the controller running under the RBAC of its markers
/// in a namespace that enforces the "restricted" Pod Security Standard.
#[tokio::test]
async fn the_controller_runs_memcached_end_to_end() {
    let env = TestEnv::start_cluster().await;
    // Controller logs, with RUST_LOG=project=debug for example.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let admin = env.client();
    let ns = "restricted";
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.into()),
            labels: Some(BTreeMap::from([(
                "pod-security.kubernetes.io/enforce".to_owned(),
                "restricted".to_owned(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    env.create_namespace(ns).await; // waits for the default ServiceAccount

    grant_marker_rbac(&admin, "operator-system", "controller-manager").await;
    let operator = env
        .service_account_client("operator-system", "controller-manager")
        .await;
    // The RBAC authorizer reads roles from a cache: wait until the grant is visible.
    let operator_api: Api<Memcached> = Api::all(operator.clone());
    eventually("the RBAC grant", async || {
        operator_api
            .list(&ListParams::default())
            .await
            .ok()
            .map(|_| ())
    })
    .await;

    let manager = Manager::new(operator.clone());
    let run = memcached::run_with(manager.clone(), IMAGE.into());
    let controller = tokio::spawn(run);

    let api: Api<Memcached> = Api::namespaced(admin.clone(), ns);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let created = api
        .create(&PostParams::default(), &new_object("sample", 2))
        .await
        .unwrap();

    // The Deployment: owned, sized, labelled, restricted.
    let deployment = eventually("the Deployment", async || {
        deployments.get_opt("sample").await.unwrap()
    })
    .await;
    let owner = &deployment.owner_references()[0];
    assert_eq!(owner.uid, created.uid().unwrap());
    assert_eq!(owner.controller, Some(true));
    let spec = deployment.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2));
    let labels = deployment.labels();
    assert_eq!(labels["app.kubernetes.io/instance"], "sample");
    assert_eq!(
        labels.get("app.kubernetes.io/version"),
        memcached::image_version(IMAGE).as_ref()
    );
    assert_eq!(labels["app.kubernetes.io/managed-by"], MANAGER_NAME);

    // Available only once the Pods (admitted under "restricted") are available.
    let ready = eventually("Available=True", async || {
        let object = api.get("sample").await.unwrap();
        (condition(&object, "Available") == Some("True")).then_some(object)
    })
    .await;
    let status = ready.status.as_ref().unwrap();
    assert_eq!(status.ready_replicas, Some(2));
    assert_eq!(status.observed_generation, ready.metadata.generation);
    assert_eq!(condition(&ready, "Degraded"), Some("False"));
    let finalizer = memcached::FINALIZER.to_owned();
    assert!(ready.finalizers().contains(&finalizer));
    wait_for_event(&admin, ns, "sample", "DeploymentCreated").await;

    // `kubectl get` shows the printer columns.
    let out = env
        .kubectl()
        .args(["get", RESOURCE, "sample", "-n", ns])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "SIZE", "READY", "AVAILABLE", "AGE"],
        "{table}"
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..4], ["sample", "2", "2", "True"], "{table}");

    // Converged: nothing writes any more, even when a reconciliation runs.
    let converged = eventually("Progressing=False", async || {
        let object = api.get("sample").await.unwrap();
        (condition(&object, "Progressing") == Some("False")).then_some(object)
    })
    .await;
    let deployment_version = deployments.get("sample").await.unwrap().resource_version();
    let writes = |resource, subresource| request_count(&admin, WRITES, resource, subresource);
    let before = (
        writes("deployments", "").await,
        writes("memcacheds", "status").await,
    );
    assert!(before.0 > 0 && before.1 > 0, "no write counted: {before:?}");
    let reconciles_before = reconciles(&manager);
    // An annotation changes no spec, but triggers a reconciliation.
    api.patch(
        "sample",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "annotations": { "touched": "yes" } } })),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        reconciles(&manager) > reconciles_before,
        "no reconciliation ran"
    );
    let after = (
        writes("deployments", "").await,
        writes("memcacheds", "status").await,
    );
    assert_eq!(after, before, "a converged object was written to");
    let status_after = api.get("sample").await.unwrap();
    assert_eq!(status_after.status, converged.status);
    assert_eq!(
        deployments.get("sample").await.unwrap().resource_version(),
        deployment_version
    );

    // `kubectl scale --replicas=3` goes through the scale subresource.
    let target = format!("{RESOURCE}/sample");
    let out = env
        .kubectl()
        .args(["scale", target.as_str(), "--replicas=3", "-n", ns])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually("3 ready replicas", async || {
        let object = api.get("sample").await.unwrap();
        let ready = object.status.as_ref()?.ready_replicas == Some(3);
        (ready && condition(&object, "Available") == Some("True")).then_some(())
    })
    .await;
    wait_for_event(&admin, ns, "sample", "DeploymentScaled").await;

    // Someone edits the pod template: the operator puts it back.
    deployments
        .patch(
            "sample",
            &PatchParams::default(),
            &Patch::Strategic(json!({ "spec": { "template": { "spec": {
                "containers": [{ "name": "memcached", "image": "example.com/tampered:1" }]
            } } } })),
        )
        .await
        .unwrap();
    eventually("the image restored", async || {
        let d = deployments.get("sample").await.unwrap();
        let pod = d.spec?.template.spec?;
        (pod.containers[0].image.as_deref() == Some(IMAGE)).then_some(())
    })
    .await;
    wait_for_event(&admin, ns, "sample", "DeploymentUpdated").await;

    // Someone deletes the Deployment: the operator recreates it.
    let old_uid = deployments.get("sample").await.unwrap().uid();
    deployments
        .delete("sample", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Deployment recreated", async || {
        let d = deployments.get_opt("sample").await.unwrap()?;
        (d.uid() != old_uid && d.metadata.deletion_timestamp.is_none()).then_some(())
    })
    .await;
    wait_for_event(&admin, ns, "sample", "DeploymentRecreated").await;

    // Deleting the Memcached runs the finalizer, then the Deployment is garbage-collected.
    api.delete("sample", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the object gone", async || {
        api.get_opt("sample").await.unwrap().is_none().then_some(())
    })
    .await;
    wait_for_event(&admin, ns, "sample", "Finalizing").await;
    eventually("the Deployment garbage-collected", async || {
        deployments
            .get_opt("sample")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    eprintln!(
        "writes: deployments {}, memcacheds/status {}, memcacheds {}",
        writes("deployments", "").await,
        writes("memcacheds", "status").await,
        writes("memcacheds", "").await
    );
    // Graceful shutdown.
    manager.shutdown();
    tokio::time::timeout(Duration::from_secs(30), controller)
        .await
        .expect("the controller did not stop")
        .unwrap();
}

/// A Deployment of the same name that something else controls is left alone, and the
/// Memcached says why (Degraded=True, a Warning event).
#[tokio::test]
async fn a_deployment_controlled_by_another_owner_is_not_taken_over() {
    use k8s_openapi::api::core::v1::ConfigMap;

    let env = TestEnv::start().await;
    let client = env.client();
    let pp = PostParams::default();
    let owner = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(
            &pp,
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("other-owner".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let foreign: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "taken", "ownerReferences": [owner.controller_owner_ref(&()).unwrap()] },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": "other" } },
            "template": {
                "metadata": { "labels": { "app": "other" } },
                "spec": { "containers": [{ "name": "other", "image": "other:1" }] },
            },
        },
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let foreign = deployments.create(&pp, &foreign).await.unwrap();

    let manager = Manager::new(client.clone());
    let run = memcached::run_with(manager.clone(), IMAGE.into());
    let controller = tokio::spawn(run);
    let api: Api<Memcached> = Api::namespaced(client.clone(), "default");
    api.create(&pp, &new_object("taken", 1)).await.unwrap();

    let degraded = eventually("Degraded=True", async || {
        let object = api.get("taken").await.unwrap();
        let status = object.status?;
        let c = status
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Degraded")?;
        (c.status == "True").then_some(c)
    })
    .await;
    assert_eq!(degraded.reason, "ReconcileFailed");
    assert!(
        degraded
            .message
            .contains("controlled by ConfigMap other-owner"),
        "{}",
        degraded.message
    );
    wait_for_event(&client, "default", "taken", "ReconcileFailed").await;
    let after = deployments.get("taken").await.unwrap();
    assert_eq!(after.resource_version(), foreign.resource_version());

    manager.shutdown();
    controller.await.unwrap();
}
