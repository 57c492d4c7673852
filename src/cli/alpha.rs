//! `rustbuilder alpha ...`: commands whose shape may still change.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use clap::ArgAction;

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
    /// The version to move to: only this rustbuilder's own (Kubebuilder's flag, checked).
    #[arg(long, value_name = "VERSION")]
    pub to_version: Option<String>,
    /// Commit the update on a branch made from this one (default with any branch flag: the current branch).
    #[arg(long, value_name = "BRANCH", help_heading = "On a branch")]
    pub from_branch: Option<String>,
    /// The branch the update is committed on (default: `rustbuilder-update-from-OLD-to-NEW`).
    #[arg(long, value_name = "BRANCH", help_heading = "On a branch")]
    pub output_branch: Option<String>,
    /// Commit even with conflict markers left in files.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false, help_heading = "On a branch")]
    pub force: bool,
    /// Two commits: the scaffold's changes alone, then the files merged with your edits.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false, help_heading = "On a branch")]
    pub show_commits: bool,
    /// A path kept as the base branch has it (repeatable), e.g. your CI workflows.
    #[arg(long, value_name = "PATH", help_heading = "On a branch")]
    pub restore_path: Vec<PathBuf>,
    /// Push the branch to `origin`.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false, help_heading = "On a branch")]
    pub push: bool,
    /// The commit message (default: `Update the scaffold to rustbuilder NEW`).
    #[arg(long, value_name = "MESSAGE", help_heading = "On a branch")]
    pub merge_message: Option<String>,
    /// The commit message when conflicts are committed (--force).
    #[arg(long, value_name = "MESSAGE", help_heading = "On a branch")]
    pub conflict_message: Option<String>,
    /// After the push, open a GitHub issue for the review (needs `gh`).
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false, help_heading = "On a branch")]
    pub open_gh_issue: bool,
    /// Comment a summary of the update on the issue, written by GitHub Models (needs `--open-gh-issue`
    /// and gh's `gh-models` extension); a summary that fails is a warning.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false, help_heading = "On a branch")]
    pub use_gh_models: bool,
    /// A git setting for the update's commands, `key=value` (repeatable).
    #[arg(long, value_name = "KEY=VALUE", help_heading = "On a branch")]
    pub git_config: Vec<String>,
}

impl UpdateArgs {
    /// The branch flags, when any is given: the update is then committed on a branch.
    fn branch(&self) -> Option<crate::update::branch::BranchOptions> {
        let on_branch = self.from_branch.is_some()
            || self.output_branch.is_some()
            || self.force
            || self.show_commits
            || !self.restore_path.is_empty()
            || self.push
            || self.merge_message.is_some()
            || self.conflict_message.is_some()
            || self.open_gh_issue
            || self.use_gh_models
            || !self.git_config.is_empty();
        on_branch.then(|| crate::update::branch::BranchOptions {
            from_branch: self.from_branch.clone(),
            output_branch: self.output_branch.clone(),
            force: self.force,
            show_commits: self.show_commits,
            restore_paths: self.restore_path.clone(),
            push: self.push,
            merge_message: self.merge_message.clone(),
            conflict_message: self.conflict_message.clone(),
            open_gh_issue: self.open_gh_issue,
            use_gh_models: self.use_gh_models,
            git_config: self.git_config.clone(),
        })
    }
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
    if let Some(version) = &args.to_version {
        crate::update::branch::check_to_version(version)?;
    }
    let branch = args.branch();
    let options = Options {
        dir: args.project.dir,
        from_version: args.from_version,
        from_binary: args.from_binary,
    };
    if let Some(branch) = branch {
        return update_on_branch(&options, &branch);
    }
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
    print_report(&report);
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

/// What the merge did, file by file.
fn print_report(report: &crate::update::Report) {
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
}

/// `alpha update` with branch flags: the update committed on its own branch.
fn update_on_branch(
    options: &crate::update::Options,
    branch: &crate::update::branch::BranchOptions,
) -> Result<()> {
    use crate::update::VERSION;
    use crate::update::branch::BranchOutcome;
    let committed = match crate::update::branch::run(options, branch)? {
        BranchOutcome::UpToDate => {
            shell::status(
                "Fresh",
                format!("the project was scaffolded by rustbuilder {VERSION}: no branch made"),
            );
            return Ok(());
        }
        BranchOutcome::Committed(committed) => *committed,
    };
    let report = &committed.report;
    print_report(report);
    let name = &committed.branch;
    if committed.commits == 0 {
        let list: String = report
            .conflicts
            .iter()
            .map(|f| format!("\n  {}", f.display()))
            .collect();
        bail!(
            "the update from rustbuilder {} to {} left conflicts in {} file{} on the branch `{name}`, not committed:{list}\n\
             help: resolve the `<<<<<<<` markers on it, then `git add -A && git commit`\n\
             help: or start again (`git restore . && git clean -fd && git switch {} && git branch -D {name}`) and pass `--force` to commit them as they are",
            report.from,
            report.to,
            report.conflicts.len(),
            if report.conflicts.len() == 1 { "" } else { "s" },
            committed.base,
        );
    }
    let commits = if committed.commits == 1 {
        "1 commit"
    } else {
        "2 commits"
    };
    shell::status(
        "Committed",
        format!(
            "the update from rustbuilder {} to {} on the branch `{name}` ({commits} on `{}`)",
            report.from, report.to, committed.base
        ),
    );
    if !report.conflicts.is_empty() {
        shell::warning(format!(
            "{} file{} committed with conflict markers: resolve them on `{name}`",
            report.conflicts.len(),
            if report.conflicts.len() == 1 { "" } else { "s" }
        ));
    }
    if committed.pushed {
        shell::status("Pushed", format!("`{name}` to origin"));
    }
    if let Some(issue) = &committed.issue {
        shell::status("Opened", format!("the review issue {issue}"));
    }
    match &committed.summary {
        Some(Ok(())) => shell::status("Commented", "a summary of the update by GitHub Models"),
        Some(Err(why)) => shell::warning(format!("no summary by GitHub Models: {why}")),
        None => {}
    }
    shell::note(
        "Next",
        format!(
            "review the branch, refresh the manifests, test:\n$ git diff {}...{name}\n$ make manifests lint test",
            committed.base
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
