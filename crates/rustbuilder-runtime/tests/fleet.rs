//! Fleets on three real control planes (`alpha`, `bravo`, `charlie`): clusters engaged from a
//! kubeconfig directory, from kubeconfig Secrets and from Cluster API's Clusters (a stand-in CRD on
//! `alpha`, `tests/fixtures/cluster-api`), added and removed while the fleet runs, one
//! whose API server dies and comes back, and one whose kubeconfig changes; every engagement only
//! while the process leads, no watch left open by a cluster that went, and each engaged cluster's
//! series on the process's `/metrics`, labelled with its name, until it goes.
//!
//! The three control planes start once, in one test (an env's processes die with the thread that
//! started it, so tests cannot share envs); each part below is one scenario, run in turn, and says
//! in its failure message which one failed.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ObjectMeta, Patch,
    PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use rustbuilder_envtest::{Component, TestEnv};
use rustbuilder_runtime::Manager;
use rustbuilder_runtime::fleet::{
    CLUSTER_NAME_LABEL, Cluster, ClusterApiClusters, Fleet, KubeconfigDir, KubeconfigSecrets,
    StaticClusters,
};
use rustbuilder_runtime::manager::ManagerArgs;
use serde_json::{Value, json};
use support::{Scheme, eventually, free_address, sample};

const MANAGER: &str = "fleet-test";
const LEASE: &str = "fleet-test.example.com";
const NAMESPACE: &str = "default";
/// The ConfigMaps the test controller reconciles carry this label.
const MEMBER_LABEL: &str = "fleet-test/stamp";
/// Where the directory fleet's controller writes the cluster's name.
const BY_DIR: &str = "fleet.example.com/dir";
/// Where the Secret fleet's controller writes the cluster's name.
const BY_SECRET: &str = "fleet.example.com/secret";
/// Where the Cluster API fleet's controller writes the cluster's name.
const BY_CLUSTER_API: &str = "fleet.example.com/cluster-api";
/// Where the static fleet's controller writes the cluster's name.
const BY_STATIC: &str = "fleet.example.com/static";
/// How long the static fleet's cluster may leave every probe unanswered before it is disengaged.
const SILENCE: Duration = Duration::from_secs(4);
/// The namespace of `alpha` where the Cluster API fleet reads its Clusters and their Secrets.
const CAPI_NAMESPACE: &str = "capi";

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    manager: ManagerArgs,
}

/// What each cluster's controller needs: which cluster it runs in, and where to write its name.
struct Stamp {
    cluster: Cluster,
    annotation: &'static str,
}

/// Writes the cluster's name into the ConfigMap's annotation: proof that this cluster's controller,
/// and no other, reconciled it.
async fn stamp(configmap: Arc<ConfigMap>, ctx: Arc<Stamp>) -> Result<Action, kube::Error> {
    let name = ctx.cluster.name();
    if configmap
        .annotations()
        .get(ctx.annotation)
        .map(String::as_str)
        == Some(name)
    {
        return Ok(Action::await_change());
    }
    let api: Api<ConfigMap> = Api::namespaced(ctx.cluster.client(), NAMESPACE);
    let patch = json!({ "metadata": { "annotations": { ctx.annotation: name } } });
    let params = PatchParams::default();
    api.patch(&configmap.name_any(), &params, &Patch::Merge(&patch))
        .await?;
    Ok(Action::await_change())
}

/// Engagements counted per cluster.
type Engagements = Arc<Mutex<HashMap<String, usize>>>;

/// The engage function: one controller of labelled ConfigMaps per cluster, stamping `annotation`.
fn stamper(annotation: &'static str, engagements: Engagements) -> impl Fn(&Cluster) + Send + Sync {
    move |cluster: &Cluster| {
        let mut counted = engagements.lock().unwrap();
        *counted.entry(cluster.name().to_string()).or_default() += 1;
        let manager = cluster.manager();
        let api = Api::<ConfigMap>::namespaced(cluster.client(), NAMESPACE);
        let ctx = Arc::new(Stamp {
            cluster: cluster.clone(),
            annotation,
        });
        let controller = manager
            .controller(api, "stamp")
            .watcher_config(watcher::Config::default().labels(MEMBER_LABEL))
            .run(stamp, ctx);
        manager.controllers().add(controller);
    }
}

fn engaged(engagements: &Engagements, cluster: &str) -> usize {
    let counted = engagements.lock().unwrap();
    counted.get(cluster).copied().unwrap_or(0)
}

/// Creates a labelled ConfigMap `name` and returns how long until `annotation` names `cluster`,
/// or `None` if not within `timeout`.
async fn stamped_within(
    client: &Client,
    name: &str,
    annotation: &str,
    cluster: &str,
    timeout: Duration,
) -> Option<Duration> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let configmap = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(MEMBER_LABEL.into(), "true".into())])),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &configmap)
        .await
        .unwrap_or_else(|e| panic!("creating ConfigMap {name}: {e}"));
    let created = Instant::now();
    let stamped = eventually(timeout, async || {
        let current = api.get_opt(name).await.ok().flatten();
        let stamp = current.and_then(|c| c.annotations().get(annotation).cloned());
        stamp.as_deref() == Some(cluster)
    })
    .await;
    stamped.then(|| created.elapsed())
}

/// The WATCH requests on ConfigMaps the API server of `client` is serving now, from its own
/// `apiserver_longrunning_requests` gauge.
async fn configmap_watches(client: &Client) -> u64 {
    watches_of(client, "configmaps").await
}

/// The WATCH requests on `resource` (a plural) the API server of `client` is serving now.
async fn watches_of(client: &Client, resource: &str) -> u64 {
    let request = kube::core::Request::new("")
        .get("metrics", &Default::default())
        .unwrap();
    let text = client.request_text(request).await.unwrap();
    let samples = text
        .lines()
        .filter_map(|line| line.strip_prefix("apiserver_longrunning_requests{"))
        .filter_map(|line| line.split_once("} "))
        .filter(|(labels, _)| {
            labels.contains(r#"verb="WATCH""#)
                && labels.contains(&format!(r#"resource="{resource}""#))
        });
    samples
        .map(|(_, value)| value.trim().parse::<f64>().unwrap() as u64)
        .sum()
}

/// Waits until `client`'s API server serves `expected` ConfigMap watches; the last count seen.
async fn watches_become(client: &Client, expected: u64, timeout: Duration) -> u64 {
    let mut seen = 0;
    eventually(timeout, async || {
        seen = configmap_watches(client).await;
        seen == expected
    })
    .await;
    seen
}

/// The client configuration of an env's admin kubeconfig.
async fn config_of(env: &TestEnv) -> kube::Config {
    let kubeconfig = Kubeconfig::read_from(env.kubeconfig()).unwrap();
    let options = KubeConfigOptions::default();
    kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap()
}

/// An env's kubeconfig with its certificate files embedded, as a kubeconfig Secret holds it.
fn embedded_kubeconfig(env: &TestEnv) -> Vec<u8> {
    embedded(env.kubeconfig())
}

/// The kubeconfig at `path` with its certificate files embedded.
fn embedded(path: &Path) -> Vec<u8> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut kubeconfig: Value = serde_json::from_str(&text).unwrap();
    let embed = |section: &mut Value, keys: &[&str]| {
        for key in keys {
            if let Some(path) = section.get(*key).and_then(Value::as_str).map(PathBuf::from) {
                let data = ByteString(std::fs::read(&path).unwrap());
                section[format!("{key}-data")] = serde_json::to_value(data).unwrap();
                section.as_object_mut().unwrap().remove(*key);
            }
        }
    };
    for cluster in kubeconfig["clusters"].as_array_mut().unwrap() {
        embed(&mut cluster["cluster"], &["certificate-authority"]);
    }
    for user in kubeconfig["users"].as_array_mut().unwrap() {
        embed(&mut user["user"], &["client-certificate", "client-key"]);
    }
    serde_json::to_vec(&kubeconfig).unwrap()
}

/// A manager process on `env` with leader election, as an operator's `main` starts it, serving
/// `/metrics` over plain HTTP on `metrics` (`0`: not at all).
async fn leader_elected_manager(env: &TestEnv, metrics: &str) -> Manager {
    let args = Args::try_parse_from([
        "fleet-test",
        "--leader-elect",
        "--health-probe-bind-address=0",
        "--leader-election-namespace=default",
        &format!("--metrics-bind-address={metrics}"),
        "--metrics-secure=false",
    ])
    .unwrap()
    .manager;
    Manager::builder(MANAGER)
        .leader_election_id(LEASE)
        .external_tracing()
        .client_config(config_of(env).await)
        .start(args)
        .await
        .unwrap()
}

fn names(fleet: &Fleet) -> Vec<String> {
    fleet.clusters().into_iter().map(|c| c.name).collect()
}

/// Writes `env`'s kubeconfig into `dir` as `cluster`'s, pretty-printed or not: another text, the
/// same cluster.
fn rewrite_kubeconfig(env: &TestEnv, dir: &Path, cluster: &str, pretty: bool) {
    let text = std::fs::read_to_string(env.kubeconfig()).unwrap();
    let kubeconfig: Value = serde_json::from_str(&text).unwrap();
    let text = match pretty {
        true => serde_json::to_string_pretty(&kubeconfig),
        false => serde_json::to_string(&kubeconfig),
    };
    std::fs::write(dir.join(format!("{cluster}.kubeconfig")), text.unwrap()).unwrap();
}

fn copy_kubeconfig(env: &TestEnv, dir: &Path, cluster: &str) {
    std::fs::copy(env.kubeconfig(), dir.join(format!("{cluster}.kubeconfig"))).unwrap();
}

const FAST: Duration = Duration::from_secs(10);

/// The process's `/metrics`, checked to be one exposition: each family described once, and each
/// series (name and labels) once.
async fn scrape(address: SocketAddr) -> String {
    let got = support::get(address, &Scheme::Http, "/metrics", None).await;
    let (status, text) = got.unwrap_or_else(|e| panic!("GET /metrics: {e}"));
    assert_eq!(status, 200, "GET /metrics: {text}");
    let mut seen = BTreeSet::new();
    let keys = text
        .lines()
        .filter(|l| l.starts_with("# TYPE ") || !l.starts_with('#'));
    for key in keys
        .filter_map(|line| line.rsplit_once(' '))
        .map(|(key, _)| key)
    {
        assert!(seen.insert(key), "twice in /metrics: {key}\n{text}");
    }
    text
}

/// The successful reconciles of the `stamp` controller in `cluster`, from `/metrics`.
fn stamped_in(metrics: &str, cluster: &str) -> f64 {
    let series = format!(
        r#"controller_runtime_reconcile_total{{cluster="{cluster}",controller="stamp",result="success"}}"#
    );
    sample(metrics, &series).unwrap_or(0.0)
}

/// The samples of `/metrics` labelled with `cluster`.
fn series_of<'a>(metrics: &'a str, cluster: &str) -> Vec<&'a str> {
    let label = format!(r#"cluster="{cluster}""#);
    metrics.lines().filter(|l| l.contains(&label)).collect()
}

#[tokio::test]
async fn a_fleet_follows_clusters_that_come_go_fail_and_recover() {
    if let Ok(filter) = std::env::var("TEST_LOG") {
        let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
    }
    let started = Instant::now();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cluster-api");
    let with_cluster_api = TestEnv::builder().crd_dir(fixtures).start();
    let (alpha, mut bravo, charlie) =
        tokio::join!(with_cluster_api, TestEnv::start(), TestEnv::start());
    eprintln!("three control planes up in {:?}", started.elapsed());
    let (a, b, c) = (alpha.client(), bravo.client(), charlie.client());
    let idle = (
        configmap_watches(&a).await,
        configmap_watches(&b).await,
        configmap_watches(&c).await,
    );

    // The directory fleet starts with alpha, bravo, and a cluster nothing answers for.
    let dir = tempfile::tempdir().unwrap();
    copy_kubeconfig(&alpha, dir.path(), "alpha");
    copy_kubeconfig(&bravo, dir.path(), "bravo");
    let nowhere = r#"{"apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x"}"#;
    std::fs::write(dir.path().join("nowhere.yaml"), nowhere).unwrap();

    let metrics = free_address();
    let leader = leader_elected_manager(&alpha, &metrics.to_string()).await;
    let by_dir: Engagements = Engagements::default();
    let provider = KubeconfigDir::new(dir.path()).interval(Duration::from_millis(300));
    let dir_fleet = Fleet::new(&leader, provider, stamper(BY_DIR, by_dir.clone()));
    let by_secret: Engagements = Engagements::default();
    let secrets = KubeconfigSecrets::new(&leader, NAMESPACE, CLUSTER_NAME_LABEL);
    let secret_fleet = Fleet::new(&leader, secrets, stamper(BY_SECRET, by_secret.clone()));
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(CAPI_NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let namespaces: Api<Namespace> = Api::all(a.clone());
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let by_cluster_api: Engagements = Engagements::default();
    let capi = ClusterApiClusters::new(&leader, CAPI_NAMESPACE);
    let engage = stamper(BY_CLUSTER_API, by_cluster_api.clone());
    let capi_fleet = Fleet::new(&leader, capi, engage);
    leader.controllers().add(dir_fleet.clone().run());
    leader.controllers().add(secret_fleet.clone().run());
    leader.controllers().add(capi_fleet.clone().run());
    // delta: alpha's API server behind a proxy that can go silent.
    let config_of_alpha = config_of(&alpha).await;
    let proxy = support::SilentProxy::start(&config_of_alpha).await;
    let by_static: Engagements = Engagements::default();
    let delta = StaticClusters::new().cluster("delta", proxy.config(&config_of_alpha));
    let static_fleet = Fleet::new(&leader, delta, stamper(BY_STATIC, by_static.clone()))
        .disengage_silent_after(SILENCE);
    leader.controllers().add(static_fleet.clone().run());
    // crowd-1 to crowd-6: alpha under six names, engaged two at a time, each with a controller that
    // lists and watches ConfigMaps and reconciles none.
    let crowd = (1..=6).fold(StaticClusters::new(), |crowd, n| {
        crowd.cluster(&format!("crowd-{n}"), config_of_alpha.clone())
    });
    let by_crowd: Engagements = Engagements::default();
    let counted = by_crowd.clone();
    let crowd_fleet = Fleet::new(&leader, crowd, move |cluster: &Cluster| {
        *counted
            .lock()
            .unwrap()
            .entry(cluster.name().into())
            .or_default() += 1;
        let api = Api::<ConfigMap>::namespaced(cluster.client(), NAMESPACE);
        let idle =
            async |_: Arc<ConfigMap>, _: Arc<()>| Ok::<_, kube::Error>(Action::await_change());
        let controller = cluster
            .manager()
            .controller(api, "crowd")
            .watcher_config(watcher::Config::default().labels("fleet-test/crowd"))
            .run(idle, Arc::new(()));
        cluster.manager().controllers().add(controller);
    })
    .engage_at_once(2);
    leader.controllers().add(crowd_fleet.clone().run());
    // The most crowd clusters engaged and not yet listed at any moment, until all six have listed.
    let most_listing = tokio::spawn({
        let (crowd_fleet, by_crowd) = (crowd_fleet.clone(), by_crowd.clone());
        async move {
            let mut most = 0;
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                // Engagements first, statuses after: a cluster counted as listing has not
                // turned ready before its engagement was read.
                let engaged: Vec<String> = by_crowd.lock().unwrap().keys().cloned().collect();
                let statuses = crowd_fleet.clusters();
                let ready =
                    |name: &String| statuses.iter().any(|s| &s.name == name && s.is_ready());
                most = most.max(engaged.iter().filter(|name| !ready(name)).count());
                if engaged.len() == 6 && engaged.iter().all(ready) {
                    return Some(most);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            None
        }
    });
    let leading = tokio::spawn(leader.controllers().run());

    // -- A standby replica engages nothing while the other leads.
    let standby = leader_elected_manager(&alpha, "0").await;
    let by_standby: Engagements = Engagements::default();
    let static_list = StaticClusters::new().cluster("alpha", config_of(&alpha).await);
    let standby_fleet = Fleet::new(&standby, static_list, stamper(BY_DIR, by_standby.clone()));
    standby.controllers().add(standby_fleet.clone().run());
    let standing_by = tokio::spawn(standby.controllers().run());

    // -- Engaged at start: alpha and bravo reconcile, each as itself.
    for (client, cluster) in [(&a, "alpha"), (&b, "bravo")] {
        let took = stamped_within(client, &format!("{cluster}-1"), BY_DIR, cluster, FAST).await;
        assert!(took.is_some(), "at start: {cluster} was not reconciled");
    }
    assert_eq!(names(&dir_fleet), ["alpha", "bravo", "nowhere"]);

    // -- Six clusters at once, two at a time: no more than two make their first lists together
    // (before, all six did), and all six list.
    let most = most_listing.await.unwrap();
    let most = most.expect("crowd: the six clusters did not all list within a minute");
    assert!(
        most <= 2,
        "crowd: {most} clusters made their first lists at once"
    );
    let text = scrape(metrics).await;
    let fleets = [
        &dir_fleet,
        &secret_fleet,
        &capi_fleet,
        &static_fleet,
        &crowd_fleet,
    ];
    let engaged_now: usize = fleets.iter().map(|fleet| fleet.clusters().len()).sum();
    assert_eq!(
        sample(&text, r#"fleet_clusters{state="engaged"}"#),
        Some(engaged_now as f64),
        "crowd: fleet_clusters"
    );
    assert_eq!(
        sample(&text, r#"fleet_clusters{state="waiting"}"#),
        Some(0.0)
    );

    // -- The process's /metrics: each cluster's series with its name, the process's own as they
    // were, and whether each cluster is ready.
    let text = scrape(metrics).await;
    for cluster in ["alpha", "bravo"] {
        assert!(
            stamped_in(&text, cluster) >= 1.0,
            "/metrics: no reconcile counted in {cluster}:\n{text}"
        );
        let requests = format!(r#"rest_client_requests_total{{cluster="{cluster}",code="200""#);
        assert!(
            text.lines().any(|l| l.starts_with(&requests)),
            "/metrics: no request of {cluster}'s client:\n{text}"
        );
        let ready = format!(r#"fleet_cluster_ready{{cluster="{cluster}"}}"#);
        assert_eq!(sample(&text, &ready), Some(1.0), "{ready}:\n{text}");
    }
    let nowhere = r#"fleet_cluster_ready{cluster="nowhere"}"#;
    assert_eq!(sample(&text, nowhere), Some(0.0), "{nowhere}:\n{text}");
    let own = r#"leader_election_master_status{name="fleet-test.example.com"}"#;
    assert_eq!(
        sample(&text, own),
        Some(1.0),
        "the process's own series:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with(r#"rest_client_requests_total{code="200",method="GET",host="#)),
        "the process's own requests, unlabelled:\n{text}"
    );
    let per_cluster = |l: &&str| l.starts_with("process_") || l.starts_with("leader_election");
    let mislabelled: Vec<&str> = series_of(&text, "alpha")
        .into_iter()
        .filter(per_cluster)
        .collect();
    assert!(
        mislabelled.is_empty(),
        "process-wide series per cluster: {mislabelled:?}"
    );
    // The cluster nobody answers for is the fleet's unready member, named, and it alone; the
    // process stays ready (its /readyz is its own cluster's: one member down must not take the
    // pod's webhooks out of their Service).
    let only_nowhere = |ready: &Result<(), String>| {
        ready
            .as_ref()
            .is_err_and(|r| r.contains("nowhere") && !r.contains("bravo"))
    };
    let unready = eventually(FAST, async || only_nowhere(&dir_fleet.ready())).await;
    assert!(
        unready,
        "the fleet's readiness with an unreachable cluster: {:?}",
        dir_fleet.ready()
    );
    assert!(
        leader.ready().is_ok(),
        "one unreachable member made the process unready: {:?}",
        leader.ready()
    );
    std::fs::remove_file(dir.path().join("nowhere.yaml")).unwrap();
    let ready = eventually(FAST, async || dir_fleet.ready().is_ok()).await;
    assert!(
        ready,
        "the fleet not ready once the unreachable cluster went: {:?}",
        dir_fleet.ready()
    );
    let text = scrape(metrics).await;
    let left = series_of(&text, "nowhere");
    assert!(
        left.is_empty(),
        "/metrics: nowhere went, its series stay: {left:?}"
    );
    assert!(
        standby_fleet.clusters().is_empty() && engaged(&by_standby, "alpha") == 0,
        "standby: engaged {:?} without leading",
        names(&standby_fleet)
    );
    assert!(
        standby.ready().is_ok(),
        "a standby is ready: {:?}",
        standby.ready()
    );

    // -- Added while running: charlie's file appears, and charlie reconciles within seconds.
    let scenario = Instant::now();
    copy_kubeconfig(&charlie, dir.path(), "charlie");
    let took = stamped_within(&c, "charlie-1", BY_DIR, "charlie", FAST).await;
    let took = took.expect("added while running: charlie was not reconciled");
    eprintln!("charlie added: reconciled {took:?} after its ConfigMap was created");
    assert!(
        configmap_watches(&c).await > idle.2,
        "charlie engaged without a watch"
    );
    let text = scrape(metrics).await;
    assert!(
        stamped_in(&text, "charlie") >= 1.0,
        "/metrics: charlie's reconciles not counted:\n{text}"
    );
    eprintln!("scenario 'added' took {:?}", scenario.elapsed());

    // -- charlie's file goes: disengaged, and its API server serves none of our watches.
    let scenario = Instant::now();
    let charlie_manager = dir_fleet.cluster("charlie").unwrap().manager().clone();
    std::fs::remove_file(dir.path().join("charlie.kubeconfig")).unwrap();
    let gone = eventually(FAST, async || dir_fleet.cluster("charlie").is_none()).await;
    assert!(gone, "removed: charlie is still engaged");
    assert!(charlie_manager.is_shutting_down());
    let watching = watches_become(&c, idle.2, FAST).await;
    assert_eq!(watching, idle.2, "removed: charlie's watch stays open");
    let text = scrape(metrics).await;
    let left = series_of(&text, "charlie");
    assert!(left.is_empty(), "removed: charlie's series stay: {left:?}");
    assert!(
        stamped_in(&text, "alpha") >= 1.0,
        "removed: alpha's series went too"
    );
    eprintln!("scenario 'removed' took {:?}", scenario.elapsed());

    // -- bravo's API server dies, and bravo is engaged again (its kubeconfig changes) while it is
    // down: charlie, added next, and alpha do not wait for it; bravo stays engaged and reconciles
    // again once its API server is back.
    let scenario = Instant::now();
    bravo.kill(Component::KubeApiserver).await;
    rewrite_kubeconfig(&bravo, dir.path(), "bravo", true);
    let again = eventually(FAST, async || engaged(&by_dir, "bravo") == 2).await;
    assert!(again, "bravo down: not engaged again on its new kubeconfig");
    copy_kubeconfig(&charlie, dir.path(), "charlie");
    for (client, cluster) in [(&c, "charlie"), (&a, "alpha")] {
        let name = format!("{cluster}-while-bravo-is-down");
        let took = stamped_within(client, &name, BY_DIR, cluster, Duration::from_secs(5)).await;
        let took = took.unwrap_or_else(|| panic!("bravo down: {cluster} was held up"));
        eprintln!("bravo down: {cluster} reconciled in {took:?}");
    }
    assert!(
        names(&dir_fleet).contains(&"bravo".into()),
        "bravo down: disengaged"
    );
    let bravo_manager = dir_fleet.cluster("bravo").unwrap().manager().clone();
    bravo.start_component(Component::KubeApiserver).await;
    let timeout = Duration::from_secs(45);
    let took = stamped_within(&b, "bravo-after-restart", BY_DIR, "bravo", timeout).await;
    let took = took.expect("bravo back: not reconciled again");
    eprintln!("bravo back: reconciled {took:?} after its ConfigMap was created");
    assert!(!bravo_manager.is_shutting_down() && engaged(&by_dir, "bravo") == 2);
    eprintln!("scenario 'API server down' took {:?}", scenario.elapsed());

    // -- bravo's kubeconfig changes again: engaged again, the old engagement's watch closed.
    let scenario = Instant::now();
    let watching = watches_become(&b, idle.1 + 1, FAST).await;
    assert_eq!(
        watching,
        idle.1 + 1,
        "bravo: one watch expected while engaged"
    );
    rewrite_kubeconfig(&bravo, dir.path(), "bravo", false);
    let again = eventually(FAST, async || engaged(&by_dir, "bravo") == 3).await;
    assert!(again, "changed kubeconfig: bravo was not engaged again");
    assert!(
        bravo_manager.is_shutting_down(),
        "changed kubeconfig: the old manager runs on"
    );
    let took = stamped_within(&b, "bravo-2", BY_DIR, "bravo", FAST).await;
    assert!(took.is_some(), "changed kubeconfig: bravo not reconciled");
    // The old engagement's series went with it: bravo's are on /metrics once (`scrape` checks).
    let text = scrape(metrics).await;
    assert!(
        stamped_in(&text, "bravo") >= 1.0,
        "changed kubeconfig:\n{text}"
    );
    let watching = watches_become(&b, idle.1 + 1, FAST).await;
    assert_eq!(
        watching,
        idle.1 + 1,
        "changed kubeconfig: bravo's old watch stays open"
    );
    eprintln!("scenario 'changed' took {:?}", scenario.elapsed());

    // -- A Cluster API kubeconfig Secret for charlie engages it; deleting the Secret disengages it.
    let scenario = Instant::now();
    let secrets: Api<Secret> = Api::namespaced(a.clone(), NAMESPACE);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("charlie-kubeconfig".into()),
            labels: Some(BTreeMap::from([(
                CLUSTER_NAME_LABEL.into(),
                "charlie".into(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "value".into(),
            ByteString(embedded_kubeconfig(&charlie)),
        )])),
        ..Default::default()
    };
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let took = stamped_within(&c, "charlie-2", BY_SECRET, "charlie", FAST).await;
    assert!(took.is_some(), "Secret created: charlie was not reconciled");
    assert_eq!(names(&secret_fleet), ["charlie"]);
    // Cluster API labels a cluster's other Secrets with its name too: its CAs, its service account
    // keys, and each Machine's bootstrap data (key `value`, as the kubeconfig's). None is read as
    // the cluster's kubeconfig: a Machine's Secret deleted in a rollout leaves charlie engaged.
    let engagements = engaged(&by_secret, "charlie");
    let manager = secret_fleet.cluster("charlie").unwrap().manager().clone();
    let others = [
        ("charlie-ca", "tls.crt"),
        ("charlie-etcd", "tls.crt"),
        ("charlie-sa", "tls.key"),
        ("charlie-proxy", "tls.crt"),
        ("charlie-md-0-x7k2p", "value"),
    ];
    for (name, key) in others {
        let mut other = secret.clone();
        other.metadata.name = Some(name.into());
        other.type_ = Some("cluster.x-k8s.io/secret".into());
        other.data = Some(BTreeMap::from([(
            key.into(),
            ByteString(b"#cloud-config".to_vec()),
        )]));
        secrets
            .create(&PostParams::default(), &other)
            .await
            .unwrap();
    }
    for name in ["charlie-ca", "charlie-md-0-x7k2p"] {
        secrets
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    let disturbed = eventually(Duration::from_secs(2), async || {
        manager.is_shutting_down() || engaged(&by_secret, "charlie") != engagements
    })
    .await;
    assert!(
        !disturbed,
        "Cluster API's other Secrets: charlie was disengaged or engaged again"
    );
    assert_eq!(names(&secret_fleet), ["charlie"]);
    // One watch of charlie's ConfigMaps for each fleet it is in; on /metrics, charlie once.
    assert_eq!(configmap_watches(&c).await, idle.2 + 2);
    let text = scrape(metrics).await;
    assert!(
        stamped_in(&text, "charlie") >= 1.0,
        "/metrics: charlie in two fleets:\n{text}"
    );

    // Credentials rotated: a token kubeconfig engages charlie again (other credentials); a new
    // token in its place is sent by the running client, with no new engagement, watch or list,
    // and the first token's ServiceAccount deleted (its token refused from then on), charlie
    // still reconciles. Before, every new token engaged the cluster again.
    let with_token = async |account: &str| {
        support::kubectl_apply(
            &charlie,
            &support::binding(account, "cluster-admin", NAMESPACE, account),
            NAMESPACE,
        );
        let kubeconfig = charlie.service_account_kubeconfig(NAMESPACE, account).await;
        let mut rotated = secret.clone();
        rotated.data = Some(BTreeMap::from([(
            "value".into(),
            ByteString(embedded(&kubeconfig)),
        )]));
        rotated.metadata.resource_version = secrets
            .get("charlie-kubeconfig")
            .await
            .unwrap()
            .metadata
            .resource_version;
        secrets
            .replace("charlie-kubeconfig", &PostParams::default(), &rotated)
            .await
            .unwrap();
    };
    with_token("fleet-first").await;
    let again = eventually(FAST, async || {
        engaged(&by_secret, "charlie") == engagements + 1
    })
    .await;
    assert!(again, "token: charlie not engaged again with a token");
    let took = stamped_within(&c, "charlie-token", BY_SECRET, "charlie", FAST).await;
    assert!(took.is_some(), "token: charlie was not reconciled");
    let manager = secret_fleet.cluster("charlie").unwrap().manager().clone();
    let lists = support::requests(&c, "LIST", "configmaps").await;
    with_token("fleet-second").await;
    let serviceaccounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(c.clone(), NAMESPACE);
    tokio::time::sleep(Duration::from_secs(1)).await; // the new token read
    serviceaccounts
        .delete("fleet-first", &DeleteParams::default())
        .await
        .unwrap();
    let took = stamped_within(&c, "charlie-rotated", BY_SECRET, "charlie", FAST).await;
    assert!(
        took.is_some(),
        "rotated: charlie not reconciled with the new token"
    );
    assert!(
        !manager.is_shutting_down() && engaged(&by_secret, "charlie") == engagements + 1,
        "rotated: charlie engaged again for a new token"
    );
    assert_eq!(
        support::requests(&c, "LIST", "configmaps").await,
        lists,
        "rotated: ConfigMaps listed again"
    );
    assert!(
        secret_fleet.ready().is_ok(),
        "rotated: {:?}",
        secret_fleet.ready()
    );

    secrets
        .delete("charlie-kubeconfig", &DeleteParams::default())
        .await
        .unwrap();
    let gone = eventually(FAST, async || secret_fleet.clusters().is_empty()).await;
    assert!(gone, "Secret deleted: charlie is still engaged");
    let watching = watches_become(&c, idle.2 + 1, FAST).await;
    assert_eq!(
        watching,
        idle.2 + 1,
        "Secret deleted: its watch of charlie stays open"
    );
    eprintln!("scenario 'Secret' took {:?}", scenario.elapsed());

    // -- Cluster API: a Cluster for charlie with its kubeconfig Secret engages nothing until it is
    // provisioned with its control plane up; then charlie reconciles as itself, a changed
    // kubeconfig engages it again, and deleting the Secret, or the Cluster, disengages it and
    // closes its watch.
    let scenario = Instant::now();
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster");
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(a.clone(), CAPI_NAMESPACE, &ApiResource::from_gvk(&gvk));
    let capi_secrets: Api<Secret> = Api::namespaced(a.clone(), CAPI_NAMESPACE);
    let capi_secret = |kubeconfig: Vec<u8>| Secret {
        metadata: ObjectMeta {
            name: Some("charlie-kubeconfig".into()),
            labels: Some(BTreeMap::from([(
                CLUSTER_NAME_LABEL.into(),
                "charlie".into(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("value".into(), ByteString(kubeconfig))])),
        ..Default::default()
    };
    let cluster: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": { "name": "charlie" },
        "spec": {},
    }))
    .unwrap();
    let created = PostParams::default();
    clusters.create(&created, &cluster).await.unwrap();
    let provisioning = json!({ "status": { "phase": "Provisioned" } });
    let params = PatchParams::default();
    clusters
        .patch_status("charlie", &params, &Patch::Merge(&provisioning))
        .await
        .unwrap();
    let kubeconfig = embedded_kubeconfig(&charlie);
    let secret = capi_secret(kubeconfig.clone());
    capi_secrets.create(&created, &secret).await.unwrap();
    let early = eventually(Duration::from_secs(1), async || {
        !capi_fleet.clusters().is_empty()
    })
    .await;
    assert!(
        !early,
        "Cluster API: charlie engaged before its control plane is initialized"
    );
    assert_eq!(
        watches_of(&a, "clusters").await,
        1,
        "Cluster API: one watch of Clusters"
    );
    let initialized =
        json!({ "status": { "initialization": { "controlPlaneInitialized": true } } });
    clusters
        .patch_status("charlie", &params, &Patch::Merge(&initialized))
        .await
        .unwrap();
    let took = stamped_within(&c, "charlie-capi", BY_CLUSTER_API, "charlie", FAST).await;
    let took = took.expect("Cluster API: provisioned, charlie was not reconciled");
    eprintln!(
        "Cluster API: charlie provisioned, reconciled {took:?} after its ConfigMap was created"
    );
    assert_eq!(names(&capi_fleet), ["charlie"]);
    let watching = watches_become(&c, idle.2 + 2, FAST).await;
    assert_eq!(
        watching,
        idle.2 + 2,
        "Cluster API: charlie engaged without a watch"
    );

    // Another kubeconfig text for the same cluster: engaged again, the old watch closed.
    let mut text: Value = serde_json::from_slice(&kubeconfig).unwrap();
    text["preferences"] = json!({});
    let changed = capi_secret(serde_json::to_vec_pretty(&text).unwrap());
    capi_secrets
        .replace("charlie-kubeconfig", &created, &changed)
        .await
        .unwrap();
    let again = eventually(FAST, async || engaged(&by_cluster_api, "charlie") == 2).await;
    assert!(
        again,
        "Cluster API: changed kubeconfig, charlie not engaged again"
    );
    let watching = watches_become(&c, idle.2 + 2, FAST).await;
    assert_eq!(
        watching,
        idle.2 + 2,
        "Cluster API: changed kubeconfig, the old watch stays open"
    );

    // The Secret goes: disengaged; back: engaged; the Cluster goes: disengaged.
    capi_secrets
        .delete("charlie-kubeconfig", &DeleteParams::default())
        .await
        .unwrap();
    let gone = eventually(FAST, async || capi_fleet.clusters().is_empty()).await;
    assert!(
        gone,
        "Cluster API: Secret deleted, charlie is still engaged"
    );
    let watching = watches_become(&c, idle.2 + 1, FAST).await;
    assert_eq!(
        watching,
        idle.2 + 1,
        "Cluster API: Secret deleted, its watch stays open"
    );
    capi_secrets.create(&created, &secret).await.unwrap();
    let back = eventually(FAST, async || engaged(&by_cluster_api, "charlie") == 3).await;
    assert!(back, "Cluster API: Secret back, charlie not engaged again");
    clusters
        .delete("charlie", &DeleteParams::default())
        .await
        .unwrap();
    let gone = eventually(FAST, async || capi_fleet.clusters().is_empty()).await;
    assert!(
        gone,
        "Cluster API: Cluster deleted, charlie is still engaged"
    );
    let watching = watches_become(&c, idle.2 + 1, FAST).await;
    assert_eq!(
        watching,
        idle.2 + 1,
        "Cluster API: Cluster deleted, its watch stays open"
    );
    eprintln!("scenario 'Cluster API' took {:?}", scenario.elapsed());

    // -- delta's API server goes silent: connections accepted and never answered, its watch open
    // and carrying nothing. delta is disengaged after the bound and engaged again, on new
    // connections, as soon as it answers. Before, its watch hung on the silent connection until
    // kube's read timeout (almost five minutes), and nothing was reconciled meanwhile.
    let scenario = Instant::now();
    let took = stamped_within(&a, "delta-1", BY_STATIC, "delta", FAST).await;
    assert!(took.is_some(), "silent: delta was not reconciled before");
    proxy.silence(true);
    let disengaged = eventually(SILENCE * 3, async || {
        static_fleet.cluster("delta").is_none()
    })
    .await;
    let while_silent = static_fleet.clusters();
    proxy.silence(false);
    let took = stamped_within(&a, "delta-2", BY_STATIC, "delta", FAST).await;
    let took = took.expect("silent: delta answers again and is not reconciled");
    eprintln!("silent: delta answers again, reconciled {took:?} after its ConfigMap was created");
    assert!(
        disengaged,
        "silent: delta still engaged {:?} after silent",
        SILENCE * 3
    );
    assert!(
        matches!(&while_silent[..], [status] if status.name == "delta" && !status.is_ready()),
        "silent: {while_silent:?}"
    );
    assert!(
        engaged(&by_static, "delta") >= 2,
        "silent: delta not engaged again"
    );
    let ready = eventually(FAST, async || static_fleet.ready().is_ok()).await;
    assert!(ready, "silent: {:?}", static_fleet.ready());
    drop(proxy); // its held connections end, and their watches with them
    eprintln!("scenario 'silent' took {:?}", scenario.elapsed());

    // -- The process shuts down: every cluster is disengaged, and no watch stays open. The standby
    // goes first: the leader gives its Lease up as it stops, and a standby that took it over would
    // engage the clusters again (and open their watches) while the counts below are read.
    standby.shutdown();
    let stopped = tokio::time::timeout(FAST, standing_by).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "standby: {stopped:?}");
    assert!(
        standby_fleet.clusters().is_empty() && engaged(&by_standby, "alpha") == 0,
        "standby: engaged {:?} without leading",
        names(&standby_fleet)
    );
    leader.shutdown();
    let stopped = tokio::time::timeout(FAST, leading).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "leader: {stopped:?}");
    assert!(dir_fleet.clusters().is_empty(), "{:?}", names(&dir_fleet));
    let text = scrape(metrics).await;
    let left: Vec<&str> = text.lines().filter(|l| l.contains("cluster=")).collect();
    assert!(
        left.is_empty(),
        "shut down: clusters' series stay: {left:?}"
    );
    let counted: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("fleet_clusters{") && !l.ends_with(" 0"))
        .collect();
    assert!(
        counted.is_empty(),
        "shut down: clusters still counted: {counted:?}"
    );
    assert_eq!(
        watches_become(&a, idle.0, FAST).await,
        idle.0,
        "alpha: a watch stays open"
    );
    let clusters_watched = watches_of(&a, "clusters").await;
    assert_eq!(
        clusters_watched, 0,
        "alpha: the watch of Clusters stays open"
    );
    assert_eq!(
        watches_become(&b, idle.1, FAST).await,
        idle.1,
        "bravo: a watch stays open"
    );
    assert_eq!(
        watches_become(&c, idle.2, FAST).await,
        idle.2,
        "charlie: a watch stays open"
    );
    eprintln!("whole test: {:?}", started.elapsed());
}
