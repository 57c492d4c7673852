//! `edit --plugins autoupdate/v1-alpha`: a GitHub Actions workflow that keeps the project on the newest
//! rustbuilder scaffold.
//!
//! `.github/workflows/auto_update.yml` (from `templates/autoupdate/`) runs weekly and on demand: when
//! crates.io has a newer rustbuilder than PROJECT's `cliVersion`, it installs both versions, runs
//! `rustbuilder alpha update` on a branch, and opens a pull request, or an issue when the update leaves
//! conflicts. The workflow is the user's once written: running the command again keeps it.

use std::path::Path;

use anyhow::Result;

use crate::project::{self, Project};
use crate::scaffold::{IfExists, Plan};

/// The plugin's name on the command line.
pub const NAME: &str = "autoupdate/v1-alpha";

/// The workflow, relative to the project.
pub const WORKFLOW: &str = ".github/workflows/auto_update.yml";

/// Plans the workflow of the project at `dir` (kept when it exists) and records the plugin in PROJECT.
pub fn edit(dir: &Path) -> Result<Plan> {
    let mut project = Project::load(dir)?;
    let mut plan = Plan::new(dir);
    let workflow = crate::scaffold::render("autoupdate/auto_update.yml", &tera::Context::new())?;
    plan.add(WORKFLOW, workflow, IfExists::Skip);
    project
        .plugins
        .entry(project::AUTOUPDATE_PLUGIN.to_string())
        .or_default();
    plan.add(project::FILE_NAME, project.render(), IfExists::Overwrite);
    Ok(plan)
}

/// Writes the workflow into a project `alpha generate` just scaffolded at `output`: as this rustbuilder
/// writes it, like every scaffolded file, so that `alpha update` merges a newer workflow into the user's.
pub fn replay(output: &Path) -> Result<()> {
    edit(output)?.apply()?;
    Ok(())
}
