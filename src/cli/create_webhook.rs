//! `rustbuilder create webhook`: defaulting and validating webhooks for an API, or conversion between its
//! versions.

use anyhow::Result;
use clap::ArgAction;

use crate::model::{Group, Kind, Plural, Version, WebhookPath};
use crate::plugins::webhook::WebhookOptions;
use crate::shell;

/// Scaffold a webhook for an API, a Kubernetes built-in kind or another operator's kind: defaulting,
/// validation, and/or conversion between an API's versions.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  # Defaulting and validating webhooks for cache.example.com/v1alpha1 Memcached\n  \
                        rustbuilder create webhook --group cache --version v1alpha1 --kind Memcached \\\n    \
                        --defaulting --programmatic-validation\n\n  \
                        # v1 becomes the hub (the stored version) that v1alpha1 converts to and from\n  \
                        rustbuilder create webhook --group cache --version v1 --kind Memcached \\\n    \
                        --conversion --spoke v1alpha1\n\n  \
                        # Webhooks for a Kubernetes built-in kind (the k8s-openapi type)\n  \
                        rustbuilder create webhook --group apps --version v1 --kind Deployment \\\n    \
                        --defaulting --programmatic-validation\n\n  \
                        # A defaulting webhook for another operator's kind, described by its CRD\n  \
                        rustbuilder create webhook --group cert-manager --version v1 --kind Issuer \\\n    \
                        --defaulting --external-api-path issuer-crd.yaml --external-api-domain io\n\n  \
                        # A validating webhook served at a path of one's own\n  \
                        rustbuilder create webhook --group cache --version v1alpha1 --kind Memcached \\\n    \
                        --programmatic-validation --validation-path /custom-validate-memcached"
)]
pub struct Args {
    /// API group, without the domain (e.g. `cache`); for a built-in kind its Kubernetes group (`apps`,
    /// `core`, `networking`).
    #[arg(long)]
    pub group: Group,
    /// API version: with `--conversion`, the hub (the version the API server stores).
    #[arg(long)]
    pub version: Version,
    /// Kind, in PascalCase (e.g. `Memcached`).
    #[arg(long)]
    pub kind: Kind,
    /// Scaffold the defaulting webhook (fills in what users leave out).
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false)]
    pub defaulting: bool,
    /// Scaffold the validating webhook (refuses invalid creates and updates).
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false)]
    pub programmatic_validation: bool,
    /// Scaffold the conversion webhook: `--version` is the hub, `--spoke` the versions converting to it.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false)]
    pub conversion: bool,
    /// The versions that convert to and from the hub, comma-separated (with `--conversion`).
    #[arg(long, value_name = "VERSION,...", value_delimiter = ',')]
    pub spoke: Vec<Version>,
    /// The defaulting webhook's route, instead of `/mutate-<group>-<version>-<kind>` (with
    /// `--defaulting`).
    #[arg(long, value_name = "PATH")]
    pub defaulting_path: Option<WebhookPath>,
    /// The validating webhook's route, instead of `/validate-<group>-<version>-<kind>` (with
    /// `--programmatic-validation`).
    #[arg(long, value_name = "PATH")]
    pub validation_path: Option<WebhookPath>,
    #[command(flatten)]
    pub external: super::ExternalApi,
    /// Scaffold the webhook again even if it exists (its files are overwritten).
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false)]
    pub force: bool,
    /// The API's plural, as Kubebuilder takes it here too; it must be the one the API has (PROJECT),
    /// which the webhook uses anyway.
    #[arg(long)]
    pub plural: Option<Plural>,
    /// Plugin keys: the layout's (`go/v4`, `go.kubebuilder.io/v4`, `kustomize/v2`) change nothing.
    #[arg(long, value_name = "PLUGIN,...")]
    pub plugins: Option<String>,
    #[command(flatten)]
    pub go: super::GoToolchain,
    #[command(flatten)]
    pub project: super::ProjectDir,
}

pub fn run(args: Args) -> Result<()> {
    if let Some(chain) = args.plugins.as_deref() {
        super::plugin_keys::parse(chain, "create webhook", &[])?;
    }
    let options = WebhookOptions {
        group: args.group,
        version: args.version,
        kind: args.kind,
        defaulting: args.defaulting,
        validation: args.programmatic_validation,
        conversion: args.conversion,
        spokes: args.spoke,
        defaulting_path: args.defaulting_path,
        validation_path: args.validation_path,
        external: args.external.options(),
        force: args.force,
        plural: args.plural,
    };
    let plan = crate::plugins::webhook::create_webhook(&args.project.dir, &options)?;
    shell::written(plan.apply()?);
    shell::note(
        "Next",
        "implement your new webhook and generate the manifests (CRDs, webhook configurations) with:\n$ make manifests",
    );
    Ok(())
}
