//! The controller toolkit in-process on a real API server: a controller built with
//! `Manager::controller` over a custom resource, reading its ConfigMaps from an `Owned` cache, writing
//! them and its status with `apply` (no write when nothing changed), publishing events, and retrying
//! failed reconciles with exponential backoff.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::PropagationPolicy;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::Selector;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{CustomResource, CustomResourceExt, Resource, ResourceExt};
use rustbuilder_envtest::{TestEnv, TestEnvBuilder, take_turn};
use rustbuilder_runtime::apply::{self, Applied};
use rustbuilder_runtime::cache::Change;
use rustbuilder_runtime::children;
use rustbuilder_runtime::controller::OnError;
use rustbuilder_runtime::events::Events;
use rustbuilder_runtime::owned::{self, MANAGED_BY_LABEL, Owned};
use rustbuilder_runtime::shard;
use rustbuilder_runtime::{Manager, conditions};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use support::{eventually, requests};

const MANAGER: &str = "widget-manager";

/// The control plane most tests take turns on, each in a namespace of its own with a manager that
/// watches only it: some count the requests the API server answered. The tests that need a server of
/// their own (namespaces and RBAC of their own, the watches it serves, Leases of sharded replicas)
/// start one.
fn shared_env() -> TestEnvBuilder {
    TestEnv::builder().crd(Widget::crd())
}

/// A test resource: each Widget gets a ConfigMap `<name>-widget` holding its size.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "test.example.com",
    version = "v1",
    kind = "Widget",
    namespaced
)]
#[kube(status = "WidgetStatus")]
struct WidgetSpec {
    size: i32,
    /// The first this many reconciles fail.
    #[serde(default)]
    fail_times: usize,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
struct WidgetStatus {
    #[serde(default)]
    conditions: Vec<Condition>,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("failing on purpose")]
    OnPurpose,
}

struct Context {
    client: kube::Client,
    events: Events,
    configmaps: Owned<ConfigMap>,
    attempts: Mutex<Vec<Instant>>,
    writes: AtomicUsize,
    reconciles: AtomicUsize,
}

impl Context {
    /// A fresh context for a controller of `manager` that reads `configmaps`.
    fn new(manager: &Manager, client: kube::Client, configmaps: &Owned<ConfigMap>) -> Arc<Self> {
        Arc::new(Context {
            client,
            events: manager.events(),
            configmaps: configmaps.clone(),
            attempts: Mutex::default(),
            writes: AtomicUsize::new(0),
            reconciles: AtomicUsize::new(0),
        })
    }
}

async fn reconcile(widget: Arc<Widget>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.reconciles.fetch_add(1, Ordering::SeqCst);
    let attempt = {
        let mut attempts = ctx.attempts.lock().unwrap();
        attempts.push(Instant::now());
        attempts.len()
    };
    if attempt <= widget.spec.fail_times {
        return Err(Error::OnPurpose);
    }
    assert!(
        widget.spec.size >= 0,
        "size {} is negative",
        widget.spec.size
    );
    let namespace = widget.namespace().unwrap();
    let name = format!("{}-widget", widget.name_any());
    let current = ctx.configmaps.find(&namespace, &name).await?;
    if let Some(current) = &current {
        assert!(owned::controlled_by(&**current, &*widget), "not ours");
    }
    let desired = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.clone()),
            labels: Some(BTreeMap::from([(MANAGED_BY_LABEL.into(), MANAGER.into())])),
            owner_references: widget.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "size".into(),
            widget.spec.size.to_string(),
        )])),
        ..Default::default()
    };
    let configmaps = Api::<ConfigMap>::namespaced(ctx.client.clone(), &namespace);
    let applied = apply::apply(&configmaps, current.as_deref(), &desired, MANAGER).await?;
    if let Applied::Changed(_) = applied {
        ctx.writes.fetch_add(1, Ordering::SeqCst);
        let note = "é".repeat(2000); // over the API's limit: cut to fit
        ctx.events.normal(&*widget, "Created", "Apply", &note);
    }
    let mut status = widget.status.clone().unwrap_or_default();
    let ready = conditions::new(
        "Ready",
        true,
        "ConfigMapApplied",
        "ok",
        widget.meta().generation,
    );
    conditions::set(&mut status.conditions, ready);
    let widgets = Api::<Widget>::namespaced(ctx.client.clone(), &namespace);
    if apply::status(&widgets, &*widget, &status, MANAGER).await? {
        ctx.writes.fetch_add(1, Ordering::SeqCst);
    }
    Ok(Action::await_change())
}

/// Runs the Widget controller of a manager that watches `namespace` (owning its labelled ConfigMaps)
/// until it is ready.
async fn start(
    env: &TestEnv,
    namespace: &str,
) -> (Manager, Arc<Context>, tokio::task::JoinHandle<()>) {
    let manager = Manager::in_namespace(MANAGER, env.client(), namespace);
    let configmaps = manager.owned_labelled::<ConfigMap>().with_other_names();
    let ctx = Context::new(&manager, env.client(), &configmaps);
    let controller = manager
        .controller(manager.api::<Widget>(), "widget")
        .owns(&configmaps)
        .concurrency(2)
        .run(reconcile, ctx.clone());
    let controllers = manager.controllers();
    controllers.add(controller);
    let running = tokio::spawn(async move { controllers.run().await.unwrap() });
    let ready = async || manager.ready().is_ok();
    assert!(
        eventually(Duration::from_secs(30), ready).await,
        "{:?}",
        manager.ready()
    );
    (manager, ctx, running)
}

/// Runs the Widget controller (owning `configmaps`) of `manager`, which watches its own namespace
/// or all of them, until the manager shuts down.
fn run_widgets(
    manager: &Manager,
    configmaps: &Owned<ConfigMap>,
    ctx: Arc<Context>,
) -> tokio::task::JoinHandle<()> {
    let controllers = manager.controllers();
    controllers.add(
        manager
            .controller(manager.api::<Widget>(), "widget")
            .owns(configmaps)
            .run(reconcile, ctx),
    );
    tokio::spawn(async move { controllers.run().await.unwrap() })
}

fn widget(name: &str, size: i32, fail_times: usize) -> Widget {
    Widget::new(name, WidgetSpec { size, fail_times })
}

#[tokio::test]
async fn applies_only_changes_and_follows_owned_objects() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();
    // A ConfigMap without the manager's label stays out of the cache.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let unrelated: ConfigMap =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": "unrelated" } })).unwrap();
    configmaps
        .create(&PostParams::default(), &unrelated)
        .await
        .unwrap();

    let (manager, ctx, running) = start(&env, ns).await;
    let widgets: Api<Widget> = Api::namespaced(client.clone(), ns);
    widgets
        .create(&PostParams::default(), &widget("w", 3, 0))
        .await
        .unwrap();

    let is_ready = async || {
        let w = widgets.get("w").await.unwrap();
        let conditions = w.status.map(|s| s.conditions).unwrap_or_default();
        conditions::is_true(&conditions, "Ready")
    };
    assert!(
        eventually(Duration::from_secs(30), is_ready).await,
        "never Ready"
    );
    let copy = configmaps.get("w-widget").await.unwrap();
    assert_eq!(copy.data.unwrap()["size"], "3");
    assert!(ctx.configmaps.get(Some(ns), "unrelated").is_none());
    let cached = async || {
        let copy = ctx.configmaps.get(Some(ns), "w-widget");
        ctx.configmaps.len() == 1 && copy.is_some_and(|c| c.data.as_ref().unwrap()["size"] == "3")
    };
    assert!(eventually(Duration::from_secs(10), cached).await);

    // A name neither watch knows is free without asking the API server; a ConfigMap someone else
    // made is found (by a GET), so a controller does not take it over.
    let gets_before = requests(&client, "GET", "configmaps").await;
    for _ in 0..5 {
        let free = ctx.configmaps.find(ns, "nobody-has-this").await.unwrap();
        assert!(free.is_none());
    }
    let theirs = ctx.configmaps.find(ns, "unrelated").await.unwrap();
    assert_eq!(theirs.map(|c| c.name_any()).as_deref(), Some("unrelated"));
    assert_eq!(
        requests(&client, "GET", "configmaps").await - gets_before,
        1,
        "one GET, for the ConfigMap someone else made"
    );

    // The event, with its note cut to the API's 1024 bytes.
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let published = async || {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items.iter().any(|e| {
            e.reason.as_deref() == Some("Created")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("w")
                && e.note.as_ref().is_some_and(|n| n.len() == 1024)
                && e.reporting_controller.as_deref() == Some(MANAGER)
        })
    };
    assert!(
        eventually(Duration::from_secs(10), published).await,
        "no event"
    );

    // Converged: a reconcile triggered by an unrelated change writes nothing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes = ctx.writes.load(Ordering::SeqCst);
    let copy_version = configmaps.get("w-widget").await.unwrap().resource_version();
    let reconciles = ctx.reconciles.load(Ordering::SeqCst);
    let touch =
        Patch::Merge(serde_json::json!({ "metadata": { "annotations": { "touched": "1" } } }));
    widgets
        .patch("w", &PatchParams::default(), &touch)
        .await
        .unwrap();
    let reconciled = async || ctx.reconciles.load(Ordering::SeqCst) > reconciles;
    assert!(
        eventually(Duration::from_secs(10), reconciled).await,
        "no reconcile after the change"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        ctx.writes.load(Ordering::SeqCst),
        writes,
        "a converged object was written"
    );
    assert_eq!(
        configmaps.get("w-widget").await.unwrap().resource_version(),
        copy_version
    );

    // A spec change is applied.
    let resize = Patch::Merge(serde_json::json!({ "spec": { "size": 5 } }));
    widgets
        .patch("w", &PatchParams::default(), &resize)
        .await
        .unwrap();
    let resized = async || configmaps.get("w-widget").await.unwrap().data.unwrap()["size"] == "5";
    assert!(
        eventually(Duration::from_secs(10), resized).await,
        "not resized"
    );

    // Deleting the owned ConfigMap reconciles its owner, which makes it again.
    configmaps
        .delete("w-widget", &DeleteParams::default())
        .await
        .unwrap();
    let recreated = async || {
        configmaps
            .get_opt("w-widget")
            .await
            .unwrap()
            .is_some_and(|c| c.metadata.deletion_timestamp.is_none())
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        eventually(Duration::from_secs(10), recreated).await,
        "not recreated"
    );

    manager.shutdown();
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn failed_reconciles_back_off_exponentially() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let (manager, ctx, running) = start(&env, ns).await;
    let widgets: Api<Widget> = Api::namespaced(env.client(), ns);
    widgets
        .create(&PostParams::default(), &widget("flaky", 1, 3))
        .await
        .unwrap();

    let succeeded = async || ctx.writes.load(Ordering::SeqCst) >= 2;
    assert!(
        eventually(Duration::from_secs(30), succeeded).await,
        "never succeeded"
    );
    let attempts = ctx.attempts.lock().unwrap().clone();
    let gaps: Vec<Duration> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!("retry gaps: {gaps:?}");
    assert!(attempts.len() >= 4, "{gaps:?}");
    for (gap, expected) in gaps.iter().zip([1, 2, 4]) {
        let expected = Duration::from_secs(expected);
        assert!(
            *gap >= expected.mul_f64(0.9) && *gap < expected + Duration::from_millis(1500),
            "retry gaps {gaps:?}, expected 1 s, 2 s, 4 s"
        );
    }
    let metrics = manager.metrics().encode();
    let sample = |series: &str| support::sample(&metrics, series);
    let errors = r#"controller_runtime_reconcile_total{controller="widget",result="error"}"#;
    assert_eq!(sample(errors), Some(3.0), "{metrics}");

    // Each failure is told on the object itself, as a Warning event carrying the error: one event,
    // whose series counts the three failures (repeats are not stored again).
    let events: Api<Event> = Api::namespaced(env.client(), ns);
    let failures = async || {
        let list = events.list(&ListParams::default()).await.unwrap();
        let failed: Vec<Event> = list
            .items
            .into_iter()
            .filter(|event| event.reason.as_deref() == Some("ReconcileFailed"))
            .collect();
        failed
    };
    let counted = async || {
        let failed = failures().await;
        failed.len() == 1 && failed[0].series.as_ref().is_some_and(|s| s.count == 3)
    };
    let found = eventually(Duration::from_secs(10), counted).await;
    let failed = failures().await;
    assert!(
        found,
        "not one ReconcileFailed event counted 3 times: {failed:#?}"
    );
    let event = &failed[0];
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("flaky")
    );
    let note = event.note.as_deref().unwrap_or_default();
    assert!(note.contains("failing on purpose"), "{note}");
    manager.shutdown();
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap();
}

/// An error policy that gives up waits for the object to change instead of retrying, and a
/// controller may keep failures out of the object's events.
#[tokio::test]
async fn a_controller_can_give_up_on_an_error_and_publish_no_event() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let manager = Manager::in_namespace(MANAGER, env.client(), ns);
    let configmaps = manager.owned::<ConfigMap>();
    let ctx = Context::new(&manager, env.client(), &configmaps);
    let controller = manager
        .controller(manager.api::<Widget>(), "widget")
        .on_error(|widget, error| {
            assert_eq!(widget.name_any(), "doomed");
            match error.downcast_ref::<Error>() {
                Some(Error::OnPurpose) => OnError::GiveUp,
                _ => OnError::Retry,
            }
        })
        .failure_events(false)
        .run(reconcile, ctx.clone());
    manager.controllers().add(controller);
    let running = tokio::spawn(manager.controllers().run());
    let widgets: Api<Widget> = Api::namespaced(env.client(), ns);
    widgets
        .create(&PostParams::default(), &widget("doomed", 1, 100))
        .await
        .unwrap();
    let attempts = || ctx.attempts.lock().unwrap().len();
    assert!(eventually(Duration::from_secs(30), async || attempts() == 1).await);
    // With backoff it would have tried again after 1 s and 3 s.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(attempts(), 1, "retried although the policy gave up");

    let patch = serde_json::json!({ "spec": { "size": 2 } });
    widgets
        .patch("doomed", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), async || attempts() == 2).await,
        "a change did not reconcile the object again"
    );
    let events: Api<Event> = Api::namespaced(env.client(), ns);
    let list = events.list(&ListParams::default()).await.unwrap();
    let failed = list
        .items
        .iter()
        .filter(|event| event.reason.as_deref() == Some("ReconcileFailed"));
    assert_eq!(failed.count(), 0, "a failure event although turned off");
    manager.shutdown();
    running.await.unwrap().unwrap();
}

/// A manager that watches one namespace (`--watch-namespace`, as `init --namespaced` deploys it) works
/// with a Role there and nothing else: every list and watch it makes is namespaced. Widgets elsewhere
/// are left alone.
#[tokio::test]
async fn a_namespaced_manager_needs_only_a_role_in_its_namespace() {
    let env = TestEnv::builder().crd(Widget::crd()).start().await;
    let admin = env.client();
    for namespace in ["team-a", "team-b"] {
        env.create_namespace(namespace).await;
    }
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "manager-role", "namespace": "team-a" },
        "rules": [
            { "apiGroups": ["test.example.com"], "resources": ["widgets", "widgets/status"],
              "verbs": ["get", "list", "watch", "patch"] },
            { "apiGroups": [""], "resources": ["configmaps"],
              "verbs": ["get", "list", "watch", "create", "patch"] },
            { "apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"] },
        ],
    }))
    .unwrap();
    let binding: k8s_openapi::api::rbac::v1::RoleBinding =
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "manager-rolebinding", "namespace": "team-a" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "manager-role" },
            "subjects": [{ "kind": "ServiceAccount", "name": "manager", "namespace": "team-a" }],
        }))
        .unwrap();
    let pp = PostParams::default();
    Api::namespaced(admin.clone(), "team-a")
        .create(&pp, &role)
        .await
        .unwrap();
    Api::namespaced(admin.clone(), "team-a")
        .create(&pp, &binding)
        .await
        .unwrap();
    let client = env.service_account_client("team-a", "manager").await;
    let forbidden = Api::<Widget>::all(client.clone())
        .list(&ListParams::default())
        .await;
    assert!(
        forbidden.is_err(),
        "the account may list widgets cluster-wide"
    );

    let manager = Manager::in_namespace(MANAGER, client.clone(), "team-a");
    assert_eq!(manager.watch_namespace(), Some("team-a"));
    let configmaps = manager.owned::<ConfigMap>();
    let ctx = Context::new(&manager, client.clone(), &configmaps);
    let running = run_widgets(&manager, &configmaps, ctx.clone());
    // Ready means every cache listed: possible only with namespaced lists under this Role.
    let ready = async || manager.ready().is_ok();
    assert!(
        eventually(Duration::from_secs(30), ready).await,
        "{:?}",
        manager.ready()
    );

    for namespace in ["team-b", "team-a"] {
        Api::<Widget>::namespaced(admin.clone(), namespace)
            .create(&pp, &widget("w", 2, 0))
            .await
            .unwrap();
    }
    let mine: Api<Widget> = Api::namespaced(admin.clone(), "team-a");
    let is_ready = async || {
        let w = mine.get("w").await.unwrap();
        conditions::is_true(&w.status.map(|s| s.conditions).unwrap_or_default(), "Ready")
    };
    assert!(
        eventually(Duration::from_secs(30), is_ready).await,
        "team-a's widget never Ready"
    );
    let other = Api::<Widget>::namespaced(admin.clone(), "team-b")
        .get("w")
        .await
        .unwrap();
    assert!(
        other.status.is_none(),
        "team-b's widget was reconciled: {:?}",
        other.status
    );
    let copies = Api::<ConfigMap>::namespaced(admin.clone(), "team-b")
        .get_opt("w-widget")
        .await;
    assert!(copies.unwrap().is_none(), "a ConfigMap was made in team-b");

    manager.shutdown();
    running.await.unwrap();
}

/// A Role in `namespace` for the ServiceAccount `manager` there, named `name`, with `rules`.
async fn grant(admin: &kube::Client, namespace: &str, name: &str, rules: serde_json::Value) {
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "namespace": namespace }, "rules": rules,
    }))
    .unwrap();
    let binding: k8s_openapi::api::rbac::v1::RoleBinding =
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "namespace": namespace },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
            "subjects": [{ "kind": "ServiceAccount", "name": "manager", "namespace": namespace }],
        }))
        .unwrap();
    let pp = PostParams::default();
    let roles = Api::namespaced(admin.clone(), namespace);
    roles.create(&pp, &role).await.unwrap();
    let bindings = Api::namespaced(admin.clone(), namespace);
    bindings.create(&pp, &binding).await.unwrap();
}

/// A cache whose watch the API server keeps refusing (its Role revoked: each new watch is
/// forbidden) stops every controller that reads it; past the manager's bound it is no longer
/// silent: the manager is not ready, naming the kind and the refusal, until the watch works again,
/// and a `CacheStalled` Warning on its Pod (a stand-in here) says the same, once.
#[tokio::test]
async fn a_watch_refused_past_the_bound_makes_the_manager_unready() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let admin = env.client();
    let rules = serde_json::json!([
        { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"] },
    ]);
    grant(&admin, ns, "watcher", rules).await;
    let events = serde_json::json!([
        { "apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"] },
    ]);
    grant(&admin, ns, "publisher", events).await;
    let client = env.service_account_client(ns, "manager").await;
    let manager = Manager::in_namespace(MANAGER, client.clone(), ns);
    manager.set_cache_stall_bound(Duration::from_secs(2));
    let pod = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some("manager-0".into()),
        namespace: Some(ns.to_string()),
        uid: Some("4c1f2a8e-0000-4000-8000-000000000001".into()),
        ..Default::default()
    };
    manager.set_event_target(pod);
    // Watches that the API server ends after a second: each new one meets the Role as it is then.
    let config = kube::runtime::watcher::Config::default().timeout(1);
    let cache = manager.cache_with(Api::<ConfigMap>::namespaced(client, ns), config);
    let running = tokio::spawn(manager.controllers().run());
    cache.completeness().wait().await;
    assert!(
        eventually(Duration::from_secs(10), async || manager.ready().is_ok()).await,
        "{:?}",
        manager.ready()
    );

    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> = Api::namespaced(admin.clone(), ns);
    bindings
        .delete("watcher", &DeleteParams::default())
        .await
        .unwrap();
    let refused = async || {
        manager.ready().is_err_and(|why| {
            why.contains("the watch of ConfigMap has failed") && why.contains("forbidden")
        })
    };
    assert!(
        eventually(Duration::from_secs(20), refused).await,
        "a watch refused for longer than the bound, and the manager: {:?}",
        manager.ready()
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin.clone(), ns);
    let stalled = async || {
        let listed = events.list(&Default::default()).await.unwrap().items;
        let on_pod = listed.into_iter().filter(|event| {
            event.reason.as_deref() == Some("CacheStalled")
                && event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("manager-0")
        });
        on_pod.collect::<Vec<_>>()
    };
    assert!(
        eventually(Duration::from_secs(10), async || !stalled()
            .await
            .is_empty())
        .await,
        "no CacheStalled event on the manager's Pod"
    );
    let published = stalled().await;
    let note = published[0].note.clone().unwrap_or_default();
    assert!(
        published.len() == 1
            && note.contains("the watch of ConfigMap has failed")
            && note.contains("forbidden")
            && published[0].type_.as_deref() == Some("Warning"),
        "{published:?}"
    );

    // Allowed again: the next watch works, and its first event ends the failure.
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "watcher", "namespace": ns },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "watcher" },
        "subjects": [{ "kind": "ServiceAccount", "name": "manager", "namespace": ns }],
    }))
    .unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let mut configmap = ConfigMap::default();
    configmap.metadata.name = Some("after".into());
    configmaps
        .create(&PostParams::default(), &configmap)
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(60), async || manager.ready().is_ok()).await,
        "the watch works again, and the manager: {:?}",
        manager.ready()
    );

    manager.shutdown();
    running.await.unwrap().unwrap();
}

/// The controller's own cache lists at once, the cache of the ConfigMaps it owns cannot list yet
/// (its Role comes later): no reconcile may start before both hold their lists, else it would take
/// a ConfigMap still coming for an absent one.
#[tokio::test]
async fn no_reconcile_starts_before_every_cache_it_reads_has_listed() {
    let env = TestEnv::builder().crd(Widget::crd()).start().await;
    let admin = env.client();
    env.create_namespace("gated").await;
    let widgets_only = serde_json::json!([
        { "apiGroups": ["test.example.com"], "resources": ["widgets", "widgets/status"],
          "verbs": ["get", "list", "watch", "patch"] },
        { "apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"] },
    ]);
    grant(&admin, "gated", "widgets", widgets_only).await;
    Api::<Widget>::namespaced(admin.clone(), "gated")
        .create(&PostParams::default(), &widget("w", 2, 0))
        .await
        .unwrap();
    let client = env.service_account_client("gated", "manager").await;
    let manager = Manager::in_namespace(MANAGER, client.clone(), "gated");
    let configmaps = manager.owned::<ConfigMap>();
    let ctx = Context::new(&manager, client, &configmaps);
    let widgets = manager.cache::<Widget>();
    let running = run_widgets(&manager, &configmaps, ctx.clone());

    let listed = async || widgets.is_synced();
    assert!(
        eventually(Duration::from_secs(30), listed).await,
        "the widgets never listed"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!configmaps.completeness().is_complete());
    assert_eq!(
        ctx.reconciles.load(Ordering::SeqCst),
        0,
        "a reconcile ran while the ConfigMaps had not listed"
    );

    let configmaps_too = serde_json::json!([
        { "apiGroups": [""], "resources": ["configmaps"],
          "verbs": ["get", "list", "watch", "create", "patch"] },
    ]);
    grant(&admin, "gated", "configmaps", configmaps_too).await;
    let mine: Api<Widget> = Api::namespaced(admin.clone(), "gated");
    let is_ready = async || {
        let w = mine.get("w").await.unwrap();
        conditions::is_true(&w.status.map(|s| s.conditions).unwrap_or_default(), "Ready")
    };
    assert!(
        eventually(Duration::from_secs(60), is_ready).await,
        "never Ready once the ConfigMaps could be listed"
    );
    assert!(configmaps.completeness().is_complete());

    manager.shutdown();
    running.await.unwrap();
}

/// The unhappy paths of one running controller: a reconcile that panics, a reader of the owned
/// cache that never reads while more than a thousand ConfigMaps arrive, and triggers for owners
/// that are gone. The controller goes on with every other object, and its queue empties.
#[tokio::test]
async fn panics_stalled_readers_and_gone_owners_stop_nothing() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();
    let (manager, ctx, running) = start(&env, ns).await;
    // Subscribed and never read.
    let _stalled = ctx.configmaps.changes();
    let widgets: Api<Widget> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();
    widgets.create(&pp, &widget("bad", -1, 0)).await.unwrap();

    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let failed = async || {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items.iter().any(|e| {
            e.reason.as_deref() == Some("ReconcileFailed")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad")
                && e.note
                    .as_ref()
                    .is_some_and(|n| n.contains("panicked: size -1 is negative"))
        })
    };
    assert!(
        eventually(Duration::from_secs(30), failed).await,
        "no ReconcileFailed event for the panic"
    );
    let metrics = manager.metrics().encode();
    let panics = support::sample(
        &metrics,
        r#"controller_runtime_reconcile_panics_total{controller="widget"}"#,
    );
    assert!(panics.is_some_and(|n| n >= 1.0), "{metrics}");
    assert!(!running.is_finished(), "the manager stopped");

    // More changes than any buffer of a reader would hold.
    const MANY: usize = 1_100;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(0..MANY)
        .for_each_concurrent(16, |i| {
            let configmaps = configmaps.clone();
            async move {
                let labelled: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": { "name": format!("many-{i}"), "labels": { MANAGED_BY_LABEL: MANAGER } }
                }))
                .unwrap();
                configmaps.create(&PostParams::default(), &labelled).await.unwrap();
            }
        })
        .await;
    let all_cached = async || ctx.configmaps.len() >= MANY;
    assert!(
        eventually(Duration::from_secs(30), all_cached).await,
        "the cache stopped at {} of {MANY} ConfigMaps",
        ctx.configmaps.len()
    );
    widgets.create(&pp, &widget("good", 2, 0)).await.unwrap();
    let is_ready = async || {
        let w = widgets.get("good").await.unwrap();
        conditions::is_true(&w.status.map(|s| s.conditions).unwrap_or_default(), "Ready")
    };
    assert!(
        eventually(Duration::from_secs(30), is_ready).await,
        "the controller beside the stalled reader never made `good` Ready"
    );

    // The owners go first (no garbage collector here), then their ConfigMaps: each deletion
    // triggers an owner that no longer exists.
    let dp = DeleteParams::default();
    for name in ["good", "bad"] {
        widgets.delete(name, &dp).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    configmaps.delete("good-widget", &dp).await.unwrap();
    let emptied = async || widget_queue_depth(&manager) == Some(0.0);
    assert!(
        eventually(Duration::from_secs(20), emptied).await,
        "workqueue_depth stays at {:?}",
        widget_queue_depth(&manager)
    );

    manager.shutdown();
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap();
}

/// A manager asked to stop before its caches have listed (here: it may not list anything) stops at
/// once: no reconcile can have started yet, so there is nothing to wait for.
#[tokio::test]
async fn a_manager_stopped_before_its_caches_sync_stops_at_once() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.service_account_client(ns, "nobody").await;
    let manager = Manager::in_namespace(MANAGER, client.clone(), ns);
    let configmaps = manager.owned::<ConfigMap>();
    let ctx = Context::new(&manager, client, &configmaps);
    let running = run_widgets(&manager, &configmaps, ctx);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(manager.ready().is_err(), "ready without any list allowed");

    manager.shutdown();
    let stopped = tokio::time::timeout(Duration::from_secs(5), running).await;
    assert!(
        stopped.is_ok(),
        "still running 5 s after shutdown was asked for"
    );
}

/// The watches kube-apiserver serves now for `resource` (its `apiserver_longrunning_requests` gauge).
async fn watches(client: &kube::Client, resource: &str) -> u64 {
    let request = kube::core::Request::new("")
        .get("metrics", &Default::default())
        .unwrap();
    let text = client.request_text(request).await.unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("apiserver_longrunning_requests{"))
        .filter_map(|line| line.split_once("} "))
        .filter(|(labels, _)| {
            labels.contains(r#"verb="WATCH""#)
                && labels.contains(&format!(r#"resource="{resource}""#))
        })
        .map(|(_, value)| value.trim().parse::<f64>().unwrap() as u64)
        .sum()
}

fn secret(name: &str, owner: Option<&ConfigMap>, tier: &str) -> Secret {
    let labels = [(MANAGED_BY_LABEL, MANAGER), ("tier", tier)];
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            labels: Some(labels.map(|(k, v)| (k.to_string(), v.to_string())).into()),
            owner_references: owner
                .and_then(|o| o.controller_owner_ref(&()))
                .map(|o| vec![o]),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// However many users ask, a manager keeps one watch and one store per kind, selector and storage
/// (owned caches are packed, the others typed). A cache finds an owner's children through its index
/// and objects by label, and a late reader of its changes first gets what it holds: packed, too.
#[tokio::test]
async fn caches_are_shared_one_watch_per_kind_and_selector() {
    let env = TestEnv::builder().start().await;
    let client = env.client();
    // The API server's own watches (its token authenticator's, say) come first.
    let before = watches(&client, "secrets").await;
    let manager = Manager::new(MANAGER, client.clone());
    let owned = [
        manager.owned_labelled::<Secret>(),
        manager.owned_labelled::<Secret>(),
    ];
    let ours = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGER}"));
    let same = manager.cache_with(Api::<Secret>::all(client.clone()), ours);
    let all = [manager.cache::<Secret>(), manager.cache::<Secret>()];
    assert!(owned[0].same_as(&owned[1]) && !owned[1].same_as(&same));
    assert!(all[0].same_as(&all[1]) && !all[0].same_as(&same));
    // Owned caches keep their objects packed, and have no kube `Store` to hand out.
    assert!(owned[0].is_packed() && owned[0].store().is_none());
    assert!(!all[0].is_packed() && all[0].store().is_some());
    // The default owned cache holds every Secret, packed: not the typed cache of them all.
    let every = manager.owned::<Secret>();
    assert!(every.same_as(&manager.owned::<Secret>()) && !every.same_as(&all[0]));
    // A controller of Secrets joins the cache of all of them.
    manager
        .controllers()
        .add(manager.controller(manager.api::<Secret>(), "secret").run(
            async |_, _: Arc<()>| Ok::<_, kube::Error>(Action::await_change()),
            Arc::new(()),
        ));
    let running = tokio::spawn(manager.controllers().run());
    let synced = async || {
        all[0].is_synced() && owned[0].is_synced() && every.is_synced() && manager.ready().is_ok()
    };
    assert!(
        eventually(Duration::from_secs(30), synced).await,
        "{:?}",
        manager.ready()
    );
    let counted = async || watches(&client, "secrets").await == before + 4;
    assert!(
        eventually(Duration::from_secs(10), counted).await,
        "{} watches of secrets besides the API server's {before}, not one per selector and storage",
        watches(&client, "secrets").await - before
    );

    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    let mut owner = ConfigMap::default();
    owner.metadata.name = Some("owner".into());
    let owner = configmaps.create(&pp, &owner).await.unwrap();
    let secrets = Api::<Secret>::namespaced(client.clone(), "default");
    for secret in [
        secret("a", Some(&owner), "front"),
        secret("b", Some(&owner), "back"),
        secret("c", None, "front"),
    ] {
        secrets.create(&pp, &secret).await.unwrap();
    }
    let names = |objects: Vec<Arc<Secret>>| {
        let mut names: Vec<String> = objects.iter().map(|s| s.name_any()).collect();
        names.sort();
        names
    };
    let indexed = async || owned[0].len() == 3 && names(owned[0].children_of(&owner)) == ["a", "b"];
    assert!(eventually(Duration::from_secs(10), indexed).await);
    let front = Selector::from_iter([("tier", "front")]);
    assert_eq!(names(owned[1].matching(&front)), ["a", "c"]);
    assert_eq!(names(owned[1].list_in("default")), ["a", "b", "c"]);
    assert!(owned[0].list_in("kube-system").is_empty());

    // A reader that comes late first gets every object held, then what happens next.
    let mut changes = owned[0].changes();
    let mut held = Vec::new();
    for _ in 0..3 {
        let change = tokio::time::timeout(Duration::from_secs(5), changes.next()).await;
        match change.unwrap().unwrap() {
            Change::Applied(secret) => held.push(secret),
            Change::Deleted(secret) => panic!("{} deleted", secret.name_any()),
        }
    }
    assert_eq!(names(held), ["a", "b", "c"]);
    secrets.delete("b", &DeleteParams::default()).await.unwrap();
    let deleted = tokio::time::timeout(Duration::from_secs(10), changes.next()).await;
    assert!(
        matches!(deleted.unwrap().unwrap(), Change::Deleted(s) if s.name_any() == "b"),
        "the deletion was not streamed"
    );
    assert_eq!(names(owned[0].children_of(&owner)), ["a"]);

    // Deleting children: with the propagation asked for (foreground: the API server keeps the
    // object until its dependents are gone), and never an object re-created since it was read.
    let stale = owned[0].get(Some("default"), "c").unwrap();
    secrets.delete("c", &DeleteParams::default()).await.unwrap();
    secrets
        .create(&pp, &secret("c", None, "front"))
        .await
        .unwrap();
    let children = owned[0].children_of(&owner);
    let deleted = children::delete(&client, &children, PropagationPolicy::Foreground).await;
    assert_eq!(deleted.unwrap(), 1);
    let a = secrets.get("a").await.unwrap();
    assert!(a.metadata.deletion_timestamp.is_some());
    assert_eq!(a.finalizers(), ["foregroundDeletion"]);
    let deleted = children::delete(&client, &[stale], PropagationPolicy::Background).await;
    assert_eq!(deleted.unwrap(), 0, "deleted a Secret re-created since");
    assert!(secrets.get_opt("c").await.unwrap().is_some());

    manager.shutdown();
    running.await.unwrap().unwrap();
}

/// A Deployment made by hand for `owner`: its controller reference, and none of our labels.
fn deployment_by_hand(name: &str, owner: &Widget) -> Deployment {
    let app = serde_json::json!({ "app": name });
    let namespace = owner.namespace();
    let mut deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "namespace": namespace, "labels": app },
        "spec": {
            "selector": { "matchLabels": app },
            "template": {
                "metadata": { "labels": app },
                "spec": { "containers": [{ "name": "web", "image": "nginx:1.27" }] },
            },
        },
    }))
    .unwrap();
    deployment.metadata.owner_references = owner.controller_owner_ref(&()).map(|o| vec![o]);
    deployment
}

/// What the Deployment test's controller saw: for each reconcile, the `v` annotation of each child
/// Deployment the cache gave it.
#[derive(Default)]
struct SeenChildren(Mutex<Vec<BTreeMap<String, String>>>);

impl SeenChildren {
    fn saw(&self, name: &str, version: &str) -> bool {
        let seen = self.0.lock().unwrap();
        seen.iter()
            .any(|children| children.get(name).map(String::as_str) == Some(version))
    }
}

/// Runs a Widget controller that owns `deployments` and notes the children each reconcile finds.
fn run_noting_children(
    manager: &Manager,
    deployments: &Owned<Deployment>,
) -> (Arc<SeenChildren>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(SeenChildren::default());
    let ctx = (deployments.clone(), seen.clone());
    let note = async |widget: Arc<Widget>, ctx: Arc<(Owned<Deployment>, Arc<SeenChildren>)>| {
        let children = ctx.0.children_of(&*widget).into_iter().map(|d| {
            let version = d.annotations().get("v").cloned().unwrap_or_default();
            (d.name_any(), version)
        });
        let (_, seen) = ctx.as_ref();
        seen.0.lock().unwrap().push(children.collect());
        Ok::<_, kube::Error>(Action::await_change())
    };
    let controllers = manager.controllers();
    controllers.add(
        manager
            .controller(manager.api::<Widget>(), "widget")
            .owns(deployments)
            .run(note, Arc::new(ctx)),
    );
    let running = tokio::spawn(async move { controllers.run().await.unwrap() });
    (seen, running)
}

/// A Deployment someone made by hand for a Widget, with a controller reference to it but without
/// the manager's label, is one of its children all the same, as `Owns` sees it in
/// controller-runtime: in `children_of`, and its changes reconcile the Widget.
#[tokio::test]
async fn owned_caches_find_children_made_by_hand() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();
    let manager = Manager::in_namespace(MANAGER, client.clone(), ns);
    let deployments = manager.owned::<Deployment>();
    let (seen, running) = run_noting_children(&manager, &deployments);
    let widgets: Api<Widget> = Api::namespaced(client.clone(), ns);
    let w = widgets
        .create(&PostParams::default(), &widget("w", 1, 0))
        .await
        .unwrap();

    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let by_hand = deployment_by_hand("by-hand", &w);
    api.create(&PostParams::default(), &by_hand).await.unwrap();
    let found = async || {
        let children = deployments.children_of(&w);
        children.iter().map(|d| d.name_any()).collect::<Vec<_>>() == ["by-hand"]
    };
    assert!(
        eventually(Duration::from_secs(10), found).await,
        "the Deployment made by hand is not a child: {:?}",
        deployments.list()
    );
    // Its change reconciles the Widget, which reads the change from the cache.
    let v2 = Patch::Merge(serde_json::json!({ "metadata": { "annotations": { "v": "2" } } }));
    api.patch("by-hand", &PatchParams::default(), &v2)
        .await
        .unwrap();
    let reconciled = async || seen.saw("by-hand", "2");
    assert!(
        eventually(Duration::from_secs(10), reconciled).await,
        "no reconcile of the Widget saw the change of its Deployment"
    );
    // Someone else's name is known from the cache: no GET.
    let gets = requests(&client, "GET", "deployments").await;
    let found = deployments.find(ns, "by-hand").await.unwrap();
    assert!(found.is_some());
    assert!(deployments.find(ns, "free").await.unwrap().is_none());
    assert_eq!(requests(&client, "GET", "deployments").await, gets);

    manager.shutdown();
    running.await.unwrap();
}

/// `children::list_now` reads an owner's children from the API server: one created a moment ago
/// is there before any cache could have seen it, and only the owner's controlled children are.
#[tokio::test]
async fn children_read_now_are_the_api_servers_controlled_ones() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();
    let widgets: Api<Widget> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();
    let w = widgets.create(&pp, &widget("w", 1, 0)).await.unwrap();
    let other = widgets.create(&pp, &widget("other", 1, 0)).await.unwrap();
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    api.create(&pp, &deployment_by_hand("child", &w))
        .await
        .unwrap();
    api.create(&pp, &deployment_by_hand("others", &other))
        .await
        .unwrap();
    let mut not_controlled = deployment_by_hand("referring", &w);
    for owner in not_controlled
        .metadata
        .owner_references
        .iter_mut()
        .flatten()
    {
        owner.controller = None;
    }
    api.create(&pp, &not_controlled).await.unwrap();

    let children: Vec<Arc<Deployment>> = children::list_now(&client, &w).await.unwrap();
    let names: Vec<String> = children.iter().map(|d| d.name_any()).collect();
    assert_eq!(names, ["child"]);
}

/// The labelled cache's trade-off: the API server sends only the objects with the manager's label,
/// so a child made by hand without it is not among its owner's children and its changes reconcile
/// nothing; only `find` sees it, with a GET.
#[tokio::test]
async fn labelled_owned_caches_miss_children_made_by_hand() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();
    let manager = Manager::in_namespace(MANAGER, client.clone(), ns);
    let deployments = manager.owned_labelled::<Deployment>();
    let (seen, running) = run_noting_children(&manager, &deployments);
    let widgets: Api<Widget> = Api::namespaced(client.clone(), ns);
    let w = widgets
        .create(&PostParams::default(), &widget("w", 1, 0))
        .await
        .unwrap();

    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();
    api.create(&pp, &deployment_by_hand("by-hand", &w))
        .await
        .unwrap();
    let mut labelled = deployment_by_hand("labelled", &w);
    let labels = labelled.metadata.labels.get_or_insert_default();
    labels.insert(MANAGED_BY_LABEL.into(), MANAGER.into());
    api.create(&pp, &labelled).await.unwrap();
    // Changed in this order: were the first in the cache, its change would come first.
    let v2 = Patch::Merge(serde_json::json!({ "metadata": { "annotations": { "v": "2" } } }));
    for name in ["by-hand", "labelled"] {
        api.patch(name, &PatchParams::default(), &v2).await.unwrap();
    }
    let reconciled = async || seen.saw("labelled", "2");
    assert!(
        eventually(Duration::from_secs(10), reconciled).await,
        "no reconcile saw the change of the labelled Deployment"
    );
    let children = deployments.children_of(&w);
    let names: Vec<String> = children.iter().map(|d| d.name_any()).collect();
    assert_eq!(names, ["labelled"]);
    assert!(!seen.saw("by-hand", "2") && !seen.saw("by-hand", ""));
    let gets = requests(&client, "GET", "deployments").await;
    let found = deployments.find(ns, "by-hand").await.unwrap();
    assert!(found.is_some());
    assert_eq!(requests(&client, "GET", "deployments").await, gets + 1);

    manager.shutdown();
    running.await.unwrap();
}

/// What the backlog test's controller saw: each reconcile's object and its `v`, in order.
#[derive(Default)]
struct Seen(Mutex<Vec<(String, String)>>);

async fn record_slowly(object: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, kube::Error> {
    let v = object.data.as_ref().and_then(|d| d.get("v").cloned());
    let entry = (object.name_any(), v.unwrap_or_default());
    seen.0.lock().unwrap().push(entry);
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(Action::await_change())
}

/// A controller working through a backlog of listed objects (as after a restart) reconciles an object
/// changed meanwhile next, not after the backlog: listed objects wait behind live changes.
#[tokio::test]
async fn live_changes_are_reconciled_before_a_listed_backlog() {
    const OBJECTS: usize = 200;
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client(), ns);
    let labelled = |name: &str, v: &str| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("backlog".to_string(), "yes".to_string())].into()),
            ..Default::default()
        },
        data: Some([("v".to_string(), v.to_string())].into()),
        ..Default::default()
    };
    let created = futures::stream::iter(0..OBJECTS).map(|i| {
        let object = labelled(&format!("item-{i:03}"), "listed");
        let configmaps = configmaps.clone();
        async move { configmaps.create(&PostParams::default(), &object).await }
    });
    let created: Vec<_> = created.buffer_unordered(16).collect().await;
    assert!(created.iter().all(Result::is_ok), "creating the backlog");

    let manager = Manager::in_namespace(MANAGER, env.client(), ns);
    let seen = Arc::new(Seen::default());
    let controller = manager
        .controller(configmaps.clone(), "backlog")
        .watcher_config(watcher::Config::default().labels("backlog=yes"))
        .run(record_slowly, seen.clone());
    let controllers = manager.controllers();
    controllers.add(controller);
    let running = tokio::spawn(async move { controllers.run().await.unwrap() });
    let started = async || seen.0.lock().unwrap().len() >= 10;
    assert!(eventually(Duration::from_secs(30), started).await);

    // Edit five objects the controller has not reached yet.
    let reached: HashSet<String> = seen
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|(n, _)| n.clone())
        .collect();
    let edited: Vec<String> = (0..OBJECTS)
        .map(|i| format!("item-{i:03}"))
        .filter(|name| !reached.contains(name))
        .take(5)
        .collect();
    let before_edits = seen.0.lock().unwrap().len();
    let edited_at = Instant::now();
    for name in &edited {
        let patch = Patch::Merge(serde_json::json!({"data": {"v": "edited"}}));
        configmaps
            .patch(name, &PatchParams::default(), &patch)
            .await
            .unwrap();
    }
    let all_edited = async || {
        let seen = seen.0.lock().unwrap();
        let done = seen.iter().filter(|(_, v)| v == "edited").count();
        done == edited.len()
    };
    assert!(eventually(Duration::from_secs(30), all_edited).await);
    eprintln!(
        "{} edits reconciled {:?} after they were sent, with {} listed objects waiting",
        edited.len(),
        edited_at.elapsed(),
        OBJECTS - before_edits
    );
    let seen_then = seen.0.lock().unwrap().clone();
    let last_edit = seen_then.iter().rposition(|(_, v)| v == "edited").unwrap();
    // Each edit waits at most for the reconcile in flight (concurrency 1) and the listed object
    // admitted before it; the edits' own patches take a few reconciles' time to send.
    let waited = last_edit + 1 - before_edits - edited.len();
    assert!(
        waited <= 8,
        "the edits were reconciled after {waited} listed objects (of {} left): {:?}",
        OBJECTS - before_edits,
        &seen_then[before_edits..=last_edit]
    );
    // Every object at least once (an edited one may have been queued from the list already).
    let all_done = async || {
        let seen = seen.0.lock().unwrap();
        seen.iter()
            .map(|(name, _)| name)
            .collect::<HashSet<_>>()
            .len()
            == OBJECTS
    };
    assert!(
        eventually(Duration::from_secs(30), all_done).await,
        "the backlog was not worked through"
    );
    manager.shutdown();
    running.await.unwrap();
}

/// A controller that reads a kind it does not own (a ConfigMap its Widgets name in an annotation)
/// is told of its changes by `watches`: each change of the shared ConfigMap cache reconciles the
/// Widgets that name it, and no other.
#[tokio::test]
async fn watched_objects_reconcile_the_objects_that_name_them() {
    const SETTINGS: &str = "test.example.com/settings";
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();
    let manager = Manager::in_namespace(MANAGER, client.clone(), ns);
    let settings = manager.cache::<ConfigMap>();
    let widgets = manager.cache::<Widget>();
    let names_it = |widget: &Widget, configmap: &ConfigMap| {
        widget.namespace() == configmap.namespace()
            && widget.annotations().get(SETTINGS) == Some(&configmap.name_any())
    };
    let mapper = move |configmap: &ConfigMap| {
        let referring = widgets
            .list()
            .into_iter()
            .filter(|w| names_it(w, configmap));
        referring
            .map(|w| ObjectRef::from_obj(&*w))
            .collect::<Vec<_>>()
    };
    // Each reconcile records the color its Widget's settings hold, as the cache has them.
    type Seen = Vec<(String, Option<String>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let reconcile = {
        let (settings, seen) = (settings.clone(), seen.clone());
        move |widget: Arc<Widget>, _: Arc<()>| {
            let (settings, seen) = (settings.clone(), seen.clone());
            async move {
                let named = widget.annotations().get(SETTINGS).cloned();
                let namespace = widget.namespace();
                let configmap = named.and_then(|name| settings.get(namespace.as_deref(), &name));
                let color = configmap.and_then(|c| c.data.as_ref()?.get("color").cloned());
                seen.lock().unwrap().push((widget.name_any(), color));
                Ok::<_, kube::Error>(Action::await_change())
            }
        }
    };
    let controller = manager
        .controller(Api::<Widget>::namespaced(client.clone(), ns), "widget")
        .watches(&settings, mapper)
        .run(reconcile, Arc::new(()));
    manager.controllers().add(controller);
    let running = tokio::spawn(manager.controllers().run());

    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let colored = |color: &str| ConfigMap {
        metadata: ObjectMeta {
            name: Some("settings".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("color".into(), color.into())])),
        ..Default::default()
    };
    let pp = PostParams::default();
    configmaps.create(&pp, &colored("blue")).await.unwrap();
    let widgets: Api<Widget> = Api::namespaced(client.clone(), ns);
    let mut named = widget("named", 1, 0);
    named
        .annotations_mut()
        .insert(SETTINGS.into(), "settings".into());
    widgets.create(&pp, &named).await.unwrap();
    widgets.create(&pp, &widget("other", 1, 0)).await.unwrap();
    let saw = |name: &str, color: Option<&str>| {
        let seen = seen.lock().unwrap();
        seen.iter().any(|(n, c)| n == name && c.as_deref() == color)
    };
    let both = async || saw("named", Some("blue")) && saw("other", None);
    assert!(
        eventually(Duration::from_secs(30), both).await,
        "{:?}",
        seen.lock().unwrap()
    );

    let reconciles_of = |name: &str| {
        seen.lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == name)
            .count()
    };
    let others = reconciles_of("other");
    let green = serde_json::json!({"data": {"color": "green"}});
    let merge = PatchParams::default();
    configmaps
        .patch("settings", &merge, &Patch::Merge(&green))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), async || saw(
            "named",
            Some("green")
        ))
        .await,
        "the change of the settings did not reconcile the Widget naming them: {:?}",
        seen.lock().unwrap()
    );
    // Gone settings reconcile it too (counted from before the delete: its reconcile may come first).
    let after = reconciles_of("named");
    configmaps
        .delete("settings", &DeleteParams::default())
        .await
        .unwrap();
    let again = async || reconciles_of("named") > after && saw("named", None);
    assert!(
        eventually(Duration::from_secs(10), again).await,
        "{:?}",
        seen.lock().unwrap()
    );
    assert_eq!(
        reconciles_of("other"),
        others,
        "a Widget naming nothing was reconciled"
    );
    let metrics = manager.metrics().encode();
    let adds = support::sample(
        &metrics,
        r#"workqueue_adds_total{name="widget",controller="widget"}"#,
    );
    assert!(adds.is_some_and(|n| n >= 4.0), "{metrics}");

    manager.shutdown();
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

/// The work queue's depth for the Widget controller of `manager`, from its metrics.
fn widget_queue_depth(manager: &Manager) -> Option<f64> {
    let metrics = manager.metrics().encode();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("workqueue_depth{") && l.contains(r#"controller="widget""#))?;
    line.rsplit(' ').next()?.parse().ok()
}

/// A manager started with `--sharding` (short Lease timings) on `env`'s API server, as a replica
/// in a process of its own would be.
async fn sharded_manager(env: &TestEnv) -> Manager {
    support::sharded_manager(env, MANAGER, None, TIMING).await
}

/// Short Lease timings for the sharded managers of these tests.
const TIMING: rustbuilder_runtime::manager::leader::Timing =
    rustbuilder_runtime::manager::leader::Timing {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
    };

/// Sharded, the default owned cache of a replica holds the children of the objects in its part,
/// placed by their controller reference, labelled or not: a ConfigMap made by hand for a Widget is
/// in the cache of the replica that holds the Widget, and only there.
#[tokio::test]
async fn sharded_owned_caches_place_children_made_by_hand_with_their_owner() {
    let env = TestEnv::builder().crd(Widget::crd()).start().await;
    let widgets: Api<Widget> = Api::namespaced(env.client(), "default");
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let pp = PostParams::default();
    let mut owners = Vec::new();
    for i in 0..16 {
        let owner = widget(&format!("w{i}"), 1, 0);
        let owner = widgets.create(&pp, &owner).await.unwrap();
        let mut child = ConfigMap::default();
        child.metadata.name = Some(format!("by-hand-{i}"));
        child.metadata.owner_references = owner.controller_owner_ref(&()).map(|o| vec![o]);
        configmaps.create(&pp, &child).await.unwrap();
        owners.push(owner);
    }
    let replicas = [sharded_manager(&env).await, sharded_manager(&env).await];
    let owned = replicas.each_ref().map(|r| r.owned::<ConfigMap>());

    // The children of the Widgets whose hash `manager` holds, and those its cache holds.
    let expected = |manager: &Manager| -> BTreeSet<String> {
        let held = manager.shard().unwrap().state().borrow().held.clone();
        let ours = owners.iter().enumerate().filter(|(_, owner)| {
            held.contains(shard::hash(owner.metadata.uid.as_deref().unwrap()))
        });
        ours.map(|(i, _)| format!("by-hand-{i}")).collect()
    };
    let cached = |owned: &Owned<ConfigMap>| -> BTreeSet<String> {
        let children = owned.list().into_iter().map(|c| c.name_any());
        children
            .filter(|name| name.starts_with("by-hand-"))
            .collect()
    };
    let split = async || {
        let parts = replicas.each_ref().map(expected);
        let full = parts[0].len() + parts[1].len() == owners.len();
        full && !parts[0].is_empty()
            && !parts[1].is_empty()
            && (0..2).all(|r| owned[r].is_synced() && cached(&owned[r]) == parts[r])
    };
    assert!(
        eventually(Duration::from_secs(30), split).await,
        "children not placed with their owners: held {:?} and {:?}, cached {:?} and {:?}",
        expected(&replicas[0]),
        expected(&replicas[1]),
        cached(&owned[0]),
        cached(&owned[1]),
    );
    // A name of the other replica's part is not free: `find` asks the API server for it.
    let theirs = cached(&owned[1]).pop_first().unwrap();
    let found = owned[0].find("default", &theirs).await.unwrap();
    assert_eq!(found.map(|c| c.name_any()), Some(theirs));

    for manager in replicas {
        manager.shutdown();
    }
}

/// Sharded (`--sharding`), a replica skips the queued objects it hands over to a replica that
/// joins, and forgets them: both queues drain to 0 once the objects are worked, instead of keeping
/// one entry per object handed over.
#[tokio::test]
async fn objects_handed_over_leave_the_queue_of_the_replica_that_gave_them_up() {
    let env = TestEnv::builder().crd(Widget::crd()).start().await;
    let replica = async || {
        let manager = sharded_manager(&env).await;
        let configmaps = manager.owned::<ConfigMap>().with_other_names();
        let ctx = Context::new(&manager, manager.client(), &configmaps);
        // Slow reconciles, so that the first replica still has most objects queued when the
        // second joins; each replica notes the objects it reconciled.
        let seen = Arc::new(Mutex::new(HashSet::new()));
        let noted = seen.clone();
        let slow = move |widget: Arc<Widget>, ctx: Arc<Context>| {
            noted.lock().unwrap().insert(widget.name_any());
            async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                reconcile(widget, ctx).await
            }
        };
        let controllers = manager.controllers();
        controllers.add(
            manager
                .controller(manager.api::<Widget>(), "widget")
                .owns(&configmaps)
                .concurrency(1)
                .run(slow, ctx.clone()),
        );
        let running = tokio::spawn(async move { controllers.run().await.unwrap() });
        (manager, seen, running)
    };

    let (first, by_first, first_running) = replica().await;
    let widgets: Api<Widget> = Api::namespaced(env.client(), "default");
    const WIDGETS: usize = 60;
    for i in 0..WIDGETS {
        let object = widget(&format!("w{i}"), 1, 0);
        widgets
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }
    let started = async || by_first.lock().unwrap().len() >= 3;
    assert!(eventually(Duration::from_secs(30), started).await);
    let (second, by_second, second_running) = replica().await;

    let ready = async || {
        let list = widgets.list(&ListParams::default()).await.unwrap();
        let ready = list.items.iter().filter(|w| {
            let conditions = w.status.as_ref().map(|s| s.conditions.clone());
            conditions::is_true(&conditions.unwrap_or_default(), "Ready")
        });
        ready.count() == WIDGETS
    };
    assert!(
        eventually(Duration::from_secs(60), ready).await,
        "not every Widget became Ready"
    );
    // The first replica gave up objects it had queued: it did not reconcile them all.
    let (by_first, by_second) = (
        by_first.lock().unwrap().len(),
        by_second.lock().unwrap().len(),
    );
    assert!(
        by_first < WIDGETS && by_second > 0,
        "objects reconciled: {by_first} by the first replica, {by_second} by the second"
    );
    let drained = async || {
        widget_queue_depth(&first) == Some(0.0) && widget_queue_depth(&second) == Some(0.0)
    };
    assert!(
        eventually(Duration::from_secs(20), drained).await,
        "workqueue_depth stays at {:?} and {:?}",
        widget_queue_depth(&first),
        widget_queue_depth(&second)
    );

    for (manager, running) in [(first, first_running), (second, second_running)] {
        manager.shutdown();
        tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .unwrap()
            .unwrap();
    }
}

/// Sharded (`--sharding`), replicas ride out an outage of the API server longer than their renew
/// deadline: each drops its part at its fence and rejoins once a renewal gets through again, and
/// work goes on after; a replica started meanwhile waits for the API server and joins. Before, each
/// replica's manager returned `ShardLost` (the process exits: every replica at once, into
/// CrashLoopBackOff), and a manager started while the API server was away failed at once.
#[tokio::test]
async fn sharded_replicas_rejoin_after_the_api_server_was_away_past_their_renew_deadline() {
    use rustbuilder_envtest::Component;

    let mut env = TestEnv::builder().crd(Widget::crd()).start().await;
    let run = |manager: Manager| {
        let configmaps = manager.owned::<ConfigMap>();
        let ctx = Context::new(&manager, manager.client(), &configmaps);
        let controllers = manager.controllers();
        controllers.add(
            manager
                .controller(manager.api::<Widget>(), "widget")
                .owns(&configmaps)
                .run(reconcile, ctx),
        );
        (manager, tokio::spawn(controllers.run()))
    };
    let mut replicas = Vec::new();
    for _ in 0..2 {
        replicas.push(run(sharded_manager(&env).await));
    }
    let widgets: Api<Widget> = Api::namespaced(env.client(), "default");
    let create = async |range: std::ops::Range<usize>| {
        for i in range {
            let object = widget(&format!("w{i}"), 1, 0);
            widgets
                .create(&PostParams::default(), &object)
                .await
                .unwrap();
        }
    };
    let ready = async |count: usize| {
        let Ok(list) = widgets.list(&ListParams::default()).await else {
            return false;
        };
        let ready = list.items.iter().filter(|w| {
            let conditions = w.status.as_ref().map(|s| s.conditions.clone());
            conditions::is_true(&conditions.unwrap_or_default(), "Ready")
        });
        ready.count() == count
    };
    // Each replica holds a part, and the parts cover the whole space.
    let split = |replicas: &[(Manager, _)]| {
        let held = replicas
            .iter()
            .map(|(m, _)| m.shard().unwrap().state().borrow().held.clone());
        let held: Vec<_> = held.collect();
        let all = held
            .iter()
            .fold(shard::Ranges::none(), |all, h| all.union(h));
        held.iter().all(|h| !h.is_empty()) && all.is_full()
    };
    create(0..10).await;
    let converged = async || ready(10).await && split(&replicas);
    assert!(eventually(Duration::from_secs(30), converged).await);

    let mut states: Vec<_> = replicas
        .iter()
        .map(|(m, _)| m.shard().unwrap().state())
        .collect();
    env.stop(Component::KubeApiserver).await;
    // The renew deadline (2 s) and 2 s more.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for state in &mut states {
        let lost = state.wait_for(|state| state.lost && state.held.is_empty());
        let lost = tokio::time::timeout(Duration::from_secs(2), lost)
            .await
            .is_ok();
        assert!(lost, "a replica still holds a part: {:?}", *state.borrow());
    }
    // A third replica starts meanwhile: it waits for the API server instead of failing.
    let third = tokio::spawn({
        let kubeconfig = env.kubeconfig().to_owned();
        async move { support::sharded_manager_of(&kubeconfig, MANAGER, None, TIMING).await }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !third.is_finished(),
        "the third replica did not wait: {:?}",
        third.await
    );
    env.start_component(Component::KubeApiserver).await;
    let third = tokio::time::timeout(Duration::from_secs(30), third).await;
    replicas.push(run(third.expect("the third replica still waits").unwrap()));

    create(10..20).await;
    let converged = async || ready(20).await && split(&replicas);
    assert!(
        eventually(Duration::from_secs(60), converged).await,
        "the replicas did not converge after the outage: held {:?}",
        replicas
            .iter()
            .map(|(m, _)| m.shard().unwrap().state().borrow().clone())
            .collect::<Vec<_>>()
    );
    for (manager, running) in replicas {
        assert!(
            !running.is_finished(),
            "a replica stopped: {:?}",
            running.await
        );
        assert!(!manager.shard().unwrap().state().borrow().lost);
        manager.shutdown();
        tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

/// How long a cache's list takes once its watch has expired, in [`expiring_configmaps`].
const RELIST: Duration = Duration::from_secs(3);

/// A client whose watches of ConfigMaps, started before `expire` says so, hang until it does and
/// then end with 410 Gone (the API server's "resource version too old"): the caches list again, and
/// each list of ConfigMaps after that takes [`RELIST`]. Returns the client and when each of those
/// lists was asked for and answered.
fn expiring_configmaps(
    client: kube::Client,
    expire: tokio::sync::watch::Receiver<bool>,
) -> (kube::Client, Arc<Mutex<Relists>>) {
    const GONE: &str = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version","reason":"Expired","code":410}}"#;
    let answered = Arc::new(Mutex::new(Relists::default()));
    let relists = answered.clone();
    let namespace = client.default_namespace().to_string();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let (client, mut expire, relists) = (client.clone(), expire.clone(), relists.clone());
        async move {
            let uri = request.uri();
            let configmaps =
                request.method() == http::Method::GET && uri.path().ends_with("/configmaps");
            let watch = uri
                .query()
                .is_some_and(|query| query.split('&').any(|pair| pair.starts_with("watch=")));
            let expired = *expire.borrow();
            if configmaps && watch && !expired {
                let _ = expire.wait_for(|expired| *expired).await;
                let body = kube::client::Body::from(format!("{GONE}\n").into_bytes());
                return Ok(http::Response::new(body));
            }
            if configmaps && !watch && expired {
                relists.lock().unwrap().asked.push(Instant::now());
                tokio::time::sleep(RELIST).await;
                let response = client.send(request).await;
                relists.lock().unwrap().answered.push(Instant::now());
                return response;
            }
            client.send(request).await
        }
    });
    (kube::Client::new(service, namespace), answered)
}

/// The lists of [`expiring_configmaps`] after the watches expired.
#[derive(Default)]
struct Relists {
    asked: Vec<Instant>,
    answered: Vec<Instant>,
}

/// A cache that lists again (its watch expired with 410 Gone) holds back the reconciles that read
/// it until the new list is whole, as before its first list: the object the store holds meanwhile
/// may be long gone, and one that changed is not there yet.
#[tokio::test]
async fn no_reconcile_reads_a_cache_while_it_lists_again() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let (expire, expiring) = tokio::sync::watch::channel(false);
    let (client, relisted) = expiring_configmaps(env.client(), expiring);
    let manager = Manager::in_namespace(MANAGER, client.clone(), ns);
    let configmaps = manager.owned_labelled::<ConfigMap>().with_other_names();
    let ctx = Context::new(&manager, client, &configmaps);
    let running = run_widgets(&manager, &configmaps, ctx.clone());
    let widgets: Api<Widget> = Api::namespaced(env.client(), ns);
    let pp = PostParams::default();
    widgets.create(&pp, &widget("w", 1, 0)).await.unwrap();
    let ready = async || {
        let status = widgets.get("w").await.unwrap().status.unwrap_or_default();
        conditions::is_true(&status.conditions, "Ready")
    };
    assert!(eventually(Duration::from_secs(30), ready).await);

    // The watch expires: the cache lists again, slowly; meanwhile the Widget changes.
    expire.send_replace(true);
    // Both caches of ConfigMaps (ours, and the names of the others) list again.
    let relisting = async || relisted.lock().unwrap().asked.len() >= 2;
    assert!(
        eventually(Duration::from_secs(5), relisting).await,
        "the caches did not list again"
    );
    let before = ctx.attempts.lock().unwrap().len();
    let resize = Patch::Merge(serde_json::json!({ "spec": { "size": 2 } }));
    widgets
        .patch("w", &PatchParams::default(), &resize)
        .await
        .unwrap();
    let reconciled = async || ctx.attempts.lock().unwrap().len() > before;
    assert!(eventually(Duration::from_secs(30), reconciled).await);
    let started = ctx.attempts.lock().unwrap()[before];
    let first_list = relisted.lock().unwrap().answered.iter().min().copied();
    assert!(
        first_list.is_some_and(|listed| started > listed),
        "a reconcile started while the cache listed again (at {started:?}; the list answered at \
         {first_list:?})"
    );
    let applied = async || {
        let configmaps: Api<ConfigMap> = Api::namespaced(env.client(), ns);
        let data = configmaps.get("w-widget").await.unwrap().data;
        data.is_some_and(|data| data["size"] == "2")
    };
    assert!(eventually(Duration::from_secs(30), applied).await);

    manager.shutdown();
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap();
}

/// A `watches` mapper and an `on_error` policy are the user's code too: one that panics costs the
/// change or the choice it was asked for, never the controller (a panic would end its task, and
/// the manager with it).
#[tokio::test]
async fn a_panicking_mapper_or_error_policy_stops_nothing() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();
    let manager = Manager::in_namespace(MANAGER, client.clone(), ns);
    let settings = manager.cache::<ConfigMap>();
    let configmaps = manager.owned::<ConfigMap>();
    let ctx = Context::new(&manager, client.clone(), &configmaps);
    let namespace = ns.to_owned();
    let mapper = move |configmap: &ConfigMap| -> Vec<ObjectRef<Widget>> {
        assert_ne!(
            configmap.name_any(),
            "poison",
            "the mapper cannot map poison"
        );
        vec![ObjectRef::new("w").within(&namespace)]
    };
    let controller = manager
        .controller(Api::<Widget>::namespaced(client.clone(), ns), "widget")
        .owns(&configmaps)
        .watches(&settings, mapper)
        .on_error(|_, _| panic!("the policy cannot choose"))
        .run(reconcile, ctx.clone());
    manager.controllers().add(controller);
    let running = tokio::spawn(manager.controllers().run());

    let named = |name: &str| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let pp = PostParams::default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    cms.create(&pp, &named("poison")).await.unwrap();
    // The first reconcile fails, and the policy that should choose what follows panics: retried.
    let widgets: Api<Widget> = Api::namespaced(client.clone(), ns);
    widgets.create(&pp, &widget("w", 1, 1)).await.unwrap();
    let ready = async || {
        let status = widgets.get("w").await.unwrap().status.unwrap_or_default();
        conditions::is_true(&status.conditions, "Ready")
    };
    assert!(
        eventually(Duration::from_secs(30), ready).await,
        "the Widget whose policy panicked was not retried"
    );
    // A change the mapper does map still reconciles, after the one it could not.
    let before = ctx.reconciles.load(Ordering::SeqCst);
    cms.create(&pp, &named("fine")).await.unwrap();
    let mapped = async || ctx.reconciles.load(Ordering::SeqCst) > before;
    assert!(
        eventually(Duration::from_secs(10), mapped).await,
        "a mapped change did not reconcile the Widget"
    );
    assert!(!running.is_finished(), "the controller stopped");

    manager.shutdown();
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

/// With `predicates::generation` on its own kind, a controller reconciles a Deployment when it is
/// created and when its spec changes (a new generation), not when only its labels or its status
/// change; a change of a ConfigMap it owns reconciles it whatever the predicate says.
#[tokio::test]
async fn a_generation_predicate_reconciles_spec_changes_only() {
    let env = take_turn(shared_env).await;
    let ns = env.namespace();
    let client = env.client();
    let manager = Manager::in_namespace(MANAGER, client.clone(), ns);
    let reconciles = Arc::new(AtomicUsize::new(0));
    let counted = async |_: Arc<Deployment>, count: Arc<AtomicUsize>| {
        count.fetch_add(1, Ordering::SeqCst);
        Ok::<_, kube::Error>(Action::await_change())
    };
    let configmaps = manager.cache::<ConfigMap>();
    let controller = manager
        .controller(manager.api::<Deployment>(), "generations")
        .predicate(kube::runtime::predicates::generation)
        .owns(&configmaps)
        .run(counted, reconciles.clone());
    manager.controllers().add(controller);
    let running = tokio::spawn(manager.controllers().run());

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let web: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "web" },
        "spec": {
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "nginx" }] },
            },
        },
    }))
    .unwrap();
    let web = deployments
        .create(&PostParams::default(), &web)
        .await
        .unwrap();
    let count = || reconciles.load(Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(10), async || count() == 1).await,
        "created: {} reconciles",
        count()
    );

    // Labels and status: the same generation, no reconcile.
    let params = PatchParams::default();
    let labels = serde_json::json!({ "metadata": { "labels": { "tier": "front" } } });
    deployments
        .patch("web", &params, &Patch::Merge(&labels))
        .await
        .unwrap();
    let status = serde_json::json!({ "status": { "observedGeneration": 1, "replicas": 0 } });
    deployments
        .patch_status("web", &params, &Patch::Merge(&status))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(count(), 1, "labels and status changed: reconciled");

    // The spec: a new generation, one reconcile.
    let spec = serde_json::json!({ "spec": { "replicas": 3 } });
    deployments
        .patch("web", &params, &Patch::Merge(&spec))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), async || count() == 2).await,
        "spec changed: {} reconciles",
        count()
    );

    // A ConfigMap it owns: reconciled, the predicate notwithstanding.
    let owner = web.controller_owner_ref(&()).unwrap();
    let mut child = ConfigMap::default();
    child.metadata.name = Some("web-settings".into());
    child.metadata.owner_references = Some(vec![owner]);
    let children: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    children
        .create(&PostParams::default(), &child)
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), async || count() == 3).await,
        "child created: {} reconciles",
        count()
    );

    manager.shutdown();
    running.await.unwrap().unwrap();
}
