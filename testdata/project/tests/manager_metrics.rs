// Copyright The project Authors
// SPDX-License-Identifier: Apache-2.0

//! The manager's metrics endpoint, run as the real binary against a real API server: HTTPS with
//! authentication and authorization by default, plain HTTP with `--metrics-secure=false`, and a mounted
//! certificate that is reloaded when it changes.

mod envtest;
mod support;

use std::path::Path;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use support::{ManagerProcess, Scheme, create_sample, eventually, free_address, get, sample};

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
    let env = envtest::TestEnv::start().await;
    let client = env.client();
    let dir = tempfile::tempdir().unwrap();
    let (metrics, probes) = (free_address(), free_address());
    let args = [
        format!("--metrics-bind-address={metrics}"),
        format!("--health-probe-bind-address={probes}"),
    ];
    let mut manager = ManagerProcess::start("secure", dir.path(), env.kubeconfig(), &args);
    manager
        .wait_for_log("controllers started", Duration::from_secs(30))
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

    create_sample(&client, "default", "metrics-sample").await;
    let reconciled = async || !manager.reconciles().is_empty();
    assert!(
        eventually(Duration::from_secs(30), reconciled).await,
        "no reconcile"
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

    // The metrics-reader ClusterRole of config/rbac, bound to another ServiceAccount: 200.
    let reader_role = support::project_file("config/rbac/metrics_reader_role.yaml");
    support::kubectl_apply(&env, &reader_role, "default");
    let reader = env
        .service_account_kubeconfig("default", "prometheus")
        .await;
    let reader = support::token_of(&reader);
    let binding = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: prometheus-metrics-reader
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: metrics-reader
subjects:
- kind: ServiceAccount
  name: prometheus
  namespace: default
"#;
    support::kubectl_apply(&env, binding, "default");
    // The API server's authorizer sees new bindings after a moment.
    let allowed = async || status(metrics, &https, "/metrics", Some(&reader)).await == 200;
    assert!(
        eventually(Duration::from_secs(10), allowed).await,
        "metrics-reader is not enough"
    );
    let (_, body) = get(metrics, &https, "/metrics", Some(&reader))
        .await
        .unwrap();
    let labels = r#"controller="memcached""#;
    let series = |name: &str| format!("{name}{{{labels}}}");
    let results = ["success", "error", "requeue", "requeue_after"].map(|result| {
        let series = format!(r#"controller_runtime_reconcile_total{{{labels},result="{result}"}}"#);
        sample(&body, &series).unwrap_or_else(|| panic!("no {series} in\n{body}"))
    });
    assert!(
        results.iter().sum::<f64>() >= 1.0,
        "no reconcile counted:\n{body}"
    );
    let reconcile_time = sample(
        &body,
        &series("controller_runtime_reconcile_time_seconds_count"),
    );
    assert!(reconcile_time >= Some(1.0), "no reconcile timed:\n{body}");
    for series in [
        series("controller_runtime_reconcile_errors_total"),
        series("controller_runtime_active_workers"),
        series("controller_runtime_max_concurrent_reconciles"),
        "process_cpu_seconds_total".into(),
        "process_resident_memory_bytes".into(),
        "process_start_time_seconds".into(),
        "process_open_fds".into(),
    ] {
        assert!(sample(&body, &series).is_some(), "no {series} in\n{body}");
    }
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
    let served = async || {
        matches!(
            get(mounted, &first, "/metrics", Some(&reader)).await,
            Ok((200, _))
        )
    };
    assert!(
        eventually(Duration::from_secs(30), served).await,
        "{}",
        manager.log_text()
    );

    let second_ca = write_serving_cert(&certs, "second-ca");
    let second = Scheme::https_trusting(&second_ca);
    let reloaded = async || {
        matches!(
            get(mounted, &second, "/metrics", Some(&reader)).await,
            Ok((200, _))
        )
    };
    assert!(
        eventually(Duration::from_secs(30), reloaded).await,
        "the new certificate was not served:\n{}",
        manager.log_text()
    );
    // A new client (the old one would resume its TLS session without looking at certificates).
    let first = Scheme::https_trusting(&first_ca);
    let old = get(mounted, &first, "/metrics", Some(&reader)).await;
    assert!(old.is_err(), "old certificate still served: {old:?}");
    stop(manager).await;
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
