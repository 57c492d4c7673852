//! Scripts of Kubebuilder commands, as its users write them, run unchanged with `kubebuilder`
//! replaced by `rustbuilder` (tests/fixtures/kubebuilder-scripts/): each scaffolds a project and
//! ends with `make manifests`, `make build-installer` and `make lint` (rustfmt and clippy with
//! warnings as errors). A command Kubebuilder accepts and rustbuilder refuses fails its script.
//!
//! The projects build in the golden projects' target dir with `testdata/project`'s `Cargo.lock`, so
//! their dependencies are the ones already built there.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Deserialize as _;

mod common;
use common::with_shared_build_dir;

const SCRIPTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/kubebuilder-scripts"
);

/// The cert-manager module in a Go module cache, with the CRDs the scripts' external kinds need.
fn go_module_cache(root: &Path) -> PathBuf {
    let cache = root.join("gomodcache");
    let crds = cache.join("github.com/cert-manager/cert-manager@v1.20.2/deploy/crds");
    std::fs::create_dir_all(&crds).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for (fixture, file) in [
        ("certificate-crd.yaml", "crd-certificates.yaml"),
        ("issuer-crd.yaml", "crd-issuers.yaml"),
    ] {
        std::fs::copy(fixtures.join(fixture), crds.join(file)).unwrap();
    }
    cache
}

/// `kubectl` of the envtest assets: `make build-installer` runs `kubectl kustomize`.
fn kubectl() -> PathBuf {
    let assets = std::env::var_os("KUBEBUILDER_ASSETS").expect(
        "KUBEBUILDER_ASSETS is not set: `make build-installer` needs kubectl; run `make test-cli`, or \
         set KUBEBUILDER_ASSETS=$(rustbuilder envtest use 1.36.3 -p path)",
    );
    let kubectl = PathBuf::from(assets).join("kubectl");
    assert!(kubectl.is_file(), "no kubectl in KUBEBUILDER_ASSETS");
    kubectl
}

/// Runs `script` in a new directory, `rustbuilder` first on PATH; returns the project's directory.
fn run(script: &str, root: &Path) -> PathBuf {
    let dir = root.join(script.trim_end_matches(".sh"));
    std::fs::create_dir_all(&dir).unwrap();
    // The golden project's lock: `cargo` adds the new project's own crate and keeps the rest.
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/project/Cargo.lock");
    let bin = Path::new(env!("CARGO_BIN_EXE_rustbuilder"))
        .parent()
        .unwrap();
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let started = Instant::now();
    // Its `make` targets build and run the project's binaries.
    let output = with_shared_build_dir("bash")
        .arg(Path::new(SCRIPTS).join(script))
        .current_dir(&dir)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env("GOMODCACHE", go_module_cache(root))
        .env("KUBECTL", kubectl())
        // A copy of the lock before `make manifests` builds (the scripts' `init` writes none).
        .env("BASH_ENV", write_lock_hook(root, &lock))
        .output()
        .unwrap();
    eprintln!("{script}: {:.0?}", started.elapsed());
    assert!(
        output.status.success(),
        "{script} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    dir
}

/// A `BASH_ENV` file that wraps `make`: the first `make` of a script copies `lock` into the project,
/// and each gives the project's vendored runtime its sources' times first (see
/// `common::vendored_runtime_times`).
fn write_lock_hook(root: &Path, lock: &Path) -> PathBuf {
    let hook = root.join("lock-hook.sh");
    let text = format!(
        "make() {{ [ -f Cargo.lock ] || cp {} Cargo.lock; {}/hack/vendored-runtime-times.sh .; command make \"$@\"; }}\n",
        lock.display(),
        env!("CARGO_MANIFEST_DIR"),
    );
    std::fs::write(&hook, text).unwrap();
    hook
}

fn read(dir: &Path, path: &str) -> String {
    std::fs::read_to_string(dir.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The kinds of the installer's CRDs, in the order kustomize wrote them.
fn installed_kinds(dir: &Path) -> Vec<String> {
    let installer = read(dir, "dist/install.yaml");
    serde_yaml::Deserializer::from_str(&installer)
        .filter_map(|document| {
            let object = serde_yaml::Value::deserialize(document).ok()?;
            (object["kind"] == "CustomResourceDefinition")
                .then(|| object["spec"]["names"]["kind"].as_str().map(String::from))?
        })
        .collect()
}

#[test]
fn a_single_group_script_with_webhooks_on_every_kind_of_type() {
    let root = tempfile::tempdir().unwrap();
    let dir = run("single-group.sh", root.path());
    let mut kinds = installed_kinds(&dir);
    kinds.sort();
    assert_eq!(kinds, ["Admiral", "Captain", "FirstMate", "Sailor"]);
    let webhooks = read(&dir, "config/webhook/manifests.yaml");
    for path in [
        "/custom-mutate-sailor",
        "/custom-validate-sailor",
        "/validate--v1-pod",
        "/mutate-apps-v1-deployment",
        "/mutate-cert-manager-io-v1-issuer",
    ] {
        assert!(webhooks.contains(path), "no webhook at {path}:\n{webhooks}");
    }
    assert!(dir.join("src/controller/sailor_backup.rs").is_file());
    assert!(dir.join("src/external/cert_manager/v1").is_dir());
    let crd = read(
        &dir,
        "config/crd/bases/crew.testproject.org_firstmates.yaml",
    );
    assert!(
        crd.contains("conversion:") && crd.contains("name: v2"),
        "{crd}"
    );
}

#[test]
fn a_multigroup_script() {
    let root = tempfile::tempdir().unwrap();
    let dir = run("multigroup.sh", root.path());
    let mut kinds = installed_kinds(&dir);
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "Bar",
            "Bar",
            "Captain",
            "Cruiser",
            "Destroyer",
            "Frigate",
            "HealthCheckPolicy",
            "Kraken",
            "Leviathan"
        ]
    );
    assert!(dir.join("src/api/sea_creatures/v1beta2").is_dir());
    assert!(dir.join("src/controller/apps/deployment.rs").is_file());
    assert!(read(&dir, "PROJECT").contains("multigroup: true"));
}

#[test]
fn a_namespaced_script_with_the_optional_plugins_by_their_full_keys() {
    let root = tempfile::tempdir().unwrap();
    let dir = run("namespaced-plugins.sh", root.path());
    let mut kinds = installed_kinds(&dir);
    kinds.sort();
    assert_eq!(kinds, ["Busybox", "Memcached"]);
    let project = read(&dir, "PROJECT");
    // PROJECT records rustbuilder's keys of the plugins Kubebuilder's keys named.
    for key in [
        "namespaced: true",
        "deploy-image.rustbuilder.dev/v1-alpha",
        "grafana.rustbuilder.dev/v1-alpha",
        "helm.rustbuilder.dev/v2-alpha",
        "autoupdate.rustbuilder.dev/v1-alpha:\n    useGhModels: true",
    ] {
        assert!(project.contains(key), "PROJECT lacks {key}:\n{project}");
    }
    assert!(dir.join("dist/chart/Chart.yaml").is_file());
    assert!(
        dir.join("grafana/controller-runtime-metrics.json")
            .is_file()
    );
    assert!(read(&dir, ".github/workflows/auto_update.yml").contains("models: read"));
}
