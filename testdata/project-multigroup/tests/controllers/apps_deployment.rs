// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! Tests of the `Deployment` controller against a real API server: etcd and kube-apiserver, started
//! per test by rustbuilder-envtest (the binaries come from `KUBEBUILDER_ASSETS`, or are downloaded once).

use std::time::Duration;

use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::Manager;

use project_multigroup::controller::{MANAGER_NAME, apps::deployment};

#[tokio::test]
async fn controller_watches_deployments() {
    let env = TestEnv::start().await;
    let manager = Manager::new(MANAGER_NAME, env.client());
    let controllers = manager.controllers();
    controllers.add(deployment::run(manager.clone()));
    let running = tokio::spawn(controllers.run());

    // The manager turns ready once the controller has listed the deployments and watches them.
    let mut ready = manager.ready();
    for _ in 0..100 {
        if ready.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        ready = manager.ready();
    }
    assert_eq!(
        ready,
        Ok(()),
        "the controller did not sync its cache within 10 s"
    );

    // TODO(user): create deployments here and check what the controller does with them.

    manager.shutdown();
    let stopped = running.await.expect("the controllers do not panic");
    stopped.expect("the controllers stop cleanly");
}
