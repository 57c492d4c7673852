//! `rustbuilder init`: scaffolds a new project.

use std::path::PathBuf;

use anyhow::{Result, bail};

use crate::model::{Domain, ProjectName};
use crate::plugins::rust::{self, InitOptions};
use crate::shell;

/// Scaffold a new operator project in the current directory (or `--dir`).
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  mkdir memcached-operator && cd memcached-operator\n  \
                        rustbuilder init --domain example.com --owner \"The Memcached Authors\""
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
    /// License of the generated code.
    #[arg(long, value_enum, default_value_t = License::Apache2)]
    pub license: License,
    /// Lay the project out for several API groups: `src/api/<group>/<version>/`, `src/controller/<group>/`.
    #[arg(long)]
    pub multigroup: bool,
    /// A namespace-scoped manager: it watches only its own namespace (`WATCH_NAMESPACE`), with a Role and
    /// RoleBinding there instead of cluster-wide ones.
    #[arg(long)]
    pub namespaced: bool,
    /// Where the project gets rustbuilder's runtime crates; recorded in PROJECT.
    #[arg(long, value_enum, value_name = "SOURCE", default_value_t = RuntimeSource::Vendored)]
    pub runtime_source: RuntimeSource,
    /// Directory to scaffold into; created when missing.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
}

/// The `--license` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum License {
    /// Apache License 2.0: an SPDX header in every Rust file and `license` in Cargo.toml.
    Apache2,
    /// No license header.
    None,
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

impl From<License> for rust::License {
    fn from(license: License) -> Self {
        match license {
            License::Apache2 => rust::License::Apache2,
            License::None => rust::License::None,
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
    let project_name = match args.project_name {
        Some(name) => name,
        None => default_project_name(&args.dir)?,
    };
    let options = InitOptions {
        domain: args.domain,
        project_name,
        repo: args.repo,
        owner: args.owner,
        license: args.license.into(),
        multigroup: args.multigroup,
        namespaced: args.namespaced,
        runtime_source: args.runtime_source.into(),
    };
    let plan = crate::plugins::rust::init(&args.dir, &options)?;
    shell::written(plan.apply()?);
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
