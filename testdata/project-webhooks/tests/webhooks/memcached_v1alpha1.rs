// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! The webhooks of `Memcached` called by a real API server. rustbuilder-envtest registers
//! `config/webhook/manifests.yaml` (which `make manifests` writes from the markers) with the address of
//! the webhook server this test starts, so the API server calls the webhooks as it does in a cluster.

use kube::api::PostParams;
use kube::{Api, ResourceExt};
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::manager::CertSource;
use rustbuilder_runtime::manifests::crd;
use rustbuilder_runtime::webhook::{Server, Webhooks};

use project_webhooks::api::v1alpha1::Memcached;
use project_webhooks::webhook::v1alpha1::memcached::MemcachedWebhook;

/// The name label the webhooks' examples default and protect.
const NAME_LABEL: &str = "app.kubernetes.io/name";

/// A control plane with the CRD and the webhook configurations, and the webhook server they point at.
async fn start() -> (TestEnv, Server) {
    let env = TestEnv::builder()
        .crd(crd::<Memcached>())
        .webhook_manifests("config/webhook")
        .start()
        .await;
    // The webhooks `src/main.rs` registers.
    let webhooks = Webhooks::new();
    webhooks.defaulter(MemcachedWebhook);
    webhooks.validator(MemcachedWebhook);
    // +rustbuilder:scaffold:webhooks
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

fn sample(name: &str, name_label: Option<&str>) -> Memcached {
    let mut memcached = Memcached::new(name, Default::default());
    if let Some(value) = name_label {
        memcached
            .labels_mut()
            .insert(NAME_LABEL.to_string(), value.to_string());
    }
    memcached
}

#[tokio::test]
async fn the_api_server_defaults_memcacheds() {
    let (env, _server) = start().await;
    let api: Api<Memcached> = Api::namespaced(env.client(), "default");
    let created = api
        .create(&PostParams::default(), &sample("defaulted", None))
        .await
        .unwrap();
    // The label comes from the defaulting webhook: the object sent had none.
    assert_eq!(created.labels()[NAME_LABEL], "memcached");
    let stored = api.get("defaulted").await.unwrap();
    assert_eq!(stored.labels()[NAME_LABEL], "memcached");
}

#[tokio::test]
async fn the_api_server_refuses_what_validation_refuses() {
    use kube::api::{Patch, PatchParams};
    use serde_json::json;

    let (env, _server) = start().await;
    let api: Api<Memcached> = Api::namespaced(env.client(), "default");
    api.create(
        &PostParams::default(),
        &sample("validated", Some("memcached")),
    )
    .await
    .unwrap();
    let change = json!({ "metadata": { "labels": { NAME_LABEL: "other" } } });
    let refused = api
        .patch("validated", &PatchParams::default(), &Patch::Merge(&change))
        .await;
    // The API server answers with the webhook's message.
    match refused {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert!(
                status.message.contains("cannot change once set"),
                "{}",
                status.message
            );
        }
        other => panic!("the change should be refused, got {other:?}"),
    }
    let stored = api.get("validated").await.unwrap();
    assert_eq!(stored.labels()[NAME_LABEL], "memcached");
}
// +rustbuilder:scaffold:webhook-tests
