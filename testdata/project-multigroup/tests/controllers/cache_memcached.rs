// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! The `Memcached` controller on a real API server (and, where Pods matter, the simulated cluster)
//! that rustbuilder-envtest starts per test. Add a test for each behaviour you add.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::manifests::crd;
use rustbuilder_runtime::{Manager, testing};
use serde_json::json;

use project_multigroup::api::cache::v1alpha1::Memcached;
use project_multigroup::controller::{MANAGER_NAME, cache::memcached};

/// The image the tests run; with the fake nodes of the cluster mode no image is pulled.
const IMAGE: &str = memcached::DEFAULT_IMAGE;
/// The resource as kubectl names it, unambiguous among every API of the cluster.
const RESOURCE: &str = "memcacheds.cache.example.com";
const TIMEOUT: Duration = Duration::from_secs(90);
/// How late a slowed list is answered: long enough for a reconcile to run meanwhile, were one let.
const SLOW_LIST: Duration = Duration::from_secs(3);

/// A control plane with the project's CRD; `cluster` adds what makes Pods run.
async fn start(cluster: bool) -> TestEnv {
    TestEnv::builder()
        .crd(crd::<Memcached>())
        .cluster(cluster)
        .start()
        .await
}

/// Polls `check` until it returns `Some`, failing the test after [`TIMEOUT`].
async fn eventually<T>(what: &str, check: impl AsyncFnMut() -> Option<T>) -> T {
    testing::eventually(what, TIMEOUT, check).await
}

fn new_object(name: &str, size: i32) -> Memcached {
    let mut object = Memcached::new(name, Default::default());
    object.spec.size = size;
    object
}

/// The status and reason of the condition `type_`, if the object reports it.
fn condition(object: &Memcached, type_: &str) -> Option<(String, String)> {
    let status = object.status.as_ref()?;
    let condition = status.conditions.iter().find(|c| c.type_ == type_)?;
    Some((condition.status.clone(), condition.reason.clone()))
}

fn is_true(object: &Memcached, type_: &str) -> bool {
    condition(object, type_).is_some_and(|(status, _)| status == "True")
}

fn api_error<T: std::fmt::Debug>(result: kube::Result<T>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn the_apiserver_validates_memcacheds() {
    let env = start(false).await;
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

    // The CEL rule on the name (`validation = Rule::new(..)` in the API): refused with its message.
    let long_name = "m".repeat(64);
    let status = api_error(api.create(&pp, &new_object(&long_name, 1)).await);
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status
            .message
            .contains("the name must be at most 63 characters"),
        "unclear message {:?}",
        status.message
    );
    api.create(&pp, &new_object(&"m".repeat(63), 1))
        .await
        .unwrap();

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

/// Writes of any kind.
const WRITES: &[&str] = &["POST", "PUT", "PATCH", "APPLY", "DELETE"];

/// Waits for an event with `reason` about the object `name`.
async fn wait_for_event(client: &Client, namespace: &str, name: &str, reason: &str) -> Event {
    testing::wait_for_event(client, namespace, name, reason, TIMEOUT).await
}

/// The reasons of the events about the object `name`.
async fn event_reasons(client: &Client, namespace: &str, name: &str) -> Vec<String> {
    let events = testing::events_about(client, namespace, name).await;
    events
        .into_iter()
        .filter_map(|event| event.reason)
        .collect()
}

/// Successful reconciles the manager has counted (`controller_runtime_reconcile_total`).
fn successful_reconciles(manager: &Manager) -> u64 {
    testing::reconciles(manager, "cache-memcached", "success")
}

/// The whole life of a Memcached, with the controller running under the RBAC of its markers in a
/// namespace that enforces the "restricted" Pod Security Standard.
#[tokio::test]
async fn the_controller_runs_memcached_end_to_end() {
    let env = start(true).await;
    // Controller logs, with RUST_LOG=project_multigroup=debug for example.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let admin = env.client();
    let ns = "restricted";
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": { "name": ns, "labels": { "pod-security.kubernetes.io/enforce": "restricted" } },
    }))
    .unwrap();
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    env.create_namespace(ns).await; // waits for the default ServiceAccount

    // The operator's permissions, exactly: what its `+rustbuilder:rbac` markers declare.
    let project = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    testing::grant_manager_role(&admin, project, "operator-system", "controller-manager").await;
    let operator = env
        .service_account_client("operator-system", "controller-manager")
        .await;
    // The RBAC authorizer reads roles from a cache: wait until the grant is visible.
    let operator_api: Api<Memcached> = Api::all(operator.clone());
    eventually("the RBAC grant", async || {
        operator_api.list(&ListParams::default()).await.ok()
    })
    .await;

    let manager = Manager::new(MANAGER_NAME, operator.clone());
    let controller = tokio::spawn(memcached::run(manager.clone()));

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
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        (created.uid().unwrap().as_str(), Some(true))
    );
    assert_eq!(deployment.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(
        deployment.labels()["app.kubernetes.io/managed-by"],
        MANAGER_NAME
    );
    assert!(
        created.finalizers().is_empty(),
        "a finalizer would block deletion for nothing"
    );

    // Available once a Pod (admitted under "restricted") serves; the status is complete once both do.
    let ready = eventually("Available=True with 2 ready replicas", async || {
        let object = api.get("sample").await.unwrap();
        let complete = object.status.as_ref()?.ready_replicas == Some(2);
        (complete && is_true(&object, "Available")).then_some(object)
    })
    .await;
    let status = ready.status.as_ref().unwrap();
    assert_eq!(status.observed_generation, ready.metadata.generation);
    assert!(!is_true(&ready, "Degraded"), "{status:?}");
    wait_for_event(&admin, ns, "sample", "DeploymentCreated").await;

    // `kubectl get` shows the printer columns.
    let out = env
        .kubectl()
        .args(["get", RESOURCE, "sample", "-n", ns])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "SIZE", "READY", "AVAILABLE", "AGE"],
        "{table}"
    );
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(row[..4], ["sample", "2", "2", "True"], "{table}");

    // Converged: nothing writes any more, even when a reconcile runs.
    let converged = eventually("Progressing=False", async || {
        let object = api.get("sample").await.unwrap();
        let done = condition(&object, "Progressing").is_some_and(|(status, _)| status == "False");
        done.then_some(object)
    })
    .await;
    let writes =
        |resource, subresource| testing::api_requests(&admin, WRITES, resource, subresource);
    let before = (
        writes("deployments", "").await,
        writes("memcacheds", "status").await,
    );
    assert!(before.0 > 0 && before.1 > 0, "no write counted: {before:?}");
    let reconciles_before = successful_reconciles(&manager);
    // An annotation changes no spec, but triggers a reconcile.
    let touch = json!({ "metadata": { "annotations": { "touched": "yes" } } });
    api.patch("sample", &PatchParams::default(), &Patch::Merge(touch))
        .await
        .unwrap();
    eventually("a successful reconcile", async || {
        (successful_reconciles(&manager) > reconciles_before).then_some(())
    })
    .await;
    let after = (
        writes("deployments", "").await,
        writes("memcacheds", "status").await,
    );
    assert_eq!(after, before, "a converged object was written to");
    assert_eq!(api.get("sample").await.unwrap().status, converged.status);

    // Restarted while the Deployments still list (as thousands of them would): no reconcile reads
    // the half-filled cache, so the Deployment is not taken for absent and created "again".
    manager.shutdown();
    controller.await.expect("the controller stops cleanly");
    let slow = testing::with_slow_lists(operator.clone(), "deployments", SLOW_LIST);
    let manager = Manager::new(MANAGER_NAME, slow);
    let controller = tokio::spawn(memcached::run(manager.clone()));
    eventually("a reconcile after the restart", async || {
        (successful_reconciles(&manager) > 0).then_some(())
    })
    .await;
    let restarted = (
        writes("deployments", "").await,
        writes("memcacheds", "status").await,
    );
    assert_eq!(
        restarted, before,
        "the restarted manager wrote to a converged object"
    );
    let reasons = event_reasons(&admin, ns, "sample").await;
    let created = reasons
        .iter()
        .filter(|reason| *reason == "DeploymentCreated")
        .count();
    assert_eq!(created, 1, "{reasons:?}");

    // `kubectl scale --replicas=3` goes through the scale subresource.
    let target = format!("{RESOURCE}/sample");
    let out = env
        .kubectl()
        .args(["scale", &target, "--replicas=3", "-n", ns])
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
        (ready && is_true(&object, "Available")).then_some(())
    })
    .await;
    // The new size is in the status; an event is for changes made by someone else, below.
    let reasons = event_reasons(&admin, ns, "sample").await;
    assert!(reasons.contains(&"DeploymentCreated".into()), "{reasons:?}");
    assert!(
        !reasons.contains(&"DeploymentUpdated".into()),
        "{reasons:?}"
    );

    // Someone edits the pod template: the operator puts it back, and says so.
    let tamper = json!({ "spec": { "template": { "spec": {
        "containers": [{ "name": "memcached", "image": "example.com/tampered:1" }]
    } } } });
    deployments
        .patch("sample", &PatchParams::default(), &Patch::Strategic(tamper))
        .await
        .unwrap();
    eventually("the image restored", async || {
        let pod = deployments
            .get("sample")
            .await
            .unwrap()
            .spec?
            .template
            .spec?;
        (pod.containers[0].image.as_deref() == Some(IMAGE)).then_some(())
    })
    .await;
    let restored = wait_for_event(&admin, ns, "sample", "DeploymentUpdated").await;
    assert!(
        restored
            .note
            .unwrap_or_default()
            .contains("Put Deployment sample back")
    );

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

    // Deleting the Memcached garbage-collects its Deployment; no finalizer holds it up.
    api.delete("sample", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the object gone", async || {
        api.get_opt("sample").await.unwrap().is_none().then_some(())
    })
    .await;
    eventually("the Deployment garbage-collected", async || {
        deployments
            .get_opt("sample")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    manager.shutdown();
    tokio::time::timeout(Duration::from_secs(30), controller)
        .await
        .expect("the controller did not stop")
        .unwrap();
}

/// A Deployment of the same name that the Memcached does not control (made by hand, or owned by
/// something else) is left alone, and the Memcached says why: Degraded=True and a Warning event.
#[tokio::test]
async fn a_deployment_it_does_not_control_is_not_adopted() {
    let env = start(false).await;
    let client = env.client();
    let pp = PostParams::default();
    let foreign: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "taken" },
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

    let manager = Manager::new(MANAGER_NAME, client.clone());
    let controller = tokio::spawn(memcached::run(manager.clone()));
    let api: Api<Memcached> = Api::namespaced(client.clone(), "default");
    api.create(&pp, &new_object("taken", 1)).await.unwrap();

    let degraded = eventually("Degraded=True", async || {
        let object = api.get("taken").await.unwrap();
        condition(&object, "Degraded").filter(|(status, _)| status == "True")
    })
    .await;
    assert_eq!(degraded.1, "DeploymentNotOwned");
    let event = wait_for_event(&client, "default", "taken", "DeploymentNotOwned").await;
    assert!(event.note.unwrap_or_default().contains("Deployment taken"));
    let after = deployments.get("taken").await.unwrap();
    assert_eq!(after.resource_version(), foreign.resource_version());
    assert!(
        after.owner_references().is_empty(),
        "the Deployment was adopted"
    );

    // Gone, the Deployment in the way no longer shows in Degraded, at once (no Deployment controller
    // reports a rollout here); a new annotation wakes the Memcached before its minute is up.
    deployments
        .delete("taken", &DeleteParams::default())
        .await
        .unwrap();
    let touch = json!({ "metadata": { "annotations": { "example.com/touched": "yes" } } });
    api.patch("taken", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    eventually("Degraded withdrawn", async || {
        let object = api.get("taken").await.unwrap();
        condition(&object, "Degraded").is_none().then_some(())
    })
    .await;

    manager.shutdown();
    controller.await.unwrap();
}
