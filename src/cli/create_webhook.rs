//! `rustbuilder create webhook`: defaulting and validating webhooks for an API, or conversion between its
//! versions.

use anyhow::Result;

use crate::model::{Group, Kind, Version};
use crate::plugins::webhook::WebhookOptions;
use crate::shell;

/// Scaffold a webhook for an API: defaulting, validation, and/or conversion between its versions.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  # Defaulting and validating webhooks for cache.example.com/v1alpha1 Memcached\n  \
                        rustbuilder create webhook --group cache --version v1alpha1 --kind Memcached \\\n    \
                        --defaulting --programmatic-validation\n\n  \
                        # v1 becomes the hub (the stored version) that v1alpha1 converts to and from\n  \
                        rustbuilder create webhook --group cache --version v1 --kind Memcached \\\n    \
                        --conversion --spoke v1alpha1"
)]
pub struct Args {
    /// API group, without the domain (e.g. `cache`).
    #[arg(long)]
    pub group: Group,
    /// API version: with `--conversion`, the hub (the version the API server stores).
    #[arg(long)]
    pub version: Version,
    /// Kind, in PascalCase (e.g. `Memcached`).
    #[arg(long)]
    pub kind: Kind,
    /// Scaffold the defaulting webhook (fills in what users leave out).
    #[arg(long)]
    pub defaulting: bool,
    /// Scaffold the validating webhook (refuses invalid creates and updates).
    #[arg(long)]
    pub programmatic_validation: bool,
    /// Scaffold the conversion webhook: `--version` is the hub, `--spoke` the versions converting to it.
    #[arg(long)]
    pub conversion: bool,
    /// The versions that convert to and from the hub, comma-separated (with `--conversion`).
    #[arg(long, value_name = "VERSION,...", value_delimiter = ',')]
    pub spoke: Vec<Version>,
    /// Scaffold the webhook again even if it exists (its files are overwritten).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub project: super::ProjectDir,
}

pub fn run(args: Args) -> Result<()> {
    let options = WebhookOptions {
        group: args.group,
        version: args.version,
        kind: args.kind,
        defaulting: args.defaulting,
        validation: args.programmatic_validation,
        conversion: args.conversion,
        spokes: args.spoke,
        force: args.force,
    };
    let plan = crate::plugins::webhook::create_webhook(&args.project.dir, &options)?;
    shell::written(plan.apply()?);
    shell::note(
        "Next",
        "implement your new webhook and generate the manifests (CRDs, webhook configurations) with:\n$ make manifests",
    );
    Ok(())
}
