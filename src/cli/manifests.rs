//! `rustbuilder manifests`: runs the project's own manifest writer.

use anyhow::Result;

use crate::manifests::Mode;

/// Generate the CRDs and the RBAC role by running the project's `crdgen` (as `make manifests`).
///
/// Runs `cargo run --quiet --bin crdgen -- --write` in the project: `config/crd/bases/*.yaml` from the Rust
/// types, `config/rbac/role.yaml` from the `// +rustbuilder:rbac:` markers.
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
    let mode = if args.check { Mode::Check } else { Mode::Write };
    crate::manifests::run(&args.project.dir, mode)
}
