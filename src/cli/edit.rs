//! `rustbuilder edit`: changes the shape of an existing project.

use anyhow::{Result, bail};
use clap::ArgAction;

use crate::plugins::multigroup::{self, Edit};
use crate::plugins::namespaced;
use crate::shell;

/// Change the layout of an existing project.
///
/// `--multigroup` moves a single-group project to the multigroup layout: the API types go from
/// `src/api/<version>/` to `src/api/<group>/<version>/`, the controllers from `src/controller/` to
/// `src/controller/<group>/`, and every `crate::api::...` / `<crate>::controller::...` path in `src/`,
/// `tests/`, `examples/` and `benches/` follows. All or nothing: when the code holds something the move
/// cannot follow, nothing changes and the error says what.
///
/// `--namespaced` confines the manager to its own namespace: `WATCH_NAMESPACE` in config/manager and in
/// the e2e tests, a RoleBinding instead of the ClusterRoleBinding (and a Role at the next
/// `make manifests`). `--namespaced=false` goes back to a cluster-wide manager.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  rustbuilder edit --multigroup\n  git diff --stat   # review the move, then build\n  \
                        rustbuilder edit --namespaced && make manifests"
)]
pub struct Args {
    /// Use the multigroup layout (`--multigroup=false`: back to a single group, for a project without APIs).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub multigroup: Option<bool>,
    /// Confine the manager to its own namespace (`--namespaced=false`: watch the whole cluster again).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub namespaced: Option<bool>,
    #[command(flatten)]
    pub project: super::ProjectDir,
}

pub fn run(args: Args) -> Result<()> {
    if args.multigroup.is_some() && args.namespaced.is_some() {
        bail!(
            "one edit at a time: `--multigroup` and `--namespaced` were both given\nhelp: run `rustbuilder edit` once for each"
        );
    }
    if let Some(namespaced) = args.namespaced {
        return edit_namespaced(&args.project.dir, namespaced);
    }
    let Some(multigroup) = args.multigroup else {
        bail!(
            "nothing to edit: no option given\nhelp: e.g. `rustbuilder edit --multigroup` or `rustbuilder edit --namespaced`"
        );
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

fn edit_namespaced(dir: &std::path::Path, namespaced: bool) -> Result<()> {
    let scope = if namespaced {
        "its own namespace"
    } else {
        "the whole cluster"
    };
    match namespaced::edit(dir, namespaced)? {
        namespaced::Edit::Fresh => {
            shell::status("Fresh", format!("the manager already watches {scope}"));
        }
        namespaced::Edit::Change(plan) => {
            shell::written(plan.apply()?);
            shell::status("Updated", format!("the manager to watch {scope}"));
            shell::note(
                "Next",
                "regenerate config/rbac/role.yaml and review the change:\n$ make manifests && git diff --stat",
            );
        }
    }
    Ok(())
}
