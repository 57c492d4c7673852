//! `rustbuilder edit`: changes the shape of an existing project.

use anyhow::{Result, bail};
use clap::ArgAction;

use super::plugin_keys::{self, Plugin};
use crate::plugins::multicluster;
use crate::plugins::multigroup::{self, Edit};
use crate::plugins::namespaced;
use crate::plugins::rust;
use crate::plugins::{autoupdate, grafana, helm};
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
/// `--multicluster` makes a single-cluster project into the one `init --multicluster` scaffolds: a
/// manager that runs the project's controllers in every cluster of a fleet. `src/main.rs`, each
/// controller and its test are written as `init --multicluster` and `create api` would have written
/// them, and `config/samples/cluster_kubeconfig_secret.yaml` is added. All or nothing: a file that
/// no longer reads as rustbuilder scaffolded it stops the edit, and so do controllers of built-in
/// or other operators' kinds and the deploy-image plugin's, which multi-cluster projects do not take
/// yet.
///
/// `--plugins helm/v2-alpha` writes a Helm chart to `dist/chart/` from `config/` (run `make manifests`
/// first), or from the install manifest `--manifests` names (`make build-installer` writes
/// `dist/install.yaml`); `--output-dir DIR` puts it in `DIR/chart/`. The templates take their labels
/// from `templates/_helpers.tpl`, and `.github/workflows/test-chart.yml` lints the chart and installs it
/// on a local cluster. Running it again regenerates the templates and keeps `values.yaml`, `Chart.yaml`,
/// `.helmignore`, `_helpers.tpl` and the workflow as they are, adding any values section the new
/// templates need; `--force` rewrites them.
///
/// `--plugins grafana/v1-alpha` writes Grafana dashboards of the manager's metrics to `grafana/`, and
/// `grafana/custom-metrics/config.yaml` for metrics of your own: list them there and run it again for
/// their dashboard.
///
/// `--plugins autoupdate/v1-alpha` writes `.github/workflows/auto_update.yml`, a weekly GitHub Actions
/// workflow that runs `rustbuilder alpha update` when a newer rustbuilder is released and opens a pull
/// request (or an issue, on conflicts); with `--use-gh-models` it also comments a summary of the update
/// written by GitHub Models.
///
/// `--license`, `--owner` and `--license-file` change the licence header of the files written from
/// then on (`hack/boilerplate.rs.txt`, as `init` takes them); files already written keep theirs.
///
/// Kubebuilder's plugin keys (`helm.kubebuilder.io/v2-alpha`, ...) and ours
/// (`helm.rustbuilder.dev/v2-alpha`, ...) name the same plugins.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  rustbuilder edit --multigroup\n  git diff --stat   # review the move, then build\n  \
                        rustbuilder edit --namespaced && make manifests\n  \
                        rustbuilder edit --multicluster && make manifests\n  \
                        make manifests && rustbuilder edit --plugins helm/v2-alpha\n  \
                        make build-installer && rustbuilder edit --plugins helm/v2-alpha --manifests dist/install.yaml\n  \
                        rustbuilder edit --plugins grafana/v1-alpha\n  \
                        rustbuilder edit --plugins autoupdate/v1-alpha --use-gh-models\n  \
                        rustbuilder edit --license apache2 --owner \"The Memcached Authors\""
)]
pub struct Args {
    /// Use the multigroup layout (`--multigroup=false`: back to a single group, for a project without APIs).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub multigroup: Option<bool>,
    /// Confine the manager to its own namespace (`--namespaced=false`: watch the whole cluster again).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub namespaced: Option<bool>,
    /// Run the controllers in every cluster of a fleet, as `init --multicluster` scaffolds them.
    #[arg(long)]
    pub multicluster: bool,
    /// Plugin to run on the project: `helm/v2-alpha` (a Helm chart), `grafana/v1-alpha` (Grafana
    /// dashboards) or `autoupdate/v1-alpha` (a workflow that runs `alpha update`).
    #[arg(long, value_name = "PLUGIN")]
    pub plugins: Option<String>,
    /// With `--plugins helm/v2-alpha`: rewrite values.yaml, Chart.yaml, .helmignore, _helpers.tpl and
    /// the chart's workflow too.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false)]
    pub force: bool,
    /// With `--plugins helm/v2-alpha`: build the chart from this rendered install manifest (e.g.
    /// dist/install.yaml from `make build-installer`) instead of config/; `--manifests ""` goes back
    /// to config/.
    #[arg(long, value_name = "FILE")]
    pub manifests: Option<String>,
    /// With `--plugins helm/v2-alpha`: write the chart to DIR/chart/ [default: dist].
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<String>,
    /// With `--plugins autoupdate/v1-alpha`: the workflow also asks GitHub Models for a summary of each
    /// update and comments it on the pull request or issue (needs the `models: read` permission,
    /// which the workflow requests) [default: as PROJECT records it, else false].
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub use_gh_models: Option<bool>,
    /// With `--plugins autoupdate/v1-alpha`: remove the workflow, and the plugin from PROJECT.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false, conflicts_with = "use_gh_models")]
    pub delete: bool,
    /// The license of the files written from now on: their header in `hack/boilerplate.rs.txt`.
    #[arg(long, value_enum)]
    pub license: Option<super::license::License>,
    /// The copyright owner in the header of the files written from now on.
    #[arg(long)]
    pub owner: Option<String>,
    /// A file whose text is the header of the files written from now on (overrides `--license`).
    #[arg(long, value_name = "FILE")]
    pub license_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub project: super::ProjectDir,
}

pub fn run(args: Args) -> Result<()> {
    let given: Vec<&str> = [
        ("--multigroup", args.multigroup.is_some()),
        ("--namespaced", args.namespaced.is_some()),
        ("--multicluster", args.multicluster),
        ("--plugins", args.plugins.is_some()),
        (
            "--license",
            args.license.is_some() || args.owner.is_some() || args.license_file.is_some(),
        ),
    ]
    .into_iter()
    .filter_map(|(flag, set)| set.then_some(flag))
    .collect();
    if let [first, second, ..] = given.as_slice() {
        bail!(
            "one edit at a time: `{first}` and `{second}` were both given\nhelp: run `rustbuilder edit` once for each"
        );
    }
    let allowed = [Plugin::Helm, Plugin::Grafana, Plugin::Autoupdate];
    let plugins = match args.plugins.as_deref() {
        Some(chain) => plugin_keys::parse(chain, "edit", &allowed)?,
        None => Vec::new(),
    };
    if args.plugins.is_some() && plugins.is_empty() {
        bail!(
            "nothing to edit: `--plugins` names only the layout, which the project has\nhelp: e.g. `rustbuilder edit --plugins helm/v2-alpha`"
        );
    }
    for (flag, set) in [
        ("--force", args.force),
        ("--manifests", args.manifests.is_some()),
        ("--output-dir", args.output_dir.is_some()),
    ] {
        if set && !plugins.contains(&Plugin::Helm) {
            bail!(
                "`{flag}` belongs to `--plugins helm/v2-alpha`\nhelp: e.g. `rustbuilder edit --plugins helm/v2-alpha {flag}{}`",
                match flag {
                    "--manifests" => " dist/install.yaml",
                    "--output-dir" => " dist",
                    _ => "",
                }
            );
        }
    }
    if args.use_gh_models.is_some() && !plugins.contains(&Plugin::Autoupdate) {
        bail!(
            "`--use-gh-models` belongs to `--plugins autoupdate/v1-alpha`\nhelp: e.g. `rustbuilder edit --plugins autoupdate/v1-alpha --use-gh-models`"
        );
    }
    if args.delete {
        if plugins != [Plugin::Autoupdate] {
            bail!(
                "`--delete` removes the auto-update workflow, alone\nhelp: `rustbuilder edit --plugins autoupdate/v1-alpha --delete`; other plugins' files are yours to remove"
            );
        }
        return delete_autoupdate(&args.project.dir);
    }
    if !plugins.is_empty() {
        let options = helm::Options {
            force: args.force,
            manifests: args.manifests,
            output: args.output_dir,
            replay: false,
        };
        for plugin in plugins {
            run_plugin(&args.project.dir, plugin, &options, args.use_gh_models)?;
        }
        return Ok(());
    }
    if let Some(namespaced) = args.namespaced {
        return edit_namespaced(&args.project.dir, namespaced);
    }
    if args.multicluster {
        return edit_multicluster(&args.project.dir);
    }
    if args.license.is_some() || args.owner.is_some() || args.license_file.is_some() {
        let (license, header) =
            super::license::header_of(args.license, args.license_file.as_deref())?;
        let plan = rust::edit_license(&args.project.dir, license, args.owner, header)?;
        let changed = plan.apply()?;
        if changed.is_empty() {
            shell::status("Fresh", format!("{} is as asked", rust::BOILERPLATE));
        } else {
            shell::written(changed);
            shell::status(
                "Updated",
                "the licence header of the files written from now on; files already written keep theirs",
            );
        }
        return Ok(());
    }
    let Some(multigroup) = args.multigroup else {
        bail!(
            "nothing to edit: no option given\nhelp: e.g. `rustbuilder edit --multigroup`, `rustbuilder edit --namespaced`, `rustbuilder edit --multicluster`, `rustbuilder edit --license apache2` or `rustbuilder edit --plugins helm/v2-alpha`"
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

fn edit_multicluster(dir: &std::path::Path) -> Result<()> {
    match multicluster::edit(dir)? {
        multicluster::Edit::Fresh => {
            shell::status("Fresh", "the project is multi-cluster already");
        }
        multicluster::Edit::Change(plan) => {
            shell::written(plan.apply()?);
            shell::status(
                "Updated",
                "the project to run its controllers in every cluster of a fleet",
            );
            shell::note(
                "Next",
                "give the manager read access to the clusters' kubeconfig Secrets and review the change:\n$ make manifests && git diff --stat",
            );
        }
    }
    Ok(())
}

/// Runs `plugin` on the project in `dir` (`options` for Helm's chart, `use_gh_models` for the
/// auto-update workflow).
pub(super) fn run_plugin(
    dir: &std::path::Path,
    plugin: Plugin,
    options: &helm::Options,
    use_gh_models: Option<bool>,
) -> Result<()> {
    match plugin {
        Plugin::Helm => edit_helm(dir, options),
        Plugin::Grafana => edit_grafana(dir),
        Plugin::Autoupdate => edit_autoupdate(dir, use_gh_models),
        Plugin::DeployImage => unreachable!("deploy-image runs on `create api`"),
    }
}

fn edit_helm(dir: &std::path::Path, options: &helm::Options) -> Result<()> {
    let edit = helm::edit(dir, options)?;
    let changed = edit.plan.apply()?;
    if changed.is_empty() {
        shell::status("Fresh", format!("{} is up to date", edit.chart_dir));
        return Ok(());
    }
    shell::written(changed);
    shell::status(
        "Generated",
        format!("the Helm chart in {} from {}", edit.chart_dir, edit.source),
    );
    shell::note(
        "Next",
        format!(
            "check and install it (values.yaml holds the image, replicas, ...):\n$ helm lint {0} && helm install <release> {0} --namespace <namespace> --create-namespace",
            edit.chart_dir
        ),
    );
    Ok(())
}

fn edit_grafana(dir: &std::path::Path) -> Result<()> {
    let changed = grafana::edit(dir)?.apply()?;
    if changed.is_empty() {
        shell::status("Fresh", format!("{}/ is up to date", grafana::DIR));
        return Ok(());
    }
    shell::written(changed);
    shell::status(
        "Generated",
        format!("Grafana dashboards in {}/", grafana::DIR),
    );
    shell::note(
        "Next",
        format!(
            "import the JSON files into Grafana (Dashboards > New > Import) with a Prometheus data source that scrapes the manager (config/prometheus); for metrics of your own, list them in {} and run this again",
            grafana::CONFIG
        ),
    );
    Ok(())
}

fn delete_autoupdate(dir: &std::path::Path) -> Result<()> {
    let changed = autoupdate::delete(dir)?.apply()?;
    if changed.is_empty() {
        shell::status("Fresh", "the project has no auto-update workflow");
    } else {
        shell::written(changed);
    }
    Ok(())
}

fn edit_autoupdate(dir: &std::path::Path, use_gh_models: Option<bool>) -> Result<()> {
    let edit = autoupdate::edit(dir, use_gh_models)?;
    let changed = edit.plan.apply()?;
    if edit.workflow_kept && use_gh_models.is_some() {
        shell::note(
            "Kept",
            format!(
                "{} as it is: remove it and run this again for the workflow with{} the GitHub Models summary",
                autoupdate::WORKFLOW,
                if edit.use_gh_models { "" } else { "out" }
            ),
        );
    }
    if changed.is_empty() {
        shell::status(
            "Fresh",
            format!("{} is there already", autoupdate::WORKFLOW),
        );
        return Ok(());
    }
    shell::written(changed);
    shell::status(
        "Generated",
        format!("the auto-update workflow {}", autoupdate::WORKFLOW),
    );
    shell::note(
        "Next",
        "commit and push it; it runs every Tuesday, or from the Actions tab (Auto Update > Run workflow). Allow GitHub Actions to create pull requests in the repository's Actions settings",
    );
    Ok(())
}
