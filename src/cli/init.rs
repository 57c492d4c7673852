//! `rustbuilder init`: scaffolds a new project.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::ArgAction;

use super::license::{self, License};
use super::plugin_keys::{self, Plugin};

use crate::model::{Domain, ProjectName};
use crate::plugins::rust::{self, InitOptions};
use crate::shell;

/// Scaffold a new operator project in the current directory (or `--dir`).
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  mkdir memcached-operator && cd memcached-operator\n  \
                        rustbuilder init --domain example.com --owner \"The Memcached Authors\"\n  \
                        # Kubebuilder's form works as it is\n  \
                        rustbuilder init --plugins go/v4 --domain example.com --project-version 3"
)]
pub struct Args {
    /// Domain of the API groups: groups are `<group>.<domain>`.
    #[arg(long, default_value = "my.domain")]
    pub domain: Domain,
    /// Project name (a DNS-1123 label); defaults to the directory name.
    #[arg(long, value_name = "NAME")]
    pub project_name: Option<ProjectName>,
    /// Where the code lives, e.g. `https://github.com/example/memcached-operator`; recorded in Cargo.toml.
    #[arg(long)]
    pub repo: Option<String>,
    /// Copyright owner for the license header.
    #[arg(long)]
    pub owner: Option<String>,
    /// License of the generated code: the header of every Rust file, kept in
    /// `hack/boilerplate.rs.txt` (edit it to change the header of the files written afterwards).
    #[arg(long, value_enum, default_value_t = License::Apache2)]
    pub license: License,
    /// A file whose text is the header of every Rust file instead of `--license`'s: kept as it is
    /// when written as comments (`//` lines, or a `/* ... */` block like Kubebuilder's
    /// boilerplate), else made into `//` lines.
    #[arg(long, value_name = "FILE")]
    pub license_file: Option<PathBuf>,
    /// Lay the project out for several API groups: `src/api/<group>/<version>/`, `src/controller/<group>/`.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false)]
    pub multigroup: bool,
    /// A namespace-scoped manager: it watches only its own namespace (`WATCH_NAMESPACE`), with a Role and
    /// RoleBinding there instead of cluster-wide ones.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false)]
    pub namespaced: bool,
    /// A multi-cluster manager: it runs the controllers in every cluster of a fleet, announced by
    /// kubeconfig Secrets, the files of a directory or Cluster API's Clusters (the manager's
    /// `--cluster-provider`).
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false)]
    pub multicluster: bool,
    /// Kubebuilder's plugin keys, comma-separated: the layout (`go/v4`, also written
    /// `go.kubebuilder.io/v4`, `base.go.kubebuilder.io/v4`, `kustomize/v2`) is the one rustbuilder
    /// scaffolds, and changes nothing; `grafana/v1-alpha` and `autoupdate/v1-alpha` run on the new
    /// project, as `rustbuilder edit --plugins` would.
    #[arg(long, value_name = "PLUGIN,...")]
    pub plugins: Option<String>,
    /// With `autoupdate/v1-alpha` among `--plugins`: its workflow also has GitHub Models summarize
    /// each update (see `rustbuilder edit --help`).
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub use_gh_models: Option<bool>,
    /// The PROJECT file's version: `3`, the only one Kubebuilder v4 writes.
    #[arg(long, value_name = "VERSION")]
    pub project_version: Option<String>,
    /// Kubebuilder: `go get` the dependencies. Cargo fetches them at the first build: accepted, no
    /// effect.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = true, hide_default_value = true)]
    pub fetch_deps: bool,
    /// Kubebuilder: skip checking the Go version. There is no Go here: accepted, no effect.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false)]
    pub skip_go_version_check: bool,
    /// Where the project gets rustbuilder's runtime crates; recorded in PROJECT.
    #[arg(long, value_enum, value_name = "SOURCE", default_value_t = RuntimeSource::Vendored)]
    pub runtime_source: RuntimeSource,
    /// Directory to scaffold into; created when missing.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
}

/// The `--runtime-source` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeSource {
    /// A copy in the project's `rustbuilder/` (refreshed by `rustbuilder alpha update-runtime`): builds with
    /// crates.io alone, before the runtime crates are published.
    Vendored,
    /// `rustbuilder-runtime = "<version>"` from crates.io, no copy: once rustbuilder is published there.
    Registry,
}

impl From<RuntimeSource> for rust::RuntimeSource {
    fn from(source: RuntimeSource) -> Self {
        match source {
            RuntimeSource::Vendored => rust::RuntimeSource::Vendored,
            RuntimeSource::Registry => rust::RuntimeSource::Registry,
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    if let Some(repo) = &args.repo
        && repo.starts_with('-')
    {
        bail!(
            "invalid repo `{repo}`: it looks like another flag\nhelp: give the repository URL, e.g. `--repo https://github.com/example/memcached-operator`"
        );
    }
    if let Some(version) = &args.project_version
        && version != "3"
    {
        bail!(
            "unsupported `--project-version {version}`\nhelp: rustbuilder writes PROJECT version 3, as Kubebuilder v4 does: `--project-version 3`, or leave it out"
        );
    }
    let plugins = match args.plugins.as_deref() {
        Some(chain) => plugin_keys::parse(chain, "init", &[Plugin::Grafana, Plugin::Autoupdate])?,
        None => Vec::new(),
    };
    if args.use_gh_models.is_some() && !plugins.contains(&Plugin::Autoupdate) {
        bail!(
            "`--use-gh-models` belongs to the autoupdate plugin\nhelp: `rustbuilder init --plugins go/v4,autoupdate/v1-alpha --use-gh-models`"
        );
    }
    let project_name = match args.project_name {
        Some(name) => name,
        None => default_project_name(&args.dir)?,
    };
    let (license, header) = license::header_of(Some(args.license), args.license_file.as_deref())?;
    let options = InitOptions {
        domain: args.domain,
        project_name,
        repo: args.repo,
        owner: args.owner,
        license: license.unwrap_or(rust::License::Apache2),
        header,
        multigroup: args.multigroup,
        namespaced: args.namespaced,
        multicluster: args.multicluster,
        runtime_source: args.runtime_source.into(),
    };
    let plan = crate::plugins::rust::init(&args.dir, &options)?;
    shell::written(plan.apply()?);
    for plugin in plugins {
        super::edit::run_plugin(&args.dir, plugin, &Default::default(), args.use_gh_models)?;
    }
    shell::note(
        "Next",
        "define a resource with:\n$ rustbuilder create api --group <group> --version v1alpha1 --kind <Kind>",
    );
    Ok(())
}

/// The directory's name, lowercased, as Kubebuilder does.
fn default_project_name(dir: &std::path::Path) -> Result<ProjectName> {
    let absolute = std::path::absolute(dir)?;
    let name = absolute
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(name) => name.to_str(),
            _ => None,
        })
        .next_back()
        .unwrap_or_default()
        .to_lowercase();
    name.parse().map_err(|e: crate::model::InvalidName| {
        anyhow::anyhow!(
            "cannot use the directory name `{name}` as the project name: {}\nhelp: pass `--project-name <name>`",
            e.rule
        )
    })
}
