//! What each command generates. `rust` is the base plugin (`init`, `create api`); `deploy_image` builds on
//! it with a complete controller that runs a container image as a Deployment. The base plugin knows
//! nothing of the others; this module picks the plugin for a command.

use std::path::Path;

use anyhow::Result;

use crate::project::{self, Project, Resource};
use crate::scaffold::Plan;

pub mod autoupdate;
pub mod deploy_image;
pub mod grafana;
pub mod helm;
pub mod migrate;
pub mod multicluster;
pub mod multigroup;
pub mod namespaced;
pub mod rust;
pub mod webhook;

/// Plans `create api`: with the deploy-image controller when `image` is given, else the base one.
pub fn create_api(
    dir: &Path,
    options: &rust::ApiOptions,
    image: Option<&deploy_image::DeployImage>,
) -> Result<Plan> {
    match image {
        Some(image) => deploy_image::create_api(dir, options, image),
        None => rust::create_api(dir, options),
    }
}

/// Rebuilds a project from its PROJECT file alone into the empty directory `output`: `init`, then
/// `create api` for each resource, in the order PROJECT lists them, then `create webhook` for each
/// resource with webhooks (a conversion needs every version of its kind). `input` is the project's
/// directory: external kinds are generated again from the CRD copies in it that PROJECT names, and own
/// kinds with a CRD controller-gen wrote in it get their types from that CRD ([`migrate`]).
pub fn generate(project: &Project, input: &Path, output: &Path) -> Result<()> {
    let rust_plugin = project.plugins.get(project::RUST_PLUGIN);
    let init_options = rust::InitOptions {
        domain: project.domain.parse()?,
        project_name: project.project_name.parse()?,
        repo: project.repo.clone(),
        owner: rust_plugin.and_then(|p| p.owner.clone()),
        license: rust::License::from_key(rust_plugin.and_then(|p| p.license.as_deref()))?,
        header: Some(rust::read_header(input, project)?),
        multigroup: project.multigroup,
        namespaced: project.namespaced,
        multicluster: rust::is_multicluster(project),
        runtime_source: rust::RuntimeSource::of(project)?,
    };
    rust::init(output, &init_options)?.apply()?;
    for resource in &project.resources {
        let options = rust::ApiOptions {
            group: resource.group.parse()?,
            version: resource.version.parse()?,
            kind: resource.kind.parse()?,
            plural: resource.plural.as_deref().map(str::parse).transpose()?,
            resource: resource.api.is_some(),
            controller: resource.has_default_controller(),
            namespaced: resource.api.as_ref().is_some_and(|a| a.namespaced),
            force: false,
            controller_name: None,
            external: external_options(input, resource)?,
        };
        let image = project
            .plugin_resource(project::DEPLOY_IMAGE_PLUGIN, resource)
            .map(deploy_image::DeployImage::from_record)
            .transpose()?;
        if options.resource || options.controller || options.external.is_some() {
            create_api(output, &options, image.as_ref())?.apply()?;
        }
        // Then the controllers added with `--controller-name`, on the type that now exists.
        for name in resource.named_controllers() {
            let named = rust::ApiOptions {
                resource: false,
                controller: true,
                controller_name: Some(name.parse()?),
                ..options.clone()
            };
            create_api(output, &named, None)?.apply()?;
        }
    }
    for resource in &project.resources {
        let Some(webhooks) = &resource.webhooks else {
            continue;
        };
        let options = webhook::WebhookOptions {
            group: resource.group.parse()?,
            version: resource.version.parse()?,
            kind: resource.kind.parse()?,
            defaulting: webhooks.defaulting,
            validation: webhooks.validation,
            conversion: webhooks.conversion,
            spokes: webhooks
                .spoke
                .iter()
                .map(|s| s.parse())
                .collect::<Result<_, _>>()?,
            defaulting_path: webhooks
                .defaulting_path
                .as_deref()
                .map(str::parse)
                .transpose()?,
            validation_path: webhooks
                .validation_path
                .as_deref()
                .map(str::parse)
                .transpose()?,
            // Built-in and external kinds are in PROJECT: their webhooks need no more.
            external: None,
            force: false,
            plural: None,
        };
        webhook::create_webhook(output, &options)?.apply()?;
    }
    // The own kinds whose CRDs the input has get their types from them.
    migrate::apply(project, input, output)?;
    replay_optional_plugins(project, input, output)?;
    keep_server_side_apply(project, output)
}

/// `api.ssa` no command sets (it comes from a Kubebuilder project and changes nothing generated): the
/// regenerated PROJECT keeps it as the input had it.
fn keep_server_side_apply(project: &Project, output: &Path) -> Result<()> {
    let asked = |r: &Resource| r.api.as_ref().is_some_and(|a| a.ssa);
    if !project.resources.iter().any(asked) {
        return Ok(());
    }
    let mut written = Project::load(output)?;
    for resource in &mut written.resources {
        let input = project.resources.iter().find(|r| {
            (&r.group, &r.version, &r.kind) == (&resource.group, &resource.version, &resource.kind)
        });
        if let (Some(api), Some(input)) = (resource.api.as_mut(), input) {
            api.ssa = asked(input);
        }
    }
    let mut plan = crate::scaffold::Plan::new(output);
    plan.add(
        project::FILE_NAME,
        written.render(),
        crate::scaffold::IfExists::Overwrite,
    );
    plan.apply()?;
    Ok(())
}

/// The optional plugins PROJECT records, run again on the re-scaffolded project: the Grafana dashboards
/// (with the custom-metrics list of the project at `input`) and the auto-update workflow. The Helm
/// chart is not among them: it is built from manifests, which come later (see
/// [`crate::generate::scaffold`]).
fn replay_optional_plugins(project: &Project, input: &Path, output: &Path) -> Result<()> {
    if project.plugins.contains_key(project::GRAFANA_PLUGIN) {
        grafana::replay(input, output)?;
    }
    if let Some(record) = project.plugins.get(project::AUTOUPDATE_PLUGIN) {
        autoupdate::replay(output, record.use_gh_models == Some(true))?;
    }
    Ok(())
}

/// What `--external-api-path` and `--external-api-domain` were for an external kind of PROJECT: its
/// CRD copy in the project at `input`, and its domain.
fn external_options(input: &Path, resource: &Resource) -> Result<Option<rust::ExternalOptions>> {
    if !resource.external {
        return Ok(None);
    }
    let Some(path) = &resource.path else {
        anyhow::bail!(
            "PROJECT records `{}/{}, Kind={}` as external but gives no `path` to its CRD\nhelp: set `path` to the CRD's file in the project, e.g. `config/crd/external/<group>_<plural>.yaml`",
            resource.group,
            resource.version,
            resource.kind
        );
    };
    Ok(Some(rust::ExternalOptions {
        crd: input.join(path),
        domain: (!resource.domain.is_empty())
            .then(|| resource.domain.parse())
            .transpose()?,
        module: resource.module.clone(),
    }))
}
