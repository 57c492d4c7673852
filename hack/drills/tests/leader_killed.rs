//! Drill: two replicas of the operator run with `--leader-elect`, as a Deployment with two replicas
//! would run them. The leader is SIGKILLed in the middle of a wave: it cannot release the Lease, so the
//! standby must wait for the Lease to expire (15 s without renewal), take it over, and finish the wave.
//! Before that, the standby must not have reconciled anything, but its caches must be filled (a warm
//! standby), so that it reconciles the moment it leads.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use support::{DRILL_BUDGET, Drill, NAMESPACE, Operator, objects, scaled};

/// The Lease named by testdata/project's `main.rs`, in `POD_NAMESPACE`.
const LEASE: &str = "project.example.com";
/// What the runtime logs when it takes the Lease, and when it waits for it.
const LEADING: &str = "became leader";
const WAITING: &str = "waiting for leadership";
/// What the runtime logs when a cache holds its first list, and after each reconcile (at debug).
const SYNCED: &str = "cache synced";
const RECONCILED: &str = "reconciled controller=";
/// How long the standby may take to take over: the Lease lasts 15 s after its last renewal (renewed
/// every 2 s), plus one retry period of the standby.
const TAKEOVER_BUDGET: Duration = Duration::from_secs(25);

#[tokio::test]
async fn the_leader_is_killed_mid_wave_and_the_standby_takes_over() {
    let objects = objects(300);
    tokio::time::timeout(scaled(DRILL_BUDGET, objects), drill(objects))
        .await
        .expect("the drill took longer than its budget");
}

/// The Lease's holder and how often it changed hands.
async fn lease(drill: &Drill) -> (Option<String>, Option<i32>) {
    let leases: Api<Lease> = Api::namespaced(drill.client(), NAMESPACE);
    let spec = leases.get(LEASE).await.unwrap().spec.unwrap_or_default();
    (spec.holder_identity, spec.lease_transitions)
}

async fn drill(objects: usize) {
    let mut drill = Drill::start().await;
    let kubeconfig = drill.env.kubeconfig().to_owned();
    // Two replicas instead of the single operator (no object exists yet): the first one leads.
    drill.operator = Operator::launch(&kubeconfig, "replica-a", &["--leader-elect"]);
    drill
        .operator
        .wait_for_log(LEADING, Duration::from_secs(30))
        .await;
    let mut standby = Operator::launch(&kubeconfig, "replica-b", &["--leader-elect"]);
    standby.wait_for_log(WAITING, Duration::from_secs(30)).await;
    let (first_holder, _) = lease(&drill).await;

    drill.create_wave(objects).await;
    drill.wait_for_deployments(objects / 3).await;
    let at_fault = drill.progress(objects).await;

    let killed = Instant::now();
    let status = drill.operator.kill();
    assert_eq!(status.signal(), Some(9), "{status:?}");
    standby.wait_for_log(LEADING, TAKEOVER_BUDGET).await;
    let took_over = killed.elapsed();
    standby
        .wait_for_log(RECONCILED, Duration::from_secs(10))
        .await;
    let first_reconcile = killed.elapsed();
    // The standby did nothing before it led: its first `reconciled` line comes after `became leader`.
    let log = standby.log_text();
    let (before, _) = log.split_once(LEADING).unwrap();
    assert!(
        !before.contains(RECONCILED),
        "the standby reconciled before it held the Lease:\n{before}"
    );
    assert!(
        before.contains(SYNCED),
        "the standby's caches were not filled before it led:\n{before}"
    );
    let (holder, transitions) = lease(&drill).await;
    assert_ne!(holder, first_holder, "the Lease did not change hands");
    assert_eq!(transitions, Some(1), "Lease transitions");

    // From here on failures show the new leader's log.
    std::mem::swap(&mut drill.operator, &mut standby);
    let recovery = drill.wait_converged(objects).await;
    let total = killed.elapsed();
    let status = drill.operator.exited();
    assert!(
        status.is_none(),
        "the new leader exited ({status:?}); {}",
        drill.operator.tail()
    );
    eprintln!(
        "drill leader-killed: {objects} objects; at the kill {} Deployments, {} converged; the \
         standby led {took_over:.1?} after the kill and reconciled {first_reconcile:.1?} after it; \
         converged {total:.1?} after the kill ({recovery:.1?} after the takeover)",
        at_fault.0, at_fault.1
    );
}
