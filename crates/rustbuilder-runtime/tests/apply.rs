//! `apply` and `apply_scalable` on a real API server: which request each change costs, who owns the
//! size afterwards (the API server's `managedFields`), and that every foreign edit of a field the
//! operator sets is taken back, lists included, while a converged object costs no request.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, Patch, PatchParams};
use kube::{CustomResource, CustomResourceExt, ResourceExt};
use rustbuilder_envtest::{TestEnv, TestEnvBuilder, take_turn};
use rustbuilder_runtime::Manager;
use rustbuilder_runtime::apply::{self, Applied};
use rustbuilder_runtime::owned::MANAGED_BY_LABEL;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::{eventually, requests};

const MANAGER: &str = "scaler";

/// The control plane the tests take turns on, each in a namespace of its own: they count the requests
/// the API server answered.
fn shared_env() -> TestEnvBuilder {
    TestEnv::builder().crd(Gadget::crd()).crd(Sprocket::crd())
}

fn deployment(namespace: &str, replicas: i32, tier: &str) -> Deployment {
    let labels = json!({ "app": "web", "tier": tier });
    serde_json::from_value(json!({
        "metadata": { "name": "web", "namespace": namespace, "labels": labels },
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
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);

    // Nothing yet: created by an apply.
    let before = writes(&client).await;
    let created = apply::apply_scalable(&api, None, &deployment(ns, 1, "a"), MANAGER).await;
    assert!(created.unwrap().is_changed());
    assert_eq!(writes(&client).await, (before.0 + 1, before.1));
    let current = api.get("web").await.unwrap();
    assert_eq!(size_owner(&current), [("Apply".into(), String::new())]);

    // Only the size differs: one merge patch of `scale`, and the result is what the server holds.
    let before = writes(&client).await;
    let resized =
        apply::apply_scalable(&api, Some(&current), &deployment(ns, 3, "a"), MANAGER).await;
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
    let same = apply::apply_scalable(&api, Some(&current), &deployment(ns, 3, "a"), MANAGER).await;
    assert!(!same.unwrap().is_changed());
    assert_eq!(writes(&client).await, before);

    // The size and a label: the whole object is applied, and the apply owns the size again.
    let before = writes(&client).await;
    let applied =
        apply::apply_scalable(&api, Some(&current), &deployment(ns, 2, "b"), MANAGER).await;
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

/// A Deployment `name` with a toleration, two environment variables, two arguments and a port, as
/// the operator wants it; `labels` besides `app` and `managed-by`.
fn pod_spec_deployment(namespace: &str, name: &str, labels: Value) -> Deployment {
    let mut all = json!({ "app": name, MANAGED_BY_LABEL: MANAGER });
    all.as_object_mut()
        .unwrap()
        .extend(labels.as_object().unwrap().clone());
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": namespace, "labels": all },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": {
                    "tolerations": [{ "key": "dedicated", "operator": "Exists" }],
                    "nodeSelector": { "disk": "ssd" },
                    "topologySpreadConstraints": [spread(json!({ "app": name }))],
                    "containers": [{
                        "name": "web",
                        "image": "nginx:1.27",
                        "args": ["--port", "80"],
                        "env": [{ "name": "A", "value": "1" }, { "name": "B", "value": "$(A)" }],
                        // A key of the list left out (`protocol`, defaulted to TCP): still converged.
                        "ports": [{ "containerPort": 80 }],
                    }],
                },
            },
        },
    }))
    .unwrap()
}

/// A spread over zones of the Pods whose labels `match_labels` selects.
fn spread(match_labels: Value) -> Value {
    json!({
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": { "matchLabels": match_labels },
    })
}

/// Another writer's edit: a JSON merge patch of the pod spec as field manager `intruder`.
async fn foreign_edit(api: &Api<Deployment>, name: &str, pod_spec: Value) {
    let params = PatchParams {
        field_manager: Some("intruder".into()),
        ..PatchParams::default()
    };
    let patch = json!({ "spec": { "template": { "spec": pod_spec } } });
    api.patch(name, &params, &Patch::Merge(patch))
        .await
        .unwrap();
}

fn pod_spec(deployment: &Deployment) -> Value {
    let spec = deployment.spec.as_ref().unwrap().template.spec.as_ref();
    serde_json::to_value(spec.unwrap()).unwrap()
}

/// Applies `desired` over what the API server holds now: whether it changed the Deployment, and how
/// many applies it sent. Then checks that once converged, the same apply costs no request.
async fn take_back(client: &kube::Client, desired: &Deployment) -> (bool, u64) {
    let namespace = desired.namespace().expect("a namespaced Deployment");
    let api: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let name = desired.name_any();
    let current = api.get(&name).await.unwrap();
    let before = writes(client).await.0;
    let applied = apply::apply(&api, Some(&current), desired, MANAGER)
        .await
        .unwrap();
    let sent = writes(client).await.0 - before;

    let current = api.get(&name).await.unwrap();
    let before = writes(client).await;
    let again = apply::apply(&api, Some(&current), desired, MANAGER)
        .await
        .unwrap();
    assert!(!again.is_changed(), "{name}: converged, yet changed");
    assert_eq!(
        writes(client).await,
        before,
        "{name}: converged, yet written"
    );
    (applied.is_changed(), sent)
}

#[tokio::test]
async fn foreign_edits_of_lists_are_taken_back() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let container = |env: Value, args: Value| {
        let ports = json!([{ "containerPort": 80 }]);
        json!({ "name": "web", "image": "nginx:1.27", "args": args, "env": env, "ports": ports })
    };
    let env_ab = json!([{ "name": "A", "value": "1" }, { "name": "B", "value": "$(A)" }]);
    let args = json!(["--port", "80"]);
    let cases = [
        // An atomic list: a toleration of someone else's goes, as the apply replaces the list.
        (
            "toleration",
            json!({ "tolerations": [
                { "key": "dedicated", "operator": "Exists" },
                { "key": "foreign", "operator": "Exists" },
            ] }),
        ),
        // A map list keyed by name: the same variables in another order (B refers to A: order
        // matters), put back in the order the operator gives.
        (
            "env-order",
            json!({ "containers": [container(
                json!([{ "name": "B", "value": "$(A)" }, { "name": "A", "value": "1" }]),
                args.clone(),
            )] }),
        ),
        // A list of scalars (atomic): an extra argument.
        (
            "extra-arg",
            json!({ "containers": [container(env_ab.clone(), json!(["--port", "80", "--debug"]))] }),
        ),
        // An atomic map: a node label of someone else's goes, as the apply replaces the map.
        (
            "node-selector",
            json!({ "nodeSelector": { "foreign": "x" } }),
        ),
        // An atomic struct inside a map list's item: a LabelSelector selecting more.
        (
            "label-selector",
            json!({ "topologySpreadConstraints": [
                spread(json!({ "app": "label-selector", "foreign": "x" })),
            ] }),
        ),
        // A map list keyed by port and protocol, the protocol left out (TCP by default): port 80
        // over UDP is not ours, and ours comes back.
        (
            "udp-port",
            json!({ "containers": [{
                "name": "web", "image": "nginx:1.27", "args": args.clone(), "env": env_ab.clone(),
                "ports": [{ "containerPort": 80, "protocol": "UDP" }],
            }] }),
        ),
    ];
    let mut kept = Vec::new();
    for (name, edit) in cases {
        let desired = pod_spec_deployment(ns, name, json!({}));
        let created = apply::apply(&api, None, &desired, MANAGER).await.unwrap();
        foreign_edit(&api, name, edit).await;
        let edited = pod_spec(&api.get(name).await.unwrap());
        assert_ne!(
            edited,
            pod_spec(created.object()),
            "{name}: the edit changed nothing"
        );
        let (changed, sent) = take_back(&client, &desired).await;
        if !changed {
            kept.push(name);
            continue;
        }
        assert_eq!(sent, 1, "{name}: one apply");
        let now = pod_spec(&api.get(name).await.unwrap());
        let toleration = json!([{ "key": "dedicated", "operator": "Exists" }]);
        assert_eq!(now["tolerations"], toleration, "{name}");
        let container = &now["containers"][0];
        assert_eq!(container["env"], env_ab, "{name}");
        assert_eq!(container["args"], args, "{name}");
        assert_eq!(now["nodeSelector"], json!({ "disk": "ssd" }), "{name}");
        let selector = &now["topologySpreadConstraints"][0]["labelSelector"];
        assert_eq!(
            selector,
            &json!({ "matchLabels": { "app": name } }),
            "{name}"
        );
        let tcp_80 = json!({ "containerPort": 80, "protocol": "TCP" });
        let ports = container["ports"].as_array().unwrap();
        assert!(ports.contains(&tcp_80), "{name}: {ports:?}");
    }
    assert!(kept.is_empty(), "foreign edits not taken back: {kept:?}");
}

#[tokio::test]
async fn a_label_no_longer_set_is_removed_through_the_cache() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let manager = Manager::new(MANAGER, client.clone());
    let deployments = manager.owned::<Deployment>();
    let desired = pod_spec_deployment(ns, "label", json!({ "tier": "a" }));
    apply::apply(&api, None, &desired, MANAGER).await.unwrap();

    // The operator no longer sets `tier`: the object as the cache holds it tells that it did.
    let cached = async || deployments.find(ns, "label").await.unwrap();
    let found = eventually(Duration::from_secs(10), async || cached().await.is_some()).await;
    assert!(found, "the cache never held the Deployment");
    let current = cached().await.unwrap();
    let entries = current.managed_fields();
    assert_eq!(
        entries.len(),
        1,
        "the cache keeps our apply entry only: {entries:?}"
    );
    let desired = pod_spec_deployment(ns, "label", json!({}));
    let before = writes(&client).await;
    let applied = apply::apply(&api, Some(&current), &desired, MANAGER).await;
    assert!(applied.unwrap().is_changed(), "the label stays");
    assert_eq!(writes(&client).await, (before.0 + 1, before.1));
    let now = api.get("label").await.unwrap();
    assert_eq!(now.labels().get("tier"), None, "{:?}", now.labels());

    // Converged, as the cache sees it: no request.
    let synced = eventually(Duration::from_secs(10), async || {
        cached()
            .await
            .is_some_and(|c| c.resource_version() == now.resource_version())
    });
    assert!(synced.await, "the cache never saw the apply");
    let before = writes(&client).await;
    let same = apply::apply(&api, cached().await.as_deref(), &desired, MANAGER).await;
    assert!(!same.unwrap().is_changed());
    assert_eq!(writes(&client).await, before);
    manager.shutdown();
}

/// What the API server normalises is no difference: quantities written in another form (`1000m`
/// reads back as `1`, `1024Mi` as `1Gi`, `0.5` as `500m`) and empty lists (left out when stored).
/// The converged object costs no write.
#[tokio::test]
async fn values_the_api_server_normalises_cost_no_write() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let mut desired = serde_json::to_value(pod_spec_deployment(ns, "normal", json!({}))).unwrap();
    let container = &mut desired["spec"]["template"]["spec"]["containers"][0];
    container["resources"] = json!({
        "limits": { "cpu": "1000m", "memory": "1024Mi" },
        "requests": { "cpu": "0.5" },
    });
    container["envFrom"] = json!([]);
    let desired: Deployment = serde_json::from_value(desired).unwrap();
    apply::apply(&api, None, &desired, MANAGER).await.unwrap();

    let stored = api.get("normal").await.unwrap();
    let stored_container = &pod_spec(&stored)["containers"][0];
    assert_eq!(stored_container["resources"]["limits"]["cpu"], "1");
    assert_eq!(stored_container["resources"]["limits"]["memory"], "1Gi");
    assert_eq!(stored_container["resources"]["requests"]["cpu"], "500m");
    assert!(
        stored_container.get("envFrom").is_none(),
        "{stored_container}"
    );
    let before = writes(&client).await;
    let again = apply::apply(&api, Some(&stored), &desired, MANAGER)
        .await
        .unwrap();
    assert!(!again.is_changed());
    assert_eq!(
        writes(&client).await,
        before,
        "the normalised object was written again"
    );

    // A quantity that is really different is still a difference.
    let mut larger = serde_json::to_value(&desired).unwrap();
    larger["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] =
        json!("1500m");
    let larger: Deployment = serde_json::from_value(larger).unwrap();
    let (changed, sent) = take_back(&client, &larger).await;
    assert!(changed && sent == 1, "changed {changed}, {sent} applies");
}

/// A list whose name the field-name fallback knows as a map list (`ports`) is atomic in a
/// NetworkPolicy's rules, as the schema the API server publishes says: a port added by someone else
/// is taken back.
#[tokio::test]
async fn lists_merge_by_the_published_schema_not_their_name() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();
    let api: Api<NetworkPolicy> = Api::namespaced(client.clone(), ns);
    let rule = |ports: Value| json!([{ "ports": ports }]);
    let http = json!({ "port": 80, "protocol": "TCP" });
    let https = json!({ "port": 443, "protocol": "TCP" });
    let desired: NetworkPolicy = serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": { "name": "web", "namespace": ns },
        "spec": { "podSelector": {}, "ingress": rule(json!([http])) },
    }))
    .unwrap();
    apply::apply(&api, None, &desired, MANAGER).await.unwrap();
    let params = PatchParams {
        field_manager: Some("intruder".into()),
        ..PatchParams::default()
    };
    let opened = json!({ "spec": { "ingress": rule(json!([http, https])) } });
    api.patch("web", &params, &Patch::Merge(opened))
        .await
        .unwrap();

    let current = api.get("web").await.unwrap();
    let applied = apply::apply(&api, Some(&current), &desired, MANAGER)
        .await
        .unwrap();
    assert!(applied.is_changed(), "the opened port stays");
    let ingress = serde_json::to_value(&applied.object().spec.as_ref().unwrap().ingress).unwrap();
    assert_eq!(ingress, rule(json!([http])));
}

/// Built-in kinds default some fields in code without publishing the default (a NetworkPolicy
/// port's `protocol`, a webhook rule's `scope`): the stored object never holds the wanted one by the
/// schema's merge rules. The API server's answer to the first apply stands for it from then on:
/// reconciling again sends nothing (before, each reconcile sent an apply that changed nothing and
/// reported it as unchanged), while a foreign edit of the applied fields is still taken back.
#[tokio::test]
async fn defaults_the_api_server_does_not_publish_cost_one_apply_not_one_each_reconcile() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();

    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), ns);
    let policy: NetworkPolicy = serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": { "name": "defaulted", "namespace": ns },
        "spec": { "podSelector": {}, "ingress": [{ "ports": [{ "port": 80 }] }] },
    }))
    .unwrap();
    let sent = reconciles(&client, &policies, &policy, "networkpolicies").await;
    assert_eq!(
        sent, 0,
        "applies sent by 3 reconciles of a converged NetworkPolicy"
    );
    let stored = policies.get("defaulted").await.unwrap();
    let ports = &stored.spec.unwrap().ingress.unwrap()[0].ports;
    let protocol = ports.as_ref().unwrap()[0].protocol.clone();
    assert_eq!(protocol.as_deref(), Some("TCP"), "the server's default");

    // Another's edit of a field the operator applies is still a difference, and is taken back.
    let params = PatchParams {
        field_manager: Some("intruder".into()),
        ..PatchParams::default()
    };
    let edit = json!({ "spec": { "ingress": [{ "ports": [{ "port": 8080 }] }] } });
    policies
        .patch("defaulted", &params, &Patch::Merge(edit))
        .await
        .unwrap();
    let current = policies.get("defaulted").await.unwrap();
    let applied = apply::apply(&policies, Some(&current), &policy, MANAGER)
        .await
        .unwrap();
    assert!(applied.is_changed(), "the foreign port stays");
    let ports = serde_json::to_value(&applied.object().spec.as_ref().unwrap().ingress).unwrap();
    assert_eq!(
        ports,
        json!([{ "ports": [{ "port": 80, "protocol": "TCP" }] }])
    );

    // A webhook rule's `scope` (cluster-scoped: named after the namespace). Its rule matches no
    // resource that exists, so the webhook never gets a request.
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let webhook: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": format!("{ns}-defaulted") },
        "webhooks": [{
            "name": "check.test.example.com",
            "clientConfig": { "url": "https://127.0.0.1:9/check" },
            "rules": [{
                "apiGroups": ["test.example.com"],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["nothings"],
            }],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }],
    }))
    .unwrap();
    let sent = reconciles(
        &client,
        &webhooks,
        &webhook,
        "validatingwebhookconfigurations",
    )
    .await;
    assert_eq!(
        sent, 0,
        "applies sent by 3 reconciles of a converged webhook configuration"
    );
    webhooks
        .delete(&format!("{ns}-defaulted"), &Default::default())
        .await
        .unwrap();
}

/// Applies `desired` (created), then reconciles it 3 times as a controller would, from what the API
/// server holds; returns the applies the reconciles sent.
async fn reconciles<K>(client: &kube::Client, api: &Api<K>, desired: &K, resource: &str) -> u64
where
    K: kube::Resource + Clone + std::fmt::Debug + Serialize + serde::de::DeserializeOwned,
{
    let created = apply::apply(api, None, desired, MANAGER).await.unwrap();
    assert!(created.is_changed());
    let name = desired.meta().name.clone().unwrap();
    let before = support::requests(client, "APPLY", resource).await;
    for _ in 0..3 {
        let current = api.get(&name).await.unwrap();
        let again = apply::apply(api, Some(&current), desired, MANAGER)
            .await
            .unwrap();
        assert!(!again.is_changed());
    }
    support::requests(client, "APPLY", resource).await - before
}

/// A custom resource whose lists and status the tests below apply.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "test.example.com",
    version = "v1",
    kind = "Gadget",
    namespaced,
    status = "GadgetStatus"
)]
struct GadgetSpec {
    /// A map list keyed by `name`, though the field-name fallback takes `tolerations` for atomic.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    tolerations: Vec<Part>,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
struct Part {
    name: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
struct GadgetStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    ready: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    phase: Option<String>,
}

/// A custom resource merges by its CRD: another manager's item of a map list leaves the object
/// converged (no write). Its status compares by ownership: a status field the manager stops setting
/// is removed. (The map list held before the schema was read too, the manager's managed-fields entry
/// telling its type; the status did not: the phase stayed.)
#[tokio::test]
async fn custom_resources_merge_by_their_crd_and_status_by_ownership() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();
    let api: Api<Gadget> = Api::namespaced(client.clone(), ns);
    let part = |name: &str| Part { name: name.into() };
    let mut desired = Gadget::new(
        "g",
        GadgetSpec {
            tolerations: vec![part("ours")],
        },
    );
    desired.metadata.namespace = Some(ns.into());
    apply::apply(&api, None, &desired, MANAGER).await.unwrap();
    let theirs = json!({
        "apiVersion": "test.example.com/v1",
        "kind": "Gadget",
        "spec": { "tolerations": [{ "name": "theirs" }] },
    });
    api.patch("g", &PatchParams::apply("intruder"), &Patch::Apply(theirs))
        .await
        .unwrap();

    let current = api.get("g").await.unwrap();
    assert_eq!(current.spec.tolerations.len(), 2, "{:?}", current.spec);
    let applies = async || requests(&client, "APPLY", "gadgets").await;
    let before = applies().await;
    let same = apply::apply(&api, Some(&current), &desired, MANAGER).await;
    assert!(!same.unwrap().is_changed());
    assert_eq!(applies().await, before, "converged, yet written");

    let status = |phase: Option<&str>| GadgetStatus {
        ready: Some(1),
        phase: phase.map(String::from),
    };
    assert!(
        apply::status(&api, &current, &status(Some("Up")), MANAGER)
            .await
            .unwrap()
    );
    let current = api.get("g").await.unwrap();
    assert!(
        !apply::status(&api, &current, &status(Some("Up")), MANAGER)
            .await
            .unwrap()
    );
    let wrote = apply::status(&api, &current, &status(None), MANAGER).await;
    assert!(wrote.unwrap(), "the phase no longer set stays");
    let now = api.get("g").await.unwrap().status.unwrap();
    assert_eq!((now.ready, now.phase), (Some(1), None));
}

/// A custom resource whose schema no other test of this process reads.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "test.example.com",
    version = "v1",
    kind = "Sprocket",
    namespaced
)]
struct SprocketSpec {
    teeth: i32,
}

/// A client that counts the requests for OpenAPI documents (the schemas) it sends.
#[derive(Clone)]
struct CountingSchemas {
    client: kube::Client,
    fetched: Arc<AtomicUsize>,
}

impl tower::Service<http::Request<kube::client::Body>> for CountingSchemas {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, kube::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), kube::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        if request.uri().path().starts_with("/openapi/v3") {
            self.fetched.fetch_add(1, Ordering::SeqCst);
        }
        let client = self.client.clone();
        Box::pin(async move { client.send(request).await })
    }
}

/// The first reconciles of a kind, at once, fetch its schema once: the others wait for the first
/// one's answer (before, each of the 8 fetched the document of the kind's group version).
#[tokio::test]
async fn concurrent_first_applies_of_a_kind_fetch_its_schema_once() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let counting = CountingSchemas {
        client: env.client(),
        fetched: Arc::default(),
    };
    let api: Api<Sprocket> = Api::namespaced(kube::Client::new(counting.clone(), ns), ns);
    let sprocket = |i: usize, teeth: i32| {
        let mut sprocket = Sprocket::new(&format!("s{i}"), SprocketSpec { teeth });
        sprocket.metadata.namespace = Some(ns.to_string());
        sprocket
    };
    let mut created = Vec::new();
    for i in 0..8 {
        let object = api
            .create(&Default::default(), &sprocket(i, 1))
            .await
            .unwrap();
        created.push(object);
    }
    let applies = created.iter().enumerate().map(|(i, current)| {
        let api = api.clone();
        let desired = sprocket(i, 2);
        async move { apply::apply(&api, Some(current), &desired, MANAGER).await }
    });
    for applied in futures::future::join_all(applies).await {
        assert!(applied.unwrap().is_changed());
    }
    assert_eq!(counting.fetched.load(Ordering::SeqCst), 1, "schema fetches");
}
