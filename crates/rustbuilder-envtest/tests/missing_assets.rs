//! Where `TestEnv` finds its binaries, and how it fails without them. Each test re-runs itself in a
//! subprocess with a changed environment, so the checks cannot race other tests over variables.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rustbuilder_envtest::{TestEnv, assets};

/// Set in the subprocess: there the test only calls `TestEnv::start()`.
const CHILD: &str = "ENVTEST_CHILD";

/// An index URL nothing listens on: "no network", decided at once.
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/envtest-releases.yaml")
}

/// Runs `test` in a fresh copy of this test binary without any asset variables and without network
/// (the release index on a closed port), plus `vars`.
fn start_in_child(test: &str, vars: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture"]).env(CHILD, "1");
    for var in [
        "KUBEBUILDER_ASSETS",
        "ENVTEST_K8S_VERSION",
        "TEST_ASSET_ETCD",
        "TEST_ASSET_KUBE_APISERVER",
        "TEST_ASSET_KUBECTL",
        "GO",
        "ENVTEST_FROM_SOURCE",
        "ENVTEST_DOWNLOAD_URL",
        "ENVTEST_KUBERNETES_URL",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("ENVTEST_INDEX_URL", closed_port_url());
    for (var, value) in vars {
        cmd.env(var, value);
    }
    cmd.output().unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// In the subprocess, starts an env (a panic fails the subprocess) and returns true.
async fn start_when_child() -> bool {
    if std::env::var_os(CHILD).is_some() {
        TestEnv::start().await;
        return true;
    }
    false
}

/// The real assets of the test run, to put into a fake cache.
fn real_assets() -> PathBuf {
    let dir = std::env::var_os("KUBEBUILDER_ASSETS")
        .expect("KUBEBUILDER_ASSETS must point at the control-plane binaries for this test");
    PathBuf::from(dir)
}

#[tokio::test]
async fn kubebuilder_assets_without_the_binaries_names_the_missing_one() {
    if start_when_child().await {
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    let out = start_in_child(
        "kubebuilder_assets_without_the_binaries_names_the_missing_one",
        &[("KUBEBUILDER_ASSETS", empty.path())],
    );
    assert!(!out.status.success(), "start() did not fail");
    let stderr = stderr(&out);
    let etcd = empty.path().join("etcd");
    assert!(
        stderr.contains(&format!("envtest: etcd not found at {}", etcd.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains("help: KUBEBUILDER_ASSETS must hold etcd, kube-apiserver, kubectl"),
        "{stderr}"
    );
}

#[tokio::test]
async fn without_assets_network_or_go_the_panic_says_what_to_do() {
    if start_when_child().await {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let out = start_in_child(
        "without_assets_network_or_go_the_panic_says_what_to_do",
        &[("XDG_DATA_HOME", home.path()), ("PATH", home.path())],
    );
    assert!(!out.status.success(), "start() did not fail");
    let stderr = stderr(&out);
    assert!(
        stderr.contains(
            "etcd, kube-apiserver, kubectl could not be downloaded (cannot fetch the index"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("and Go (`go`) is not installed"),
        "{stderr}"
    );
    assert!(stderr.contains("check the network"), "{stderr}");
    assert!(stderr.contains("install Go 1.26 or newer"), "{stderr}");
    assert!(stderr.contains("KUBEBUILDER_ASSETS"), "{stderr}");
    let cache = home.path().join("kubebuilder-envtest");
    assert!(
        assets::list(&cache).unwrap().is_empty(),
        "a cache entry was left"
    );
}

#[tokio::test]
async fn an_invalid_envtest_k8s_version_is_explained() {
    if start_when_child().await {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let out = start_in_child(
        "an_invalid_envtest_k8s_version_is_explained",
        &[
            ("XDG_DATA_HOME", home.path()),
            ("ENVTEST_K8S_VERSION", Path::new("1.36.x")),
        ],
    );
    assert!(!out.status.success(), "start() did not fail");
    let stderr = stderr(&out);
    assert!(
        stderr.contains("ENVTEST_K8S_VERSION: invalid Kubernetes version `1.36.x`"),
        "{stderr}"
    );
}

/// A cache under `home` whose `version` entry holds the real assets.
fn cache_with(home: &Path, version: &str) {
    let k8s = home.join("kubebuilder-envtest/k8s");
    std::fs::create_dir_all(&k8s).unwrap();
    std::os::unix::fs::symlink(real_assets(), k8s.join(assets::platform_dir(version))).unwrap();
}

#[tokio::test]
async fn without_kubebuilder_assets_the_cache_of_the_default_version_is_used() {
    if start_when_child().await {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    cache_with(home.path(), assets::DEFAULT_KUBERNETES_VERSION);
    // No Go on PATH: the env can only start from the cache.
    let out = start_in_child(
        "without_kubebuilder_assets_the_cache_of_the_default_version_is_used",
        &[("XDG_DATA_HOME", home.path()), ("PATH", home.path())],
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test]
async fn envtest_k8s_version_chooses_the_cache_entry() {
    if start_when_child().await {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    cache_with(home.path(), "1.99.0");
    let out = start_in_child(
        "envtest_k8s_version_chooses_the_cache_entry",
        &[
            ("XDG_DATA_HOME", home.path()),
            ("PATH", home.path()),
            ("ENVTEST_K8S_VERSION", Path::new("v1.99.0")),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));

    // The same cache without that version: nothing to start from, nothing to download it from and no
    // Go to build it.
    let out = start_in_child(
        "envtest_k8s_version_chooses_the_cache_entry",
        &[
            ("XDG_DATA_HOME", home.path()),
            ("PATH", home.path()),
            ("ENVTEST_K8S_VERSION", Path::new("1.98.0")),
        ],
    );
    assert!(!out.status.success(), "started without assets for 1.98.0");
    assert!(
        stderr(&out).contains("could not be downloaded")
            && stderr(&out).contains("is not installed"),
        "{}",
        stderr(&out)
    );
}
