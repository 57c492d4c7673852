//! Health probes of a manager process (the example operator) running as a ServiceAccount under RBAC:
//! `/healthz` answers at once, `/readyz` only once the controller's caches are synced, which here
//! waits for the binding of the controller's own permissions.

mod support;

use std::time::Duration;

use rustbuilder_envtest::TestEnv;
use support::{
    ManagerProcess, Scheme, binding, copy_of, create_source, eventually, free_address, get,
    lease_holder,
};

const NAMESPACE: &str = "echo-system";

#[tokio::test]
async fn readyz_waits_for_synced_caches_under_rbac() {
    let env = TestEnv::start().await;
    let client = env.client();
    let dir = tempfile::tempdir().unwrap();
    env.create_namespace(NAMESPACE).await;

    // Everything the manager needs except the controller's access to ConfigMaps.
    support::kubectl_apply(&env, support::MANAGER_ROLE, NAMESPACE);
    support::kubectl_apply(&env, support::MANAGER_BASE_ROLE, NAMESPACE);
    let base = binding(
        "echo-manager-base",
        "echo-manager-base",
        NAMESPACE,
        "manager",
    );
    support::kubectl_apply(&env, &base, NAMESPACE);
    let kubeconfig = env.service_account_kubeconfig(NAMESPACE, "manager").await;

    let (probes, metrics) = (free_address(), free_address());
    let args = [
        "--leader-elect".to_string(),
        format!("--health-probe-bind-address={probes}"),
        format!("--metrics-bind-address={metrics}"),
    ];
    // Out of a pod, the manager finds its namespace in $POD_NAMESPACE.
    let vars = [("POD_NAMESPACE", NAMESPACE)];
    let mut manager =
        ManagerProcess::start_with_env("manager", dir.path(), &kubeconfig, &args, &vars);
    // The controllers start (their caches fill) while it waits for the Lease: wait for both.
    manager
        .wait_for_log("controllers started", Duration::from_secs(60))
        .await;
    manager
        .wait_for_log("became leader", Duration::from_secs(30))
        .await;
    assert!(
        lease_holder(&client, NAMESPACE).await.is_some(),
        "no lease in {NAMESPACE}"
    );

    // Leading, but the controller cannot list ConfigMaps yet: alive, not ready.
    let http = Scheme::Http;
    for _ in 0..3 {
        let healthz = get(probes, &http, "/healthz", None).await.unwrap();
        assert_eq!(healthz, (200, "ok\n".to_string()));
        let (status, reason) = get(probes, &http, "/readyz", None).await.unwrap();
        assert_eq!(
            (status, reason.trim()),
            (503, "0 of 1 controller caches synced")
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // With the controller's permissions the caches sync (after the watchers' backoff): ready.
    let full = binding("echo-manager", "echo-manager", NAMESPACE, "manager");
    support::kubectl_apply(&env, &full, NAMESPACE);
    let ready = async || matches!(get(probes, &http, "/readyz", None).await, Ok((200, _)));
    assert!(
        eventually(Duration::from_secs(60), ready).await,
        "not ready after the role binding:\n{}",
        manager.log_text()
    );

    // The controller works with these permissions.
    create_source(&client, "default", "greeting", &[("hello", "world")]).await;
    let copied = async || copy_of(&client, "default", "greeting").await.is_some();
    assert!(
        eventually(Duration::from_secs(30), copied).await,
        "no copy:\n{}",
        manager.log_text()
    );
    let data = copy_of(&client, "default", "greeting").await.unwrap();
    assert_eq!(data.get("hello").map(String::as_str), Some("world"));
    let reconciled = async || !manager.reconciles().is_empty();
    assert!(eventually(Duration::from_secs(10), reconciled).await);

    // So do the metrics endpoint's own TokenReview and SubjectAccessReview: this ServiceAccount may
    // not read metrics, which is 403 (a failed review would be 500, an unknown token 401).
    let own_token = support::token_of(&kubeconfig);
    let https = Scheme::https_insecure();
    let (status, _) = get(metrics, &https, "/metrics", Some(&own_token))
        .await
        .unwrap();
    assert_eq!(status, 403, "{}", manager.log_text());

    // A clean stop releases the lease, which needs `update` on leases.
    manager.signal(libc::SIGTERM);
    let exited = manager.wait_exit(Duration::from_secs(10)).await;
    assert!(
        exited.is_some_and(|s| s.success()),
        "{exited:?}:\n{}",
        manager.log_text()
    );
    assert_eq!(
        lease_holder(&client, NAMESPACE).await,
        None,
        "lease not released"
    );
    assert_eq!(manager.logged("released the lease").len(), 1);
    assert_eq!(manager.logged("manager stopped").len(), 1);
}
