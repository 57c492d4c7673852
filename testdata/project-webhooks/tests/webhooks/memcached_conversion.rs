// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! `Memcached` at every version, converted by the webhook. The CRD holds all the versions, stored at
//! v1 (the hub), with `spec.conversion.strategy: Webhook` pointed at the webhook server this test
//! starts: the API server calls it whenever a client asks for a version other than the stored one.

use kube::api::PostParams;
use kube::{Api, ResourceExt};
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::manager::CertSource;
use rustbuilder_runtime::manifests::{Crds, crd};
use rustbuilder_runtime::webhook::{Server, Webhooks};

use project_webhooks::api;

/// A control plane with the kind's CRD as `make manifests` writes it, and the conversion webhook.
async fn start() -> (TestEnv, Server) {
    let crds = Crds::new(vec![
        crd::<api::v1::Memcached>(),
        crd::<api::v1alpha1::Memcached>(),
    ])
    .storage_version::<api::v1::Memcached>()
    .conversion_webhook::<api::v1::Memcached>()
    .merged()
    .expect("the versions merge into one CRD");
    let env = TestEnv::builder().crds(crds).start().await;
    // The conversions `src/main.rs` registers.
    let webhooks = Webhooks::new();
    webhooks.conversion::<api::v1alpha1::Memcached, api::v1::Memcached>();
    let address = format!("127.0.0.1:{}", env.webhook_port());
    let cert = CertSource::Files {
        cert: env.webhook_cert_dir().join("tls.crt"),
        key: env.webhook_cert_dir().join("tls.key"),
    };
    let server = Server::start(webhooks, &address.parse().unwrap(), cert)
        .await
        .expect("the webhook server starts");
    (env, server)
}

#[tokio::test]
async fn a_v1alpha1_object_reads_at_v1_and_back() {
    let (env, _server) = start().await;
    let spoke: Api<api::v1alpha1::Memcached> = Api::namespaced(env.client(), "default");
    let hub: Api<api::v1::Memcached> = Api::namespaced(env.client(), "default");

    let mut memcached = api::v1alpha1::Memcached::new("from-v1alpha1", Default::default());
    memcached
        .labels_mut()
        .insert("app".to_string(), "sample".to_string());
    let created = spoke
        .create(&PostParams::default(), &memcached)
        .await
        .unwrap();

    // Stored at v1; the API server asks the webhook for each other version.
    let at_hub = hub.get("from-v1alpha1").await.unwrap();
    assert_eq!(at_hub.uid(), created.uid());
    assert_eq!(at_hub.labels()["app"], "sample");
    let back = spoke.get("from-v1alpha1").await.unwrap();
    assert_eq!(back.labels()["app"], "sample");
    assert_eq!(back.spec, created.spec);

    let mut memcached = api::v1::Memcached::new("from-v1", Default::default());
    memcached
        .labels_mut()
        .insert("app".to_string(), "sample".to_string());
    hub.create(&PostParams::default(), &memcached)
        .await
        .unwrap();
    let at_spoke = spoke.get("from-v1").await.unwrap();
    assert_eq!(at_spoke.labels()["app"], "sample");
}
