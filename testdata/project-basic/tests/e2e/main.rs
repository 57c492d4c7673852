// Copyright The project-basic Authors
// SPDX-License-Identifier: Apache-2.0

//! End-to-end tests: the manager runs as its own process, authenticated as its own ServiceAccount with
//! nothing but the RBAC in `config/rbac`, the way it runs in a cluster.
//!
//! By default they share a simulated cluster (etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler and kwok fake nodes), started once and used by one test at a time; with
//! `USE_EXISTING_CLUSTER=true` they use the cluster of `$KUBECONFIG` instead (they create and delete
//! objects there: use a throw-away cluster). The plumbing is rustbuilder-envtest's `e2e` module.
//! `make test-e2e` runs them after `make manifests`; `create api` adds one module per kind at the
//! marker below.

// +rustbuilder:scaffold:e2e

use rustbuilder_envtest::e2e::{self, Project};
pub use rustbuilder_envtest::e2e::{Cluster, eventually};

/// The project as `config/default` deploys it.
pub const PROJECT: Project = Project {
    dir: env!("CARGO_MANIFEST_DIR"),
    manager: env!("CARGO_BIN_EXE_project-basic"),
    namespace: "project-basic-system",
    service_account: "project-basic-controller-manager",
    deployment: "project-basic-controller-manager",
    watch_namespace: true,
};

/// The cluster the checks run on, once the tests before have had their turn on it.
pub async fn cluster() -> Cluster {
    Cluster::start(&PROJECT).await
}

#[tokio::test]
async fn the_manager_runs_with_only_its_own_rbac() {
    let cluster = cluster().await;
    let manager = cluster.deploy_manager(&[]).await;
    // The manager may do what config/rbac grants, and nothing more: the verbs next to the granted
    // ones are refused.
    assert!(
        cluster.can_i("create", "leases.coordination.k8s.io"),
        "the leader-election role is missing"
    );
    assert!(
        cluster.can_i("create", "events.events.k8s.io"),
        "the manager cannot publish events"
    );
    assert!(
        !cluster.can_i("create", "secrets"),
        "the manager may read or write Secrets"
    );
    assert!(
        !cluster.can_i("delete", "namespaces"),
        "the manager may delete namespaces"
    );
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(manager.stop(), "the manager did not exit 0 on SIGTERM");
}

/// `config/default`, what `make deploy` applies, is accepted by the API server, and the manager's Pod
/// passes the restricted Pod Security Standard that its namespace enforces.
#[tokio::test]
async fn config_default_deploys_under_restricted_pod_security() {
    e2e::check_restricted_pod_security(&PROJECT).await;
}
