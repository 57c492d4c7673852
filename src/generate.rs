//! Re-scaffolding a whole project from its PROJECT file (`alpha generate`); `alpha update` builds the
//! two scaffolds it merges with it.

use std::path::Path;

use anyhow::{Context as _, Result, bail};

use crate::project::{self, Project};

/// Entries of an output directory that regeneration never touches: version control, build output, and
/// the lock file cargo writes on the first build.
pub const KEEP: &[&str] = &[".git", "target", "Cargo.lock"];

/// Rebuilds the project whose PROJECT file is in `input` into `output`, without its manifests.
///
/// The project is generated into a fresh directory next to `output` first; only when that succeeded are
/// `output`'s contents (but [`KEEP`]) replaced by it. A Helm chart in `input` comes along as it is, and
/// PROJECT keeps the Helm plugin's record: the chart is built from manifests, which come later.
pub fn scaffold(input: &Path, output: &Path) -> Result<Project> {
    let text = std::fs::read_to_string(input.join(project::FILE_NAME)).ok();
    if let Some(text) = text.filter(|t| crate::project::is_kubebuilder(t)) {
        return from_kubebuilder(&text, input, output);
    }
    let project = Project::load(input)?;
    let staging = staging_dir(output)?;
    crate::shell::set_quiet_scoped(|| crate::plugins::generate(&project, input, staging.path()))
        .context("failed to re-scaffold the project from PROJECT")?;
    if let Some(helm) = project.plugins.get(project::HELM_PLUGIN) {
        crate::plugins::helm::carry(Some(input), staging.path(), helm)
            .context("failed to keep the project's Helm chart")?;
    }
    replace_contents(staging.path(), output)?;
    Ok(project)
}

/// Makes the Rust project of the Kubebuilder project in `input` in `output`, which must be another
/// directory: the Go project stays as it is. What was translated or left out is printed as notes.
fn from_kubebuilder(text: &str, input: &Path, output: &Path) -> Result<Project> {
    if std::path::absolute(input)? == std::path::absolute(output)? {
        bail!(
            "`{}` is a Kubebuilder project: its Rust counterpart is written to another directory, so the Go code stays\nhelp: pass `--output-dir <new directory>`",
            input.display()
        );
    }
    let imported = crate::kubebuilder::import(text, input)
        .context("failed to read the Kubebuilder PROJECT file")?;
    for note in &imported.notes {
        crate::shell::note("Kubebuilder", note);
    }
    let project = imported.project;
    let staging = staging_dir(output)?;
    crate::shell::set_quiet_scoped(|| crate::plugins::generate(&project, input, staging.path()))
        .context("failed to scaffold the Rust project from Kubebuilder's PROJECT")?;
    if let Some(helm) = project.plugins.get(project::HELM_PLUGIN) {
        // The Go project's chart is not this project's: the plugin is recorded, and the chart built
        // from the Rust project's manifests.
        crate::plugins::helm::carry(None, staging.path(), helm)
            .context("failed to record the Helm plugin")?;
    }
    replace_contents(staging.path(), output)?;
    Project::load(output)
}

/// A fresh directory next to `output`, to build a project in before it replaces `output`'s contents.
fn staging_dir(output: &Path) -> Result<tempfile::TempDir> {
    let parent = std::path::absolute(output)?
        .parent()
        .map(Path::to_path_buf)
        .context("the output directory has no parent directory")?;
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("failed to create `{}`", parent.display()))?;
    tempfile::Builder::new()
        .prefix(".rustbuilder-generate-")
        .tempdir_in(&parent)
        .with_context(|| {
            format!(
                "failed to create a staging directory in `{}`",
                parent.display()
            )
        })
}

/// Makes `output` hold exactly what `staging` holds, keeping `KEEP` entries of `output`.
fn replace_contents(staging: &Path, output: &Path) -> Result<()> {
    if output.exists() {
        for entry in std::fs::read_dir(output)
            .with_context(|| format!("failed to read `{}`", output.display()))?
        {
            let entry = entry?;
            if KEEP.iter().any(|k| entry.file_name() == *k) {
                continue;
            }
            let path = entry.path();
            let removed = if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.with_context(|| format!("failed to remove `{}`", path.display()))?;
        }
    } else {
        std::fs::create_dir_all(output)
            .with_context(|| format!("failed to create `{}`", output.display()))?;
    }
    for entry in std::fs::read_dir(staging)? {
        let entry = entry?;
        let target = output.join(entry.file_name());
        if target.exists() {
            bail!(
                "`{}` is in the way of the regenerated project",
                target.display()
            );
        }
        std::fs::rename(entry.path(), &target)
            .with_context(|| format!("failed to move into `{}`", target.display()))?;
    }
    Ok(())
}
