//! A fleet sharded by cluster on a real API server: replicas started with `--sharding` each engage
//! the clusters whose name hashes into the ranges their shard holds. Two replicas split four
//! clusters; one stops renewing its Lease (as a paused or killed process) and the other takes its
//! clusters once the Lease expires; a third joins and takes some from a live one. All along, no
//! cluster runs its controllers in two replicas at once: each engagement records itself until its
//! controllers have stopped, and the engaged sets are sampled throughout.
//!
//! The four clusters are one control plane under four names (the fleet tells clusters apart by name
//! only), which also holds the shard Leases: a control plane less to start.
//!
//! The drill runs the example manager as processes (`--fleet --sharding`) over clusters of their
//! own: one replica is SIGKILLed, and the other takes its cluster once its Lease has expired, never
//! before, while the cluster it had goes on being served.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::Manager;
use rustbuilder_runtime::fleet::{Cluster, Fleet, StaticClusters, placement};
use rustbuilder_runtime::manager::ManagerArgs;
use rustbuilder_runtime::manager::leader::Timing;
use rustbuilder_runtime::shard::{GROUP_LABEL, Ranges};
use support::{ManagerProcess, copy_of, create_source, eventually};

const MANAGER: &str = "fleet-shard-test";

/// Short enough for a test, in whole seconds as Leases count them.
const TIMING: Timing = Timing {
    lease_duration: Duration::from_secs(3),
    renew_deadline: Duration::from_secs(2),
    retry_period: Duration::from_millis(500),
};

/// How long a disengaged cluster's controllers take to stop: a reconcile still in flight. Longer
/// than a handover takes once a range is released, so that a replica giving a cluster up too early
/// shows as an overlap; and longer than a lease duration, so that a stalled replica's cluster
/// whose reconciles were not cancelled at its fence shows too.
const LINGER: Duration = Duration::from_secs(4);

const SETTLE: Duration = Duration::from_secs(15);

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    manager: ManagerArgs,
}

/// Which replicas run each cluster's controllers now, and every time two did at once.
#[derive(Default)]
struct Record {
    running: BTreeMap<String, BTreeSet<String>>,
    overlaps: Vec<String>,
}

/// One engagement of `cluster` by `replica`, from the engage function until its controllers have
/// stopped (or were cancelled).
struct Engaged {
    record: Arc<Mutex<Record>>,
    cluster: String,
    replica: String,
}

impl Engaged {
    fn new(record: &Arc<Mutex<Record>>, cluster: &str, replica: &str) -> Self {
        let mut locked = record.lock().unwrap();
        let Record { running, overlaps } = &mut *locked;
        let running = running.entry(cluster.to_string()).or_default();
        if !running.is_empty() {
            let overlap = format!("{cluster}: engaged by {replica} while {running:?} run it");
            overlaps.push(overlap);
        }
        running.insert(replica.to_string());
        Engaged {
            record: record.clone(),
            cluster: cluster.to_string(),
            replica: replica.to_string(),
        }
    }
}

impl Drop for Engaged {
    fn drop(&mut self) {
        let mut locked = self.record.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(running) = locked.running.get_mut(&self.cluster) {
            running.remove(&self.replica);
        }
    }
}

/// The engage function of `replica`: one controller per cluster that runs until the cluster's
/// manager shuts down, then takes [`LINGER`] to finish.
fn engage(record: Arc<Mutex<Record>>, replica: &'static str) -> impl Fn(&Cluster) + Send + Sync {
    move |cluster: &Cluster| {
        let engaged = Engaged::new(&record, cluster.name(), replica);
        let manager = cluster.manager().clone();
        let stopped = manager.shutdown_signal();
        manager.controllers().add(async move {
            let _engaged = engaged;
            stopped.await;
            tokio::time::sleep(LINGER).await;
        });
    }
}

async fn config_of(env: &TestEnv) -> kube::Config {
    let kubeconfig = Kubeconfig::read_from(env.kubeconfig()).unwrap();
    let options = KubeConfigOptions::default();
    kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap()
}

/// A sharded replica named `identity`.
async fn replica(env: &TestEnv, identity: &str) -> Manager {
    let args = Args::try_parse_from([
        MANAGER,
        "--sharding",
        "--leader-election-namespace=default",
        "--health-probe-bind-address=0",
        "--metrics-bind-address=0",
    ])
    .unwrap()
    .manager;
    Manager::builder(MANAGER)
        .identity(identity)
        .lease_timing(TIMING)
        .external_tracing()
        .client_config(config_of(env).await)
        .start(args)
        .await
        .unwrap()
}

/// Runs a fleet of `clusters` in `manager`, recording its engagements as `replica`.
fn run_fleet(
    manager: &Manager,
    clusters: &StaticClusters,
    record: &Arc<Mutex<Record>>,
    replica: &'static str,
) -> (Fleet, tokio::task::JoinHandle<()>) {
    let fleet = Fleet::new(manager, clusters.clone(), engage(record.clone(), replica));
    manager.controllers().add(fleet.clone().run());
    let running = manager.controllers().run();
    let running = tokio::spawn(async move {
        let _ = running.await;
    });
    (fleet, running)
}

/// Fails if a cluster ran in two replicas at once, or was in two engaged sets at once, so far.
fn assert_no_overlap(record: &Mutex<Record>, sampled: &Mutex<Vec<String>>, when: &str) {
    let overlaps = record.lock().unwrap().overlaps.clone();
    assert!(
        overlaps.is_empty(),
        "{when}: controllers ran twice: {overlaps:?}"
    );
    let sampled = sampled.lock().unwrap().clone();
    assert!(sampled.is_empty(), "{when}: engaged twice: {sampled:?}");
}

fn names(fleet: &Fleet) -> BTreeSet<String> {
    fleet.clusters().into_iter().map(|c| c.name).collect()
}

/// The clusters among `all` whose name hashes into `member`'s part when `members` share them.
fn part(all: &[String], members: &[&str], member: &str) -> BTreeSet<String> {
    let ranges = Ranges::assigned(members, member);
    let within = all.iter().filter(|name| ranges.contains(placement(name)));
    within.cloned().collect()
}

/// Four cluster names: one for each way two sharings can place it, first between `one` and
/// `two`, then between `one` and `three`; so each replica starts with some, and `three` takes one
/// of `one`'s while `one` keeps another.
fn cluster_names() -> Vec<String> {
    let owner = |members: &[&str], name: &str| {
        let owners = members.iter().copied();
        let mut owners = owners.filter(|m| Ranges::assigned(members, m).contains(placement(name)));
        owners.next().unwrap().to_string()
    };
    let mut picked = BTreeMap::new();
    for i in 0..10_000 {
        let name = format!("member-{i}");
        let placed = (
            owner(&["one", "two"], &name),
            owner(&["one", "three"], &name),
        );
        picked.entry(placed).or_insert(name);
        if picked.len() == 4 {
            break;
        }
    }
    assert_eq!(picked.len(), 4, "names for every placement: {picked:?}");
    picked.into_values().collect()
}

#[tokio::test]
async fn replicas_share_the_clusters_and_hand_them_over_without_overlap() {
    if let Ok(filter) = std::env::var("TEST_LOG") {
        let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
    }
    let env = TestEnv::start().await;
    let started = Instant::now();
    let all = cluster_names();
    let all_set: BTreeSet<String> = all.iter().cloned().collect();
    let config = config_of(&env).await;
    let clusters: StaticClusters = all
        .iter()
        .map(|name| (name.clone(), config.clone()))
        .collect();
    let record = Arc::new(Mutex::new(Record::default()));

    let one = replica(&env, "one").await;
    let two = replica(&env, "two").await;
    let (fleet_one, running_one) = run_fleet(&one, &clusters, &record, "one");
    let (fleet_two, running_two) = run_fleet(&two, &clusters, &record, "two");

    // Sampled all along: no cluster in two replicas' engaged sets at once.
    let fleets = Arc::new(Mutex::new(vec![
        ("one", fleet_one.clone()),
        ("two", fleet_two.clone()),
    ]));
    let sampled = Arc::new(Mutex::new(Vec::<String>::new()));
    let sampler = {
        let (fleets, sampled) = (fleets.clone(), sampled.clone());
        tokio::spawn(async move {
            loop {
                let fleets = fleets.lock().unwrap().clone();
                let mut engaged_by: BTreeMap<String, Vec<&str>> = BTreeMap::new();
                for (replica, fleet) in &fleets {
                    for name in names(fleet) {
                        engaged_by.entry(name).or_default().push(replica);
                    }
                }
                for (name, replicas) in engaged_by.iter().filter(|(_, r)| r.len() > 1) {
                    let overlap = format!("{name} in the engaged sets of {replicas:?}");
                    sampled.lock().unwrap().push(overlap);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };

    // -- Two replicas: each cluster in exactly one, by the hash of its name.
    let (want_one, want_two) = (
        part(&all, &["one", "two"], "one"),
        part(&all, &["one", "two"], "two"),
    );
    let split = eventually(SETTLE, async || {
        names(&fleet_one) == want_one && names(&fleet_two) == want_two
    })
    .await;
    assert!(
        split,
        "two replicas: one engages {:?} (wants {want_one:?}), two {:?} (wants {want_two:?})",
        names(&fleet_one),
        names(&fleet_two)
    );
    assert!(!want_one.is_empty() && !want_two.is_empty());
    assert_eq!(
        want_one.union(&want_two).cloned().collect::<BTreeSet<_>>(),
        all_set,
        "the union is every cluster"
    );
    eprintln!("two replicas split the clusters in {:?}", started.elapsed());

    // -- `two` stops renewing its Lease, as a paused process: its clusters are cancelled at its
    // fence, and `one` takes them once the Lease has expired.
    let stalled = Instant::now();
    two.shard().unwrap().abort();
    let taken = eventually(SETTLE, async || {
        names(&fleet_one) == all_set && names(&fleet_two).is_empty()
    })
    .await;
    assert!(
        taken,
        "after two stalled: one engages {:?}, two {:?}",
        names(&fleet_one),
        names(&fleet_two)
    );
    let took = stalled.elapsed();
    assert_no_overlap(&record, &sampled, "after two stalled");
    // The Lease expires a lease duration after its last renewal, which came at most a retry
    // period (and a request) before the stall.
    assert!(
        took >= TIMING.renew_deadline,
        "one took two's clusters {took:?} after it stalled, before its Lease could expire"
    );
    eprintln!("one took two's clusters {took:?} after two stalled");

    // -- `three` joins: `one` gives some clusters up, each only once its controllers have stopped,
    // and `three` engages them then. First, `two`'s expired Lease is gone (a newcomer would count
    // it live for a lease duration).
    let leases: Api<Lease> = Api::namespaced(env.client(), "default");
    let selector = ListParams::default().labels(GROUP_LABEL);
    let one_lease = eventually(SETTLE, async || {
        leases
            .list(&selector)
            .await
            .is_ok_and(|l| l.items.len() == 1)
    })
    .await;
    assert!(one_lease, "two's expired Lease was not deleted");
    let joined = Instant::now();
    let three = replica(&env, "three").await;
    let (fleet_three, running_three) = run_fleet(&three, &clusters, &record, "three");
    fleets.lock().unwrap().push(("three", fleet_three.clone()));
    let want_one = part(&all, &["one", "three"], "one");
    let want_three = part(&all, &["one", "three"], "three");
    let moved = eventually(SETTLE, async || {
        names(&fleet_one) == want_one && names(&fleet_three) == want_three
    })
    .await;
    assert!(
        moved,
        "after three joined: one engages {:?} (wants {want_one:?}), three {:?} (wants {want_three:?})",
        names(&fleet_one),
        names(&fleet_three)
    );
    let took = joined.elapsed();
    assert_no_overlap(&record, &sampled, "after three joined");
    assert!(
        took >= LINGER,
        "three engaged one's cluster {took:?} after joining, before one's controllers could stop"
    );
    eprintln!("three took its clusters from one in {took:?}");

    sampler.abort();

    for manager in [&one, &two, &three] {
        manager.shutdown();
    }
    for running in [running_one, running_two, running_three] {
        let stopped = tokio::time::timeout(SETTLE, running).await;
        assert!(stopped.is_ok(), "a replica did not stop");
    }
    eprintln!("done in {:?}", started.elapsed());
}

/// The holders of the shard Leases in `env`: the replicas the shard knows.
async fn shard_members(env: &TestEnv) -> Vec<String> {
    let leases: Api<Lease> = Api::namespaced(env.client(), "default");
    let selector = ListParams::default().labels(GROUP_LABEL);
    let list = leases.list(&selector).await.expect("Leases listed");
    let holders = list
        .items
        .into_iter()
        .filter_map(|l| l.spec?.holder_identity);
    holders.collect()
}

/// When `replica` logged `message` about `cluster` (in a field, or in its span), each time.
fn logged_about(replica: &ManagerProcess, message: &str, cluster: &str) -> Vec<Timestamp> {
    let about = |line: &serde_json::Value| {
        line["fields"]["cluster"] == cluster || line["span"]["cluster"] == cluster
    };
    let lines = replica.logged(message).into_iter().filter(about);
    let time = |line: serde_json::Value| line["timestamp"].as_str()?.parse().ok();
    lines.filter_map(time).collect()
}

async fn eventually_copied(client: &kube::Client, source: &str, what: &str) -> Instant {
    let copied = async || copy_of(client, "default", source).await.is_some();
    assert!(eventually(Duration::from_secs(60), copied).await, "{what}");
    Instant::now()
}

/// The drill: two replicas of the example manager, processes run with `--fleet --sharding`, share
/// two clusters (each its own control plane; a third holds the Leases) named so that each replica
/// holds one. The one holding `doomed` is SIGKILLed: no clean release, so its Lease must expire
/// before the other engages `doomed`, and meanwhile the other's own cluster is served as before.
#[tokio::test]
async fn a_replica_killed_while_sharded_by_cluster_hands_its_cluster_over_once_its_lease_expires() {
    let (host, east, west) = tokio::join!(TestEnv::start(), TestEnv::start(), TestEnv::start());
    let dir = tempfile::tempdir().unwrap();
    let clusters = dir.path().join("clusters");
    std::fs::create_dir(&clusters).unwrap();
    let args: Vec<String> = [
        "--fleet",
        "--sharding",
        "--leader-election-namespace=default",
        "--health-probe-bind-address=0",
        "--cluster-provider=kubeconfig-dir",
    ]
    .map(String::from)
    .into_iter()
    .chain([format!("--cluster-kubeconfig-dir={}", clusters.display())])
    .collect();
    let mut doomed = ManagerProcess::start("doomed", dir.path(), host.kubeconfig(), &args);
    doomed.wait_for_log("fleet started", SETTLE * 4).await;
    let mut survivor = ManagerProcess::start("survivor", dir.path(), host.kubeconfig(), &args);
    survivor.wait_for_log("fleet started", SETTLE * 4).await;
    let mut members = Vec::new();
    let both = eventually(SETTLE, async || {
        members = shard_members(&host).await;
        members.len() == 2
    })
    .await;
    assert!(both, "two shard members, found {members:?}");
    // Each replica holds the clusters whose name hashes into its part: a name for each.
    let held_by = |replica: &ManagerProcess| {
        let joined = replica.logged("joining the shard group");
        let identity = joined[0]["fields"]["identity"]
            .as_str()
            .expect("an identity");
        assert!(
            members.iter().any(|m| m == identity),
            "{identity} not in {members:?}"
        );
        (0..10_000)
            .map(|i| format!("member-{i}"))
            .find(|name| Ranges::assigned(&members, identity).contains(placement(name)))
            .expect("a name in each part")
    };
    let (doomed_cluster, kept_cluster) = (held_by(&doomed), held_by(&survivor));
    std::fs::copy(
        east.kubeconfig(),
        clusters.join(format!("{doomed_cluster}.yaml")),
    )
    .unwrap();
    std::fs::copy(
        west.kubeconfig(),
        clusters.join(format!("{kept_cluster}.yaml")),
    )
    .unwrap();

    // Both clusters served, each by its replica.
    create_source(&east.client(), "default", "before", &[("k", "v")]).await;
    create_source(&west.client(), "default", "before", &[("k", "v")]).await;
    eventually_copied(
        &east.client(),
        "before",
        "the doomed replica's cluster served",
    )
    .await;
    eventually_copied(&west.client(), "before", "the survivor's cluster served").await;
    assert!(
        !logged_about(&doomed, "cluster engaged", &doomed_cluster).is_empty(),
        "the doomed replica did not engage {doomed_cluster}:\n{}",
        doomed.log_text()
    );
    let kept_engagements = logged_about(&survivor, "cluster engaged", &kept_cluster).len();

    // SIGKILL: no release; then a change in each cluster.
    doomed.signal(libc::SIGKILL);
    let killed_at = Timestamp::now();
    let killed = Instant::now();
    create_source(&east.client(), "default", "after", &[("k", "v")]).await;
    create_source(&west.client(), "default", "after", &[("k", "v")]).await;
    let kept_served = eventually_copied(&west.client(), "after", "the kept cluster served").await;
    let taken_over = eventually_copied(&east.client(), "after", "the doomed cluster taken").await;

    let taken_at = logged_about(
        &survivor,
        "this replica's cluster now: engaging it",
        &doomed_cluster,
    );
    let Some(taken_at) = taken_at.first() else {
        panic!(
            "the survivor never took {doomed_cluster}:\n{}",
            survivor.log_text()
        );
    };
    let waited = taken_at.duration_since(killed_at);
    // The Lease expires a lease duration after its last renewal, at most a retry period (and a
    // request) before the kill.
    assert!(
        waited >= SignedDuration::from_secs(10),
        "the survivor took {doomed_cluster} {waited:?} after the kill: before the Lease expired"
    );
    assert!(
        kept_served < taken_over,
        "the kept cluster waited for the takeover: served {:?} after the kill, the other {:?}",
        kept_served - killed,
        taken_over - killed
    );
    assert_eq!(
        logged_about(&survivor, "cluster engaged", &kept_cluster).len(),
        kept_engagements,
        "the survivor engaged its own cluster again"
    );
    assert!(
        survivor.wait_exit(Duration::ZERO).await.is_none(),
        "the survivor exited"
    );
    eprintln!(
        "after the kill: the kept cluster served in {:?}, the other taken over in {waited:?} and \
         served in {:?}",
        kept_served - killed,
        taken_over - killed
    );
}
