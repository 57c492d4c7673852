//! What one engaged cluster costs a fleet: memory, open sockets, watches on its API server, and the
//! time from its announcement until its caches have synced. Run by `python3 bench/bench.py fleet`,
//! or directly (the release build measures what an operator would ship):
//!
//! ```text
//! KUBEBUILDER_ASSETS=… cargo run --release -p rustbuilder-runtime --example fleet_cost -- 10
//! ```
//!
//! It starts N control planes (etcd and kube-apiserver each), then a fleet in this process whose
//! engage function adds one controller of ConfigMaps selected by a label no object has (a cluster
//! with no objects), and engages one cluster, then the other N-1 at once, then disengages them all;
//! then engages and disengages them all a few more times, to see whether memory comes back.
//! Each cluster has its own control plane, so every watch and connection counted is a real one.
//!
//! The control planes are child processes; this process holds only their handles, so the memory
//! figures are the operator's, taken as differences between the steps. Prints one JSON object.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::channel::mpsc;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube::{Api, Client};
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::Manager;
use rustbuilder_runtime::fleet::{Announcement, Cluster, Fleet};
use serde_json::{Value, json};

/// No object carries this label: each cluster's cache lists nothing and watches.
const NO_OBJECT_LABEL: &str = "fleet-cost.example.com/none";

/// How long to let a step's allocations and connections settle before reading the figures.
const SETTLE: Duration = Duration::from_secs(2);

/// How many control planes start at once (two cores are slow to start many).
const START_BATCH: usize = 3;

/// How many more rounds engage and disengage every cluster, to tell a leak from the allocator's
/// reserve.
const CYCLES: usize = 3;

async fn reconcile(_: std::sync::Arc<ConfigMap>, _: std::sync::Arc<()>) -> kube::Result<Action> {
    Ok(Action::await_change())
}

fn engage(cluster: &Cluster) {
    let manager = cluster.manager();
    let controller = manager
        .controller(Api::<ConfigMap>::all(cluster.client()), "configmap")
        .watcher_config(watcher::Config::default().labels(NO_OBJECT_LABEL))
        .run(reconcile, std::sync::Arc::new(()));
    manager.controllers().add(controller);
}

/// A field of `/proc/self/status` in KiB (or a count).
fn status_field(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find_map(|l| l.strip_prefix(key));
    let value = line.map(|v| v.trim().trim_end_matches("kB").trim());
    value.and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// This process's memory (`RssAnon`, `RssFile`, in KiB; `RssAnon` again once the allocator has
/// handed its free memory back: what is in use), open file descriptors and sockets.
fn process_figures() -> Value {
    let kib = status_field;
    let rss_anon = kib("RssAnon:");
    trim_heap();
    let links: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .map(|dir| dir.flatten().collect::<Vec<_>>())
        .unwrap_or_default()
        .iter()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .map(|link| link.display().to_string())
        .collect();
    json!({
        "rss_anon_kib": rss_anon,
        "rss_anon_in_use_kib": kib("RssAnon:"),
        "rss_file_kib": kib("RssFile:"),
        "threads": kib("Threads:"),
        "fds": links.len(),
        "sockets": links.iter().filter(|l| l.starts_with("socket:")).count(),
    })
}

/// The WATCH requests an API server serves now (`apiserver_longrunning_requests`).
async fn watches(client: &Client) -> u64 {
    let request = kube::core::Request::new("").get("metrics", &Default::default());
    let Ok(text) = client.request_text(request.expect("a GET")).await else {
        return 0;
    };
    let samples = text
        .lines()
        .filter_map(|line| line.strip_prefix("apiserver_longrunning_requests{"))
        .filter(|line| line.contains(r#"verb="WATCH""#))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok());
    samples.sum::<f64>() as u64
}

/// The WATCH requests each API server serves now.
async fn all_watches(servers: &[Client]) -> Vec<u64> {
    futures::future::join_all(servers.iter().map(watches)).await
}

async fn config_of(env: &TestEnv) -> kube::Config {
    let kubeconfig = Kubeconfig::read_from(env.kubeconfig()).expect("the env's kubeconfig");
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a client configuration")
}

/// Whether the cluster `name` has had its first list answered: a `GET` answered 200 in its
/// `rest_client_requests_total` (the list comes first; the watch counts once it has started).
fn listed(fleet: &Fleet, name: &str) -> bool {
    let Some(cluster) = fleet.cluster(name) else {
        return false;
    };
    let metrics = cluster.manager().metrics().encode();
    metrics
        .lines()
        .any(|line| line.starts_with(r#"rest_client_requests_total{code="200",method="GET""#))
}

/// Milliseconds from the announcements to each cluster's first list answered, and to its
/// readiness (which looks at its caches every 200 ms).
#[derive(Default)]
struct Engaged {
    listed: BTreeMap<String, u128>,
    ready: BTreeMap<String, u128>,
}

/// Announces `clusters` and waits until each is ready.
async fn engage_and_time(
    fleet: &Fleet,
    announce: &mpsc::UnboundedSender<Announcement>,
    clusters: &[(String, kube::Config)],
) -> Engaged {
    let started = Instant::now();
    for (name, config) in clusters {
        let engage = Announcement::Engage {
            name: name.clone(),
            config: config.clone(),
        };
        announce.unbounded_send(engage).expect("the fleet runs");
    }
    let mut engaged = Engaged::default();
    while engaged.ready.len() < clusters.len() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "not synced after 2 minutes: {:?}",
            fleet.ready()
        );
        for (name, _) in clusters {
            if !engaged.listed.contains_key(name) && listed(fleet, name) {
                engaged
                    .listed
                    .insert(name.clone(), started.elapsed().as_millis());
            }
        }
        for status in fleet.clusters() {
            if status.is_ready() && clusters.iter().any(|(name, _)| *name == status.name) {
                engaged
                    .ready
                    .entry(status.name)
                    .or_insert_with(|| started.elapsed().as_millis());
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    engaged
}

/// Disengages `clusters` and waits until their API servers serve none of their watches; how long
/// that took, in milliseconds.
async fn disengage_all(
    servers: &[Client],
    announce: &mpsc::UnboundedSender<Announcement>,
    clusters: &[(String, kube::Config)],
    idle_watches: &[u64],
) -> u128 {
    let stopping = Instant::now();
    for (name, _) in clusters {
        let disengage = Announcement::Disengage { name: name.clone() };
        announce.unbounded_send(disengage).expect("the fleet runs");
    }
    while all_watches(servers).await != idle_watches {
        assert!(
            stopping.elapsed() < Duration::from_secs(60),
            "watches stay open"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stopping.elapsed().as_millis()
}

/// Asks glibc to hand its free memory back to the system, so that `RssAnon` shows what is in use.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    // SAFETY: malloc_trim only releases free memory of the allocator; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}

#[tokio::main]
async fn main() {
    let count: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("the number of clusters"))
        .unwrap_or(10);
    assert!(count >= 2, "at least two clusters");

    let started = Instant::now();
    let mut envs = Vec::new();
    while envs.len() < count {
        let batch = START_BATCH.min(count - envs.len());
        envs.extend(futures::future::join_all((0..batch).map(|_| TestEnv::start())).await);
    }
    let control_planes_s = started.elapsed().as_secs_f64();
    let mut clusters = Vec::new();
    for (i, env) in envs.iter().enumerate() {
        clusters.push((format!("c{i:02}"), config_of(env).await));
    }
    // The clients that count watches, made once: the figures are the fleet's allocations.
    let servers: Vec<Client> = envs.iter().map(TestEnv::client).collect();
    let idle_watches = all_watches(&servers).await;

    // The process manager, connected to the first control plane, runs the fleet.
    let process = Manager::new("fleet-cost", envs[0].client());
    let (announce, announcements) = mpsc::unbounded();
    let fleet = Fleet::new(&process, announcements, engage);
    process.controllers().add(fleet.clone().run());
    let running = tokio::spawn(process.controllers().run());
    tokio::time::sleep(SETTLE).await;
    let before = process_figures();

    let first = engage_and_time(&fleet, &announce, &clusters[..1]).await;
    tokio::time::sleep(SETTLE).await;
    let one = process_figures();
    let one_watches = all_watches(&servers).await;

    let rest = engage_and_time(&fleet, &announce, &clusters[1..]).await;
    tokio::time::sleep(SETTLE).await;
    let all = process_figures();
    let all_watches_now = all_watches(&servers).await;
    let encoding = Instant::now();
    let metrics = process.metrics().encode();
    let encode_ms = encoding.elapsed().as_secs_f64() * 1000.0;

    let watches_closed_ms = disengage_all(&servers, &announce, &clusters, &idle_watches).await;
    tokio::time::sleep(SETTLE).await;
    let after = process_figures();

    // Engaged and disengaged again and again: memory that grows with each round would be a leak;
    // memory the allocator keeps for the next round levels off.
    let mut rounds = Vec::new();
    for _ in 0..CYCLES {
        engage_and_time(&fleet, &announce, &clusters).await;
        tokio::time::sleep(SETTLE).await;
        disengage_all(&servers, &announce, &clusters, &idle_watches).await;
        tokio::time::sleep(SETTLE).await;
        rounds.push(process_figures());
    }
    process.shutdown();
    let _ = running.await;

    let opened = |now: &[u64]| -> Vec<u64> {
        now.iter()
            .zip(&idle_watches)
            .map(|(now, idle)| now.saturating_sub(*idle))
            .collect()
    };
    let report = json!({
        "clusters": count,
        "control_planes_started_s": control_planes_s,
        "process": {
            "before": before,
            "one": one,
            "all": all,
            "after_disengaging_all": after,
            "after_each_further_round": rounds,
        },
        "watches_opened": { "one": opened(&one_watches), "all": opened(&all_watches_now) },
        "engage_to_listed_ms": { "first": first.listed, "rest_at_once": rest.listed },
        "engage_to_ready_ms": { "first": first.ready, "rest_at_once": rest.ready },
        "metrics": { "bytes": metrics.len(), "encode_ms": encode_ms },
        "watches_closed_after_disengaging_ms": watches_closed_ms,
    });
    println!("{report:#}");
}
