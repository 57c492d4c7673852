//! `alpha update` on a branch: the update committed on a branch of its own, the way a team reviews it.
//!
//! The base branch is checked out, the new scaffold merged into it as [`super::run`] does, and the
//! result committed on the output branch (`rustbuilder-update-from-<old>-to-<new>` unless named):
//! one commit, or with `show_commits` the files the scaffold changed alone apart from the files merged
//! with your edits. Conflicts stop before the commit unless `force` commits them, markers and all.
//! Then, if asked, the branch is pushed to `origin` and a GitHub issue opened for its review.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};

use super::{Options, Outcome, Report, VERSION};

/// How the update is committed.
#[derive(Debug, Clone, Default)]
pub struct BranchOptions {
    /// The branch holding the project (default: the current one).
    pub from_branch: Option<String>,
    /// The branch the update is committed on (default: `rustbuilder-update-from-<old>-to-<new>`).
    pub output_branch: Option<String>,
    /// Commit even when files are left with conflict markers.
    pub force: bool,
    /// Two commits instead of one: the scaffold's own changes, then the files merged with yours.
    pub show_commits: bool,
    /// Paths (relative to the project) kept as the base branch has them, whatever the scaffold says.
    pub restore_paths: Vec<PathBuf>,
    /// Push the output branch to `origin`.
    pub push: bool,
    /// The commit message when nothing conflicts.
    pub merge_message: Option<String>,
    /// The commit message when conflicts are committed (`force`).
    pub conflict_message: Option<String>,
    /// Open a GitHub issue (with `gh`) for the review, after the push.
    pub open_gh_issue: bool,
    /// Comment on that issue a summary of the update by GitHub Models (`gh models run`).
    pub use_gh_models: bool,
    /// `key=value` settings for every git command of the update (`git -c key=value`).
    pub git_config: Vec<String>,
}

/// What happened on the branch.
#[derive(Debug)]
pub struct Committed {
    pub branch: String,
    pub base: String,
    pub report: Report,
    /// The commits made: none when conflicts stopped the update before it committed.
    pub commits: usize,
    pub pushed: bool,
    /// What `gh issue create` printed (the issue's address).
    pub issue: Option<String>,
    /// Whether GitHub Models' summary was commented on the issue (`Err`: why not), when asked for.
    pub summary: Option<Result<(), String>>,
}

/// The outcome of an update on a branch.
#[derive(Debug)]
pub enum BranchOutcome {
    /// PROJECT already records this rustbuilder: no branch was made.
    UpToDate,
    Committed(Box<Committed>),
}

/// Runs `alpha update` on a branch.
pub fn run(options: &Options, branch: &BranchOptions) -> Result<BranchOutcome> {
    let dir = &options.dir;
    let git = Git {
        dir,
        config: &branch.git_config,
    };
    for setting in &branch.git_config {
        if !setting.contains('=') || setting.starts_with('=') {
            bail!(
                "`--git-config {setting}` is not `key=value`\nhelp: e.g. `--git-config merge.renameLimit=999999`"
            );
        }
    }
    if branch.use_gh_models && !branch.open_gh_issue {
        bail!(
            "`--use-gh-models` comments its summary on the review issue\nhelp: add `--open-gh-issue --push`"
        );
    }
    if branch.open_gh_issue && !branch.push {
        bail!(
            "`--open-gh-issue` links the issue to the pushed branch\nhelp: add `--push`, so the branch is on `origin` first"
        );
    }
    super::check_repository(dir)?;
    super::check_clean(dir)?;
    let current = git
        .text(&["symbolic-ref", "--quiet", "--short", "HEAD"])
        .ok();
    let base = match (&branch.from_branch, &current) {
        (Some(base), _) => base.clone(),
        (None, Some(current)) => current.clone(),
        (None, None) => bail!(
            "HEAD is detached: there is no branch to update\nhelp: name the branch holding the project with `--from-branch BRANCH`"
        ),
    };
    let local = |name: &str| {
        git.succeeds(&[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{name}"),
        ])
    };
    if !local(&base) {
        bail!(
            "there is no branch `{base}`\nhelp: `--from-branch` names a local branch: `git branch` lists them"
        );
    }
    if let Some(output) = &branch.output_branch {
        git.check_branch_name(output)?;
        if local(output) {
            bail!(
                "the branch `{output}` exists already\nhelp: delete it (`git branch -D {output}`) or name another with `--output-branch`"
            );
        }
    }
    if current.as_deref() != Some(&base) {
        git.run(&["switch", "--quiet", &base])?;
    }
    // From here on a failure leaves the base branch as it was: the merge writes nothing until it
    // has succeeded, and the output branch is made only after it.
    // The branch the update would make must not exist: said before anything is merged.
    if branch.output_branch.is_none()
        && let Some(from) = super::scaffolded_by(options)?
        && from != VERSION
        && local(&default_name(&from))
    {
        if let Some(current) = current.as_deref().filter(|current| *current != base) {
            git.run(&["switch", "--quiet", current])?;
        }
        let name = default_name(&from);
        bail!(
            "the branch `{name}` exists already: an earlier update made it\nhelp: review and merge it, or delete it (`git branch -D {name}`), or name another with `--output-branch`"
        );
    }
    let back = |outcome| {
        if let Some(current) = current.as_deref().filter(|current| *current != base) {
            git.run(&["switch", "--quiet", current])?;
        }
        outcome
    };
    let report = match super::run(options) {
        Ok(Outcome::UpToDate) => return back(Ok(BranchOutcome::UpToDate)),
        Ok(Outcome::Merged(report)) => *report,
        Err(e) => return back(Err(e)),
    };
    let name = branch
        .output_branch
        .clone()
        .unwrap_or_else(|| default_name(&report.from));
    if local(&name) {
        super::undo(dir)?;
        back(Ok(BranchOutcome::UpToDate))?;
        bail!(
            "the branch `{name}` exists already: an earlier update made it\nhelp: review and merge it, or delete it (`git branch -D {name}`), or name another with `--output-branch`"
        );
    }
    git.run(&["switch", "--quiet", "--create", &name])?;
    if !branch.restore_paths.is_empty() {
        // Staged first, so a restored path loses the files the scaffold added under it too; then
        // unstaged again, so a stop at conflicts leaves the tree as `alpha update` alone would.
        git.run(&["add", "--all", "--", "."])?;
        for path in &branch.restore_paths {
            let path = path.to_string_lossy();
            let source = format!("--source={base}");
            git.run(&["restore", &source, "--staged", "--worktree", "--", &path])
                .with_context(|| {
                    format!("`--restore-path {path}` could not be restored from `{base}`")
                })?;
        }
        git.run(&["reset", "--quiet"])?;
    }
    let mut committed = Committed {
        branch: name,
        base,
        report,
        commits: 0,
        pushed: false,
        issue: None,
        summary: None,
    };
    let conflicts = !committed.report.conflicts.is_empty();
    if conflicts && !branch.force {
        return Ok(BranchOutcome::Committed(Box::new(committed)));
    }
    let (from, to) = (&committed.report.from, &committed.report.to);
    let message = if conflicts {
        branch.conflict_message.clone().unwrap_or_else(|| {
            format!("Update the scaffold to rustbuilder {to} (conflicts to resolve)")
        })
    } else {
        branch
            .merge_message
            .clone()
            .unwrap_or_else(|| format!("Update the scaffold to rustbuilder {to}"))
    };
    let merged: Vec<&PathBuf> = committed
        .report
        .merged
        .iter()
        .chain(&committed.report.conflicts)
        .collect();
    if branch.show_commits && !merged.is_empty() {
        // First what the scaffold changed where you had not, then the files merged with your edits.
        git.run(&["add", "--all", "--", "."])?;
        let mut unstage = vec!["reset", "--quiet", "--"];
        let paths: Vec<String> = merged
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        unstage.extend(paths.iter().map(String::as_str));
        git.run(&unstage)?;
        if !git.succeeds(&["diff", "--cached", "--quiet"]) {
            let first =
                format!("The scaffold of rustbuilder {to}, where it differs from {from} only");
            git.run(&["commit", "--quiet", "--message", &first])?;
            committed.commits += 1;
        }
    }
    git.run(&["add", "--all", "--", "."])?;
    git.run(&["commit", "--quiet", "--allow-empty", "--message", &message])?;
    committed.commits += 1;
    if branch.push {
        git.run(&[
            "push",
            "--quiet",
            "--set-upstream",
            "origin",
            &committed.branch,
        ])?;
        committed.pushed = true;
    }
    if branch.open_gh_issue {
        let issue = open_issue(dir, &committed)?;
        if branch.use_gh_models {
            committed.summary = Some(comment_summary(&git, &committed, &issue));
        }
        committed.issue = Some(issue);
    }
    Ok(BranchOutcome::Committed(Box::new(committed)))
}

/// The branch an update from rustbuilder `from` is committed on, unless `--output-branch` names one.
fn default_name(from: &str) -> String {
    format!("rustbuilder-update-from-{from}-to-{VERSION}")
}

/// `gh issue create` for the review of the pushed branch; returns what gh printed (the address).
fn open_issue(dir: &Path, committed: &Committed) -> Result<String> {
    let report = &committed.report;
    let conflicts = !report.conflicts.is_empty();
    let title = if conflicts {
        format!("Update to rustbuilder {}: conflicts to resolve", report.to)
    } else {
        format!("Update the scaffold to rustbuilder {}", report.to)
    };
    let mut body = format!(
        "`rustbuilder alpha update` moved the project from rustbuilder {} to {} on the branch `{}` (base `{}`).\n",
        report.from, report.to, committed.branch, committed.base
    );
    if conflicts {
        body.push_str("\nFiles with conflict markers to resolve:\n");
        for file in &report.conflicts {
            body.push_str(&format!("- {}\n", file.display()));
        }
    }
    body.push_str("\nTo finish:\n- [ ] resolve any conflict markers\n- [ ] `make manifests lint test`\n- [ ] open a pull request from the branch\n");
    let output = Command::new("gh")
        .args(["issue", "create", "--title", &title, "--body", &body])
        .current_dir(dir)
        .output()
        .map_err(|e| {
            anyhow::anyhow!(
                "the branch `{}` is pushed, but `gh` did not run: {e}\nhelp: install the GitHub CLI (https://cli.github.com) and `gh auth login`, or open the issue by hand",
                committed.branch
            )
        })?;
    if !output.status.success() {
        bail!(
            "the branch `{}` is pushed, but `gh issue create` failed: {}\nhelp: check `gh auth status`, or open the issue by hand",
            committed.branch,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// The model that writes the summary, as GitHub Models names it.
const SUMMARY_MODEL: &str = "openai/gpt-4o-mini";

/// The update's last commit (cut to what the model reads) summarized by GitHub Models and commented
/// on `issue`. Advice for the reviewer: a failure is returned, not raised, as the update is done.
fn comment_summary(git: &Git<'_>, committed: &Committed, issue: &str) -> Result<(), String> {
    let diff = git
        .text(&["show", "--stat", "--patch", "HEAD"])
        .map_err(|e| e.to_string())?;
    let diff: String = diff.chars().take(60_000).collect();
    let report = &committed.report;
    let prompt = format!(
        "This is the commit in which `rustbuilder alpha update` moved a Rust Kubernetes operator from \
         rustbuilder {} to {}. In a few short bullet points, summarize what the new scaffold changed, \
         then {}. Markdown, no preamble.",
        report.from,
        report.to,
        if report.conflicts.is_empty() {
            "say what a maintainer should check before merging"
        } else {
            "say for each file with conflict markers what each side brings and how to resolve it"
        }
    );
    let summary = gh(
        git.dir,
        &["models", "run", SUMMARY_MODEL, &prompt],
        Some(&diff),
    )?;
    if summary.trim().is_empty() {
        return Err("`gh models run` wrote nothing".into());
    }
    let body = format!(
        "{}\n\n_Written by GitHub Models (`rustbuilder alpha update --use-gh-models`): check it against the diff._\n",
        summary.trim_end()
    );
    gh(git.dir, &["issue", "comment", issue, "--body", &body], None).map(|_| ())
}

/// Runs `gh` with `args` (and `input` on its standard input); its output, or why it failed.
fn gh(dir: &Path, args: &[&str], input: Option<&str>) -> Result<String, String> {
    use std::io::Write as _;
    let mut child = Command::new("gh")
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("`gh` did not run: {e}"))?;
    let mut stdin = child.stdin.take().expect("piped");
    // A gh that exits without reading its input is its own failure, reported below.
    let _ = stdin.write_all(input.unwrap_or_default().as_bytes());
    drop(stdin);
    let output = child
        .wait_with_output()
        .map_err(|e| format!("`gh` did not run: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "`gh {}` failed: {}",
            args[..2].join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Git in the project directory, with the update's `-c key=value` settings.
struct Git<'a> {
    dir: &'a Path,
    config: &'a [String],
}

impl Git<'_> {
    fn command(&self, args: &[&str]) -> Result<std::process::Output> {
        let mut command = Command::new("git");
        for setting in self.config {
            command.args(["-c", setting]);
        }
        command
            .args(args)
            .current_dir(self.dir)
            .output()
            .map_err(super::git_missing)
    }

    /// Runs git; a failure is an error with git's own message.
    fn run(&self, args: &[&str]) -> Result<()> {
        let output = self.command(args)?;
        if !output.status.success() {
            bail!(
                "`git {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }

    fn succeeds(&self, args: &[&str]) -> bool {
        self.command(args).is_ok_and(|o| o.status.success())
    }

    fn text(&self, args: &[&str]) -> Result<String> {
        let output = self.command(args)?;
        if !output.status.success() {
            bail!("`git {}` failed", args.join(" "));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    }

    fn check_branch_name(&self, name: &str) -> Result<()> {
        if !self.succeeds(&["check-ref-format", "--branch", name]) {
            bail!("`{name}` is not a valid branch name\nhelp: see `git check-ref-format --help`");
        }
        Ok(())
    }
}

/// The rustbuilder version the update moves to, for `--to-version`: only this one.
pub fn check_to_version(version: &str) -> Result<()> {
    let version = version.strip_prefix('v').unwrap_or(version);
    if version != VERSION {
        bail!(
            "this is rustbuilder {VERSION}: it updates a project to its own scaffold, not to {version}\n\
             help: run `alpha update` of rustbuilder {version} (`cargo install rustbuilder --version {version}`), or leave out `--to-version`"
        );
    }
    Ok(())
}
