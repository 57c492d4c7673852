//! `rustbuilder alpha ...`: commands whose shape may still change.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};

use crate::shell;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    Generate(GenerateArgs),
    Update(UpdateArgs),
    UpdateRuntime(UpdateRuntimeArgs),
}

/// Move the project to the scaffold of this rustbuilder, keeping your code (a three-way merge).
///
/// The project is re-scaffolded from its PROJECT file twice, by the rustbuilder that made it (the
/// ancestor) and by this one; what changed between the two is merged into your files with
/// `git merge-file`. The tree must be committed first: the result is written into it, to review with
/// `git diff` and undo with `git restore`. Conflicts are left as `<<<<<<<` markers and listed.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  rustbuilder alpha update                             # from PROJECT's cliVersion\n  \
                        rustbuilder alpha update --from-binary ~/old/rustbuilder\n  \
                        git diff && make manifests lint test"
)]
pub struct UpdateArgs {
    #[command(flatten)]
    pub project: super::ProjectDir,
    /// The rustbuilder version that scaffolded the project (default: `cliVersion` in PROJECT).
    #[arg(long, value_name = "VERSION")]
    pub from_version: Option<String>,
    /// The executable of that rustbuilder (default: `rustbuilder-<VERSION>` on PATH, then
    /// `~/.cache/rustbuilder/releases/<VERSION>/bin/rustbuilder`).
    #[arg(long, value_name = "PATH")]
    pub from_binary: Option<PathBuf>,
}

/// Refresh the project's `rustbuilder/` directory to the runtime of this rustbuilder.
///
/// `rustbuilder/runtime/` and `rustbuilder/envtest/` become exactly the crates this rustbuilder ships
/// (files they no longer have are removed), and their version requirements in Cargo.toml follow. A project
/// on the crates.io runtime (`init --runtime-source registry`) has no copy: only the requirements move to
/// this rustbuilder's version. Nothing else is touched; review the change with `git diff`.
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

pub fn run(command: Command) -> Result<()> {
    match command {
        Command::Generate(args) => generate(args),
        Command::Update(args) => update(args),
        Command::UpdateRuntime(args) => update_runtime(args),
    }
}

fn update_runtime(args: UpdateRuntimeArgs) -> Result<()> {
    use crate::plugins::rust::RuntimeSource;
    let project = crate::project::Project::load(&args.project.dir)?;
    let (what, holds) = match RuntimeSource::of(&project)? {
        RuntimeSource::Vendored => (format!("{}/", crate::vendored::DIR), "holds"),
        RuntimeSource::Registry => ("Cargo.toml".to_string(), "asks for"),
    };
    let plan = crate::vendored::update(&args.project.dir)?;
    let changed = plan.apply()?;
    let version = env!("CARGO_PKG_VERSION");
    if changed.is_empty() {
        shell::status(
            "Fresh",
            format!("{what} already {holds} the runtime of rustbuilder {version}"),
        );
        return Ok(());
    }
    let count = changed.len();
    shell::written(changed);
    shell::status(
        "Updated",
        format!(
            "{what} to the runtime of rustbuilder {version} ({count} file{})",
            if count == 1 { "" } else { "s" }
        ),
    );
    shell::note(
        "Next",
        "review the change and build:\n$ git diff --stat && cargo build",
    );
    Ok(())
}

fn update(args: UpdateArgs) -> Result<()> {
    use crate::update::{Options, Outcome, VERSION};
    let options = Options {
        dir: args.project.dir,
        from_version: args.from_version,
        from_binary: args.from_binary,
    };
    let report = match crate::update::run(&options)? {
        Outcome::UpToDate => {
            shell::status(
                "Fresh",
                format!("the project was scaffolded by rustbuilder {VERSION}: nothing to update"),
            );
            return Ok(());
        }
        Outcome::Merged(report) => *report,
    };
    let (from, to) = (&report.from, &report.to);
    for (verb, files) in [
        ("Creating", &report.added),
        ("Updating", &report.updated),
        ("Removing", &report.removed),
        ("Merged", &report.merged),
    ] {
        for file in files {
            shell::status(verb, file.display());
        }
    }
    for (from, to) in &report.moved {
        shell::status("Moving", format!("{} to {}", from.display(), to.display()));
    }
    for file in &report.conflicts {
        shell::warning(format!("conflicts in `{}`", file.display()));
    }
    for (file, reason) in &report.kept {
        shell::note("Kept", format!("{}: {reason}", file.display()));
    }
    if !report.conflicts.is_empty() {
        let list = report
            .conflicts
            .iter()
            .map(|f| format!("  {}", f.display()))
            .collect::<Vec<_>>()
            .join("\n");
        bail!(
            "the update from rustbuilder {from} to {to} left conflicts in {} file{}:\n{list}\n\
             help: resolve the `<<<<<<<` markers in them, then `git add -A` and commit\n\
             help: or undo the whole update: `git restore . && git clean -fd`",
            report.conflicts.len(),
            if report.conflicts.len() == 1 { "" } else { "s" }
        );
    }
    if report.is_empty() {
        shell::status(
            "Fresh",
            format!("the project already holds what rustbuilder {to} scaffolds"),
        );
        return Ok(());
    }
    shell::status(
        "Updated",
        format!("the project from rustbuilder {from} to {to}"),
    );
    let chart = if report.helm {
        "\n$ rustbuilder edit --plugins helm/v2-alpha"
    } else {
        ""
    };
    shell::note(
        "Next",
        format!(
            "review the change, refresh the manifests, test, and commit:\n$ git diff\n$ make manifests lint test{chart}\n$ git add -A && git commit -m \"Update the scaffold to rustbuilder {to}\""
        ),
    );
    Ok(())
}

fn generate(args: GenerateArgs) -> Result<()> {
    let output = args.output_dir.unwrap_or_else(|| args.input_dir.clone());
    let project = crate::generate::scaffold(&args.input_dir, &output)?;
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
        let options = crate::plugins::helm::Options {
            force: true,
            replay: true,
            ..Default::default()
        };
        let edit = crate::plugins::helm::edit(&output, &options)
            .context("the project was regenerated, but its Helm chart was not written")?;
        edit.plan.apply()?;
        shell::status(
            "Generated",
            format!("the Helm chart in {} from {}", edit.chart_dir, edit.source),
        );
    }
    Ok(())
}
