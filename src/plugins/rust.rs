//! The base Rust plugin: what `init` and `create api` generate.
//!
//! Each function validates its options against the project, renders the matching template sets into a
//! [`Plan`], wires the new code in at the scaffold markers, and updates the PROJECT file. Nothing is written
//! here: the caller applies the plan, so a refused command leaves the directory as it was.

use std::path::Path;

use anyhow::{Result, bail};
use serde::Serialize;

use super::deploy_image::DeployImage;
use crate::model::{Domain, Group, Kind, Plural, ProjectName, Version};
use crate::project::{self, Api, Project, Resource};
use crate::scaffold::{IfExists, Insertion, Plan};
use crate::versions;

/// Files whose presence means the directory already holds a project.
const INIT_SENTINELS: &[&str] = &[project::FILE_NAME, "Cargo.toml", "Makefile", "src/main.rs"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum License {
    /// Apache License 2.0: an SPDX header in every Rust file and `license` in Cargo.toml.
    Apache2,
    /// No license header.
    None,
}

impl License {
    fn key(self) -> &'static str {
        match self {
            License::Apache2 => "apache2",
            License::None => "none",
        }
    }

    fn from_key(key: Option<&str>) -> Result<Self> {
        match key.unwrap_or("apache2") {
            "apache2" => Ok(License::Apache2),
            "none" => Ok(License::None),
            other => bail!("unknown license `{other}` in PROJECT: use `apache2` or `none`"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct InitOptions {
    pub domain: Domain,
    pub project_name: ProjectName,
    pub repo: Option<String>,
    pub owner: Option<String>,
    pub license: License,
}

#[derive(Debug, Clone)]
pub struct ApiOptions {
    pub group: Group,
    pub version: Version,
    pub kind: Kind,
    pub plural: Option<Plural>,
    pub resource: bool,
    pub controller: bool,
    pub namespaced: bool,
    pub force: bool,
    pub image: Option<DeployImage>,
}

/// Values every template of a project sees.
#[derive(Debug, Serialize)]
struct ProjectContext {
    project_name: String,
    crate_name: String,
    domain: String,
    repo: String,
    owner: String,
    license: &'static str,
    rustbuilder_version: &'static str,
    kube_version: &'static str,
    k8s_openapi_version: &'static str,
    k8s_openapi_feature: &'static str,
    kubernetes_version: &'static str,
}

impl ProjectContext {
    fn new(project: &Project) -> Result<Self> {
        let rust = project.plugins.get(project::RUST_PLUGIN);
        let license = License::from_key(rust.and_then(|p| p.license.as_deref()))?;
        let name: ProjectName = project.project_name.parse()?;
        Ok(Self {
            crate_name: name.crate_name(),
            project_name: project.project_name.clone(),
            domain: project.domain.clone(),
            repo: project.repo.clone().unwrap_or_default(),
            owner: rust
                .and_then(|p| p.owner.clone())
                .unwrap_or_else(|| format!("The {} Authors", project.project_name)),
            license: license.key(),
            rustbuilder_version: env!("CARGO_PKG_VERSION"),
            kube_version: versions::KUBE,
            k8s_openapi_version: versions::K8S_OPENAPI,
            k8s_openapi_feature: versions::K8S_OPENAPI_FEATURE,
            kubernetes_version: versions::KUBERNETES,
        })
    }
}

/// Values the templates of one API see, on top of the project's.
#[derive(Debug, Serialize)]
struct ApiContext {
    group: String,
    group_snake: String,
    qualified_group: String,
    version: String,
    kind: String,
    kind_snake: String,
    kind_lower: String,
    /// `MEMCACHED` for `Memcached`: environment variable prefix (`MEMCACHED_IMAGE`).
    kind_upper: String,
    plural: String,
    /// The plural as a Rust identifier.
    plural_snake: String,
    namespaced: bool,
    image: Option<DeployImage>,
}

/// Plans a new project in `dir`.
pub fn init(dir: &Path, options: &InitOptions) -> Result<Plan> {
    for sentinel in INIT_SENTINELS {
        if dir.join(sentinel).exists() {
            bail!(
                "`{}` is already initialized: `{sentinel}` exists\nhelp: run `rustbuilder init` in an empty directory, or `rustbuilder create api` to add to this project",
                dir.display()
            );
        }
    }
    let mut project = Project::new(
        &options.domain,
        options.project_name.as_str(),
        options.repo.clone(),
    );
    let rust = project
        .plugins
        .entry(project::RUST_PLUGIN.to_string())
        .or_default();
    rust.license = Some(options.license.key().to_string());
    rust.owner = options.owner.clone();

    let mut plan = Plan::new(dir);
    let context = tera::Context::from_serialize(ProjectContext::new(&project)?)?;
    plan.add_set("init", &context, |_| IfExists::Error)?;
    plan.add(project::FILE_NAME, project.render(), IfExists::Error);
    plan.add(
        "config/rbac/role.yaml",
        crate::manifests::render_role(&[]),
        IfExists::Error,
    );
    Ok(plan)
}

/// Plans a new API in the project at `dir`.
pub fn create_api(dir: &Path, options: &ApiOptions) -> Result<Plan> {
    let mut project = Project::load(dir)?;
    let domain: Domain = project.domain.parse()?;
    let qualified_group = options.group.qualified(&domain)?;
    check_single_group(&project, &options.group)?;

    let existing = project
        .find(&options.group, &options.version, &options.kind)
        .cloned();
    if existing.is_some() && !options.force {
        bail!(
            "API resource already exists: `{}/{}, Kind={}` is in PROJECT\nhelp: pass `--force` to scaffold it again (its files are overwritten)",
            qualified_group,
            options.version,
            options.kind
        );
    }
    if !options.resource && existing.as_ref().and_then(|r| r.api.as_ref()).is_none() {
        bail!(
            "`--resource=false` needs the API type to exist, but `{}` is not in PROJECT\nhelp: drop `--resource=false` to scaffold the type too",
            options.kind
        );
    }
    if !options.resource && !options.controller {
        bail!(
            "nothing to scaffold: both `--resource` and `--controller` are false\nhelp: leave one of them on"
        );
    }
    if options.image.is_some() && !(options.resource && options.controller) {
        bail!(
            "the deploy-image plugin scaffolds both the type and its controller\nhelp: drop `--resource=false` and `--controller=false`"
        );
    }

    let default_plural = options.kind.default_plural();
    let plural = options
        .plural
        .clone()
        .unwrap_or_else(|| default_plural.clone());
    let base = ProjectContext::new(&project)?;
    let api = ApiContext {
        group: options.group.to_string(),
        group_snake: options.group.snake(),
        qualified_group: qualified_group.clone(),
        version: options.version.to_string(),
        kind: options.kind.to_string(),
        kind_snake: options.kind.snake(),
        kind_lower: options.kind.as_str().to_lowercase(),
        kind_upper: options.kind.as_str().to_uppercase(),
        plural: plural.to_string(),
        plural_snake: plural.as_str().replace('-', "_"),
        namespaced: options.namespaced,
        image: options.image.clone(),
    };
    let mut context = tera::Context::from_serialize(&base)?;
    context.extend(tera::Context::from_serialize(&api)?);

    let mut plan = Plan::new(dir);
    let owned = |path: &str| {
        if path.ends_with("/mod.rs") {
            IfExists::Skip
        } else {
            IfExists::Error
        }
    };
    if options.resource {
        plan.add_set("api", &context, owned)?;
    }
    if options.controller {
        plan.add_set("controller", &context, owned)?;
    }
    if options.image.is_some() {
        plan.add_set("deploy-image", &context, owned)?;
    }
    if options.controller {
        // Tests of the manager itself, with the first kind as their example object.
        plan.add_set("manager-tests", &context, |_| IfExists::Skip)?;
    }
    wire(&mut plan, &base, &api, options)?;

    project.upsert(Resource {
        api: if options.resource {
            Some(Api {
                crd_version: "v1".into(),
                namespaced: options.namespaced,
            })
        } else {
            existing.as_ref().and_then(|r| r.api.clone())
        },
        controller: options.controller || existing.as_ref().is_some_and(|r| r.controller),
        domain: domain.to_string(),
        group: options.group.to_string(),
        kind: options.kind.to_string(),
        path: Some(format!(
            "{}::api::{}::{}",
            base.crate_name, options.version, options.kind
        )),
        plural: (plural != default_plural).then(|| plural.to_string()),
        version: options.version.to_string(),
    });
    if let Some(image) = &options.image {
        project
            .upsert_plugin_resource(project::DEPLOY_IMAGE_PLUGIN, image.record(&domain, options));
    }
    plan.add(project::FILE_NAME, project.render(), IfExists::Overwrite);
    if options.force {
        plan.force();
    }
    Ok(plan)
}

/// One group per project: `src/api/<version>/` has no room for a second group's types.
fn check_single_group(project: &Project, group: &Group) -> Result<()> {
    if let Some(other) = project.groups().find(|g| *g != group.as_str()) {
        bail!(
            "multiple groups are not allowed: this project already uses group `{other}`, and `{group}` would be a second one\nhelp: use `--group {other}`, or put `{group}` in a project of its own (multigroup layouts are not supported yet)"
        );
    }
    Ok(())
}

/// Registers the new API and controller with the code and manifests that list them.
fn wire(
    plan: &mut Plan,
    base: &ProjectContext,
    api: &ApiContext,
    options: &ApiOptions,
) -> Result<()> {
    let (version, kind, kind_snake) = (&api.version, &api.kind, &api.kind_snake);
    if options.resource {
        plan.insert(Insertion {
            path: "src/api/mod.rs",
            marker: "versions",
            fragment: format!("pub mod {version};"),
        })?;
        plan.insert(Insertion {
            path: &format!("src/api/{version}/mod.rs"),
            marker: "kinds",
            fragment: format!("mod {kind_snake};\npub use {kind_snake}::*;"),
        })?;
        plan.insert(Insertion {
            path: "src/bin/crdgen.rs",
            marker: "imports",
            fragment: sorted_lines(&[
                "use kube::CustomResourceExt;".to_string(),
                format!("use {}::api;", base.crate_name),
            ]),
        })?;
        plan.insert(Insertion {
            path: "src/bin/crdgen.rs",
            marker: "crds",
            fragment: format!("        api::{version}::{kind}::crd(),"),
        })?;
        plan.insert(Insertion {
            path: "config/crd/kustomization.yaml",
            marker: "crdkustomizeresource",
            fragment: format!("- bases/{}_{}.yaml", api.qualified_group, api.plural),
        })?;
        plan.insert(Insertion {
            path: "config/samples/kustomization.yaml",
            marker: "manifestskustomizesamples",
            fragment: format!("- {}_{version}_{kind_snake}.yaml", api.group_snake),
        })?;
        plan.insert(Insertion {
            path: "config/rbac/kustomization.yaml",
            marker: "rbackustomizeresource",
            fragment: ["admin", "editor", "viewer"]
                .map(|r| format!("- {kind_snake}_{r}_role.yaml"))
                .join("\n"),
        })?;
    }
    if options.image.is_some() {
        plan.insert(Insertion {
            path: "tests/e2e/main.rs",
            marker: "e2e",
            fragment: format!("mod {kind_snake};"),
        })?;
    }
    if options.controller {
        plan.insert(Insertion {
            path: "src/controller/mod.rs",
            marker: "controllers",
            fragment: format!("pub mod {kind_snake};"),
        })?;
        plan.insert(Insertion {
            path: "src/main.rs",
            marker: "imports",
            fragment: format!("use {}::controller;", base.crate_name),
        })?;
        plan.insert(Insertion {
            path: "src/main.rs",
            marker: "controllers",
            fragment: spawn_controller(kind_snake),
        })?;
    }
    if let Some(image) = &options.image {
        // The image the deploy-image controller runs, overridable per deployment. Quoted as a JSON string
        // (valid YAML), so a value such as `123` stays a string.
        let name_line = format!("        - name: {}_IMAGE", api.kind_upper);
        // `--force` with another image replaces the entry instead of adding a second one.
        plan.edit("config/manager/manager.yaml", |text| {
            let mut lines: Vec<&str> = text.lines().collect();
            if let Some(at) = lines.iter().position(|line| *line == name_line) {
                lines.drain(at..(at + 2).min(lines.len()));
            }
            lines.join("\n") + "\n"
        })?;
        plan.insert(Insertion {
            path: "config/manager/manager.yaml",
            marker: "env",
            fragment: format!(
                "{name_line}\n          value: {}",
                serde_json::Value::from(image.image.as_str())
            ),
        })?;
    }
    Ok(())
}

/// Import lines in the order rustfmt keeps them.
fn sorted_lines(lines: &[String]) -> String {
    let mut lines = lines.to_vec();
    lines.sort();
    lines.join("\n")
}

/// The line `main` spawns a controller with, wrapped the way rustfmt wraps a call whose arguments are
/// wider than 60 columns.
fn spawn_controller(kind_snake: &str) -> String {
    let call = format!("controller::{kind_snake}::run(manager.clone())");
    if call.len() <= 60 {
        format!("    controllers.spawn({call});")
    } else {
        format!(
            "    controllers.spawn(controller::{kind_snake}::run(\n        manager.clone(),\n    ));"
        )
    }
}

/// Rebuilds a project from its PROJECT file alone into the empty directory `output`: `init`, then
/// `create api` for each resource, in the order PROJECT lists them.
pub fn generate(project: &Project, output: &Path) -> Result<()> {
    let rust = project.plugins.get(project::RUST_PLUGIN);
    let init_options = InitOptions {
        domain: project.domain.parse()?,
        project_name: project.project_name.parse()?,
        repo: project.repo.clone(),
        owner: rust.and_then(|p| p.owner.clone()),
        license: License::from_key(rust.and_then(|p| p.license.as_deref()))?,
    };
    init(output, &init_options)?.apply()?;
    for resource in &project.resources {
        let options = ApiOptions {
            group: resource.group.parse()?,
            version: resource.version.parse()?,
            kind: resource.kind.parse()?,
            plural: resource.plural.as_deref().map(str::parse).transpose()?,
            resource: resource.api.is_some(),
            controller: resource.controller,
            namespaced: resource.api.as_ref().is_some_and(|a| a.namespaced),
            force: false,
            image: project
                .plugin_resource(project::DEPLOY_IMAGE_PLUGIN, resource)
                .map(DeployImage::from_record)
                .transpose()?,
        };
        create_api(output, &options)?.apply()?;
    }
    Ok(())
}
