//! The metrics endpoint of a manager process (the example operator) on a real API server: HTTPS with
//! authentication and authorization by default (401 / 403 / 200), answers cached for their TTLs, plain
//! HTTP with `--metrics-secure=false`, and a mounted certificate that is reloaded when it changes.

mod support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, PostParams};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustbuilder_envtest::TestEnv;
use support::{
    CONTROLLER, ManagerProcess, Scheme, binding, create_source, eventually, free_address, get,
    sample,
};

const GRACE: Duration = Duration::from_secs(10);

async fn status(
    address: std::net::SocketAddr,
    scheme: &Scheme,
    path: &str,
    token: Option<&str>,
) -> u16 {
    match get(address, scheme, path, token).await {
        Ok((status, _)) => status,
        Err(error) => panic!("GET {path} on {address}: {error}"),
    }
}

async fn stop(mut manager: ManagerProcess) {
    manager.signal(libc::SIGTERM);
    let exited = manager.wait_exit(GRACE).await;
    assert!(
        exited.is_some_and(|s| s.success()),
        "{} did not exit 0 within {GRACE:?} ({exited:?}):\n{}",
        manager.name,
        manager.log_text()
    );
}

#[tokio::test]
async fn metrics_are_served_to_authorized_clients_only() {
    let env = TestEnv::start().await;
    let client = env.client();
    let dir = tempfile::tempdir().unwrap();
    let (metrics, probes) = (free_address(), free_address());
    let args = [
        format!("--metrics-bind-address={metrics}"),
        format!("--health-probe-bind-address={probes}"),
    ];
    let mut manager = ManagerProcess::start("secure", dir.path(), env.kubeconfig(), &args);
    manager
        .wait_for_log("controllers started", Duration::from_secs(60))
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

    // One reconcile that succeeds, one that fails (and is retried).
    create_source(&client, "default", "good", &[("a", "1")]).await;
    create_source(&client, "default", "bad", &[("fail", "yes")]).await;
    let reconciled = async || !manager.reconciles().is_empty();
    assert!(
        eventually(Duration::from_secs(30), reconciled).await,
        "no reconcile"
    );
    let failed = async || manager.failed_reconciles().len() >= 2;
    assert!(
        eventually(Duration::from_secs(30), failed).await,
        "the failing reconcile was not retried:\n{}",
        manager.log_text()
    );
    let objects: Vec<_> = manager
        .reconciles()
        .iter()
        .map(|line| line["fields"]["object"].as_str().unwrap().to_string())
        .collect();
    assert!(
        objects.iter().all(|o| o == "default/good"),
        "a failed reconcile counted as a success: {objects:?}"
    );

    let https = Scheme::https_insecure();
    // Without a token, or with one the API server does not know: 401.
    assert_eq!(status(metrics, &https, "/metrics", None).await, 401);
    assert_eq!(
        status(metrics, &https, "/metrics", Some("not-a-token")).await,
        401
    );

    // A valid token of a ServiceAccount that may not read metrics: 403.
    let denied = env
        .service_account_kubeconfig("default", "no-metrics")
        .await;
    let denied = support::token_of(&denied);
    assert_eq!(
        status(metrics, &https, "/metrics", Some(&denied)).await,
        403
    );

    // The metrics-reader ClusterRole bound to another ServiceAccount: 200. Its first answer may be a
    // denial (the authorizer sees new bindings after a moment), cached for 30 s.
    support::kubectl_apply(&env, support::METRICS_READER_ROLE, "default");
    let reader = env
        .service_account_kubeconfig("default", "prometheus")
        .await;
    let reader = support::token_of(&reader);
    let reader_binding = binding(
        "prometheus-metrics-reader",
        "metrics-reader",
        "default",
        "prometheus",
    );
    support::kubectl_apply(&env, &reader_binding, "default");
    let allowed = async || status(metrics, &https, "/metrics", Some(&reader)).await == 200;
    assert!(
        eventually(Duration::from_secs(45), allowed).await,
        "metrics-reader is not enough:\n{}",
        manager.log_text()
    );
    let (_, body) = get(metrics, &https, "/metrics", Some(&reader))
        .await
        .unwrap();
    let labels = format!(r#"controller="{CONTROLLER}""#);
    let series = |name: &str| format!("{name}{{{labels}}}");
    let result = |result: &str| {
        let series = format!(r#"controller_runtime_reconcile_total{{{labels},result="{result}"}}"#);
        sample(&body, &series).unwrap_or_else(|| panic!("no {series} in\n{body}"))
    };
    assert!(result("success") >= 1.0, "no success counted:\n{body}");
    assert!(result("error") >= 2.0, "errors not counted:\n{body}");
    assert!(
        sample(&body, &series("controller_runtime_reconcile_errors_total")) >= Some(2.0),
        "{body}"
    );
    let timed = sample(
        &body,
        &series("controller_runtime_reconcile_time_seconds_count"),
    );
    assert!(timed >= Some(3.0), "reconciles not timed:\n{body}");
    assert_eq!(
        sample(
            &body,
            &series("controller_runtime_max_concurrent_reconciles")
        ),
        Some(4.0)
    );
    for series in [
        series("controller_runtime_active_workers"),
        "process_cpu_seconds_total".into(),
        "process_resident_memory_bytes".into(),
        "process_start_time_seconds".into(),
        "process_open_fds".into(),
    ] {
        assert!(sample(&body, &series).is_some(), "no {series} in\n{body}");
    }
    queue_and_client_series(&body);
    // Authorization is for the path: metrics-reader only grants /metrics.
    assert_eq!(
        status(metrics, &https, "/debug/pprof", Some(&reader)).await,
        403
    );
    // Plain HTTP on the TLS port gets nothing.
    let plain = get(metrics, &Scheme::Http, "/metrics", Some(&reader)).await;
    assert!(
        !matches!(plain, Ok((200, _))),
        "plain HTTP answered: {plain:?}"
    );

    // Answers are cached. An allowed request stays allowed for 5 minutes after its binding is gone,
    // and a token stays valid for a minute after its ServiceAccount is gone: without the caches, each
    // of these would be 403 and 401.
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    bindings
        .delete("prometheus-metrics-reader", &DeleteParams::default())
        .await
        .unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    accounts
        .delete("prometheus", &DeleteParams::default())
        .await
        .unwrap();
    // Wait until the API server itself says no to both: the token is not valid any more, and the
    // reader's user may not get /metrics.
    let token_rejected = async || !authenticated(&client, &reader).await;
    assert!(
        eventually(Duration::from_secs(30), token_rejected).await,
        "the API server still accepts the token of a deleted ServiceAccount"
    );
    let user = "system:serviceaccount:default:prometheus";
    let access_denied = async || !may_get_metrics(&client, user).await;
    assert!(
        eventually(Duration::from_secs(30), access_denied).await,
        "the API server still allows /metrics without the binding"
    );
    assert_eq!(
        status(metrics, &https, "/metrics", Some(&reader)).await,
        200,
        "the cached review of the reader was not used"
    );
    stop(manager).await;

    // --metrics-secure=false: plain HTTP, no authentication.
    let insecure = free_address();
    let args = [
        format!("--metrics-bind-address={insecure}"),
        "--metrics-secure=false".into(),
        "--health-probe-bind-address=0".into(),
    ];
    let manager = ManagerProcess::start("insecure", dir.path(), env.kubeconfig(), &args);
    let served = async || match get(insecure, &Scheme::Http, "/metrics", None).await {
        Ok((200, body)) => body.contains("controller_runtime_reconcile_total"),
        _ => false,
    };
    assert!(
        eventually(Duration::from_secs(30), served).await,
        "{}",
        manager.log_text()
    );
    stop(manager).await;

    // A mounted certificate (tls.crt/tls.key), checked by the client, and reloaded when replaced.
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let first_ca = write_serving_cert(&certs, "first-ca");
    let mounted = free_address();
    let args = [
        format!("--metrics-bind-address={mounted}"),
        format!("--metrics-cert-path={}", certs.display()),
        "--health-probe-bind-address=0".into(),
    ];
    let manager = ManagerProcess::start("mounted", dir.path(), env.kubeconfig(), &args);
    let first = Scheme::https_trusting(&first_ca);
    // No token: 401 proves the TLS handshake with the mounted certificate worked.
    let served = async || matches!(get(mounted, &first, "/metrics", None).await, Ok((401, _)));
    assert!(
        eventually(Duration::from_secs(30), served).await,
        "{}",
        manager.log_text()
    );

    let second_ca = write_serving_cert(&certs, "second-ca");
    let second = Scheme::https_trusting(&second_ca);
    let reloaded = async || matches!(get(mounted, &second, "/metrics", None).await, Ok((401, _)));
    assert!(
        eventually(Duration::from_secs(30), reloaded).await,
        "the new certificate was not served:\n{}",
        manager.log_text()
    );
    // A new client (the old one would resume its TLS session without looking at certificates).
    let first = Scheme::https_trusting(&first_ca);
    let old = get(mounted, &first, "/metrics", None).await;
    assert!(old.is_err(), "old certificate still served: {old:?}");
    stop(manager).await;
}

/// Whether the API server accepts `token` (a TokenReview as admin).
/// The `workqueue_*` and `rest_client_*` series after two sources were reconciled, one of them
/// failing (and retried) at least twice.
fn queue_and_client_series(body: &str) {
    let queue = |name: &str| {
        let series = format!(r#"{name}{{name="{CONTROLLER}",controller="{CONTROLLER}"}}"#);
        sample(body, &series).unwrap_or_else(|| panic!("no {series} in\n{body}"))
    };
    // Both sources were added, the copy of the good one (an owned object) triggered it again, and
    // each retry of the bad one made it wait again.
    let retries = queue("workqueue_retries_total");
    assert!(retries >= 2.0, "retries not counted:\n{body}");
    assert!(queue("workqueue_adds_total") >= 3.0, "{body}");
    // Nothing waits but the failing source, between its retries.
    assert!(queue("workqueue_depth") <= 1.0, "{body}");
    // Each source waited once at least; every reconcile was timed.
    assert!(
        queue("workqueue_queue_duration_seconds_count") >= 2.0,
        "{body}"
    );
    let waited = queue("workqueue_queue_duration_seconds_sum");
    assert!((0.0..60.0).contains(&waited), "waited {waited} s:\n{body}");
    let worked = queue("workqueue_work_duration_seconds_count");
    assert!(worked >= 3.0, "{worked} reconciles timed:\n{body}");
    // No reconcile in flight takes long (the example's take milliseconds).
    for name in [
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
    ] {
        assert!((0.0..5.0).contains(&queue(name)), "{name}:\n{body}");
    }

    // The client's requests: lists and watches (GET), the copy's apply (PATCH), by code and host.
    let total = |prefix: &str| -> f64 {
        body.lines()
            .filter(|line| line.starts_with(prefix))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let requests = |code: &str, method: &str| {
        total(&format!(
            r#"rest_client_requests_total{{code="{code}",method="{method}",host="127.0.0.1:"#
        ))
    };
    assert!(requests("200", "GET") >= 3.0, "GETs not counted:\n{body}");
    let applied = requests("200", "PATCH") + requests("201", "PATCH");
    assert!(applied >= 1.0, "the copy's apply not counted:\n{body}");
    let timed = total(r#"rest_client_request_duration_seconds_count{verb="GET",host="127.0.0.1:"#);
    assert!(timed >= 3.0, "GETs not timed:\n{body}");
}

async fn authenticated(client: &kube::Client, token: &str) -> bool {
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let review: TokenReview =
        serde_json::from_value(serde_json::json!({ "spec": { "token": token } })).unwrap();
    let reviewed = reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    reviewed.status.and_then(|s| s.authenticated) == Some(true)
}

/// Whether the API server lets `user` get `/metrics` (a SubjectAccessReview as admin).
async fn may_get_metrics(client: &kube::Client, user: &str) -> bool {
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"],
            "nonResourceAttributes": { "path": "/metrics", "verb": "get" }
        }
    }))
    .unwrap();
    let reviewed = reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    reviewed.status.is_some_and(|s| s.allowed)
}

/// Writes `tls.crt` and `tls.key` for 127.0.0.1, signed by a new CA whose PEM is returned.
fn write_serving_cert(dir: &Path, ca_name: &str) -> String {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, ca_name);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, &ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, "metrics");
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    ca_pem
}
