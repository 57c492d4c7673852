//! Shutdown: on SIGTERM a manager process (the example operator) stops taking work, finishes the
//! reconciles in flight and exits 0 within a pod's grace period; in-process, `Manager::shutdown` lets a
//! reconcile in flight finish before the controllers stop.

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::Manager;
use support::{ManagerProcess, Scheme, create_source, eventually, free_address, get};

/// A typical terminationGracePeriodSeconds.
const GRACE: Duration = Duration::from_secs(10);
const OBJECTS: usize = 20;

#[tokio::test]
async fn sigterm_during_reconciles_exits_zero_within_the_grace_period() {
    let env = TestEnv::start().await;
    let client = env.client();
    let dir = tempfile::tempdir().unwrap();
    let probes = free_address();
    // Each reconcile takes 2 s, 4 at a time: SIGTERM always finds some in flight.
    let args = [
        format!("--health-probe-bind-address={probes}"),
        "--reconcile-delay-ms=2000".into(),
    ];
    let mut manager = ManagerProcess::start("manager", dir.path(), env.kubeconfig(), &args);
    manager
        .wait_for_log("controllers started", Duration::from_secs(60))
        .await;
    let ready = async || {
        matches!(
            get(probes, &Scheme::Http, "/readyz", None).await,
            Ok((200, _))
        )
    };
    assert!(
        eventually(Duration::from_secs(30), ready).await,
        "never ready"
    );

    for i in 0..OBJECTS {
        create_source(&client, "default", &format!("load-{i}"), &[("i", "x")]).await;
    }
    let busy = async || !manager.reconciles().is_empty();
    assert!(
        eventually(Duration::from_secs(30), busy).await,
        "no reconcile"
    );
    manager.signal(libc::SIGTERM);
    let signalled = Instant::now();
    let exited = manager.wait_exit(GRACE).await;
    let stopping = signalled.elapsed();
    assert!(
        exited.is_some_and(|s| s.success()),
        "did not exit 0 within {GRACE:?} ({exited:?}):\n{}",
        manager.log_text()
    );
    assert_eq!(manager.logged("manager stopped").len(), 1);

    // Reconciles that were running when the signal came finished (and were logged) after it.
    let logs = manager.logs();
    let message = |line: &serde_json::Value| line["fields"]["message"].clone();
    let signal_at = logs
        .iter()
        .position(|l| message(l) == "shutting down: finishing in-flight reconciles")
        .expect("the signal was logged");
    let finished_after = logs[signal_at..]
        .iter()
        .filter(|l| message(l) == "reconciled")
        .count();
    let total = manager.reconciled_objects();
    eprintln!(
        "SIGTERM: exited 0 after {stopping:?}; {finished_after} reconciles finished after the \
         signal; {total} of {OBJECTS} objects reconciled in all"
    );
    assert!(finished_after >= 1, "no reconcile finished after SIGTERM");
    assert!(
        total < OBJECTS,
        "every object was reconciled: the test did not stop the manager while busy"
    );
    assert!(
        stopping >= Duration::from_millis(200),
        "did not wait for work in flight"
    );
}

/// A second SIGTERM stops at once: `Controllers::run` returns an error without waiting for the
/// reconciles in flight, and `main` exits with it (the library never exits the process itself).
#[tokio::test]
async fn a_second_sigterm_returns_at_once_with_an_error() {
    let env = TestEnv::start().await;
    let dir = tempfile::tempdir().unwrap();
    let probes = free_address();
    let args = [
        format!("--health-probe-bind-address={probes}"),
        "--reconcile-delay-ms=30000".into(),
    ];
    let mut manager = ManagerProcess::start("manager", dir.path(), env.kubeconfig(), &args);
    let ready = async || {
        matches!(
            get(probes, &Scheme::Http, "/readyz", None).await,
            Ok((200, _))
        )
    };
    assert!(
        eventually(Duration::from_secs(60), ready).await,
        "never ready"
    );
    // Its reconcile starts at once and takes 30 s.
    create_source(&env.client(), "default", "slow", &[("i", "x")]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    manager.signal(libc::SIGTERM);
    manager
        .wait_for_log("shutting down: finishing in-flight reconciles", GRACE)
        .await;
    manager.signal(libc::SIGTERM);
    let exited = manager.wait_exit(Duration::from_secs(5)).await;
    assert!(
        exited.is_some_and(|status| status.code() == Some(1)),
        "did not exit 1 at once on the second signal ({exited:?}):\n{}",
        manager.log_text()
    );
    assert!(
        manager
            .log_text()
            .contains("interrupted by a second signal"),
        "{}",
        manager.log_text()
    );
}

/// What the slow test reconciler shares with the test.
struct Slow {
    started: tokio::sync::mpsc::UnboundedSender<()>,
    finished: AtomicBool,
}

async fn slow_reconcile(_object: Arc<ConfigMap>, slow: Arc<Slow>) -> Result<Action, Infallible> {
    let _ = slow.started.send(());
    tokio::time::sleep(Duration::from_secs(2)).await;
    slow.finished.store(true, Ordering::SeqCst);
    Ok(Action::await_change())
}

#[tokio::test]
async fn shutdown_waits_for_reconciles_in_flight() {
    let env = TestEnv::start().await;
    let manager = Manager::new("slow-manager", env.client());
    let (started, mut reconcile_started) = tokio::sync::mpsc::unbounded_channel();
    let slow = Arc::new(Slow {
        started,
        finished: AtomicBool::new(false),
    });

    let configmaps: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let controller = manager
        .controller(configmaps.clone(), "slow")
        .watcher_config(watcher::Config::default().labels("test=slow"))
        .run(slow_reconcile, slow.clone());
    let controllers = manager.controllers();
    controllers.add(controller);
    assert_eq!(manager.ready(), Err("starting".to_string()));
    let stopped = tokio::spawn(controllers.run());
    let ready = async || manager.ready().is_ok();
    assert!(
        eventually(Duration::from_secs(30), ready).await,
        "{:?}",
        manager.ready()
    );

    let object: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "slow", "labels": { "test": "slow" } }
    }))
    .unwrap();
    configmaps
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), reconcile_started.recv())
        .await
        .expect("the reconcile started");

    let asked = Instant::now();
    manager.shutdown();
    let stopped = tokio::time::timeout(GRACE, stopped)
        .await
        .expect("stopped in time");
    stopped.unwrap().expect("the controllers stopped cleanly");
    assert!(
        slow.finished.load(Ordering::SeqCst),
        "the reconcile in flight was cut short"
    );
    assert!(
        asked.elapsed() >= Duration::from_secs(1),
        "did not wait for the reconcile"
    );
    let metrics = manager.metrics().encode();
    let sample = |series: &str| support::sample(&metrics, series);
    let success = r#"controller_runtime_reconcile_total{controller="slow",result="success"}"#;
    assert_eq!(sample(success), Some(1.0), "{metrics}");
    let active = r#"controller_runtime_active_workers{controller="slow"}"#;
    assert_eq!(sample(active), Some(0.0), "{metrics}");
}

/// A reconcile that hangs: the first attempt of each object never ends, the later ones do at once.
async fn hang_once(_object: Arc<ConfigMap>, hung: Arc<AtomicBool>) -> Result<Action, Infallible> {
    if !hung.swap(true, Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    Ok(Action::await_change())
}

/// A labelled ConfigMap in `default` for the controllers of these tests, which select `test=<label>`.
async fn labelled_configmap(client: &kube::Client, name: &str, label: &str) {
    let object: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "labels": { "test": label } }
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
}

/// A reconcile that never ends does not hold the pod past its grace period: once the graceful
/// shutdown timeout passes, `Controllers::run` stops without it, releases the Lease first (the
/// next leader need not wait for it to expire), and says why.
#[tokio::test]
async fn a_shutdown_stops_without_a_reconcile_that_outlives_its_timeout() {
    let env = TestEnv::start().await;
    let timing = rustbuilder_runtime::manager::leader::Timing::default();
    let manager =
        Manager::candidate_in_namespace("hung", env.client(), "default", "hung", timing).unwrap();
    manager.set_graceful_shutdown_timeout(Duration::from_secs(1));
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let controller = manager
        .controller(configmaps, "hung")
        .watcher_config(watcher::Config::default().labels("test=hung"))
        .run(hang_once, Arc::new(AtomicBool::new(false)));
    let controllers = manager.controllers();
    controllers.add(controller);
    let stopped = tokio::spawn(controllers.run());
    let leading = async || manager.is_leading() && manager.ready().is_ok();
    assert!(
        eventually(Duration::from_secs(30), leading).await,
        "never led"
    );
    labelled_configmap(&env.client(), "hung", "hung").await;
    let working = async || {
        let metrics = manager.metrics().encode();
        support::sample(
            &metrics,
            r#"controller_runtime_active_workers{controller="hung"}"#,
        ) == Some(1.0)
    };
    assert!(
        eventually(Duration::from_secs(30), working).await,
        "no reconcile started"
    );

    let asked = Instant::now();
    manager.shutdown();
    let stopped = tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("still waiting for the hung reconcile 10 s after shutdown began");
    let took = asked.elapsed();
    let error = stopped
        .unwrap()
        .expect_err("a shutdown that dropped a reconcile is no success");
    assert!(
        error.to_string().contains("reconciles still running"),
        "{error}"
    );
    assert!(
        took >= Duration::from_secs(1),
        "did not wait out the timeout: {took:?}"
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.client(), "default");
    let lease = leases.get("hung").await.unwrap();
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(holder.is_empty(), "the Lease is still held by {holder}");
}

/// With a reconcile timeout, a reconcile that hangs is cancelled, counted as failed, and retried
/// with backoff: the object is reconciled again and the controller goes on.
#[tokio::test]
async fn a_reconcile_past_its_timeout_is_cancelled_and_retried() {
    let env = TestEnv::start().await;
    let manager = Manager::new("hung-once", env.client());
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let controller = manager
        .controller(configmaps, "hung-once")
        .watcher_config(watcher::Config::default().labels("test=hung-once"))
        .reconcile_timeout(Duration::from_millis(500))
        .run(hang_once, Arc::new(AtomicBool::new(false)));
    let controllers = manager.controllers();
    controllers.add(controller);
    let stopped = tokio::spawn(controllers.run());
    labelled_configmap(&env.client(), "hung-once", "hung-once").await;
    let retried = async || {
        let metrics = manager.metrics().encode();
        let sample = |result: &str| {
            let series = format!(
                r#"controller_runtime_reconcile_total{{controller="hung-once",result="{result}"}}"#
            );
            support::sample(&metrics, &series)
        };
        sample("error") == Some(1.0) && sample("success") == Some(1.0)
    };
    assert!(
        eventually(Duration::from_secs(15), retried).await,
        "the hung reconcile was not cancelled and retried:\n{}",
        manager.metrics().encode()
    );
    manager.shutdown();
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("stopped in time")
        .unwrap()
        .unwrap();
}
