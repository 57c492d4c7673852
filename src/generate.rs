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

/// Gives each file under `staging` that has the same bytes as its counterpart under `output` the
/// counterpart's modification time.
fn keep_times_of_unchanged(staging: &Path, output: &Path) -> Result<()> {
    for entry in std::fs::read_dir(staging)? {
        let entry = entry?;
        let (staged, existing) = (entry.path(), output.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            if existing.is_dir() {
                keep_times_of_unchanged(&staged, &existing)?;
            }
        } else if existing.is_file() && std::fs::read(&staged)? == std::fs::read(&existing)? {
            let modified = std::fs::metadata(&existing)?.modified()?;
            std::fs::File::options()
                .write(true)
                .open(&staged)?
                .set_modified(modified)
                .with_context(|| format!("failed to set the time of `{}`", staged.display()))?;
        }
    }
    Ok(())
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

/// Makes `output` hold exactly what `staging` holds, keeping `KEEP` entries of `output`. A file whose
/// text did not change keeps its modification time, so cargo does not rebuild what regeneration left as
/// it was (the vendored runtime, unchanged code).
fn replace_contents(staging: &Path, output: &Path) -> Result<()> {
    if output.exists() {
        keep_times_of_unchanged(staging, output)?;
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

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::{Duration, SystemTime};

    use super::*;

    fn modified(path: &Path) -> SystemTime {
        fs::metadata(path).unwrap().modified().unwrap()
    }

    /// Writes each (path, text) under `root`; returns the paths written.
    fn write_files(root: &Path, files: &[(&str, &str)]) -> Vec<std::path::PathBuf> {
        let write = |(path, text): &(&str, &str)| {
            let path = root.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, text).unwrap();
            path
        };
        files.iter().map(write).collect()
    }

    #[test]
    fn regenerated_files_keep_their_time_only_when_their_text_is_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let (output, staging) = (dir.path().join("output"), dir.path().join("staging"));
        let long_ago = SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
        let old = [
            ("src/same.rs", "same"),
            ("src/changed.rs", "old"),
            ("gone.rs", ""),
        ];
        for path in write_files(&output, &old) {
            let file = fs::File::options().write(true).open(path).unwrap();
            file.set_modified(long_ago).unwrap();
        }
        let new = [
            ("src/same.rs", "same"),
            ("src/changed.rs", "new"),
            ("new.rs", ""),
        ];
        write_files(&staging, &new);

        replace_contents(&staging, &output).unwrap();

        assert_eq!(modified(&output.join("src/same.rs")), long_ago);
        assert_ne!(modified(&output.join("src/changed.rs")), long_ago);
        assert_eq!(
            fs::read_to_string(output.join("src/changed.rs")).unwrap(),
            "new"
        );
        assert!(output.join("new.rs").is_file() && !output.join("gone.rs").exists());
    }
}
