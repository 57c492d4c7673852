//! `rustbuilder edit`: changes the shape of an existing project.

use anyhow::{Result, bail};
use clap::ArgAction;

use crate::plugins::helm;
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
///
/// `--plugins helm/v2-alpha` writes a Helm chart to `dist/chart/` from `config/` (run `make manifests`
/// first). Running it again regenerates the templates and keeps `values.yaml`, `Chart.yaml` and
/// `.helmignore` as they are, adding any values section the new templates need; `--force` rewrites them.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  rustbuilder edit --multigroup\n  git diff --stat   # review the move, then build\n  \
                        rustbuilder edit --namespaced && make manifests\n  \
                        make manifests && rustbuilder edit --plugins helm/v2-alpha"
)]
pub struct Args {
    /// Use the multigroup layout (`--multigroup=false`: back to a single group, for a project without APIs).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub multigroup: Option<bool>,
    /// Confine the manager to its own namespace (`--namespaced=false`: watch the whole cluster again).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub namespaced: Option<bool>,
    /// Plugin to run on the project: `helm/v2-alpha` writes a Helm chart to dist/chart/.
    #[arg(long, value_name = "PLUGIN")]
    pub plugins: Option<String>,
    /// With `--plugins helm/v2-alpha`: rewrite values.yaml, Chart.yaml and .helmignore too.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub project: super::ProjectDir,
}

pub fn run(args: Args) -> Result<()> {
    let given: Vec<&str> = [
        ("--multigroup", args.multigroup.is_some()),
        ("--namespaced", args.namespaced.is_some()),
        ("--plugins", args.plugins.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, set)| set.then_some(flag))
    .collect();
    if let [first, second, ..] = given.as_slice() {
        bail!(
            "one edit at a time: `{first}` and `{second}` were both given\nhelp: run `rustbuilder edit` once for each"
        );
    }
    if args.force && args.plugins.is_none() {
        bail!(
            "`--force` belongs to `--plugins helm/v2-alpha`\nhelp: `rustbuilder edit --plugins helm/v2-alpha --force` rewrites the chart's values"
        );
    }
    if let Some(plugin) = &args.plugins {
        return edit_plugin(&args.project.dir, plugin, args.force);
    }
    if let Some(namespaced) = args.namespaced {
        return edit_namespaced(&args.project.dir, namespaced);
    }
    let Some(multigroup) = args.multigroup else {
        bail!(
            "nothing to edit: no option given\nhelp: e.g. `rustbuilder edit --multigroup`, `rustbuilder edit --namespaced` or `rustbuilder edit --plugins helm/v2-alpha`"
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

fn edit_plugin(dir: &std::path::Path, plugin: &str, force: bool) -> Result<()> {
    if plugin != helm::NAME {
        bail!(
            "unknown plugin `{plugin}` for `edit`\nhelp: the available plugin is `{}`",
            helm::NAME
        );
    }
    let changed = helm::edit(dir, force)?.apply()?;
    if changed.is_empty() {
        shell::status("Fresh", format!("{} is up to date", helm::CHART_DIR));
        return Ok(());
    }
    shell::written(changed);
    shell::status(
        "Generated",
        format!("the Helm chart in {}", helm::CHART_DIR),
    );
    shell::note(
        "Next",
        format!(
            "check and install it (values.yaml holds the image, replicas, ...):\n$ helm lint {0} && helm install <release> {0} --namespace <namespace> --create-namespace",
            helm::CHART_DIR
        ),
    );
    Ok(())
}
