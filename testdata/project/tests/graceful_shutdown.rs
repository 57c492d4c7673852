// Copyright The project Authors
// SPDX-License-Identifier: Apache-2.0

//! Shutdown: on SIGTERM the manager stops taking work, finishes the reconciles in flight and exits 0
//! within the pod's grace period. Also measures the manager's memory, idle and with 200 objects.

mod envtest;
mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use support::{ManagerProcess, Scheme, create_sample, eventually, free_address, get};

use project::api::v1alpha1::Memcached;
use project::controller::Manager;

/// terminationGracePeriodSeconds of config/manager/manager.yaml.
const GRACE: Duration = Duration::from_secs(10);
const OBJECTS: usize = 200;

#[tokio::test]
async fn sigterm_during_reconciles_exits_zero_within_the_grace_period() {
    let env = envtest::TestEnv::start().await;
    let client = env.client();
    let dir = tempfile::tempdir().unwrap();
    let probes = free_address();
    let args = [format!("--health-probe-bind-address={probes}")];
    let mut manager = ManagerProcess::start("manager", dir.path(), env.kubeconfig(), &args);
    manager
        .wait_for_log("controllers started", Duration::from_secs(30))
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
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (idle, _) = manager.memory_kib();

    // Load: 200 objects, each reconciled once.
    let started = Instant::now();
    futures::stream::iter(0..OBJECTS)
        .for_each_concurrent(16, |i| {
            let client = client.clone();
            async move { create_sample(&client, "default", &format!("load-{i}")).await }
        })
        .await;
    let all_reconciled = async || manager.reconciled_objects() >= OBJECTS;
    assert!(
        eventually(Duration::from_secs(120), all_reconciled).await,
        "not all reconciled"
    );
    let took = started.elapsed();
    let (loaded, peak) = manager.memory_kib();
    eprintln!(
        "manager RSS: idle {idle} KiB; with {OBJECTS} objects {loaded} KiB (peak {peak} KiB); \
         created and reconciled in {took:?}"
    );

    // Touch every object, and SIGTERM as soon as the new round of reconciles has begun.
    let before = manager.reconciles().len();
    let api: Api<Memcached> = Api::namespaced(client.clone(), "default");
    let touching = tokio::spawn(async move {
        let patch = Patch::Merge(serde_json::json!({
            "metadata": { "annotations": { "example.com/touched": "yes" } }
        }));
        futures::stream::iter(0..OBJECTS)
            .map(|i| {
                let (api, patch) = (api.clone(), &patch);
                async move {
                    api.patch(&format!("load-{i}"), &PatchParams::default(), patch)
                        .await
                }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>()
            .await
    });
    let busy = async || manager.reconciles().len() > before;
    assert!(
        eventually(Duration::from_secs(30), busy).await,
        "no new reconcile"
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
    let during = manager.reconciles().len() - before;
    eprintln!(
        "SIGTERM during reconciles: exited 0 after {stopping:?}; {during} reconciles in that round"
    );
    touching.await.unwrap().expect("patches accepted");
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

/// In-process, through the library's controller contract: `Manager::shutdown` lets a reconcile that
/// is in flight finish before the controllers stop.
#[tokio::test]
async fn shutdown_waits_for_reconciles_in_flight() {
    let env = envtest::TestEnv::start().await;
    let manager = Manager::new(env.client());
    let (started, mut reconcile_started) = tokio::sync::mpsc::unbounded_channel();
    let slow = Arc::new(Slow {
        started,
        finished: AtomicBool::new(false),
    });

    let configmaps: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let run = {
        let (manager, slow, configmaps) = (manager.clone(), slow.clone(), configmaps.clone());
        async move {
            let watched = watcher::Config::default().labels("test=slow");
            let controller = Controller::new(configmaps, watched)
                .graceful_shutdown_on(manager.shutdown_signal());
            manager.ready_when_synced(controller.store());
            let metrics = manager.metrics().controller("slow", 1);
            let error_policy =
                |_: Arc<ConfigMap>, _: &Infallible, _: Arc<Slow>| Action::await_change();
            controller
                .run(metrics.instrument(slow_reconcile), error_policy, slow)
                .for_each(|_| async {})
                .await;
        }
    };
    let mut controllers = manager.controllers();
    controllers.spawn(run);
    let stopped = tokio::spawn(controllers.wait());
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
