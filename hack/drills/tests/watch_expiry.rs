//! Drill: the operator's watches expire. The operator reaches kube-apiserver through a relay that the
//! drill cuts in the middle of a wave (a network partition: every connection dropped, new ones
//! refused). While it is cut off, objects change (resized, deleted, created) and etcd compacts its
//! history past everything the operator has seen. When the relay lets it through again, its watches
//! resume from compacted revisions and get 410 Gone: it must relist, and converge with no change lost.
//!
//! kube-apiserver runs without its watch cache (`--watch-cache=false`): watches are then served by
//! etcd, whose compacted history makes them expire, and the API server compacts etcd every 2 s
//! (`--etcd-compaction-interval`) instead of every 5 min. With the watch cache, expiry depends on how
//! many events the cache holds instead.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use project::api::v1alpha1::Memcached;
use rustbuilder_envtest::Component;
use serde_json::{Value, json};
use support::knobs::add_flags;
use support::{DRILL_BUDGET, Drill, NAMESPACE, Operator};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const OBJECTS: usize = 150;
/// While the operator is cut off: every 3rd object changes size, the last `DELETED` go, `ADDED` new
/// ones come.
const DELETED: usize = 20;
const ADDED: usize = 20;
/// How long etcd may take to compact past what the operator has seen.
const COMPACTION_BUDGET: Duration = Duration::from_secs(30);
/// What the operator logs for a watch that ended with 410 Gone: the API server's reason.
const EXPIRED: &str = "Expired";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_expire_while_the_operator_is_cut_off_and_it_relists() {
    tokio::time::timeout(DRILL_BUDGET, drill())
        .await
        .expect("the drill took longer than its budget");
}

/// A TCP relay to kube-apiserver that can partition its clients from it.
struct Relay {
    port: u16,
    cut: watch::Sender<bool>,
}

impl Relay {
    async fn start(upstream: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cut, _) = watch::channel(false);
        let cuts = cut.subscribe();
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let mut cut = cuts.clone();
                if *cut.borrow() {
                    continue; // closed at once: the API is unreachable
                }
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        Relay { port, cut }
    }

    /// Drops every connection and refuses new ones until [`heal`](Self::heal).
    fn cut(&self) {
        self.cut.send_replace(true);
    }

    fn heal(&self) {
        self.cut.send_replace(false);
    }
}

/// A copy of `kubeconfig` whose server is the relay on port `relay`.
fn relayed(kubeconfig: &Path, relay: u16) -> PathBuf {
    let mut config: Value = serde_json::from_slice(&std::fs::read(kubeconfig).unwrap()).unwrap();
    let server = &mut config["clusters"][0]["cluster"]["server"];
    *server = json!(format!("https://127.0.0.1:{relay}"));
    let path = kubeconfig.with_file_name("relayed.kubeconfig");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// The API server's address, from the kubeconfig.
fn apiserver(kubeconfig: &Path) -> SocketAddr {
    let config: Value = serde_json::from_slice(&std::fs::read(kubeconfig).unwrap()).unwrap();
    let server = config["clusters"][0]["cluster"]["server"].as_str().unwrap();
    server.trim_start_matches("https://").parse().unwrap()
}

/// Waits until a watch from `version` fails with 410 Gone: etcd has compacted past it.
async fn wait_expired(objects: &Api<Memcached>, version: &str) -> Duration {
    let since = Instant::now();
    loop {
        let first = match objects.watch(&WatchParams::default(), version).await {
            Ok(stream) => stream.boxed().next().await,
            Err(error) => Some(Err(error)),
        };
        match first {
            Some(Ok(WatchEvent::Error(status))) if status.code == 410 => return since.elapsed(),
            Some(Err(kube::Error::Api(status))) if status.code == 410 => return since.elapsed(),
            other => assert!(
                since.elapsed() < COMPACTION_BUDGET,
                "a watch from resourceVersion {version} still works after {COMPACTION_BUDGET:?}: \
                 {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Log lines of watches that ended with 410 Gone, as (lines of the controller's watch of
/// `Memcached`s, lines of the Deployment cache's watch).
fn expired_watches(log: &str) -> (usize, usize) {
    let expired = log.lines().filter(|line| line.contains(EXPIRED));
    let (mut objects, mut deployments) = (0, 0);
    // The runtime's shared caches log each failed watch with its kind.
    for line in expired.filter(|line| line.contains("watch failed")) {
        if line.contains("kind=\"Deployment\"") || line.contains("kind=Deployment") {
            deployments += 1;
        } else if line.contains("kind=\"Memcached\"") || line.contains("kind=Memcached") {
            objects += 1;
        }
    }
    (objects, deployments)
}

async fn drill() {
    add_flags(
        Component::KubeApiserver,
        "--watch-cache=false --etcd-compaction-interval=2s",
    );
    let mut drill = Drill::start().await;
    let kubeconfig = drill.env.kubeconfig().to_owned();
    let relay = Relay::start(apiserver(&kubeconfig)).await;
    // The operator behind the relay instead of the direct one (no object exists yet).
    let through_relay = relayed(&kubeconfig, relay.port);
    drill.operator = Operator::launch(&through_relay, "operator-relayed", &[]);

    drill.create_wave(OBJECTS).await;
    drill.wait_for_deployments(OBJECTS / 2).await;
    let at_fault = drill.progress(OBJECTS).await;

    // Everything the operator can have seen is at most this revision.
    let objects: Api<Memcached> = Api::namespaced(drill.client(), NAMESPACE);
    let seen = objects.list(&Default::default()).await.unwrap();
    let seen = seen.metadata.resource_version.unwrap();
    let cut_at = Instant::now();
    relay.cut();

    // Changes the operator's watches would have delivered.
    let resized: Vec<usize> = (0..OBJECTS - DELETED).step_by(3).collect();
    let params = PatchParams::default();
    futures::stream::iter(&resized)
        .for_each_concurrent(16, |&i| {
            let (objects, params) = (&objects, &params);
            async move {
                let size = json!({ "spec": { "size": 3 - support::size(i) } });
                let patch = Patch::Merge(&size);
                objects
                    .patch(&support::name(i), params, &patch)
                    .await
                    .unwrap();
            }
        })
        .await;
    for i in OBJECTS - DELETED..OBJECTS {
        support::delete(&objects, &support::name(i)).await;
    }
    for i in OBJECTS..OBJECTS + ADDED {
        let name = support::name(i);
        support::create(&objects, &name, support::size(i))
            .await
            .unwrap();
    }
    // The proof that history is gone: a watch from what the operator saw gets 410 Gone.
    let compacted = wait_expired(&objects, &seen).await;
    relay.heal();
    let partition = cut_at.elapsed();

    let expected = OBJECTS - DELETED + ADDED;
    let recovery = drill.wait_converged(expected).await;
    // The operator met the same: both of its watches expired, and it relisted (or it would not have
    // converged: the changes above reached it through no watch event).
    let log = drill.operator.log_text();
    let (object_watch, deployment_watch) = expired_watches(&log);
    assert!(
        object_watch > 0 && deployment_watch > 0,
        "the operator logged {object_watch} expired watches of Memcacheds and {deployment_watch} \
         of Deployments; {}",
        drill.operator.tail()
    );
    eprintln!(
        "drill watch-expiry: {OBJECTS} objects; at the cut {} Deployments, {} converged; cut off \
         {partition:.1?} ({} resized, {DELETED} deleted, {ADDED} created; a watch from \
         resourceVersion {seen} expired {compacted:.1?} after the changes); the operator logged \
         410 Gone for {object_watch} Memcached and {deployment_watch} Deployment watches; converged \
         {recovery:.1?} after the relay let it through",
        at_fault.0,
        at_fault.1,
        resized.len()
    );
    let first = log.lines().find(|line| line.contains(EXPIRED));
    eprintln!("the first: {}", first.unwrap_or_default());
}
