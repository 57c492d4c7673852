// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! Tests of the `Certificate` controller against a real API server: etcd and kube-apiserver, started
//! per test by rustbuilder-envtest (the binaries come from `KUBEBUILDER_ASSETS`, or are downloaded once).

use std::time::Duration;

use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::Manager;

use project_multigroup::controller::{MANAGER_NAME, cert_manager::certificate};

#[tokio::test]
async fn controller_watches_certificates() {
    // The API server needs the Certificate CRD, which its operator installs in a real cluster: the
    // project keeps a copy in config/crd/external/.
    let env = TestEnv::builder()
        .crd_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/config/crd/external"))
        .start()
        .await;
    let manager = Manager::new(MANAGER_NAME, env.client());
    let controllers = manager.controllers();
    controllers.add(certificate::run(manager.clone()));
    let running = tokio::spawn(controllers.run());

    // The manager turns ready once the controller has listed the certificates and watches them.
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

    // TODO(user): create certificates here and check what the controller does with them.

    manager.shutdown();
    let stopped = running.await.expect("the controllers do not panic");
    stopped.expect("the controllers stop cleanly");
}
