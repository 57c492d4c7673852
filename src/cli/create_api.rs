//! `rustbuilder create api`: adds an API type, its controller and their manifests.

use anyhow::Result;
use clap::ArgAction;

use super::plugin_keys::{self, Plugin};
use crate::model::{ControllerName, Group, Kind, Plural, Version};
use crate::plugins::deploy_image::{self, ImageOptions};
use crate::plugins::rust::ApiOptions;
use crate::shell;

/// Scaffold a Kubernetes API: the Rust type, its controller, a sample, RBAC roles and kustomize entries.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  rustbuilder create api --group cache --version v1alpha1 --kind Memcached\n  \
                        rustbuilder create api --group cache --version v1alpha1 --kind Memcached \\\n    \
                        --plugins deploy-image/v1-alpha --image memcached:1.6.26-alpine3.19 \\\n    \
                        --image-container-command memcached,--memory-limit=64,-o,modern,-v \\\n    \
                        --image-container-port 11211 --run-as-user 1001\n  \
                        kubectl get crd certificates.cert-manager.io -o yaml > certificate-crd.yaml\n  \
                        rustbuilder create api --group cert-manager --version v1 --kind Certificate \\\n    \
                        --resource=false --external-api-path certificate-crd.yaml"
)]
pub struct Args {
    /// API group, without the domain (e.g. `cache`).
    #[arg(long)]
    pub group: Group,
    /// API version.
    #[arg(long, default_value = "v1alpha1")]
    pub version: Version,
    /// Kind, in PascalCase (e.g. `Memcached`).
    #[arg(long)]
    pub kind: Kind,
    /// Lowercase plural resource name; defaults to the English plural of the kind.
    #[arg(long)]
    pub plural: Option<Plural>,
    /// Scaffold the API type.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub resource: bool,
    /// Scaffold the controller.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub controller: bool,
    /// Namespace-scoped resource (`--namespaced=false` for cluster-scoped).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub namespaced: bool,
    /// Name of the controller: another controller for the kind, in its own module (with
    /// `--resource=false` when the type exists).
    #[arg(long, value_name = "NAME")]
    pub controller_name: Option<ControllerName>,
    /// Overwrite the files of an API that already exists.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false)]
    pub force: bool,
    #[command(flatten)]
    pub external: super::ExternalApi,
    /// Plugin keys, comma-separated: `deploy-image/v1-alpha` (also
    /// `deploy-image.go.kubebuilder.io/v1-alpha`) scaffolds a controller that runs `--image` as a
    /// Deployment; the layout keys (`go/v4`, `kustomize/v2`, ...) change nothing.
    #[arg(long, value_name = "PLUGIN,...")]
    pub plugins: Option<String>,
    /// Kubebuilder (alpha): scaffold the API for server-side apply (apply configurations). Every
    /// type here is its own apply configuration (unset fields are left out) and every controller
    /// writes by server-side apply: accepted, no effect.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false)]
    pub ssa: bool,
    #[command(flatten)]
    pub go: super::GoToolchain,
    #[command(flatten)]
    pub image: ImageArgs,
    #[command(flatten)]
    pub project: super::ProjectDir,
}

/// The deploy-image flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ImageArgs {
    /// Container image the controller runs (deploy-image plugin).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Container command, comma-separated (deploy-image plugin).
    #[arg(long, value_name = "CMD,ARG,...")]
    pub image_container_command: Option<String>,
    /// Container port (deploy-image plugin).
    #[arg(long, value_name = "PORT")]
    pub image_container_port: Option<u16>,
    /// User ID the container runs as (deploy-image plugin).
    #[arg(long, value_name = "UID")]
    pub run_as_user: Option<u32>,
}

impl From<ImageArgs> for ImageOptions {
    fn from(args: ImageArgs) -> Self {
        ImageOptions {
            image: args.image,
            image_container_command: args.image_container_command,
            image_container_port: args.image_container_port,
            run_as_user: args.run_as_user,
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    let plugins = match args.plugins.as_deref() {
        Some(chain) => plugin_keys::parse(chain, "create api", &[Plugin::DeployImage])?,
        None => Vec::new(),
    };
    let deploy = plugins
        .contains(&Plugin::DeployImage)
        .then_some(deploy_image::NAME);
    let image = deploy_image::select(deploy, args.image.into())?;
    let options = ApiOptions {
        group: args.group,
        version: args.version,
        kind: args.kind,
        plural: args.plural,
        resource: args.resource,
        controller: args.controller,
        namespaced: args.namespaced,
        force: args.force,
        controller_name: args.controller_name,
        external: args.external.options(),
    };
    let plan = crate::plugins::create_api(&args.project.dir, &options, image.as_ref())?;
    shell::written(plan.apply()?);
    shell::note(
        "Next",
        "implement your new API and generate the manifests (CRDs, RBAC) with:\n$ make manifests",
    );
    Ok(())
}
