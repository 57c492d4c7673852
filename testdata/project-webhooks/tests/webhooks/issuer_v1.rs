// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! The webhooks of `Issuer` called by a real API server. rustbuilder-envtest registers
//! `config/webhook/manifests.yaml` (which `make manifests` writes from the markers) with the address of
//! the webhook server this test starts, so the API server calls the webhooks as it does in a cluster.

use kube::api::PostParams;
use kube::{Api, ResourceExt};
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::manager::CertSource;
use rustbuilder_runtime::webhook::{Server, Webhooks};

use project_webhooks::external::cert_manager::v1::Issuer;
use project_webhooks::webhook::v1::issuer::IssuerWebhook;

/// The name label the webhooks' examples default and protect.
const NAME_LABEL: &str = "app.kubernetes.io/name";

/// A control plane with the Issuer CRD, which its operator installs in a real cluster (the project
/// keeps a copy in config/crd/external/), the webhook configurations, and the webhook server they
/// point at.
async fn start() -> (TestEnv, Server) {
    let env = TestEnv::builder()
        .crd_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/config/crd/external"))
        .webhook_manifests("config/webhook")
        .start()
        .await;
    // The webhooks `src/main.rs` registers.
    let webhooks = Webhooks::new();
    webhooks.defaulter_at("/custom-mutate-issuer", IssuerWebhook);
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

fn sample(name: &str, name_label: Option<&str>) -> Issuer {
    let mut issuer = Issuer::new(name, Default::default());
    if let Some(value) = name_label {
        issuer
            .labels_mut()
            .insert(NAME_LABEL.to_string(), value.to_string());
    }
    issuer
}

#[tokio::test]
async fn the_api_server_defaults_issuers() {
    let (env, _server) = start().await;
    let api: Api<Issuer> = Api::namespaced(env.client(), "default");
    let created = api
        .create(&PostParams::default(), &sample("defaulted", None))
        .await
        .unwrap();
    // The label comes from the defaulting webhook: the object sent had none.
    assert_eq!(created.labels()[NAME_LABEL], "issuer");
    let stored = api.get("defaulted").await.unwrap();
    assert_eq!(stored.labels()[NAME_LABEL], "issuer");
}
// +rustbuilder:scaffold:webhook-tests
