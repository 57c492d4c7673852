//! Without the control-plane binaries, `TestEnv::start()` panics with one clear line.
//! Each test re-runs itself in a subprocess with a changed environment, so the checks cannot
//! race other tests over environment variables.

#[path = "../../../templates/init/tests/envtest/mod.rs"]
mod envtest;

use std::process::Command;

/// Set in the subprocess: there the test only calls `TestEnv::start()`, which must panic.
const CHILD: &str = "ENVTEST_CHILD";

/// Runs `test` in a fresh copy of this test binary; returns its stderr.
fn start_in_child(test: &str, assets: Option<&std::path::Path>) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture"]).env(CHILD, "1");
    for var in [
        "KUBEBUILDER_ASSETS",
        "TEST_ASSET_ETCD",
        "TEST_ASSET_KUBE_APISERVER",
        "TEST_ASSET_KUBECTL",
    ] {
        cmd.env_remove(var);
    }
    if let Some(dir) = assets {
        cmd.env("KUBEBUILDER_ASSETS", dir);
    }
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "start() did not fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

async fn start_when_child() -> bool {
    if std::env::var_os(CHILD).is_some() {
        envtest::TestEnv::start().await;
        return true;
    }
    false
}

#[tokio::test]
async fn unset_assets_variable_is_explained() {
    if start_when_child().await {
        return;
    }
    let stderr = start_in_child("unset_assets_variable_is_explained", None);
    assert!(
        stderr.contains("KUBEBUILDER_ASSETS is not set: run `make setup-envtest`"),
        "{stderr}"
    );
}

#[tokio::test]
async fn missing_binary_is_named() {
    if start_when_child().await {
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    let stderr = start_in_child("missing_binary_is_named", Some(empty.path()));
    assert!(stderr.contains("envtest: etcd not found at"), "{stderr}");
}
