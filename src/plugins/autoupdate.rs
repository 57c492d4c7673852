//! `edit --plugins autoupdate/v1-alpha`: a GitHub Actions workflow that keeps the project on the newest
//! rustbuilder scaffold.
//!
//! `.github/workflows/auto_update.yml` (from `templates/autoupdate/`) runs weekly and on demand: when
//! crates.io has a newer rustbuilder than PROJECT's `cliVersion`, it installs both versions, runs
//! `rustbuilder alpha update` on a branch, and opens a pull request, or an issue when the update leaves
//! conflicts; with `--use-gh-models` (`useGhModels: true` in PROJECT) it also asks GitHub Models for a
//! summary of the update and comments it there. The workflow is the user's once written: running the
//! command again keeps it.

use std::path::Path;

use anyhow::Result;

use crate::project::{self, Project};
use crate::scaffold::{IfExists, Plan};

/// The plugin's name on the command line.
pub const NAME: &str = "autoupdate/v1-alpha";

/// The workflow, relative to the project.
pub const WORKFLOW: &str = ".github/workflows/auto_update.yml";

/// A planned workflow, and what it was planned with, for messages.
pub struct Edit {
    pub plan: Plan,
    /// The workflow exists and is kept as it is.
    pub workflow_kept: bool,
    /// Whether the planned workflow comments a GitHub Models summary.
    pub use_gh_models: bool,
}

/// Plans the workflow of the project at `dir` (kept when it exists) and records the plugin in PROJECT,
/// with `useGhModels` when `use_gh_models` (else as PROJECT has it) says so.
pub fn edit(dir: &Path, use_gh_models: Option<bool>) -> Result<Edit> {
    let mut project = Project::load(dir)?;
    let record = project
        .plugins
        .entry(project::AUTOUPDATE_PLUGIN.to_string())
        .or_default();
    let use_gh_models = use_gh_models.unwrap_or(record.use_gh_models == Some(true));
    record.use_gh_models = use_gh_models.then_some(true);
    let mut context = tera::Context::new();
    context.insert("use_gh_models", &use_gh_models);
    let workflow = crate::scaffold::render("autoupdate/auto_update.yml.tera", &context)?;
    let mut plan = Plan::new(dir);
    plan.add(WORKFLOW, workflow, IfExists::Skip);
    plan.add(project::FILE_NAME, project.render(), IfExists::Overwrite);
    Ok(Edit {
        plan,
        workflow_kept: dir.join(WORKFLOW).exists(),
        use_gh_models,
    })
}

/// Plans the workflow's removal from the project at `dir` and the plugin's from its PROJECT
/// (Kubebuilder's `edit --plugins autoupdate/v1-alpha --delete`); nothing to do when neither is
/// there.
pub fn delete(dir: &Path) -> Result<Plan> {
    let mut project = Project::load(dir)?;
    let mut plan = Plan::new(dir);
    if dir.join(WORKFLOW).exists() {
        plan.remove(WORKFLOW);
    }
    if project.plugins.remove(project::AUTOUPDATE_PLUGIN).is_some() {
        plan.add(project::FILE_NAME, project.render(), IfExists::Overwrite);
    }
    Ok(plan)
}

/// Writes the workflow into a project `alpha generate` just scaffolded at `output`: as this rustbuilder
/// writes it, like every scaffolded file, so that `alpha update` merges a newer workflow into the user's.
/// `use_gh_models` is what the project's PROJECT recorded.
pub fn replay(output: &Path, use_gh_models: bool) -> Result<()> {
    edit(output, Some(use_gh_models))?.plan.apply()?;
    Ok(())
}
