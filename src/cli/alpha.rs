//! `rustbuilder alpha ...`: commands whose shape may still change.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::project::Project;
use crate::shell;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    Generate(GenerateArgs),
}

/// Re-scaffold a whole project from its PROJECT file (how `testdata/` projects are regenerated).
///
/// The project is generated into a fresh directory first; only when that succeeded is the output directory
/// replaced. In place, everything but `.git`, `target` and `Cargo.lock` is replaced by the new scaffold: commit first.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  rustbuilder alpha generate                           # re-scaffold the current project in place\n  \
                        rustbuilder alpha generate --input-dir old --output-dir new"
)]
pub struct GenerateArgs {
    /// Directory holding the PROJECT file.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub input_dir: PathBuf,
    /// Where to write the project; defaults to the input directory.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
}

/// Entries of an output directory that regeneration never touches: version control, build output, and
/// the lock file cargo writes on the first build.
const KEEP: &[&str] = &[".git", "target", "Cargo.lock"];

pub fn run(command: Command) -> Result<()> {
    let Command::Generate(args) = command;
    let project = Project::load(&args.input_dir)?;
    let output = args.output_dir.unwrap_or_else(|| args.input_dir.clone());
    let parent = std::path::absolute(&output)?
        .parent()
        .map(Path::to_path_buf)
        .context("the output directory has no parent directory")?;
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("failed to create `{}`", parent.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".rustbuilder-generate-")
        .tempdir_in(&parent)
        .with_context(|| {
            format!(
                "failed to create a staging directory in `{}`",
                parent.display()
            )
        })?;
    shell::set_quiet_scoped(|| crate::plugins::rust::generate(&project, staging.path()))
        .context("failed to re-scaffold the project from PROJECT")?;
    replace_contents(staging.path(), &output)?;
    shell::status(
        "Generated",
        format!("{} from its PROJECT file", output.display()),
    );
    shell::note("Next", "regenerate the manifests with:\n$ make manifests");
    Ok(())
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
