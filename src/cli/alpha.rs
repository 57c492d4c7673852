//! `rustbuilder alpha ...`: commands whose shape may still change.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::project::Project;
use crate::shell;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    Generate(GenerateArgs),
    UpdateRuntime(UpdateRuntimeArgs),
}

/// Refresh the project's `rustbuilder/` directory to the runtime of this rustbuilder.
///
/// `rustbuilder/runtime/` and `rustbuilder/envtest/` become exactly the crates this rustbuilder ships
/// (files they no longer have are removed), and their version requirements in Cargo.toml follow. Nothing
/// else is touched; review the change with `git diff`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  rustbuilder alpha update-runtime\n  git diff --stat rustbuilder/"
)]
pub struct UpdateRuntimeArgs {
    #[command(flatten)]
    pub project: super::ProjectDir,
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
    /// Do not write the manifests at the end (they need a build of the project: `make manifests` later).
    #[arg(long)]
    pub skip_manifests: bool,
}

/// Entries of an output directory that regeneration never touches: version control, build output, and
/// the lock file cargo writes on the first build.
const KEEP: &[&str] = &[".git", "target", "Cargo.lock"];

pub fn run(command: Command) -> Result<()> {
    match command {
        Command::Generate(args) => generate(args),
        Command::UpdateRuntime(args) => update_runtime(args),
    }
}

fn update_runtime(args: UpdateRuntimeArgs) -> Result<()> {
    let plan = crate::vendored::update(&args.project.dir)?;
    let changed = plan.apply()?;
    let version = env!("CARGO_PKG_VERSION");
    if changed.is_empty() {
        shell::status(
            "Fresh",
            format!(
                "{}/ already holds the runtime of rustbuilder {version}",
                crate::vendored::DIR
            ),
        );
        return Ok(());
    }
    let count = changed.len();
    shell::written(changed);
    shell::status(
        "Updated",
        format!(
            "{}/ to the runtime of rustbuilder {version} ({count} file{})",
            crate::vendored::DIR,
            if count == 1 { "" } else { "s" }
        ),
    );
    shell::note(
        "Next",
        "review the change and build:\n$ git diff --stat && cargo build",
    );
    Ok(())
}

fn generate(args: GenerateArgs) -> Result<()> {
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
    shell::set_quiet_scoped(|| crate::plugins::generate(&project, &args.input_dir, staging.path()))
        .context("failed to re-scaffold the project from PROJECT")?;
    replace_contents(staging.path(), &output)?;
    shell::status(
        "Generated",
        format!("{} from its PROJECT file", output.display()),
    );
    let helm = project.plugins.contains_key(crate::project::HELM_PLUGIN);
    if args.skip_manifests {
        let chart = if helm {
            ", then the Helm chart:\n$ make manifests && rustbuilder edit --plugins helm/v2-alpha"
        } else {
            ":\n$ make manifests"
        };
        shell::note("Next", format!("generate the manifests{chart}"));
        return Ok(());
    }
    // As `make manifests`: the project's own writer, so a regenerated project is complete.
    crate::manifests::run(&output, crate::manifests::Mode::Write)
        .context("the project was regenerated, but its manifests were not written")?;
    if helm {
        // The chart is built from the manifests, so it comes last.
        let plan = crate::plugins::helm::edit(&output, true)
            .context("the project was regenerated, but its Helm chart was not written")?;
        plan.apply()?;
        shell::status(
            "Generated",
            format!("the Helm chart in {}", crate::plugins::helm::CHART_DIR),
        );
    }
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
