//! A cross-cluster controller on three real control planes (`alpha`, `bravo`, `charlie`): owners
//! (labelled ConfigMaps) in alpha, the home cluster, whose `clusters` key selects the members that
//! get a copy of them. The copies are created, repaired when edited or deleted, removed from a
//! member deselected, made in a member once it is engaged or its API server is back (the others not
//! waiting for it meanwhile), and deleted everywhere before their owner goes.
//!
//! The three control planes start once, in one test (an env's processes die with the thread that
//! started it); each part below is one scenario, run in turn, and says in its failure message
//! which one failed.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use rustbuilder_envtest::{Component, TestEnv};
use rustbuilder_runtime::Manager;
use rustbuilder_runtime::fleet::{
    Announcement, Cluster, Fleet, OWNER_ANNOTATION, OWNER_CLUSTER_LABEL, OWNER_KIND_LABEL,
    OWNER_UID_LABEL, Spread, SpreadError,
};
use rustbuilder_runtime::manager::ManagerArgs;
use serde_json::json;
use support::eventually;

const MANAGER: &str = "fleet-cross-test";
const NAMESPACE: &str = "default";
/// The owners carry this label.
const OWNER_LABEL: &str = "fleet-cross-test/owner";
const FAST: Duration = Duration::from_secs(10);
/// The owners' finalizer, and their annotation that lists the members holding their copies.
const FINALIZER: &str = "fleet.rustbuilder.io/member-configmaps";

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    manager: ManagerArgs,
}

type Copies = Spread<ConfigMap, ConfigMap>;

struct Context {
    spread: Copies,
    /// Failed reconciles, by owner.
    failures: Mutex<HashMap<String, usize>>,
    /// Successful reconciles that spread (the owner carried the finalizer), by owner.
    spreads: Mutex<HashMap<String, usize>>,
}

impl Context {
    fn failures(&self, owner: &str) -> usize {
        let failures = self.failures.lock().unwrap();
        failures.get(owner).copied().unwrap_or(0)
    }

    fn spreads(&self, owner: &str) -> usize {
        let spreads = self.spreads.lock().unwrap();
        spreads.get(owner).copied().unwrap_or(0)
    }
}

/// [`copy`], its failures counted, and its successes once the owner has the finalizer (the first
/// reconcile only adds it).
async fn reconcile(owner: Arc<ConfigMap>, ctx: Arc<Context>) -> Result<Action, SpreadError> {
    let spreads = owner.finalizers().iter().any(|f| f == FINALIZER);
    let result = copy(owner.clone(), &ctx.spread).await;
    let counts = match (&result, spreads) {
        (Ok(_), true) => &ctx.spreads,
        (Ok(_), false) => return result,
        (Err(_), _) => &ctx.failures,
    };
    *counts.lock().unwrap().entry(owner.name_any()).or_default() += 1;
    result
}

/// A member whose API server accepts connections and never answers: the address of a listener that
/// holds every connection open, unread.
fn silent_member() -> kube::Config {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let held: Vec<_> = listener.incoming().collect();
        drop(held);
    });
    kube::Config::new(format!("http://{address}").parse().unwrap())
}

/// Each member that the owner's `clusters` key names gets a copy of it, `<owner>-copy`, holding its
/// `payload`; the others get none.
async fn copy(owner: Arc<ConfigMap>, spread: &Copies) -> Result<Action, SpreadError> {
    let data = owner.data.clone().unwrap_or_default();
    let selected: Vec<String> = data
        .get("clusters")
        .map(|c| c.split(',').map(String::from).collect())
        .unwrap_or_default();
    let copy = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{}-copy", owner.name_any())),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "payload".to_string(),
            data.get("payload").cloned().unwrap_or_default(),
        )])),
        ..Default::default()
    };
    let wanted = |cluster: &Cluster| match selected.iter().any(|s| s == cluster.name()) {
        true => vec![copy.clone()],
        false => vec![],
    };
    spread.reconcile(owner, wanted).await
}

/// Adds the owners' controller to `manager`: the ConfigMaps labelled `OWNER_LABEL` in its cluster,
/// `alpha`, copied into the members of `fleet`.
fn add_copies(manager: &Manager, fleet: &Fleet) -> Arc<Context> {
    let labelled = watcher::Config::default().labels(OWNER_LABEL);
    let owners = manager.cache_with(manager.api::<ConfigMap>(), labelled.clone());
    let spread = Spread::new(fleet, "alpha").owners(&owners);
    let ctx = Arc::new(Context {
        spread: spread.clone(),
        failures: Mutex::default(),
        spreads: Mutex::default(),
    });
    let controller = manager
        .controller(manager.api::<ConfigMap>(), "copies")
        .watcher_config(labelled)
        .reconcile_on(spread.triggers())
        .run(reconcile, ctx.clone());
    manager.controllers().add(controller);
    ctx
}

async fn config_of(env: &TestEnv) -> kube::Config {
    let kubeconfig = Kubeconfig::read_from(env.kubeconfig()).unwrap();
    let options = KubeConfigOptions::default();
    kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap()
}

fn configmaps(client: &Client) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), NAMESPACE)
}

async fn create_owner(client: &Client, name: &str, clusters: &str, payload: &str) -> ConfigMap {
    let owner = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(OWNER_LABEL.into(), "true".into())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("clusters".into(), clusters.into()),
            ("payload".into(), payload.into()),
        ])),
        ..Default::default()
    };
    configmaps(client)
        .create(&PostParams::default(), &owner)
        .await
        .unwrap()
}

async fn set_data(client: &Client, name: &str, key: &str, value: &str) {
    let patch = json!({ "data": { key: value } });
    configmaps(client)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// The payload of `name` in the cluster of `client`, `None` if there is no such ConfigMap (or its
/// API server does not answer).
async fn payload(client: &Client, name: &str) -> Option<String> {
    let copy = configmaps(client).get_opt(name).await.ok().flatten()?;
    Some(copy.data?.get("payload").cloned().unwrap_or_default())
}

/// Waits until `name`'s payload in `client`'s cluster is `expected` (`None`: gone).
async fn payload_becomes(
    client: &Client,
    name: &str,
    expected: Option<&str>,
    timeout: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    let became = eventually(timeout, async || {
        payload(client, name).await.as_deref() == expected
    })
    .await;
    became.then(|| started.elapsed())
}

/// The members `owner`'s annotation lists.
fn members_of(owner: &ConfigMap) -> Option<String> {
    owner.annotations().get(FINALIZER).cloned()
}

async fn is_gone(client: &Client, name: &str) -> bool {
    matches!(configmaps(client).get_opt(name).await, Ok(None))
}

#[tokio::test]
async fn a_spread_keeps_children_in_the_members_its_owners_select() {
    if let Ok(filter) = std::env::var("TEST_LOG") {
        let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
    }
    let started = Instant::now();
    let (alpha, mut bravo, charlie) =
        tokio::join!(TestEnv::start(), TestEnv::start(), TestEnv::start());
    eprintln!("three control planes up in {:?}", started.elapsed());
    let (a, b, c) = (alpha.client(), bravo.client(), charlie.client());

    let args = Args::try_parse_from(["fleet-cross-test", "--health-probe-bind-address=0"])
        .unwrap()
        .manager;
    let manager = Manager::builder(MANAGER)
        .external_tracing()
        .client_config(config_of(&alpha).await)
        .start(args)
        .await
        .unwrap();
    let (announce, announcements) = mpsc::unbounded();
    let engage = |name: &str, config: kube::Config| {
        let name = name.to_string();
        announce
            .unbounded_send(Announcement::Engage { name, config })
            .unwrap();
    };
    engage("alpha", config_of(&alpha).await);
    engage("bravo", config_of(&bravo).await);
    // The fleet runs no controllers of its own in the members: the spread writes there.
    let fleet = Fleet::new(&manager, announcements, |_: &Cluster| {});
    let ctx = add_copies(&manager, &fleet);
    manager.controllers().add(fleet.clone().run());
    let running = tokio::spawn(manager.controllers().run());

    // -- An owner selecting a member not engaged yet: its copy is made once the member is.
    let scenario = Instant::now();
    let web = create_owner(&a, "web", "bravo,charlie", "v1").await;
    let made = payload_becomes(&b, "web-copy", Some("v1"), FAST).await;
    assert!(made.is_some(), "created: bravo has no copy of web");
    assert!(is_gone(&c, "web-copy").await, "charlie is not engaged yet");
    engage("charlie", config_of(&charlie).await);
    let made = payload_becomes(&c, "web-copy", Some("v1"), FAST).await;
    let made = made.expect("engaged: charlie got no copy of web");
    eprintln!("charlie engaged: its copy made within {made:?}");
    assert!(is_gone(&a, "web-copy").await, "alpha is not selected");
    // The copy names its owner by labels and an annotation, no owner reference.
    let copy = configmaps(&b).get("web-copy").await.unwrap();
    let labels = copy.labels();
    assert_eq!(labels[OWNER_CLUSTER_LABEL], "alpha");
    assert_eq!(labels[OWNER_KIND_LABEL], "ConfigMap");
    assert_eq!(labels[OWNER_UID_LABEL], web.uid().unwrap());
    assert_eq!(copy.annotations()[OWNER_ANNOTATION], "default/web");
    assert!(copy.owner_references().is_empty());
    assert_eq!(Copies::finalizer(), FINALIZER);
    let web = configmaps(&a).get("web").await.unwrap();
    assert!(web.finalizers().contains(&FINALIZER.to_string()));
    assert_eq!(members_of(&web).as_deref(), Some("bravo,charlie"));
    eprintln!("scenario 'created' took {:?}", scenario.elapsed());

    // -- A copy edited in a member is repaired; one deleted there is made again.
    let scenario = Instant::now();
    set_data(&b, "web-copy", "payload", "tampered").await;
    let repaired = payload_becomes(&b, "web-copy", Some("v1"), FAST).await;
    let repaired = repaired.expect("edited: bravo's copy was not repaired");
    eprintln!("edited in bravo: repaired within {repaired:?}");
    configmaps(&c)
        .delete("web-copy", &DeleteParams::default())
        .await
        .unwrap();
    let remade = payload_becomes(&c, "web-copy", Some("v1"), FAST).await;
    let remade = remade.expect("deleted: charlie's copy was not made again");
    eprintln!("deleted in charlie: made again within {remade:?}");
    eprintln!("scenario 'repaired' took {:?}", scenario.elapsed());

    // -- The owner selects alpha instead of charlie: charlie loses its copy, alpha gets one.
    let scenario = Instant::now();
    set_data(&a, "web", "clusters", "alpha,bravo").await;
    let removed = payload_becomes(&c, "web-copy", None, FAST).await;
    assert!(removed.is_some(), "deselected: charlie keeps its copy");
    let made = payload_becomes(&a, "web-copy", Some("v1"), FAST).await;
    assert!(made.is_some(), "selected: alpha has no copy");
    let recorded = eventually(FAST, async || {
        let web = configmaps(&a).get("web").await.unwrap();
        members_of(&web).as_deref() == Some("alpha,bravo")
    })
    .await;
    assert!(recorded, "deselected: charlie is still recorded");
    eprintln!("scenario 'deselected' took {:?}", scenario.elapsed());

    // -- bravo's API server dies. A new owner's copy and a changed owner's are made in the other
    // members within seconds; an owner deleted meanwhile loses its copies where they can be reached
    // and stays, held by its finalizer, until bravo is back. Then bravo gets its copies, the
    // deleted owner's copy there goes, and the owner with it.
    let scenario = Instant::now();
    bravo.kill(Component::KubeApiserver).await;
    create_owner(&a, "db", "bravo,charlie", "d1").await;
    let made = payload_becomes(&c, "db-copy", Some("d1"), Duration::from_secs(5)).await;
    let made = made.expect("bravo down: charlie's copy of db was held up");
    eprintln!("bravo down: charlie's copy of db made within {made:?}");
    configmaps(&a)
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let removed = payload_becomes(&a, "web-copy", None, Duration::from_secs(5)).await;
    assert!(removed.is_some(), "bravo down: alpha's copy of web stays");
    let failed = eventually(FAST, async || ctx.failures("web") >= 1).await;
    assert!(failed, "bravo down: deleting web did not fail");
    let web = configmaps(&a).get_opt("web").await.unwrap();
    let held = web.as_ref().is_some_and(|web| {
        web.metadata.deletion_timestamp.is_some()
            && web.finalizers().contains(&FINALIZER.to_string())
            && members_of(web).as_deref() == Some("bravo")
    });
    assert!(
        held,
        "bravo down: web went before its copy in bravo: {web:?}"
    );
    // Four failures of db in bravo: its next retry is 8 s away. Its copy is made sooner: bravo,
    // asked every second whether it is back, reconciles the owners that failed there.
    let failed = eventually(FAST, async || ctx.failures("db") >= 4).await;
    assert!(failed, "bravo down: db failed {} times", ctx.failures("db"));
    bravo.start_component(Component::KubeApiserver).await;
    let back = Instant::now();
    let soon = Duration::from_secs(3);
    let made = payload_becomes(&b, "db-copy", Some("d1"), soon).await;
    assert!(made.is_some(), "bravo back: no copy of db within {soon:?}");
    let removed = payload_becomes(&b, "web-copy", None, soon).await;
    assert!(removed.is_some(), "bravo back: web's copy stays");
    let gone = eventually(soon, async || is_gone(&a, "web").await).await;
    assert!(gone, "bravo back: web is not deleted");
    eprintln!(
        "bravo back: its copies right {:?} after its API server started",
        back.elapsed()
    );
    eprintln!("scenario 'API server down' took {:?}", scenario.elapsed());

    // -- An owner deleted with every member up: its copies go, then it does.
    let scenario = Instant::now();
    configmaps(&a)
        .delete("db", &DeleteParams::default())
        .await
        .unwrap();
    let gone = eventually(FAST, async || is_gone(&a, "db").await).await;
    assert!(gone, "deleted: db stays");
    assert!(
        is_gone(&b, "db-copy").await,
        "deleted: bravo keeps db's copy"
    );
    assert!(
        is_gone(&c, "db-copy").await,
        "deleted: charlie keeps db's copy"
    );
    eprintln!("scenario 'deleted' took {:?}", scenario.elapsed());

    // -- charlie is disengaged while it holds a copy: its owner, deleted meanwhile, stays until
    // charlie is engaged again and the copy there is deleted.
    let scenario = Instant::now();
    create_owner(&a, "cache", "charlie", "c1").await;
    let made = payload_becomes(&c, "cache-copy", Some("c1"), FAST).await;
    assert!(made.is_some(), "disengaged: charlie got no copy of cache");
    announce
        .unbounded_send(Announcement::Disengage {
            name: "charlie".into(),
        })
        .unwrap();
    let away = eventually(FAST, async || fleet.cluster("charlie").is_none()).await;
    assert!(away, "disengaged: charlie is still engaged");
    configmaps(&a)
        .delete("cache", &DeleteParams::default())
        .await
        .unwrap();
    let handled = eventually(FAST, async || {
        ctx.failures("cache") >= 1 || is_gone(&a, "cache").await
    })
    .await;
    let cache = configmaps(&a).get_opt("cache").await.unwrap();
    let held = cache.as_ref().is_some_and(|cache| {
        cache.metadata.deletion_timestamp.is_some()
            && cache.finalizers().contains(&FINALIZER.to_string())
    });
    assert!(
        handled && held,
        "disengaged: cache went with its copy left in charlie: {cache:?}"
    );
    assert_eq!(payload(&c, "cache-copy").await.as_deref(), Some("c1"));
    engage("charlie", config_of(&charlie).await);
    let removed = payload_becomes(&c, "cache-copy", None, FAST).await;
    assert!(
        removed.is_some(),
        "engaged again: cache's copy stays in charlie"
    );
    let gone = eventually(FAST, async || is_gone(&a, "cache").await).await;
    assert!(gone, "engaged again: cache is not deleted");
    eprintln!("scenario 'disengaged' took {:?}", scenario.elapsed());

    // -- A member gone for good (disengaged, never to come back) holds the deletion of the owners
    // that had children there, until someone gives it up: removing it from the owner's annotation
    // lets the owner go (its copy there is left to whoever deletes the member).
    let scenario = Instant::now();
    create_owner(&a, "lost", "charlie", "l1").await;
    let made = payload_becomes(&c, "lost-copy", Some("l1"), FAST).await;
    assert!(made.is_some(), "gone: charlie got no copy of lost");
    announce
        .unbounded_send(Announcement::Disengage {
            name: "charlie".into(),
        })
        .unwrap();
    let away = eventually(FAST, async || fleet.cluster("charlie").is_none()).await;
    assert!(away, "gone: charlie is still engaged");
    configmaps(&a)
        .delete("lost", &DeleteParams::default())
        .await
        .unwrap();
    let failed = eventually(FAST, async || ctx.failures("lost") >= 1).await;
    assert!(failed, "gone: deleting lost did not wait for charlie");
    assert!(
        !is_gone(&a, "lost").await,
        "gone: lost went with its copy in charlie"
    );
    let give_up = json!({ "metadata": { "annotations": { FINALIZER: null } } });
    configmaps(&a)
        .patch("lost", &PatchParams::default(), &Patch::Merge(give_up))
        .await
        .unwrap();
    let gone = eventually(FAST, async || is_gone(&a, "lost").await).await;
    assert!(gone, "gone: lost stays after charlie was given up");
    eprintln!("scenario 'gone for good' took {:?}", scenario.elapsed());

    // -- A member engaged whose API server never answers: the owners that do not select it are
    // reconciled at once (before, each waited 10 s for it and failed), made and deleted alike.
    let scenario = Instant::now();
    engage("delta", silent_member());
    let engaged = eventually(FAST, async || fleet.cluster("delta").is_some()).await;
    assert!(engaged, "silent: delta is not engaged");
    create_owner(&a, "solo", "bravo", "s1").await;
    let made = payload_becomes(&b, "solo-copy", Some("s1"), FAST).await;
    assert!(made.is_some(), "silent: bravo got no copy of solo");
    // The reconcile that made the copy ends without waiting for delta.
    let soon = Duration::from_secs(3);
    let done = eventually(soon, async || ctx.spreads("solo") >= 1).await;
    assert!(
        done && ctx.failures("solo") == 0,
        "silent: solo's reconcile waited for delta ({} failures)",
        ctx.failures("solo")
    );
    configmaps(&a)
        .delete("solo", &DeleteParams::default())
        .await
        .unwrap();
    let gone = eventually(soon, async || is_gone(&a, "solo").await).await;
    assert!(gone, "silent: solo's deletion waited for delta");
    assert!(
        is_gone(&b, "solo-copy").await,
        "silent: bravo keeps solo's copy"
    );
    announce
        .unbounded_send(Announcement::Disengage {
            name: "delta".into(),
        })
        .unwrap();
    eprintln!("scenario 'silent member' took {:?}", scenario.elapsed());

    manager.shutdown();
    let stopped = tokio::time::timeout(FAST, running).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "manager: {stopped:?}");
    eprintln!("whole test: {:?}", started.elapsed());
}
