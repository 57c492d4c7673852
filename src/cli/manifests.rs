//! `rustbuilder manifests`: CRDs from the Rust types, `role.yaml` from the RBAC markers.

use anyhow::{Result, bail};

use crate::shell;

/// Generate `config/crd/bases/*.yaml` (by running the project's `crdgen`) and `config/rbac/role.yaml`
/// (from `// +rustbuilder:rbac:` markers).
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  rustbuilder manifests\n  rustbuilder manifests --check   # in CI: fail when a manifest is stale"
)]
pub struct Args {
    /// Write nothing; exit non-zero and name the files that are out of date.
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub project: super::ProjectDir,
}

pub fn run(args: Args) -> Result<()> {
    let plan = crate::manifests::plan(&args.project.dir)?;
    if args.check {
        let stale = plan.stale()?;
        if !stale.is_empty() {
            let names: Vec<String> = stale.iter().map(|p| format!("  {}", p.display())).collect();
            bail!(
                "manifests are out of date:\n{}\nhelp: run `make manifests` (or `rustbuilder manifests`) and commit the result",
                names.join("\n")
            );
        }
        shell::status("Checked", "manifests are up to date");
        return Ok(());
    }
    let written = plan.apply()?;
    if written.is_empty() {
        shell::status("Fresh", "manifests are up to date");
    }
    shell::written(written);
    Ok(())
}
