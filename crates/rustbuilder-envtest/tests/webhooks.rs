//! Webhook registration: the configurations in a `config/webhook`-like directory and a CRD's conversion
//! are pointed at `https://127.0.0.1:<webhook_port>` with the env's CA, and the API server calls there.

use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use rustbuilder_envtest::TestEnv;
use serde_json::json;

/// What `make manifests` writes into `config/webhook/manifests.yaml`, for ConfigMaps.
const MANIFESTS: &str = "\
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions:
  - v1
  clientConfig:
    service:
      name: webhook-service
      namespace: system
      path: /validate--v1-configmap
  failurePolicy: Fail
  name: vconfigmap-v1.kb.io
  rules:
  - apiGroups:
    - \"\"
    apiVersions:
    - v1
    operations:
    - CREATE
    resources:
    - configmaps
  sideEffects: None
";

/// A CRD converted by a webhook, as `crdgen` writes it.
fn converted_crd() -> CustomResourceDefinition {
    let schema = json!({ "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } });
    serde_json::from_value(json!({
        "metadata": { "name": "things.webhooks.example.com" },
        "spec": {
            "group": "webhooks.example.com",
            "names": { "kind": "Thing", "plural": "things", "singular": "thing", "listKind": "ThingList" },
            "scope": "Namespaced",
            "versions": [
                { "name": "v1", "served": true, "storage": true, "schema": schema },
                { "name": "v1alpha1", "served": true, "storage": false, "schema": schema },
            ],
            "conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": { "service": { "name": "webhook-service", "namespace": "system", "path": "/convert" } },
                    "conversionReviewVersions": ["v1"],
                },
            },
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn webhooks_are_pointed_at_the_local_port_with_the_envs_ca() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("manifests.yaml"), MANIFESTS).unwrap();
    // The other files of `config/webhook` are skipped.
    let service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: webhook-service\n";
    std::fs::write(dir.path().join("service.yaml"), service).unwrap();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "resources:\n- manifests.yaml\n",
    )
    .unwrap();

    let env = TestEnv::builder()
        .crd(converted_crd())
        .webhook_manifests(dir.path())
        .start()
        .await;
    let port = env.webhook_port();
    let ca = std::fs::read(env.ca_cert()).unwrap();
    for file in ["tls.crt", "tls.key"] {
        let pem = std::fs::read_to_string(env.webhook_cert_dir().join(file)).unwrap();
        assert!(pem.starts_with("-----BEGIN"), "{file}: {pem}");
    }

    let configs: Api<ValidatingWebhookConfiguration> = Api::all(env.client());
    let config = configs
        .get("validating-webhook-configuration")
        .await
        .unwrap();
    let webhook = &config.webhooks.unwrap()[0];
    let client_config = &webhook.client_config;
    let expected_url = format!("https://127.0.0.1:{port}/validate--v1-configmap");
    assert_eq!(client_config.url.as_deref(), Some(expected_url.as_str()));
    assert!(client_config.service.is_none());
    assert_eq!(client_config.ca_bundle.as_ref().unwrap().0, ca);

    let crds: Api<CustomResourceDefinition> = Api::all(env.client());
    let crd = crds.get("things.webhooks.example.com").await.unwrap();
    let conversion = crd.spec.conversion.unwrap().webhook.unwrap();
    let client_config = conversion.client_config.unwrap();
    let expected_url = format!("https://127.0.0.1:{port}/convert");
    assert_eq!(client_config.url.as_deref(), Some(expected_url.as_str()));
    assert_eq!(client_config.ca_bundle.unwrap().0, ca);

    // Nothing listens on the port yet, and the policy is Fail: the API server, having called there,
    // refuses the ConfigMap. (Its admission plugin loads new configurations within a moment.)
    let configmaps: Api<ConfigMap> = Api::default_namespaced(env.client());
    let configmap: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "checked" } })).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let message = loop {
        match configmaps.create(&PostParams::default(), &configmap).await {
            Err(kube::Error::Api(status)) => break status.message,
            Ok(_) => {
                assert!(Instant::now() < deadline, "the webhook was never called");
                configmaps
                    .delete("checked", &Default::default())
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(other) => panic!("{other}"),
        }
    };
    assert!(message.contains("vconfigmap-v1.kb.io"), "{message}");
    assert!(
        message.contains(&expected_url.replace("/convert", "/validate--v1-configmap")),
        "{message}"
    );
}

/// `route_webhooks` rewrites the objects of a rendered `config/default` the same way, for tests that
/// apply them themselves (the e2e journey); other objects are left alone.
#[tokio::test]
async fn rendered_objects_are_routed_to_the_local_port() {
    let env = TestEnv::start().await;
    let port = env.webhook_port();
    let ca = std::fs::read(env.ca_cert()).unwrap();
    let ca_bundle = serde_json::to_value(k8s_openapi::ByteString(ca)).unwrap();

    let mut configuration: serde_json::Value = serde_yaml::from_str(MANIFESTS).unwrap();
    assert!(env.route_webhooks(&mut configuration));
    let url = format!("https://127.0.0.1:{port}/validate--v1-configmap");
    assert_eq!(
        configuration["webhooks"][0]["clientConfig"],
        json!({ "url": url, "caBundle": ca_bundle })
    );

    let mut crd = serde_json::to_value(converted_crd()).unwrap();
    assert!(env.route_webhooks(&mut crd));
    let url = format!("https://127.0.0.1:{port}/convert");
    assert_eq!(
        crd["spec"]["conversion"]["webhook"]["clientConfig"],
        json!({ "url": url, "caBundle": ca_bundle })
    );
    // The routed objects are valid: the API server accepts them.
    let crds: Api<CustomResourceDefinition> = Api::all(env.client());
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(env.client());
    let configuration = serde_json::from_value(configuration).unwrap();
    configs
        .create(&PostParams::default(), &configuration)
        .await
        .unwrap();

    let mut service = json!({ "apiVersion": "v1", "kind": "Service", "spec": { "ports": [] } });
    let before = service.clone();
    assert!(!env.route_webhooks(&mut service));
    assert_eq!(service, before);
    let mut converted_by_none = serde_json::to_value(converted_crd()).unwrap();
    converted_by_none["spec"]["conversion"] = json!({ "strategy": "None" });
    let before = converted_by_none.clone();
    assert!(!env.route_webhooks(&mut converted_by_none));
    assert_eq!(converted_by_none, before);
}
