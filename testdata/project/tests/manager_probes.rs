// Copyright The project Authors
// SPDX-License-Identifier: Apache-2.0

//! Health probes of the manager (the real binary), running as the `controller-manager` ServiceAccount
//! with exactly the RBAC of config/rbac: `/healthz` answers at once, `/readyz` only once the
//! controllers' caches are synced, which here waits for the manager's ClusterRoleBinding.

mod envtest;
mod support;

use std::time::Duration;

use support::{ManagerProcess, Scheme, eventually, free_address, get, lease_holder, project_file};

const NAMESPACE: &str = "project-system";

#[tokio::test]
async fn readyz_waits_for_synced_caches_under_config_rbac() {
    let env = envtest::TestEnv::start().await;
    let client = env.client();
    let dir = tempfile::tempdir().unwrap();
    env.create_namespace(NAMESPACE).await;

    // Everything config/rbac gives the manager, except the binding of its controllers' role.
    for file in [
        "service_account.yaml",
        "role.yaml",
        "leader_election_role.yaml",
        "leader_election_role_binding.yaml",
        "metrics_auth_role.yaml",
        "metrics_auth_role_binding.yaml",
    ] {
        support::kubectl_apply(
            &env,
            &project_file(&format!("config/rbac/{file}")),
            NAMESPACE,
        );
    }
    let kubeconfig = env
        .service_account_kubeconfig(NAMESPACE, "controller-manager")
        .await;

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
    manager
        .wait_for_log("controllers started", Duration::from_secs(30))
        .await;
    assert!(
        lease_holder(&client, NAMESPACE).await.is_some(),
        "no lease in {NAMESPACE}"
    );

    // Leading, but the controller cannot list Memcached objects yet: alive, not ready.
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

    // With config/rbac/role_binding.yaml the cache syncs (after the watcher's backoff) and it is ready.
    let binding = project_file("config/rbac/role_binding.yaml");
    support::kubectl_apply(&env, &binding, NAMESPACE);
    let ready = async || matches!(get(probes, &http, "/readyz", None).await, Ok((200, _)));
    assert!(
        eventually(Duration::from_secs(60), ready).await,
        "not ready after the role binding:\n{}",
        manager.log_text()
    );

    // The controller works with these permissions, and so does the metrics endpoint's own
    // TokenReview and SubjectAccessReview (this ServiceAccount may not read metrics: 403, not 500).
    support::create_sample(&client, "default", "rbac-sample").await;
    let reconciled = async || {
        let reconciles = manager.reconciles();
        reconciles
            .iter()
            .any(|line| line["fields"]["message"] == "reconciled")
    };
    assert!(
        eventually(Duration::from_secs(30), reconciled).await,
        "{}",
        manager.log_text()
    );
    let own_token = support::token_of(&kubeconfig);
    let https = Scheme::https_insecure();
    let (status, _) = get(metrics, &https, "/metrics", Some(&own_token))
        .await
        .unwrap();
    assert_eq!(status, 403);

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
}
