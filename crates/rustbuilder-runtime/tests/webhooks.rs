//! Webhooks called by a real API server: envtest registers the webhook configurations (rendered from
//! `// +rustbuilder:webhook:` markers, as `make manifests` does) and the CRD's conversion with its own
//! CA, and the test serves them with `webhook::Server` on the env's webhook port. Then ordinary API
//! calls get defaulted, refused with the validator's message, warned, and converted between versions;
//! the webhooks see who asks, dry runs, the stored object of an update, and a manager's shared cache.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, Resource, ResourceExt};
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::Manager;
use rustbuilder_runtime::cache::Cache;
use rustbuilder_runtime::manager::CertSource;
use rustbuilder_runtime::manifests::Crds;
use rustbuilder_runtime::manifests::webhooks::{parse_webhook_marker, render};
use rustbuilder_runtime::metrics::Metrics;
use rustbuilder_runtime::webhook::{
    self, AdmissionRequest, Defaulter, Denied, Operation, Server, Validation, Validator, Webhooks,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Two versions of a test kind: `v1alpha1` has `size`, `v1` (the hub, stored) calls it `replicas`.
mod v1alpha1 {
    use super::*;

    #[derive(CustomResource, Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "webhooks.example.com",
        version = "v1alpha1",
        kind = "Gadget",
        namespaced
    )]
    #[kube(derive = "PartialEq")]
    pub struct GadgetSpec {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub size: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mode: Option<String>,
    }
}

mod v1 {
    use super::*;

    #[derive(CustomResource, Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "webhooks.example.com",
        version = "v1",
        kind = "Gadget",
        namespaced
    )]
    #[kube(derive = "PartialEq")]
    pub struct GadgetSpec {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub replicas: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mode: Option<String>,
    }
}

impl From<v1alpha1::Gadget> for v1::Gadget {
    fn from(spoke: v1alpha1::Gadget) -> Self {
        let spec = v1::GadgetSpec {
            replicas: spoke.spec.size,
            mode: spoke.spec.mode,
        };
        v1::Gadget {
            metadata: spoke.metadata,
            spec,
        }
    }
}

impl From<v1::Gadget> for v1alpha1::Gadget {
    fn from(hub: v1::Gadget) -> Self {
        let spec = v1alpha1::GadgetSpec {
            size: hub.spec.replicas,
            mode: hub.spec.mode,
        };
        v1alpha1::Gadget {
            metadata: hub.metadata,
            spec,
        }
    }
}

/// The handlers under test, on `v1alpha1`.
#[derive(Clone, Default)]
struct GadgetWebhook {
    /// Every gadget of the cluster, from a manager's shared cache: a name is used once.
    gadgets: Option<Cache<v1alpha1::Gadget>>,
    /// The gadgets admitted for real, as `<namespace>/<name> by <user>`: the kind of effect beyond
    /// the answer that a dry run must not have.
    ledger: Arc<Mutex<Vec<String>>>,
}

/// Who may delete a protected gadget.
const KEEPER: &str = "gadget-keeper";
/// Where the defaulter writes who created a gadget.
const CREATED_BY: &str = "webhooks.example.com/created-by";

fn user(request: &AdmissionRequest<v1alpha1::Gadget>) -> &str {
    request.user_info.username.as_deref().unwrap_or_default()
}

fn check_size(gadget: &v1alpha1::Gadget) -> Validation {
    match gadget.spec.size {
        Some(size) if size > 10 => Err(Denied::new(format!(
            "spec.size must be at most 10, got {size}"
        ))),
        Some(7) => Ok(vec!["spec.size 7 is unlucky".into()]),
        _ => Ok(vec![]),
    }
}

impl Defaulter for GadgetWebhook {
    type Object = v1alpha1::Gadget;

    async fn set_defaults(
        &self,
        gadget: &mut v1alpha1::Gadget,
        request: &AdmissionRequest<v1alpha1::Gadget>,
    ) -> Result<(), Denied> {
        gadget.spec.size.get_or_insert(1);
        gadget.spec.mode.get_or_insert_with(|| "standard".into());
        if request.operation == Operation::Create {
            let by = user(request).to_string();
            gadget.annotations_mut().insert(CREATED_BY.into(), by);
        }
        Ok(())
    }
}

impl Validator for GadgetWebhook {
    type Object = v1alpha1::Gadget;

    async fn validate_create(
        &self,
        gadget: &v1alpha1::Gadget,
        request: &AdmissionRequest<v1alpha1::Gadget>,
    ) -> Validation {
        let warnings = check_size(gadget)?;
        let name = gadget.name_any();
        let namespace = request.namespace.as_deref().unwrap_or_default();
        let mut gadgets = self.gadgets.iter().flat_map(Cache::list);
        let taken = gadgets.find(|other| {
            other.name_any() == name && other.namespace().as_deref() != Some(namespace)
        });
        if let Some(other) = taken {
            return Err(Denied::new(format!(
                "the name {name} is taken in namespace {}",
                other.namespace().unwrap_or_default()
            )));
        }
        if !request.dry_run {
            let entry = format!("{namespace}/{name} by {}", user(request));
            self.ledger.lock().unwrap().push(entry);
        }
        Ok(warnings)
    }

    async fn validate_update(
        &self,
        old: &v1alpha1::Gadget,
        new: &v1alpha1::Gadget,
        _request: &AdmissionRequest<v1alpha1::Gadget>,
    ) -> Validation {
        if old.spec.mode != new.spec.mode {
            return Err("spec.mode is immutable".into());
        }
        if let (Some(before), Some(after)) = (old.spec.size, new.spec.size)
            && after < before
        {
            return Err(format!("spec.size cannot shrink, from {before} to {after}").into());
        }
        check_size(new)
    }

    async fn validate_delete(
        &self,
        old: &v1alpha1::Gadget,
        request: &AdmissionRequest<v1alpha1::Gadget>,
    ) -> Validation {
        let user = user(request);
        match old.spec.mode.as_deref() {
            Some("protected") if user != KEEPER => Err(Denied::new(format!(
                "protected gadgets can be deleted by {KEEPER} only, not by {user}"
            ))),
            _ => Ok(vec![]),
        }
    }
}

/// The markers a generated webhook file carries for `GadgetWebhook`.
fn markers() -> [String; 2] {
    let mutate = webhook::mutate_path::<v1alpha1::Gadget>();
    let validate = webhook::validate_path::<v1alpha1::Gadget>();
    let common = "failurePolicy=fail,groups=webhooks.example.com,resources=gadgets,versions=v1alpha1,admissionReviewVersions=v1";
    [
        format!(
            "path={mutate},mutating=true,sideEffects=None,{common},verbs=create;update,name=mgadget-v1alpha1.kb.io"
        ),
        // The validator keeps a ledger, except on dry runs.
        format!(
            "path={validate},mutating=false,sideEffects=NoneOnDryRun,{common},verbs=create;update;delete,name=vgadget-v1alpha1.kb.io"
        ),
    ]
}

fn webhook_manifests() -> String {
    let webhooks: Vec<_> = markers()
        .iter()
        .map(|marker| parse_webhook_marker(marker).unwrap())
        .collect();
    render(&webhooks).unwrap()
}

/// The merged CRD, as `crdgen` writes it: v1 stored, converted by the webhook.
fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use kube::CustomResourceExt;
    Crds::new([v1alpha1::Gadget::crd(), v1::Gadget::crd()])
        .storage_version::<v1::Gadget>()
        .conversion_webhook::<v1::Gadget>()
        .merged()
        .unwrap()
}

fn registry() -> Webhooks {
    registered(Webhooks::new(), GadgetWebhook::default())
}

fn registered(webhooks: Webhooks, webhook: GadgetWebhook) -> Webhooks {
    webhooks.defaulter(webhook.clone());
    webhooks.validator(webhook);
    webhooks.conversion::<v1alpha1::Gadget, v1::Gadget>();
    webhooks
}

fn cert_files(dir: &Path) -> CertSource {
    CertSource::Files {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    }
}

/// An env that calls the webhooks, and what answers them.
struct Served {
    env: TestEnv,
    /// The webhook as registered: clones share its cache and ledger.
    webhook: GadgetWebhook,
    /// Where the server counts its calls.
    metrics: Metrics,
    _server: Server,
    /// The manager whose cache the webhook reads.
    _manager: Manager,
}

async fn env_and_server() -> Served {
    let env = TestEnv::builder()
        .crds(crds())
        .webhook_manifests_yaml(webhook_manifests())
        .start()
        .await;
    let manager = Manager::new("gadget-webhooks", env.client());
    let webhook = GadgetWebhook {
        gadgets: Some(manager.cache()),
        ..GadgetWebhook::default()
    };
    let address = format!("127.0.0.1:{}", env.webhook_port()).parse().unwrap();
    let metrics = Metrics::new();
    let webhooks = registered(Webhooks::with_metrics(metrics.clone()), webhook.clone());
    let server = Server::start(webhooks, &address, cert_files(&env.webhook_cert_dir()))
        .await
        .expect("the webhook server starts with the env's certificate");
    Served {
        env,
        webhook,
        metrics,
        _server: server,
        _manager: manager,
    }
}

fn gadget(name: &str, spec: serde_json::Value) -> v1alpha1::Gadget {
    serde_json::from_value(json!({
        "apiVersion": "webhooks.example.com/v1alpha1",
        "kind": "Gadget",
        "metadata": { "name": name },
        "spec": spec,
    }))
    .unwrap()
}

/// The message of an API error, e.g. a webhook's refusal.
fn refusal<T: std::fmt::Debug>(result: kube::Result<T>) -> String {
    match result {
        Err(kube::Error::Api(status)) => status.message,
        other => panic!("expected a refusal from the API server, got {other:?}"),
    }
}

#[tokio::test]
async fn the_api_server_calls_the_defaulting_and_validating_webhooks() {
    let Served { env, metrics, .. } = &env_and_server().await;
    let gadgets: Api<v1alpha1::Gadget> = Api::default_namespaced(env.client());
    let pp = PostParams::default();

    // Defaulting: the fields left out come back set, and are stored.
    let created = gadgets
        .create(&pp, &gadget("plain", json!({})))
        .await
        .unwrap();
    assert_eq!(created.spec.size, Some(1), "{created:?}");
    assert_eq!(created.spec.mode.as_deref(), Some("standard"));
    let stored = gadgets.get("plain").await.unwrap();
    assert_eq!(stored.spec, created.spec);
    // What the user set is kept.
    let set = gadget("set", json!({ "size": 3, "mode": "fast" }));
    let created = gadgets.create(&pp, &set).await.unwrap();
    assert_eq!(created.spec, set.spec);

    // Validation on create: refused with the validator's own message.
    let message = refusal(
        gadgets
            .create(&pp, &gadget("big", json!({ "size": 11 })))
            .await,
    );
    assert!(
        message.contains("spec.size must be at most 10, got 11"),
        "{message}"
    );
    assert!(
        message.contains("vgadget-v1alpha1.kb.io"),
        "the API server names the webhook: {message}"
    );
    assert!(gadgets.get_opt("big").await.unwrap().is_none());

    // Validation on update: the old and the new object.
    let patch = Patch::Merge(json!({ "spec": { "mode": "slow" } }));
    let message = refusal(gadgets.patch("set", &PatchParams::default(), &patch).await);
    assert!(message.contains("spec.mode is immutable"), "{message}");
    let patch = Patch::Merge(json!({ "spec": { "size": 50 } }));
    let message = refusal(gadgets.patch("set", &PatchParams::default(), &patch).await);
    assert!(message.contains("got 50"), "{message}");
    let patch = Patch::Merge(json!({ "spec": { "size": 4 } }));
    let updated = gadgets
        .patch("set", &PatchParams::default(), &patch)
        .await
        .unwrap();
    assert_eq!(updated.spec.size, Some(4));

    // Validation on delete.
    let protected = gadget("protected", json!({ "mode": "protected" }));
    gadgets.create(&pp, &protected).await.unwrap();
    let message = refusal(gadgets.delete("protected", &DeleteParams::default()).await);
    assert!(
        message.contains("protected gadgets can be deleted by gadget-keeper only"),
        "{message}"
    );
    assert!(gadgets.get_opt("protected").await.unwrap().is_some());
    gadgets
        .delete("plain", &DeleteParams::default())
        .await
        .unwrap();

    // Warnings: kube's client does not surface the `Warning` header, so read it from the response.
    let body = serde_json::to_vec(&gadget("lucky", json!({ "size": 7 }))).unwrap();
    let request =
        hyper::Request::post("/apis/webhooks.example.com/v1alpha1/namespaces/default/gadgets")
            .header("content-type", "application/json")
            .body(kube::client::Body::from(body))
            .unwrap();
    let response = env.client().send(request).await.unwrap();
    assert_eq!(response.status(), 201);
    let warnings: Vec<&str> = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|value| value.to_str().unwrap())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("spec.size 7 is unlucky")),
        "{warnings:?}"
    );

    // Every call was counted, refusals included (they are answered with 200 too).
    let text = metrics.encode();
    let validate = webhook::validate_path::<v1alpha1::Gadget>();
    let calls = format!(
        "controller_runtime_webhook_requests_total{{webhook=\"{validate}\",code=\"200\"}} "
    );
    let line = text.lines().find(|l| l.starts_with(&calls));
    let count: u64 = line
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0);
    // Creates (5, two refused), updates (3, two refused), deletes (2, one refused).
    assert!(count >= 10, "{count} validations counted:\n{text}");
    assert!(
        text.contains("controller_runtime_webhook_latency_seconds_count{webhook=\"/mutate-"),
        "{text}"
    );
}

/// The name the API server knows `client`'s user by.
async fn user_name(client: kube::Client) -> String {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let reviews: Api<SelfSubjectReview> = Api::all(client);
    let review = reviews
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap();
    let user = review.status.and_then(|status| status.user_info?.username);
    user.expect("the API server names the user")
}

/// A client of `env` acting as `user`, through impersonation by its admin.
async fn client_as(env: &TestEnv, user: &str) -> kube::Client {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let kubeconfig = Kubeconfig::read_from(env.kubeconfig()).unwrap();
    let options = KubeConfigOptions::default();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap();
    config.auth_info.impersonate = Some(user.to_string());
    config.auth_info.impersonate_groups = Some(vec!["system:masters".to_string()]);
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn the_webhooks_see_the_request_and_the_shared_cache() {
    let Served { env, webhook, .. } = &env_and_server().await;
    let gadgets: Api<v1alpha1::Gadget> = Api::default_namespaced(env.client());
    let pp = PostParams::default();
    let admin = user_name(env.client()).await;
    let ledger = || webhook.ledger.lock().unwrap().clone();

    // The user: the defaulter writes who created the gadget, the validator enters it in its ledger.
    let created = gadgets
        .create(&pp, &gadget("mine", json!({ "size": 4 })))
        .await
        .unwrap();
    assert_eq!(created.annotations().get(CREATED_BY), Some(&admin));
    assert_eq!(ledger(), [format!("default/mine by {admin}")]);

    // A dry run (`kubectl create --dry-run=server`) is defaulted and validated, not stored, and the
    // validator leaves its ledger alone.
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let tried = gadgets
        .create(&dry_run, &gadget("trial", json!({})))
        .await
        .unwrap();
    assert_eq!(tried.spec.size, Some(1), "defaulted: {tried:?}");
    assert!(gadgets.get_opt("trial").await.unwrap().is_none());
    assert_eq!(ledger(), [format!("default/mine by {admin}")]);
    let message = refusal(
        gadgets
            .create(&dry_run, &gadget("huge", json!({ "size": 12 })))
            .await,
    );
    assert!(message.contains("got 12"), "{message}");

    // The old object of an update: the size may grow, not shrink.
    let resize = |size: i32| Patch::Merge(json!({ "spec": { "size": size } }));
    let message = refusal(
        gadgets
            .patch("mine", &PatchParams::default(), &resize(2))
            .await,
    );
    assert!(
        message.contains("spec.size cannot shrink, from 4 to 2"),
        "{message}"
    );
    let grown = gadgets
        .patch("mine", &PatchParams::default(), &resize(6))
        .await
        .unwrap();
    assert_eq!(grown.spec.size, Some(6));

    // The user of a delete: only the keeper deletes a protected gadget.
    let protected = gadget("protected", json!({ "mode": "protected" }));
    gadgets.create(&pp, &protected).await.unwrap();
    let message = refusal(gadgets.delete("protected", &DeleteParams::default()).await);
    let expected = format!("deleted by {KEEPER} only, not by {admin}");
    assert!(message.contains(&expected), "{message}");
    let keeper: Api<v1alpha1::Gadget> = Api::default_namespaced(client_as(env, KEEPER).await);
    keeper
        .delete("protected", &DeleteParams::default())
        .await
        .expect("the keeper deletes a protected gadget");

    // The shared cache: once it holds `default/mine`, the name is refused in another namespace.
    let cache = webhook.gadgets.clone().expect("a cache");
    let deadline = Instant::now() + Duration::from_secs(20);
    while cache.get(Some("default"), "mine").is_none() {
        assert!(
            Instant::now() < deadline,
            "the cache never held default/mine"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    env.create_namespace("other").await;
    let others: Api<v1alpha1::Gadget> = Api::namespaced(env.client(), "other");
    let message = refusal(others.create(&pp, &gadget("mine", json!({}))).await);
    assert!(
        message.contains("the name mine is taken in namespace default"),
        "{message}"
    );
    others
        .create(&pp, &gadget("yours", json!({})))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_api_server_converts_through_the_webhook() {
    let Served { env, .. } = &env_and_server().await;
    let alpha: Api<v1alpha1::Gadget> = Api::default_namespaced(env.client());
    let hub: Api<v1::Gadget> = Api::default_namespaced(env.client());

    let created = alpha
        .create(
            &PostParams::default(),
            &gadget("converted", json!({ "size": 5, "mode": "fast" })),
        )
        .await
        .unwrap();
    // Stored at v1: read there, `size` is `replicas`.
    let at_v1 = hub.get("converted").await.unwrap();
    assert_eq!(at_v1.spec.replicas, Some(5));
    assert_eq!(at_v1.spec.mode.as_deref(), Some("fast"));
    assert_eq!(at_v1.meta().uid, created.meta().uid);
    // And back: the round trip changes nothing.
    let back = alpha.get("converted").await.unwrap();
    assert_eq!(back.spec, created.spec);
    assert_eq!(back.metadata.name, created.metadata.name);

    // A write at v1 reads back at v1alpha1.
    let patch = Patch::Merge(json!({ "spec": { "replicas": 6 } }));
    hub.patch("converted", &PatchParams::default(), &patch)
        .await
        .unwrap();
    assert_eq!(alpha.get("converted").await.unwrap().spec.size, Some(6));

    // kubectl, at each version by its full name.
    for version in ["v1alpha1", "v1"] {
        let mut kubectl = env.kubectl();
        let resource = format!("gadgets.{version}.webhooks.example.com");
        kubectl.args(["get", &resource, "converted", "-o", "json"]);
        // Off the runtime's thread: the webhook server answers the API server on it meanwhile.
        let output = tokio::task::spawn_blocking(move || kubectl.output())
            .await
            .unwrap()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let object: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(
            object["apiVersion"],
            format!("webhooks.example.com/{version}")
        );
        let field = if version == "v1" { "replicas" } else { "size" };
        assert_eq!(object["spec"][field], 6, "{object}");
    }
}

#[tokio::test]
async fn a_missing_certificate_is_a_clear_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let address = "127.0.0.1:0".parse().unwrap();
    let error = Server::start(registry(), &address, cert_files(dir.path()))
        .await
        .expect_err("no certificate files");
    let message = error.to_string();
    let expected_path = dir.path().join("tls.crt");
    assert!(
        message.contains(&expected_path.display().to_string()),
        "{message}"
    );
    assert!(message.contains("does not exist"), "{message}");
    assert!(message.contains("--webhook-cert-path"), "{message}");
    assert!(message.contains("cert-manager"), "{message}");
}

/// A CA and a certificate for 127.0.0.1 it signed, as PEM, and the certificate as DER.
fn issue(dir: &Path) -> Vec<u8> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, &ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    // Written whole, each file at once, as the kubelet swaps a mounted Secret.
    std::fs::write(dir.join("ca.crt"), ca_cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    cert.der().to_vec()
}

/// The certificate the server presents in a TLS handshake (not verified: it is what we compare).
async fn presented(address: std::net::SocketAddr) -> Vec<u8> {
    use std::sync::Arc;
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::client::danger::{
        HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
    };
    use tokio_rustls::rustls::crypto::ring;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, Error, SignatureScheme};

    #[derive(Debug)]
    struct AnyCert;
    impl ServerCertVerifier for AnyCert {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, Error> {
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            ring::default_provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }
    let config = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert))
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

#[tokio::test]
async fn the_server_presents_a_replaced_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let first = issue(dir.path());
    let address = "127.0.0.1:0".parse().unwrap();
    let server = Server::start(registry(), &address, cert_files(dir.path()))
        .await
        .unwrap();
    assert_eq!(presented(server.local_addr()).await, first);

    // The file modification times must differ from the first ones.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = issue(dir.path());
    assert_ne!(first, second);
    // The files are checked every 10 s.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if presented(server.local_addr()).await == second {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server still presents the old certificate after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Kubebuilder's `ENABLE_WEBHOOKS=false` (here also `--enable-webhooks=false`): a manager whose
/// webhooks are registered runs without serving them, so it needs no certificate (`make run` on a
/// workstation). With them on, the missing certificate stops it and the message names the files and
/// the ways out; once `make certs` (the envtest example's `certs`) has written them, it serves.
#[tokio::test]
async fn webhooks_turned_off_need_no_serving_certificate() {
    let env = TestEnv::start().await;
    let kubeconfig = env.kubeconfig().display().to_string();
    let port = format!("--webhook-port={}", env.webhook_port());
    let start = async |cert_dir: &str, webhooks: &str| {
        let cert_path = format!("--webhook-cert-path={cert_dir}");
        let args = [
            "manager",
            "--kubeconfig",
            &kubeconfig,
            "--health-probe-bind-address=0",
            "--metrics-bind-address=0",
            &port,
            &cert_path,
            webhooks,
        ];
        #[derive(clap::Parser)]
        struct Args {
            #[command(flatten)]
            manager: rustbuilder_runtime::manager::ManagerArgs,
        }
        let args = <Args as clap::Parser>::try_parse_from(args)
            .unwrap()
            .manager;
        let manager = Manager::builder("webhooks-off")
            .external_tracing()
            .start(args)
            .await
            .unwrap();
        registered(manager.webhooks().clone(), GadgetWebhook::default());
        manager
    };
    let keeps_running = async |manager: Manager| {
        let running = tokio::spawn(manager.controllers().run());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !running.is_finished(),
            "the manager stopped: {:?}",
            running.await
        );
        manager.shutdown();
        let stopped = tokio::time::timeout(Duration::from_secs(10), running).await;
        assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
    };

    let certs = tempfile::tempdir().unwrap();
    let dir = certs.path().join("serving-certs");
    let dir = dir.to_str().unwrap();
    let on = start(dir, "--enable-webhooks=true").await;
    let refused = on.controllers().run().await.unwrap_err().to_string();
    for part in [
        format!("no serving certificate: {dir}/tls.crt does not exist"),
        format!("the certificate {dir}/tls.crt and its key {dir}/tls.key"),
        format!("`make certs WEBHOOK_CERT_PATH={dir}` writes a self-signed pair there"),
        "`make run ENABLE_WEBHOOKS=false`".to_string(),
    ] {
        assert!(refused.contains(&part), "{part:?} in: {refused}");
    }

    keeps_running(start(dir, "--enable-webhooks=false").await).await;

    // `make certs WEBHOOK_CERT_PATH=<dir>`, then `make run`.
    let written = rustbuilder_envtest::run(["certs".to_string(), dir.to_string()]);
    assert_eq!(written, std::process::ExitCode::SUCCESS);
    keeps_running(start(dir, "--enable-webhooks=true").await).await;
}
