// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! Tests of the `Frigate` controller against a real API server: etcd and kube-apiserver, started
//! per test by rustbuilder-envtest (the binaries come from `KUBEBUILDER_ASSETS`, or are downloaded once).

use std::time::Duration;

use kube::api::{Api, PostParams};
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::manifests::crd;
use rustbuilder_runtime::{Manager, conditions};

use project_multigroup::api::ship::v1beta1::Frigate;
use project_multigroup::controller::{MANAGER_NAME, ship::frigate};

#[tokio::test]
async fn reconcile_marks_frigate_ready() {
    let env = TestEnv::builder().crd(crd::<Frigate>()).start().await;
    let manager = Manager::new(MANAGER_NAME, env.client());
    let controller = tokio::spawn(frigate::run(manager.clone()));
    let api: Api<Frigate> = Api::namespaced(env.client(), "default");
    let name = "test-frigate";
    let object = Frigate::new(name, Default::default());
    let created = api.create(&PostParams::default(), &object).await;
    created.expect("the API server accepts the object");

    // The controller reports Ready=True for the generation it saw.
    let mut ready = false;
    for _ in 0..100 {
        let current = api.get(name).await.expect("the object exists");
        let status = current.status.unwrap_or_default();
        ready = status.observed_generation == current.metadata.generation
            && conditions::is_true(&status.conditions, "Ready");
        if ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "the object did not become Ready within 10 s");

    manager.shutdown();
    controller.await.expect("the controller stops cleanly");
}
