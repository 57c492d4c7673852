//! What the test binaries that build generated projects share.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where generated projects build: `PROJECTS_TARGET_DIR`, else the cache `make test` uses, so their
/// dependencies are built once for all of them.
pub fn projects_target_dir() -> PathBuf {
    std::env::var_os("PROJECTS_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/rustbuilder/target-projects"))
        })
        .expect("PROJECTS_TARGET_DIR or HOME")
}

/// A command that builds a generated project with the other projects' build cache: cargo's build dir
/// is `PROJECTS_TARGET_DIR`, shared, so the dependencies and the vendored runtime compile once for all
/// of them, while the binaries land in the project's own `target/` (no project's `cargo run` starts a
/// `crdgen` another project just built), and builds need no lock of ours.
///
/// Cargo tells a path package's builds apart by its name, version and place in its workspace, and
/// reuses one when the sources are older than the build: two projects built at the same time must not
/// share a package name (`--project-name`), or one could run with the other's compiled code.
pub fn with_shared_build_dir(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    command
        .env("CARGO_BUILD_BUILD_DIR", projects_target_dir())
        .env_remove("CARGO_TARGET_DIR");
    // What `cargo test` tells this test about its own package is no business of the project's build:
    // ring's build script watches CARGO_MANIFEST_DIR, and a cargo that inherits it would rebuild ring,
    // rustls and kube over the other projects' builds of them.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name == "CARGO_MANIFEST_DIR"
            || name.starts_with("CARGO_PKG_")
            || name == "CARGO_CRATE_NAME"
        {
            command.env_remove(name.as_ref());
        }
    }
    command
}

/// Gives the unchanged files of the project's vendored runtime their sources' times
/// (`hack/vendored-runtime-times.sh`), so that cargo reuses the runtime it built for an earlier project.
#[allow(dead_code)] // the Kubebuilder scripts call the script from their shell
pub fn vendored_runtime_times(project: &Path) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/hack/vendored-runtime-times.sh"
    );
    let status = Command::new(script).arg(project).status().unwrap();
    assert!(status.success(), "{script} {} failed", project.display());
}

/// Gives a project without a `Cargo.lock` the golden project's, as the tutorials and the Kubebuilder
/// scripts start: a project that resolved its dependencies afresh could pick newer releases than the
/// golden projects build with, and then rebuild kube, its TLS and the vendored runtime for them.
#[allow(dead_code)] // not every test binary builds projects with cargo itself
pub fn golden_lock(project: &Path) {
    let lock = project.join("Cargo.lock");
    if project.join("Cargo.toml").is_file() && !lock.exists() {
        let golden = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/project/Cargo.lock");
        std::fs::copy(golden, &lock).unwrap();
    }
}

/// Runs `cargo ARGS` in the project `dir` (see [`with_shared_build_dir`], [`vendored_runtime_times`],
/// [`golden_lock`]) and returns its output; panics with both streams when it fails.
#[allow(dead_code)] // not every test binary builds projects with cargo itself
pub fn cargo(dir: &Path, args: &[&str]) -> String {
    vendored_runtime_times(dir);
    golden_lock(dir);
    let output = with_shared_build_dir("cargo")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "`cargo {}` failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
