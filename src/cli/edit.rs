//! `rustbuilder edit`: changes the shape of an existing project.

use anyhow::{Result, bail};
use clap::ArgAction;

use crate::plugins::multigroup::{self, Edit};
use crate::shell;

/// Change the layout of an existing project.
///
/// `--multigroup` moves a single-group project to the multigroup layout: the API types go from
/// `src/api/<version>/` to `src/api/<group>/<version>/`, the controllers from `src/controller/` to
/// `src/controller/<group>/`, and every `crate::api::...` / `<crate>::controller::...` path in `src/`,
/// `tests/`, `examples/` and `benches/` follows. All or nothing: when the code holds something the move
/// cannot follow, nothing changes and the error says what.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  rustbuilder edit --multigroup\n  git diff --stat   # review the move, then build"
)]
pub struct Args {
    /// Use the multigroup layout (`--multigroup=false`: back to a single group, for a project without APIs).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub multigroup: Option<bool>,
    #[command(flatten)]
    pub project: super::ProjectDir,
}

pub fn run(args: Args) -> Result<()> {
    let Some(multigroup) = args.multigroup else {
        bail!("nothing to edit: no option given\nhelp: e.g. `rustbuilder edit --multigroup`");
    };
    let layout = if multigroup {
        "multigroup"
    } else {
        "single-group"
    };
    match multigroup::edit(&args.project.dir, multigroup)? {
        Edit::Fresh => {
            shell::status(
                "Fresh",
                format!("the project already has the {layout} layout"),
            );
        }
        Edit::Move(plan) => {
            shell::written(plan.apply()?);
            shell::status("Updated", format!("the project to the {layout} layout"));
            shell::note(
                "Next",
                "review the move and build:\n$ git diff --stat && cargo build",
            );
        }
    }
    Ok(())
}
