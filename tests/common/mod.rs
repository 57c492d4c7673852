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

/// A command for a project built in the shared `PROJECTS_TARGET_DIR`, run holding that directory's
/// lock (`flock`): the projects there name their binaries alike (`crdgen`), so one project's build
/// would replace the binary another's `cargo run` is about to start. Every test binary that builds
/// projects there (cli, migrate, kubebuilder_scripts) takes this lock.
pub fn locked(target: &Path, program: impl AsRef<std::ffi::OsStr>) -> Command {
    std::fs::create_dir_all(target).unwrap();
    let mut command = Command::new("flock");
    command.arg(target.join(".projects.lock")).arg(program);
    command
}
