// Copyright The project-basic Authors
// SPDX-License-Identifier: Apache-2.0

//! Tests of the `Memcached` controller against a real API server (etcd + kube-apiserver, see
//! `tests/envtest`). `make test` provides the binaries through `KUBEBUILDER_ASSETS`.

mod envtest;

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, PostParams};

use project_basic::api::v1alpha1::Memcached;
use project_basic::controller::{Manager, memcached};

#[tokio::test]
async fn reconcile_marks_memcached_ready() {
    let env = envtest::TestEnv::start().await;
    let manager = Manager::new(env.client());
    let controller = tokio::spawn(memcached::run(manager.clone()));
    let api: Api<Memcached> = Api::namespaced(env.client(), "default");
    let name = "test-memcached".to_string();
    let object = Memcached::new(&name, Default::default());
    let created = api.create(&PostParams::default(), &object).await;
    created.expect("the API server accepts the object");

    // The controller reports Ready=True for the generation it saw.
    let mut ready = false;
    for _ in 0..100 {
        let current = api.get(&name).await.expect("the object exists");
        let status = current.status.unwrap_or_default();
        let is_ready = |c: &Condition| c.type_ == "Ready" && c.status == "True";
        ready = status.observed_generation == current.metadata.generation
            && status.conditions.iter().any(is_ready);
        if ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "the object did not become Ready within 10 s");

    manager.shutdown();
    controller.await.expect("the controller stops cleanly");
}
