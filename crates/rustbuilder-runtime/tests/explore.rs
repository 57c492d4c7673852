//! The explorer (`rustbuilder_runtime::testing::explore`) on a real API server, against a copy of
//! the golden Memcached controller: the copy as it is raises no alarm, and each copy seeded with
//! one classic controller bug (Sieve's and Acto's) is caught, by the perturbation of its class.
//!
//! Each case replays the one perturbation that catches its bug (what `EXPLORE_PLAN=full` found
//! for it, docs/reliability.md); the unseeded copy runs the same perturbations and must pass them
//! all. `EXPLORE_PLAN=full cargo test --test explore -- --ignored full_plan` runs the whole plan.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{CustomResource, CustomResourceExt, KubeSchema, Resource, ResourceExt};
use rustbuilder_envtest::{TestEnv, TestEnvBuilder, take_turn};
use rustbuilder_runtime::apply::{self, Applied};
use rustbuilder_runtime::cache::Change;
use rustbuilder_runtime::owned::{self, Owned};
use rustbuilder_runtime::testing::explore::{Explorer, Perturbation, Plan, Settings};
use rustbuilder_runtime::{Manager, finalizer};
use serde::{Deserialize, Serialize};
use serde_json::json;

const MANAGER: &str = "memcached-explored";
const SAMPLE: &str = "\
apiVersion: explore.example.com/v1
kind: Memcached
metadata:
  name: sample
spec:
  size: 2
  version: \"1.6\"
";
/// The finalizer of the copy that keeps a record outside the cluster's garbage collection.
const RECORD_FINALIZER: &str = "explore.example.com/record";

#[path = "explore/certificate.rs"]
mod certificate;
#[path = "explore/cron_job.rs"]
mod cron_job;
#[path = "explore/multi_version.rs"]
mod multi_version;

fn shared_env() -> TestEnvBuilder {
    TestEnv::builder()
        .crd(Memcached::crd())
        .crd(cron_job::crd())
        .crds(certificate::crds())
        .crd(multi_version::crd())
}

/// One explorer of the corpus: a copy, with a seeded bug or none, and what its report must say.
struct Case {
    name: String,
    /// What the report names; `None` for a copy without a bug, whose report must be clean.
    expected: Option<&'static str>,
    explorer: Explorer,
}

impl Case {
    fn unseeded(name: &str, explorer: Explorer) -> Case {
        Case {
            name: name.to_string(),
            expected: None,
            explorer,
        }
    }

    fn seeded(name: String, expected: &'static str, explorer: Explorer) -> Case {
        Case {
            name,
            expected: Some(expected),
            explorer,
        }
    }
}

/// The corpus's timings: a step that has not settled in 10 s is a hot loop.
fn settings() -> Settings {
    Settings {
        settle_timeout: Duration::from_secs(10),
        ..Settings::default()
    }
}

/// A plan of exactly these perturbations (`EXPLORE_REPLAY`'s text); none: the reference run only.
fn replay(perturbations: &[&str]) -> Plan {
    let parsed = perturbations.iter().filter(|p| !p.is_empty());
    Plan::Only(parsed.map(|p| p.parse().expect("a perturbation")).collect())
}

/// The golden Memcached's API, with an optional field (the image's version) to remove.
#[derive(CustomResource, KubeSchema, Clone, Debug, Deserialize, Serialize)]
#[kube(
    group = "explore.example.com",
    version = "v1",
    kind = "Memcached",
    namespaced
)]
#[kube(status = "MemcachedStatus")]
struct MemcachedSpec {
    /// Pods to run, 1 to 10.
    #[schemars(range(min = 1, max = 10))]
    #[serde(default = "one")]
    size: i32,
    /// The image's tag; `latest` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<String>,
}

fn one() -> i32 {
    1
}

#[derive(KubeSchema, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct MemcachedStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replicas: Option<i32>,
    /// Why the object cannot be served, when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    degraded: Option<String>,
    /// Set once the Deployment was created (the non-idempotent copy's bookkeeping).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    created: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_reconciled: Option<String>,
}

/// A classic controller bug, seeded into the copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    /// None: the golden controller's logic.
    None,
    /// Marks the generation observed in the status *before* applying it, and applies only
    /// generations not yet marked: a crash in between loses the change.
    StatusBeforeWork,
    /// Creates the Deployment with a POST when its status says it has not (set after), and
    /// fails on "already exists".
    NonIdempotentCreate,
    /// Remembers in memory which generation it applied, and skips those.
    ProgressInMemory,
    /// Removes its finalizer before the cleanup it guards.
    FinalizerBeforeCleanup,
    /// Cleans up a record only when it sees the object's Deleted event, and waits for that.
    CleanupOnDeletedEvent,
    /// Stamps the time into the status at each reconcile.
    HotLoop,
    /// Unwraps the optional version.
    PanicOnRemovedField,
    /// Refuses the largest valid size (an off-by-one).
    OffByOneBound,
    /// Annotates the Deployment from a task of its own, leader or not.
    LeaderUnaware,
    /// Deletes Deployments whose owner its cache does not hold (an orphan sweep).
    SweepOnStaleList,
    /// Creates the Deployment with a POST when the cache shows none, and takes "already exists"
    /// as someone else's Deployment, for good.
    CreateOnLaggingCache,
    /// Makes a record first and the Deployment after, and takes the record for proof that the
    /// Deployment was made.
    RecordBeforeWork,
}

struct Context {
    client: kube::Client,
    deployments: Owned<Deployment>,
    bug: Bug,
    /// `ProgressInMemory`: the generation applied, by name.
    applied: Mutex<HashMap<String, i64>>,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Refused(String),
}

/// The controller as `main` would run it, with `bug` seeded.
async fn run(manager: Manager, bug: Bug) {
    let deployments = manager.owned::<Deployment>();
    let ctx = Arc::new(Context {
        client: manager.client(),
        deployments: deployments.clone(),
        bug,
        applied: Mutex::default(),
    });
    let background = match bug {
        Bug::CleanupOnDeletedEvent => Some(tokio::spawn(clean_up_on_deleted(manager.clone()))),
        Bug::LeaderUnaware => Some(tokio::spawn(annotate_sizes(manager.clone()))),
        Bug::SweepOnStaleList => Some(tokio::spawn(sweep_orphans(
            manager.clone(),
            deployments.clone(),
        ))),
        _ => None,
    };
    manager
        .controller(manager.api::<Memcached>(), "memcached")
        .owns(&deployments)
        .run(reconcile, ctx)
        .await;
    if let Some(background) = background {
        background.abort();
    }
}

async fn reconcile(object: Arc<Memcached>, ctx: Arc<Context>) -> Result<Action, Error> {
    let object = object.as_ref();
    let (name, generation) = (
        object.name_any(),
        object.metadata.generation.unwrap_or_default(),
    );
    let namespace = object.namespace().unwrap_or_default();
    let objects: Api<Memcached> = Api::namespaced(ctx.client.clone(), &namespace);
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let status = object.status.clone().unwrap_or_default();

    if ctx.bug == Bug::FinalizerBeforeCleanup && !record_guarded(object, &ctx).await? {
        return Ok(Action::await_change());
    }
    if ctx.bug == Bug::CleanupOnDeletedEvent && !record_kept(object, &ctx).await? {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let given_up = status
        .degraded
        .as_deref()
        .is_some_and(|d| d.ends_with("someone else's"));
    if ctx.bug == Bug::CreateOnLaggingCache && given_up {
        return Ok(Action::await_change());
    }
    if ctx.bug == Bug::RecordBeforeWork {
        let records: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
        if records.get_opt(&record_name(object)).await?.is_some() {
            return Ok(Action::await_change());
        }
        let record = ConfigMap {
            metadata: ObjectMeta {
                name: Some(record_name(object)),
                ..Default::default()
            },
            ..Default::default()
        };
        records.create(&PostParams::default(), &record).await?;
    }
    if ctx.bug == Bug::PanicOnRemovedField {
        let version = object.spec.version.as_ref().unwrap();
        assert!(!version.is_empty());
    }
    if ctx.bug == Bug::OffByOneBound && object.spec.size >= 10 {
        return Err(Error::Refused(format!(
            "size {} out of range",
            object.spec.size
        )));
    }
    if ctx.bug == Bug::ProgressInMemory {
        let applied = ctx.applied.lock().unwrap().get(&name).copied();
        if applied == Some(generation) {
            return Ok(Action::await_change());
        }
    }
    if ctx.bug == Bug::StatusBeforeWork {
        if status.observed_generation == Some(generation) {
            return Ok(Action::await_change());
        }
        let marked = MemcachedStatus {
            observed_generation: Some(generation),
            replicas: Some(object.spec.size),
            ..Default::default()
        };
        apply::status(&objects, object, &marked, MANAGER).await?;
    }

    let current = ctx.deployments.find(&namespace, &name).await?;
    if let Some(current) = &current
        && !owned::controlled_by(current.as_ref(), object)
    {
        let degraded = MemcachedStatus {
            degraded: Some(format!(
                "Deployment {name} is not controlled by this Memcached"
            )),
            ..Default::default()
        };
        apply::status(&objects, object, &degraded, MANAGER).await?;
        return Ok(Action::requeue(Duration::from_secs(60)));
    }
    let desired = deployment_for(object)?;
    let post_create = match ctx.bug {
        Bug::NonIdempotentCreate => status.created != Some(true),
        Bug::CreateOnLaggingCache => current.is_none(),
        _ => false,
    };
    if post_create {
        match deployments.create(&PostParams::default(), &desired).await {
            Ok(_) => {}
            Err(kube::Error::Api(status))
                if status.code == 409 && ctx.bug == Bug::CreateOnLaggingCache =>
            {
                // "Someone else made it": reported once, never looked at again.
                let degraded = MemcachedStatus {
                    degraded: Some(format!("Deployment {name} exists and is someone else's")),
                    ..Default::default()
                };
                apply::status(&objects, object, &degraded, MANAGER).await?;
                return Ok(Action::await_change());
            }
            Err(error) => return Err(error.into()),
        }
        if ctx.bug == Bug::CreateOnLaggingCache {
            // A look at the new Deployment soon, through the cache.
            return Ok(Action::requeue(Duration::from_millis(250)));
        }
        let mut created = desired_status(object);
        created.created = Some(true);
        apply::status(&objects, object, &created, MANAGER).await?;
        return Ok(Action::await_change());
    }
    let applied =
        apply::apply_scalable(&deployments, current.as_deref(), &desired, MANAGER).await?;
    if let Applied::Changed(_) = applied {
        return Ok(Action::await_change());
    }
    let mut report = desired_status(object);
    report.created = status.created;
    if ctx.bug == Bug::HotLoop {
        report.last_reconciled = Some(Timestamp::now().to_string());
    }
    apply::status(&objects, object, &report, MANAGER).await?;
    if ctx.bug == Bug::ProgressInMemory {
        ctx.applied.lock().unwrap().insert(name, generation);
    }
    Ok(Action::await_change())
}

fn desired_status(object: &Memcached) -> MemcachedStatus {
    MemcachedStatus {
        observed_generation: object.metadata.generation,
        replicas: Some(object.spec.size),
        ..Default::default()
    }
}

fn deployment_for(object: &Memcached) -> Result<Deployment, Error> {
    let name = object.name_any();
    let owner = object
        .controller_owner_ref(&())
        .ok_or_else(|| Error::Refused("no uid".into()))?;
    let labels = std::collections::BTreeMap::from([("app".to_string(), name.clone())]);
    let version = object.spec.version.as_deref().unwrap_or("latest");
    Ok(Deployment {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: object.namespace(),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(object.spec.size),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "memcached".into(),
                        image: Some(format!("memcached:{version}")),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The record a copy keeps beside each object, outside garbage collection (no owner reference).
fn record_name(object: &Memcached) -> String {
    format!("{}-record", object.name_any())
}

/// `FinalizerBeforeCleanup`: keeps a record under a finalizer; `false` once the object is being
/// deleted (and handled).
async fn record_guarded(object: &Memcached, ctx: &Context) -> Result<bool, Error> {
    let namespace = object.namespace().unwrap_or_default();
    let objects: Api<Memcached> = Api::namespaced(ctx.client.clone(), &namespace);
    let records: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let name = object.name_any();
    if finalizer::is_deleting(object) {
        if finalizer::has(object, RECORD_FINALIZER) {
            // The bug: the finalizer goes first, so a crash here leaks the record.
            let patch = json!({ "metadata": { "finalizers": [], "resourceVersion": object.resource_version() } });
            objects
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
            match records
                .delete(&record_name(object), &DeleteParams::default())
                .await
            {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(error) => return Err(error.into()),
            }
        }
        return Ok(false);
    }
    if !finalizer::has(object, RECORD_FINALIZER) {
        let patch = json!({ "metadata": { "finalizers": [RECORD_FINALIZER] } });
        objects
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    let record = ConfigMap {
        metadata: ObjectMeta {
            name: Some(record_name(object)),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        data: Some([("size".to_string(), object.spec.size.to_string())].into()),
        ..Default::default()
    };
    let current = records.get_opt(&record_name(object)).await?;
    apply::apply(&records, current.as_ref(), &record, MANAGER).await?;
    Ok(true)
}

/// `CleanupOnDeletedEvent`: a record of the object's uid, made once; `false` while the record of
/// an earlier object of the name is still there (its Deleted event removes it).
async fn record_kept(object: &Memcached, ctx: &Context) -> Result<bool, Error> {
    let namespace = object.namespace().unwrap_or_default();
    let records: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let uid = object.uid().unwrap_or_default();
    match records.get_opt(&record_name(object)).await? {
        Some(record) => {
            let owner = record.data.and_then(|d| d.get("owner").cloned());
            Ok(owner.as_deref() == Some(uid.as_str()))
        }
        None => {
            let record = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(record_name(object)),
                    ..Default::default()
                },
                data: Some([("owner".to_string(), uid)].into()),
                ..Default::default()
            };
            records.create(&PostParams::default(), &record).await?;
            Ok(true)
        }
    }
}

/// `CleanupOnDeletedEvent`: deletes an object's record when it sees the object deleted.
async fn clean_up_on_deleted(manager: Manager) {
    let objects = manager.cache::<Memcached>();
    let mut changes = std::pin::pin!(objects.changes());
    while let Some(change) = changes.next().await {
        if let Change::Deleted(object) = change {
            let namespace = object.namespace().unwrap_or_default();
            let records: Api<ConfigMap> = Api::namespaced(manager.client(), &namespace);
            let _ = records
                .delete(&record_name(&object), &DeleteParams::default())
                .await;
        }
    }
}

/// `LeaderUnaware`: annotates each Deployment with its owner's size, from a task that runs on
/// every replica, leader or not.
async fn annotate_sizes(manager: Manager) {
    let objects = manager.cache::<Memcached>();
    let mut changes = std::pin::pin!(objects.changes());
    while let Some(change) = changes.next().await {
        if let Change::Applied(object) = change {
            let namespace = object.namespace().unwrap_or_default();
            let deployments: Api<Deployment> = Api::namespaced(manager.client(), &namespace);
            let size = object.spec.size.to_string();
            let patch =
                json!({ "metadata": { "annotations": { "explore.example.com/size": size } } });
            let _ = deployments
                .patch(
                    &object.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await;
        }
    }
}

/// `SweepOnStaleList`: deletes each Deployment whose owner the cache of objects lacks, once that
/// cache is complete.
async fn sweep_orphans(manager: Manager, deployments: Owned<Deployment>) {
    let objects = manager.cache::<Memcached>();
    let mut changes = std::pin::pin!(deployments.changes());
    while let Some(change) = changes.next().await {
        let Change::Applied(deployment) = change else {
            continue;
        };
        objects.completeness().wait().await;
        let namespace = deployment.namespace().unwrap_or_default();
        let owner = owned::controller_of(deployment.as_ref()).map(|o| o.name.clone());
        if let Some(owner) = owner
            && objects.get(Some(&namespace), &owner).is_none()
        {
            let api: Api<Deployment> = Api::namespaced(manager.client(), &namespace);
            let _ = api
                .delete(&deployment.name_any(), &DeleteParams::default())
                .await;
        }
    }
}

/// An explorer of the copy with `bug`, on the shared control plane, with `plan`.
fn explorer(client: kube::Client, bug: Bug, plan: Plan) -> Explorer {
    // The managers' logs, with RUST_LOG=rustbuilder_runtime=debug for example.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    Explorer::new(client, MANAGER)
        .controller(move |manager| run(manager, bug))
        .sample::<Memcached>(SAMPLE)
        .plan(plan)
        .settings(settings())
        .replay_command("cargo test -p rustbuilder-runtime --test explore")
}

/// Each seeded bug and the perturbation that catches it ("reference": the fault-free run's own
/// oracles catch it).
fn corpus() -> Vec<(Bug, Option<Perturbation>, &'static str)> {
    let cases = [
        (Bug::StatusBeforeWork, "crash:write=1", "after step 1"),
        (Bug::NonIdempotentCreate, "crash:write=1", "still failing"),
        (
            Bug::ProgressInMemory,
            "",
            "fresh manager started on the end state wrote",
        ),
        (
            Bug::FinalizerBeforeCleanup,
            "crash:write=15",
            "v1/configmaps/sample-record",
        ),
        (
            Bug::CleanupOnDeletedEvent,
            "coalesce:step=10:resource=memcacheds",
            "not settled",
        ),
        (Bug::HotLoop, "", "not settled"),
        (Bug::PanicOnRemovedField, "", "panicked"),
        (Bug::OffByOneBound, "", "still failing"),
        (
            Bug::LeaderUnaware,
            "lease-stall:step=2",
            "two writers at once",
        ),
        (
            Bug::SweepOnStaleList,
            "stale:step=10:resource=memcacheds",
            "deleted apps/v1/deployments/sample",
        ),
        (
            Bug::CreateOnLaggingCache,
            "delay:step=1:resource=deployments",
            "someone else's",
        ),
        (
            Bug::RecordBeforeWork,
            "crash:write=1",
            "apps/v1/deployments/sample is missing",
        ),
    ];
    let perturbation =
        |text: &str| (!text.is_empty()).then(|| text.parse().expect("a perturbation"));
    cases
        .into_iter()
        .map(|(bug, text, expected)| (bug, perturbation(text), expected))
        .collect()
}

/// The Memcached copy's corpus: the copy without a bug under every perturbation below, and each
/// seeded copy under its own. (The unseeded copy's `lease-stall:step=2` found the leader that wrote
/// after its Lease had passed to another.)
fn memcached_cases(client: &kube::Client) -> Vec<Case> {
    let corpus = corpus();
    let all: Vec<Perturbation> = corpus.iter().filter_map(|(_, p, _)| p.clone()).collect();
    let mut cases = vec![Case::unseeded(
        "Memcached",
        explorer(client.clone(), Bug::None, Plan::Only(all)),
    )];
    for (bug, perturbation, expected) in corpus {
        let plan = Plan::Only(perturbation.into_iter().collect());
        let explorer = explorer(client.clone(), bug, plan);
        cases.push(Case::seeded(
            format!("Memcached {bug:?}"),
            expected,
            explorer,
        ));
    }
    cases
}

/// Each copy with each of its bugs, under the perturbation that catches it: caught, with the
/// problem named; each copy without a bug, under all its copy's perturbations: no alarm.
#[tokio::test]
async fn every_seeded_bug_is_caught_and_the_unseeded_copies_raise_no_alarm() {
    let env = take_turn(shared_env).await;
    let client = env.client();
    let cases = memcached_cases(&client)
        .into_iter()
        .chain(cron_job::cases(&client))
        .chain(certificate::cases(&client))
        .chain(multi_version::cases(&client));
    let reports: Vec<_> = futures::stream::iter(cases)
        .map(|case| async move { (case.name, case.expected, case.explorer.explore().await) })
        .buffer_unordered(6)
        .collect()
        .await;
    let mut wrong = Vec::new();
    let seeded = reports.iter().filter(|(_, e, _)| e.is_some()).count();
    for (name, expected, report) in reports {
        let text = report.to_string();
        match expected {
            None if !report.is_ok() => wrong.push(format!("a false alarm on {name}:\n{text}")),
            None => {}
            Some(expected) if report.is_ok() || !text.contains(expected) => wrong.push(format!(
                "{name} not caught (expected `{expected}`):\n{text}"
            )),
            Some(_) => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(seeded >= 16, "a corpus of {seeded} seeded bugs");
}

/// The whole plan on the unseeded copy (minutes): `cargo test --test explore -- --ignored`.
#[tokio::test]
#[ignore = "the full plan takes minutes"]
async fn full_plan() {
    let env = take_turn(shared_env).await;
    let bug = std::env::var("EXPLORE_BUG").map_or(Bug::None, |name| {
        corpus()
            .into_iter()
            .map(|(bug, _, _)| bug)
            .find(|bug| format!("{bug:?}") == name)
            .unwrap_or_else(|| panic!("EXPLORE_BUG={name}: no such bug"))
    });
    let plan = match Plan::from_env() {
        Plan::Short => Plan::Full { max_runs: 200 },
        chosen => chosen,
    };
    let report = explorer(env.client(), bug, plan).explore().await;
    for (number, write) in report.reference.writes.iter().enumerate() {
        println!(
            "reference write #{}: step {} {}",
            number + 1,
            write.step,
            write.describe()
        );
    }
    report.assert_ok();
}
