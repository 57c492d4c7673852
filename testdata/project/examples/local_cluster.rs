// Copyright The project Authors
// SPDX-License-Identifier: Apache-2.0

//! A local Kubernetes cluster for trying the operator without Docker or a real cluster: etcd,
//! kube-apiserver, kube-controller-manager, kube-scheduler and kwok fake nodes (Pods become Running without
//! containers), started from `KUBEBUILDER_ASSETS` by the same harness the tests use.
//!
//! `make local-cluster` runs it; it writes a kubeconfig (default `bin/local-cluster.kubeconfig`), prints
//! how to use it, and on Ctrl-C or SIGTERM stops everything and removes what it created.

#[path = "../tests/envtest/mod.rs"]
mod envtest;

use std::path::PathBuf;

use tokio::signal::unix::{SignalKind, signal};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let path = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or("bin/local-cluster.kubeconfig".into()),
    );
    let env = envtest::TestEnv::start_cluster().await;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).expect("the kubeconfig directory can be created");
    }
    std::fs::copy(env.kubeconfig(), &path).expect("the kubeconfig can be written");
    println!(
        "Local cluster ready. In another shell:\n  export KUBECONFIG={}",
        path.display()
    );
    println!("  make install run\nPress Ctrl-C to stop it.");

    let mut terminate = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    let _ = std::fs::remove_file(&path);
    drop(env);
    println!("Local cluster stopped.");
}
