//! Leader election between manager processes (the example operator) on a real API server: one leader at a
//! time, takeover when the leader is SIGKILLed, a faster handover when it stops cleanly (SIGTERM), and
//! a non-zero exit when the lease is taken away.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use rustbuilder_envtest::TestEnv;
use support::{
    LEASE, ManagerProcess, Scheme, create_source, eventually, free_address, get, lease_holder,
};

/// controller-runtime's defaults, which the manager uses.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const RETRY_PERIOD: Duration = Duration::from_secs(2);
const NAMESPACE: &str = "default";

/// A manager candidate with its probe address and leader-election identity.
struct Candidate {
    process: ManagerProcess,
    probes: std::net::SocketAddr,
    identity: String,
}

async fn candidate(env: &TestEnv, dir: &std::path::Path, name: &str) -> Candidate {
    let probes = free_address();
    let args = [
        "--leader-elect".to_string(),
        format!("--health-probe-bind-address={probes}"),
    ];
    let mut process = ManagerProcess::start(name, dir, env.kubeconfig(), &args);
    let waiting = process
        .wait_for_log("waiting for leadership", Duration::from_secs(60))
        .await;
    let identity = waiting["fields"]["identity"].as_str().unwrap().to_string();
    Candidate {
        process,
        probes,
        identity,
    }
}

async fn holder_becomes(
    client: &kube::Client,
    identity: &str,
    timeout: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    let held = async || lease_holder(client, NAMESPACE).await.as_deref() == Some(identity);
    eventually(timeout, held).await.then(|| start.elapsed())
}

#[tokio::test]
async fn one_leader_at_a_time_with_failover_and_handover() {
    let env = TestEnv::start().await;
    let client = env.client();
    let dir = tempfile::tempdir().unwrap();

    // Two candidates: exactly one leads and reconciles; the other waits, and is ready meanwhile.
    let a = candidate(&env, dir.path(), "a").await;
    let b = candidate(&env, dir.path(), "b").await;
    let leading = async || lease_holder(&client, NAMESPACE).await.is_some();
    assert!(
        eventually(Duration::from_secs(20), leading).await,
        "nobody leads"
    );
    let holder = lease_holder(&client, NAMESPACE).await.unwrap();
    let (leader, follower) = if holder == a.identity { (a, b) } else { (b, a) };
    assert_eq!(
        holder, leader.identity,
        "the lease holder is neither candidate"
    );
    let became = |c: &Candidate| c.process.logged("became leader").len();
    assert_eq!((became(&leader), became(&follower)), (1, 0));
    let follower_ready = get(follower.probes, &Scheme::Http, "/readyz", None).await;
    assert!(
        matches!(follower_ready, Ok((200, _))),
        "follower not ready: {follower_ready:?}"
    );

    create_source(&client, NAMESPACE, "first", &[("a", "1")]).await;
    let reconciled = async || !leader.process.reconciles().is_empty();
    assert!(
        eventually(Duration::from_secs(30), reconciled).await,
        "the leader did not reconcile"
    );
    tokio::time::sleep(RETRY_PERIOD).await;
    assert!(
        follower.process.reconciles().is_empty(),
        "the follower reconciled too"
    );
    // A warm standby: the follower's caches are filled while it waits, ready for a takeover.
    let warm = follower.process.logged("cache synced");
    assert!(!warm.is_empty(), "the follower's caches are cold");

    // SIGKILL the leader: it cannot release the lease, so the follower waits for it to expire.
    leader.process.signal(libc::SIGKILL);
    let failover = holder_becomes(&client, &follower.identity, LEASE_DURATION * 2).await;
    let failover = failover.expect("the follower did not take over after SIGKILL");
    eprintln!("failover after SIGKILL: {failover:?}");
    // Expiry is judged from when the follower last saw the lease change: its watch shows each
    // renewal as it happens, and the last one was up to a retry period before the kill, so between
    // lease duration - retry period and lease duration; plus API latency on a busy machine.
    assert!(
        failover <= LEASE_DURATION + Duration::from_secs(1),
        "failover took {failover:?}"
    );
    drop(leader);
    let mut leader = follower;
    // The new leader lists the sources when it starts: it reconciles `first` itself.
    let reconciled = async || !leader.process.reconciles().is_empty();
    assert!(
        eventually(Duration::from_secs(30), reconciled).await,
        "the new leader did not reconcile"
    );

    // SIGTERM the leader: it releases the lease, and the next candidate, watching it, takes over at
    // once rather than at its next try.
    let mut next = candidate(&env, dir.path(), "c").await;
    let held_by_other = async || {
        !next
            .process
            .logged("the lease is held by another process")
            .is_empty()
    };
    assert!(eventually(Duration::from_secs(10), held_by_other).await);
    leader.process.signal(libc::SIGTERM);
    let handover = holder_becomes(&client, &next.identity, LEASE_DURATION * 2).await;
    let handover = handover.expect("no handover after SIGTERM");
    eprintln!("handover after SIGTERM: {handover:?}");
    assert!(
        handover < LEASE_DURATION,
        "handover took {handover:?}: the lease was not released"
    );
    assert!(
        handover < RETRY_PERIOD,
        "handover took {handover:?}: the candidate waited for its next try"
    );
    let exited = leader.process.wait_exit(Duration::from_secs(10)).await;
    assert!(
        exited.is_some_and(|s| s.success()),
        "{exited:?}:\n{}",
        leader.process.log_text()
    );
    assert_eq!(leader.process.logged("released the lease").len(), 1);
    next.process
        .wait_for_log("controllers started", Duration::from_secs(10))
        .await;

    // Someone else takes the lease (as after a long network partition): the leader exits non-zero.
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let mut lease = leases.get(LEASE).await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some("intruder".into());
    spec.renew_time = Some(MicroTime(Timestamp::now()));
    spec.lease_duration_seconds = Some(3600);
    leases
        .replace(LEASE, &PostParams::default(), &lease)
        .await
        .unwrap();
    let exited = next.process.wait_exit(RETRY_PERIOD * 3).await;
    assert!(
        exited.is_some_and(|s| !s.success()),
        "the leader did not exit non-zero after losing the lease ({exited:?}):\n{}",
        next.process.log_text()
    );
    assert!(
        !next
            .process
            .logged("another process took the lease")
            .is_empty()
    );
}
