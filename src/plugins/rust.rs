//! The base Rust plugin: what `init` and `create api` generate.
//!
//! Each function validates its options against the project, renders the matching template sets into a
//! [`Plan`], wires the new code in at the scaffold markers, and updates the PROJECT file. Nothing is written
//! here: the caller applies the plan, so a refused command leaves the directory as it was. Other plugins
//! build on [`plan_api`]: they add their sets to its plan before [`ApiScaffold::finish`].

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use crate::core_types::{self, CoreType};
use crate::external::{self, ExternalCrd};
use crate::model::{ControllerName, Domain, Group, Kind, Plural, ProjectName, Version};
use crate::project::{self, Api, Project, Resource};
use crate::scaffold::{IfExists, Insertion, Plan};
pub use crate::vendored::RuntimeSource;
use crate::versions;

/// The crate of the controllers' tests: one test binary, a module per controller.
pub const CONTROLLER_TESTS: &str = "tests/controllers/main.rs";

/// The explorer's test, a module of [`CONTROLLER_TESTS`]: every controller of the project's own kinds
/// run through their samples, without faults and under them.
pub const EXPLORE_TESTS: &str = "tests/controllers/explore.rs";

/// Files whose presence means the directory already holds a project.
const INIT_SENTINELS: &[&str] = &[project::FILE_NAME, "Cargo.toml", "Makefile", "src/main.rs"];

/// The license of the generated code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum License {
    /// Apache License 2.0: an SPDX header in every Rust file and `license` in Cargo.toml.
    Apache2,
    /// A copyright line alone in every Rust file.
    Copyright,
    /// The header of a file of the user's (`--license-file`), kept in [`BOILERPLATE`].
    Custom,
    /// No license header.
    None,
}

/// The header every scaffolded Rust file starts with: written by `init`, read by every command that
/// adds files. Edited by hand, it changes the files written afterwards (Kubebuilder's
/// `hack/boilerplate.go.txt`).
pub const BOILERPLATE: &str = "hack/boilerplate.rs.txt";

impl License {
    pub fn key(self) -> &'static str {
        match self {
            License::Apache2 => "apache2",
            License::Copyright => "copyright",
            License::Custom => "custom",
            License::None => "none",
        }
    }

    /// The license PROJECT records (`apache2` when it records none).
    pub fn from_key(key: Option<&str>) -> Result<Self> {
        match key.unwrap_or("apache2") {
            "apache2" => Ok(License::Apache2),
            "copyright" => Ok(License::Copyright),
            "custom" => Ok(License::Custom),
            "none" => Ok(License::None),
            other => bail!(
                "unknown license `{other}` in PROJECT: use `apache2`, `copyright`, `custom` or `none`"
            ),
        }
    }

    /// The header of this license with `owner` as the copyright holder (empty for `none`; for
    /// `custom`, what the user's file holds instead).
    pub fn header(self, owner: &str) -> String {
        match self {
            License::Apache2 => {
                format!("// Copyright {owner}\n// SPDX-License-Identifier: Apache-2.0\n")
            }
            License::Copyright => format!("// Copyright {owner}\n"),
            License::Custom | License::None => String::new(),
        }
    }
}

/// A licence header from the user's file, as a Rust comment: a text already written as comments
/// (`//` lines, or one `/* ... */` block, as Kubebuilder's boilerplate files are) is kept as it is,
/// any other text becomes `//` lines. Ends with one line break; empty when the text is blank.
pub fn header_from_text(text: &str) -> String {
    let text = text.trim_matches(|c| c == '\n' || c == '\r');
    if text.trim().is_empty() {
        return String::new();
    }
    let trimmed = text.trim();
    let commented = trimmed.lines().all(|line| {
        let line = line.trim_start();
        line.is_empty() || line.starts_with("//")
    });
    let block = trimmed.starts_with("/*") && trimmed.ends_with("*/");
    if commented || block {
        return format!("{text}\n");
    }
    text.lines()
        .map(|line| match line.trim_end() {
            "" => "//\n".to_string(),
            line => format!("// {line}\n"),
        })
        .collect()
}

#[derive(Debug, Clone)]
pub struct InitOptions {
    pub domain: Domain,
    pub project_name: ProjectName,
    pub repo: Option<String>,
    pub owner: Option<String>,
    pub license: License,
    /// The licence header, when it is not `license`'s own: from `--license-file`, or the project's
    /// [`BOILERPLATE`] when it is scaffolded again.
    pub header: Option<String>,
    /// APIs under `src/api/<group>/<version>/`, controllers under `src/controller/<group>/`.
    pub multigroup: bool,
    /// A manager that watches its own namespace only (`WATCH_NAMESPACE`), with a Role there.
    pub namespaced: bool,
    /// A manager that runs the controllers in every cluster of a fleet (`--cluster-provider`).
    pub multicluster: bool,
    pub runtime_source: RuntimeSource,
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
    /// `--controller-name`: a controller of its own name instead of the kind's own one.
    pub controller_name: Option<ControllerName>,
    /// `--external-api-path`: the type is another operator's, described by this CRD.
    pub external: Option<ExternalOptions>,
}

/// Where the CRD of an external type is (`--external-api-path`) and its domain
/// (`--external-api-domain`).
#[derive(Debug, Clone)]
pub struct ExternalOptions {
    /// The CRD's YAML file, as the command line names it (relative to the working directory).
    pub crd: PathBuf,
    /// The domain of the CRD's API group, when given; else what follows `<group>.` in it.
    pub domain: Option<Domain>,
    /// The Go module of the kind's types (`--external-api-module`, Kubebuilder's flag): when `crd` is
    /// not a file (Kubebuilder's flag names a Go import path there), the CRD is looked for in that
    /// module in Go's module cache. Recorded in PROJECT as `module`.
    pub module: Option<String>,
}

impl ExternalOptions {
    /// The CRD's file: `crd` itself, or, when `crd` is a Go import path and `module` is given, the
    /// CRD of `group` and `kind` in that module in Go's module cache.
    pub fn crd_file(&self, group: &Group, kind: &Kind) -> Result<PathBuf> {
        let Some(module) = self.module.as_ref().filter(|_| !self.crd.is_file()) else {
            return Ok(self.crd.clone());
        };
        let api_group = match &self.domain {
            Some(domain) => group.qualified(domain)?,
            None => group.to_string(),
        };
        external::go_module::crd(module, &api_group, kind.as_str()).with_context(|| {
            format!(
                "`--external-api-path {}` is not a CRD file, and Go's module cache holds no CRD of kind `{kind}` in API group `{api_group}` in `{module}`\nhelp: pass the CRD's YAML file (its release manifest, or `kubectl get crd <plural>.{api_group} -o yaml > crd.yaml`), or run `go mod download {module}` first",
                self.crd.display()
            )
        })
    }
}

/// Values every template of a project sees.
#[derive(Debug, Serialize)]
pub(super) struct ProjectContext {
    project_name: String,
    pub(super) crate_name: String,
    domain: String,
    repo: String,
    owner: String,
    license: &'static str,
    /// The header of every Rust file ([`BOILERPLATE`]), with its line break; empty for none.
    boilerplate: String,
    rustbuilder_version: &'static str,
    /// The requirement on the runtime crates: `0.1` (vendored) or `0.1.0` (crates.io).
    runtime_version_req: String,
    /// The runtime crates come from crates.io, not from a copy in `rustbuilder/`.
    runtime_from_registry: bool,
    kube_version: &'static str,
    k8s_openapi_version: &'static str,
    k8s_openapi_feature: &'static str,
    kubernetes_version: &'static str,
    multigroup: bool,
    /// The manager watches one namespace (`init --namespaced`).
    namespaced_manager: bool,
    /// The manager runs the controllers in every cluster of a fleet (`init --multicluster`).
    pub(super) multicluster: bool,
}

impl ProjectContext {
    /// The context of the project at `dir`, its header from the project's [`BOILERPLATE`].
    pub(super) fn of(project: &Project, dir: &Path) -> Result<Self> {
        let mut context = Self::new(project)?;
        context.boilerplate = read_header(dir, project)?;
        Ok(context)
    }

    pub(super) fn new(project: &Project) -> Result<Self> {
        let rust = project.plugins.get(project::RUST_PLUGIN);
        let license = License::from_key(rust.and_then(|p| p.license.as_deref()))?;
        let runtime_source = RuntimeSource::of(project)?;
        let name: ProjectName = project.project_name.parse()?;
        let owner = rust
            .and_then(|p| p.owner.clone())
            .unwrap_or_else(|| format!("The {} Authors", project.project_name));
        Ok(Self {
            crate_name: name.crate_name(),
            project_name: project.project_name.clone(),
            domain: project.domain.clone(),
            repo: project.repo.clone().unwrap_or_default(),
            boilerplate: license.header(&owner),
            owner,
            license: license.key(),
            rustbuilder_version: env!("CARGO_PKG_VERSION"),
            runtime_version_req: runtime_source.version_req(),
            runtime_from_registry: runtime_source == RuntimeSource::Registry,
            kube_version: versions::KUBE,
            k8s_openapi_version: versions::K8S_OPENAPI,
            k8s_openapi_feature: versions::K8S_OPENAPI_FEATURE,
            kubernetes_version: versions::KUBERNETES,
            multigroup: project.multigroup,
            namespaced_manager: project.namespaced,
            multicluster: is_multicluster(project),
        })
    }
}

/// Whether the project's manager runs its controllers in every cluster of a fleet
/// (`init --multicluster`).
pub fn is_multicluster(project: &Project) -> bool {
    let rust = project.plugins.get(project::RUST_PLUGIN);
    rust.and_then(|p| p.multicluster).unwrap_or(false)
}

/// The header the project at `dir` gives its files: its [`BOILERPLATE`] (or, for a Kubebuilder
/// project made into a Rust one, its `hack/boilerplate.go.txt`), else its license's.
pub fn read_header(dir: &Path, project: &Project) -> Result<String> {
    for file in [BOILERPLATE, "hack/boilerplate.go.txt"] {
        let path = dir.join(file);
        if path.is_file() {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("failed to read `{}`", path.display()))?;
            return Ok(header_from_text(&text));
        }
    }
    let rust = project.plugins.get(project::RUST_PLUGIN);
    let license = License::from_key(rust.and_then(|p| p.license.as_deref()))?;
    if license == License::Custom {
        bail!(
            "`{BOILERPLATE}` is missing: it holds this project's licence header (`--license-file`)\nhelp: restore it, or choose a header with `rustbuilder edit --license-file <file>` or `rustbuilder edit --license apache2`"
        );
    }
    let context = ProjectContext::new(project)?;
    Ok(context.boilerplate)
}

/// Values the templates of one API see, on top of the project's.
#[derive(Debug, Serialize)]
pub struct ApiContext {
    pub group: String,
    pub group_snake: String,
    pub qualified_group: String,
    pub version: String,
    pub kind: String,
    pub kind_snake: String,
    pub kind_lower: String,
    /// `MEMCACHED` for `Memcached`: environment variable prefix (`MEMCACHED_IMAGE`).
    pub kind_upper: String,
    /// The stem of the kind's own files outside its module (RBAC roles, e2e checks): `memcached`, or
    /// `cache_memcached` in a multigroup project, where one kind may be in several groups.
    pub kind_file: String,
    /// The controller's test module, `tests/controllers/<module>.rs`: the controller module, after the
    /// group in a multigroup project.
    pub controller_test: String,
    pub plural: String,
    /// The plural as a Rust identifier.
    pub plural_snake: String,
    pub namespaced: bool,
    /// The group in RBAC markers: the qualified group, or `core` for the legacy group.
    pub rbac_group: String,
    /// For a Kubernetes built-in kind, its Rust type in k8s-openapi.
    pub core_path: Option<String>,
    /// For another operator's kind, the module of its generated types below the crate:
    /// `external::cert_manager::v1`.
    pub external_module: Option<String>,
    /// For another operator's kind, the project's copy of its CRD: `config/crd/external/<group>_<plural>.yaml`.
    pub external_crd: Option<String>,
    /// `cache/` in a multigroup project, else empty: the group's directory under `src/api/` and
    /// `src/controller/`.
    pub group_path: String,
    /// The version module below the crate: `api::v1alpha1`, or `api::cache::v1alpha1` (multigroup).
    pub api_path: String,
    /// The controller's module (and file) name: the kind's, or that of `--controller-name`.
    pub controller_module: String,
    /// The controller module below `controller`: `memcached`, or `cache::memcached` (multigroup).
    pub controller_rel: String,
    /// The controller's name in metrics and logs: its own name, prefixed with the group in a
    /// multigroup project (`cache-memcached`).
    pub controller_name: String,
    pub multigroup: bool,
}

/// A `create api` in the making: the base plugin's plan, and what other plugins need to add to it.
pub struct ApiScaffold {
    pub plan: Plan,
    /// What the templates see; a plugin may add its own values before rendering its sets.
    pub context: tera::Context,
    pub api: ApiContext,
    /// PROJECT as it will be written by [`ApiScaffold::finish`].
    pub project: Project,
    pub domain: Domain,
    force: bool,
}

impl ApiScaffold {
    /// Adds PROJECT and applies `--force`: the plan is complete.
    pub fn finish(mut self) -> Plan {
        self.plan.add(
            project::FILE_NAME,
            self.project.render(),
            IfExists::Overwrite,
        );
        if self.force {
            self.plan.force();
        }
        self.plan
    }
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
    project.multigroup = options.multigroup;
    project.namespaced = options.namespaced;
    let rust = project
        .plugins
        .entry(project::RUST_PLUGIN.to_string())
        .or_default();
    rust.license = Some(options.license.key().to_string());
    rust.owner = options.owner.clone();
    rust.runtime_source = options.runtime_source.key().map(str::to_string);
    rust.multicluster = options.multicluster.then_some(true);

    let mut plan = Plan::new(dir);
    let mut context = ProjectContext::new(&project)?;
    let existing = dir.join(BOILERPLATE);
    match &options.header {
        Some(_) if existing.exists() => bail!(
            "`{}` exists, and `--license-file` gives another header\nhelp: edit `{BOILERPLATE}` and leave out `--license-file`, or remove the file",
            existing.display()
        ),
        Some(header) => context.boilerplate = header.clone(),
        // A header written before `init` is the project's, as Kubebuilder keeps a boilerplate it finds.
        None if existing.is_file() => {
            let text = std::fs::read_to_string(&existing)
                .with_context(|| format!("failed to read `{}`", existing.display()))?;
            context.boilerplate = header_from_text(&text);
        }
        None => {}
    }
    let context = tera::Context::from_serialize(context)?;
    plan.add_set("init", &context)?;
    if options.multicluster {
        // A sample of the kubeconfig Secrets the default provider reads.
        plan.add_set("multicluster", &context)?;
    }
    plan.add(project::FILE_NAME, project.render(), IfExists::Error);
    if options.runtime_source == RuntimeSource::Vendored {
        crate::vendored::add_to(&mut plan)?;
    }
    Ok(plan)
}

/// Plans `edit --license/--owner/--license-file` in the project at `dir`: the new [`BOILERPLATE`]
/// and the license and owner PROJECT records. `license` and `owner` change only when given; `header`
/// (from a file) comes with [`License::Custom`]. Files written before keep their header.
pub fn edit_license(
    dir: &Path,
    license: Option<License>,
    owner: Option<String>,
    header: Option<String>,
) -> Result<Plan> {
    let mut project = Project::load(dir)?;
    let rust = project
        .plugins
        .entry(project::RUST_PLUGIN.to_string())
        .or_default();
    if let Some(license) = license {
        rust.license = Some(license.key().to_string());
    }
    if owner.is_some() {
        rust.owner = owner;
    }
    let context = ProjectContext::new(&project)?;
    let header = match header {
        Some(header) => header,
        None if context.license == License::Custom.key() => read_header(dir, &project)?,
        None => context.boilerplate,
    };
    let mut plan = Plan::new(dir);
    plan.add(BOILERPLATE, header, IfExists::Overwrite);
    plan.add(project::FILE_NAME, project.render(), IfExists::Overwrite);
    Ok(plan)
}

/// Plans a new API in the project at `dir`.
pub fn create_api(dir: &Path, options: &ApiOptions) -> Result<Plan> {
    Ok(plan_api(dir, options)?.finish())
}

/// Plans a new API in the project at `dir`, leaving room for another plugin to add to it.
pub fn plan_api(dir: &Path, options: &ApiOptions) -> Result<ApiScaffold> {
    let mut project = Project::load(dir)?;
    let domain: Domain = project.domain.parse()?;
    let existing = project
        .find(&options.group, &options.version, &options.kind)
        .cloned();
    let external = external_crd(dir, options, existing.as_ref())?;
    let core = match external {
        Some(_) => None,
        None => core_type(options, existing.as_ref()),
    };
    let qualified_group = match (&external, core) {
        (Some(crd), _) => crd.api_group.clone(),
        (None, Some(core)) => core.api_group(),
        (None, None) => options.group.qualified(&domain)?,
    };
    if let Some(crd) = &external {
        check_external_group(&project, &options.group, crd)?;
    }
    if project.multigroup {
        // A kind may be in several groups: its files are named after both (`group_prefix`).
        check_group_module(&project, &options.group)?;
    } else if external.is_some() {
        // Its controller is `src/controller/<kind>.rs`, which a kind of that name in another group has.
        check_kind_in_one_group(&project, &options.group, &options.kind)?;
    } else if options.resource {
        // Only a new type adds a group: a controller is for a type PROJECT has, or a built-in kind.
        check_single_group(&project, &options.group)?;
    }
    let kind_lower = options.kind.as_str().to_lowercase();
    // A controller named after the lowercase kind is the kind's own one.
    let named = options
        .controller_name
        .as_ref()
        .filter(|name| name.as_str() != kind_lower);
    if named.is_some() && !options.controller {
        bail!(
            "`--controller-name` names a controller, but `--controller=false` scaffolds none\nhelp: drop `--controller=false`"
        );
    }

    // Built-in kinds are named as on the command line (`core/v1`), others with their full group.
    let shown_group = match core {
        Some(_) => options.group.to_string(),
        None => qualified_group.clone(),
    };
    let gvk = format!("`{shown_group}/{}, Kind={}`", options.version, options.kind);
    if let Some(existing) = &existing
        && !options.force
    {
        if options.resource && existing.api.is_some() {
            let help = if options.controller && named.is_some() {
                "pass `--resource=false` to add only the controller, or `--force` to scaffold the type again"
            } else {
                "pass `--force` to scaffold it again (its files are overwritten)"
            };
            bail!("API resource already exists: {gvk} is in PROJECT\nhelp: {help}");
        }
        let taken = match named {
            Some(name) => existing
                .named_controllers()
                .iter()
                .any(|n| n == name.as_str()),
            None => existing.has_default_controller(),
        };
        if options.controller && taken {
            let which = named.map_or_else(
                || "its controller".to_string(),
                |n| format!("its controller `{n}`"),
            );
            bail!(
                "API resource already exists: {gvk} and {which} are in PROJECT\nhelp: pass `--controller-name <name>` to add another controller, or `--force` to scaffold this one again"
            );
        }
    }
    if !options.resource
        && core.is_none()
        && external.is_none()
        && existing.as_ref().and_then(|r| r.api.as_ref()).is_none()
    {
        let known = core_types::versions(options.group.as_str(), options.kind.as_str());
        let help = if known.is_empty() {
            "drop `--resource=false` to scaffold the type too, name a Kubernetes built-in kind (e.g. `--group apps --version v1 --kind Deployment`), or pass `--external-api-path <CRD file>` for another operator's kind".to_string()
        } else {
            format!(
                "the built-in `{}` `{}` is at `--version {}` in k8s-openapi {}",
                options.group,
                options.kind,
                known.join("` or `--version "),
                versions::K8S_OPENAPI
            )
        };
        let shown = if core_types::is_core_group(options.group.as_str()) {
            format!(
                "`{}/{}, Kind={}`",
                options.group, options.version, options.kind
            )
        } else {
            gvk
        };
        bail!(
            "`--resource=false` needs the API type to exist, but {shown} is neither in PROJECT, nor a Kubernetes built-in kind, nor given by `--external-api-path`\nhelp: {help}"
        );
    }
    if !options.resource && !options.controller && external.is_none() {
        bail!(
            "nothing to scaffold: both `--resource` and `--controller` are false\nhelp: leave one of them on"
        );
    }
    // The kind's scope: a built-in kind's own, that of the type in PROJECT when it is not scaffolded
    // now, else `--namespaced`.
    let namespaced = match (core, &existing) {
        _ if external.is_some() => external.as_ref().is_some_and(|crd| crd.namespaced),
        (Some(core), _) => core.namespaced,
        (None, Some(Resource { api: Some(api), .. })) if !options.resource => api.namespaced,
        _ => options.namespaced,
    };
    if is_multicluster(&project) && options.controller && (core.is_some() || external.is_some()) {
        bail!(
            "{gvk} is not the project's own kind, and controllers of built-in and other operators' kinds are not scaffolded for a multi-cluster project yet\nhelp: scaffold a kind of the project's own, or `--controller=false`"
        );
    }
    if project.namespaced && !namespaced && options.controller {
        bail!(
            "{gvk} is cluster-scoped, and this project's manager watches its own namespace only (`namespaced: true` in PROJECT): its Role grants nothing outside that namespace\nhelp: scaffold a namespaced kind, or `--controller=false` for the type alone"
        );
    }
    // The kind at its other versions: one CRD, one controller for all of them.
    let other_versions: Vec<&Resource> = project
        .resources
        .iter()
        .filter(|r| {
            r.group == options.group.as_str()
                && r.kind == options.kind.as_str()
                && r.version != options.version.as_str()
        })
        .collect();
    if options.controller
        && named.is_none()
        && let Some(other) = other_versions.iter().find(|r| r.has_default_controller())
    {
        bail!(
            "`{}` has a controller already, at version {}: one controller reconciles the kind at every version\nhelp: pass `--controller=false` to add only the type of version {}",
            options.kind,
            other.version,
            options.version
        );
    }
    // Until a conversion webhook names the hub, etcd stores the kind at its most stable version, as
    // Kubernetes ranks versions (v1 > v1beta1 > v1alpha1): the same whatever order they came in.
    let hub = other_versions
        .iter()
        .any(|r| r.webhooks.as_ref().is_some_and(|w| w.conversion));
    let storage_version = (!hub && other_versions.iter().any(|r| r.api.is_some()))
        .then(|| {
            other_versions
                .iter()
                .filter(|r| r.api.is_some())
                .map(|r| r.version.as_str())
                .chain([options.version.as_str()])
                .max_by_key(|v| version_priority(v))
                .map(str::to_string)
        })
        .flatten();
    // The explorer drives a kind through its sample, so it takes the controllers of the project's own
    // kinds: a built-in or another operator's kind has no sample here, and a multi-cluster controller
    // runs in a fleet, not on the one manager the explorer starts. Each of its runs works in a
    // namespace of its own, so a cluster-scoped kind is left out. It takes a kind at one version (its
    // CRD is one per version there): the first whose controller is scaffolded.
    let explored = options.controller
        && namespaced
        && core.is_none()
        && external.is_none()
        && !is_multicluster(&project)
        && !other_versions.iter().any(|r| {
            r.api.is_some() && (r.has_default_controller() || !r.named_controllers().is_empty())
        });
    let controller_module = named.map_or_else(|| options.kind.snake(), ControllerName::snake);
    if options.controller {
        check_controller_module(&project, options, named, &controller_module)?;
    }

    let default_plural = options.kind.default_plural();
    let plural = match (&external, core) {
        (Some(crd), _) => crd.plural.parse()?,
        (None, Some(core)) => core.plural.parse()?,
        (None, None) => options
            .plural
            .clone()
            .unwrap_or_else(|| default_plural.clone()),
    };
    let base = ProjectContext::of(&project, dir)?;
    let multigroup = project.multigroup;
    let group_snake = options.group.snake();
    let group_path = if multigroup {
        format!("{group_snake}/")
    } else {
        String::new()
    };
    let group_rel = if multigroup {
        format!("{group_snake}::")
    } else {
        String::new()
    };
    let own_name = named.map_or(kind_lower.as_str(), ControllerName::as_str);
    let api = ApiContext {
        group: options.group.to_string(),
        group_snake: group_snake.clone(),
        qualified_group: qualified_group.clone(),
        version: options.version.to_string(),
        kind: options.kind.to_string(),
        kind_snake: options.kind.snake(),
        kind_lower: kind_lower.clone(),
        kind_upper: options.kind.as_str().to_uppercase(),
        kind_file: group_prefix(multigroup, &group_snake, &options.kind.snake()),
        controller_test: group_prefix(multigroup, &group_snake, &controller_module),
        plural: plural.to_string(),
        plural_snake: plural.as_str().replace('-', "_"),
        namespaced,
        rbac_group: if qualified_group.is_empty() {
            "core".to_string()
        } else {
            qualified_group.clone()
        },
        core_path: core.map(|core| core.path.to_string()),
        external_module: external
            .as_ref()
            .map(|_| format!("{}::{group_snake}::{}", external::MODULE, options.version)),
        external_crd: external.as_ref().map(ExternalCrd::file),
        api_path: format!("api::{group_rel}{}", options.version),
        controller_rel: format!("{group_rel}{controller_module}"),
        controller_name: if multigroup {
            format!("{}-{own_name}", options.group)
        } else {
            own_name.to_string()
        },
        controller_module,
        group_path,
        multigroup,
    };
    let mut context = tera::Context::from_serialize(&base)?;
    context.extend(tera::Context::from_serialize(&api)?);

    let mut plan = Plan::new(dir);
    if options.resource {
        if multigroup {
            plan.add_set("api-group", &context)?;
        }
        plan.add_set("api", &context)?;
    }
    if let Some(crd) = &external {
        let mut context = context.clone();
        context.insert("types", &crd.rust_types(&options.version)?);
        context.insert("crd_name", &crd.name());
        plan.add_set("external", &context)?;
        plan.add(crd.file(), crd.yaml()?, IfExists::Overwrite);
    }
    if options.controller {
        if multigroup {
            plan.add_set("controller-group", &context)?;
        }
        plan.add_set(
            if core.is_some() || external.is_some() {
                "controller-core"
            } else {
                "controller"
            },
            &context,
        )?;
        // The crate of every controller's test, made by the first controller.
        plan.add_set("controller-tests", &context)?;
    }
    wire(&mut plan, &base, &api, options)?;
    if explored {
        // Made by the first controller of a kind of the project's own, not by `init`: until then there
        // is nothing to explore, and a project of built-in or other operators' kinds alone has none.
        plan.add_set("explore", &context)?;
        wire_explorer(&mut plan, &api)?;
    }
    if options.resource
        && let Some(storage) = storage_version
    {
        mark_storage_version(&mut plan, &api, &storage)?;
    }

    let (own, mut others) = match &existing {
        Some(r) => (r.has_default_controller(), r.named_controllers()),
        None => (false, Vec::new()),
    };
    let own = own || (options.controller && named.is_none());
    if let Some(name) = named
        && !others.iter().any(|n| n == name.as_str())
    {
        others.push(name.to_string());
    }
    let mut resource = Resource {
        api: if options.resource {
            Some(Api {
                crd_version: "v1".into(),
                namespaced: options.namespaced,
                ssa: existing
                    .as_ref()
                    .and_then(|r| r.api.as_ref())
                    .is_some_and(|a| a.ssa),
            })
        } else {
            existing.as_ref().and_then(|r| r.api.clone())
        },
        controller: false,
        controllers: Vec::new(),
        core: core.is_some(),
        domain: match (&external, core) {
            (Some(crd), _) => crd.domain.clone(),
            (None, Some(core)) => core.domain.to_string(),
            (None, None) => domain.to_string(),
        },
        external: external.is_some(),
        group: options.group.to_string(),
        kind: options.kind.to_string(),
        module: options
            .external
            .as_ref()
            .and_then(|e| e.module.clone())
            .or_else(|| existing.as_ref().and_then(|r| r.module.clone())),
        path: Some(match (&external, core) {
            (Some(crd), _) => crd.file(),
            (None, Some(core)) => core.path.to_string(),
            (None, None) => format!("{}::{}::{}", base.crate_name, api.api_path, options.kind),
        }),
        plural: (plural != default_plural).then(|| plural.to_string()),
        version: options.version.to_string(),
        webhooks: existing.as_ref().and_then(|r| r.webhooks.clone()),
    };
    resource.set_controllers(own, others);
    project.upsert(resource);
    Ok(ApiScaffold {
        plan,
        context,
        api,
        project,
        domain,
        force: options.force,
    })
}

/// `<group>_<name>` in a multigroup project, else `name`: the stem of a file named after a kind, which
/// must not collide when one kind is in two groups.
pub(super) fn group_prefix(multigroup: bool, group_snake: &str, name: &str) -> String {
    if multigroup {
        format!("{group_snake}_{name}")
    } else {
        name.to_string()
    }
}

/// The CRD of another operator's kind `create api` is about, if any: the one `--external-api-path`
/// names, or, for a kind PROJECT already has as external, the project's copy of it.
fn external_crd(
    dir: &Path,
    options: &ApiOptions,
    existing: Option<&Resource>,
) -> Result<Option<ExternalCrd>> {
    let (group, version, kind) = (&options.group, &options.version, &options.kind);
    let Some(source) = &options.external else {
        return match existing {
            Some(r) if r.external => {
                let path = r.path.as_deref().unwrap_or_default();
                let domain = (!r.domain.is_empty())
                    .then(|| r.domain.parse())
                    .transpose()?;
                let crd = ExternalCrd::read(&dir.join(path), group, version, kind, domain.as_ref())
                    .with_context(|| {
                        format!("PROJECT records `{group}/{version}, Kind={kind}` as external, with its CRD in `{path}`")
                    })?;
                Ok(Some(crd))
            }
            _ => Ok(None),
        };
    };
    let gvk = format!("`{group}/{version}, Kind={kind}`");
    if options.resource {
        bail!(
            "`--external-api-path` is for a kind another operator owns: the project gets a controller for it, not its type\nhelp: add `--resource=false`"
        );
    }
    if let Some(core) = core_types::find(group.as_str(), version.as_str(), kind.as_str()) {
        bail!(
            "{gvk} is a Kubernetes built-in kind (`{}`), not another operator's\nhelp: drop `--external-api-path` (and `--external-api-domain`) to scaffold a controller for the built-in kind",
            core.path
        );
    }
    if existing.is_some_and(|r| r.api.is_some()) {
        bail!(
            "{gvk} is an API of this project (PROJECT has its type), not another operator's\nhelp: drop `--external-api-path` (and `--external-api-domain`)"
        );
    }
    let file = source.crd_file(group, kind)?;
    let crd = ExternalCrd::read(&file, group, version, kind, source.domain.as_ref())?;
    if let Some(plural) = &options.plural
        && plural.as_str() != crd.plural
    {
        bail!(
            "`--plural {plural}` is not the plural of the CRD `{}`: it is `{}`\nhelp: drop `--plural`; an external kind's plural is its CRD's",
            crd.name(),
            crd.plural
        );
    }
    Ok(Some(crd))
}

/// The Kubernetes built-in kind `create api` is about, if any: with `--resource=false`, a kind PROJECT
/// has no type for and k8s-openapi has. With `--resource` the type is the project's own, in
/// `<group>.<domain>`, whatever its name: `--group batch --kind CronJob` is `batch.<domain>`'s CronJob, as
/// in Kubebuilder, not Kubernetes' `batch/v1` one.
fn core_type(options: &ApiOptions, existing: Option<&Resource>) -> Option<&'static CoreType> {
    if options.resource || existing.is_some_and(|r| r.api.is_some()) {
        return None;
    }
    core_types::find(
        options.group.as_str(),
        options.version.as_str(),
        options.kind.as_str(),
    )
}

/// One group per project unless it is multigroup: `src/api/<version>/` has no room for a second
/// group's types.
pub(super) fn check_single_group(project: &Project, group: &Group) -> Result<()> {
    if let Some(other) = project.groups().find(|g| *g != group.as_str()) {
        bail!(
            "multiple groups are not allowed: this project already uses group `{other}`, and `{group}` would be a second one\nhelp: run `rustbuilder edit --multigroup` first to move the project to the multigroup layout (`src/api/<group>/<version>/`), or use `--group {other}`"
        );
    }
    Ok(())
}

/// In a multigroup project the group is a Rust module (`sea-creatures` → `sea_creatures`): a valid
/// identifier, not a keyword, and not the module of another group.
fn check_group_module(project: &Project, group: &Group) -> Result<()> {
    const KEYWORDS: &[&str] = &[
        "as", "async", "await", "box", "break", "const", "continue", "crate", "dyn", "else",
        "enum", "extern", "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match",
        "mod", "move", "mut", "pub", "ref", "return", "self", "static", "struct", "super", "trait",
        "true", "try", "type", "unsafe", "use", "where", "while", "yield",
    ];
    let module = group.snake();
    if module.starts_with(|c: char| c.is_ascii_digit()) || KEYWORDS.contains(&module.as_str()) {
        bail!(
            "group `{group}` cannot be a Rust module in the multigroup layout (`src/api/{module}/`): `{module}` is not a usable identifier\nhelp: choose a group that starts with a letter and is not a Rust keyword"
        );
    }
    if let Some(other) = project
        .groups()
        .find(|g| *g != group.as_str() && g.replace(['-', '.'], "_") == module)
    {
        bail!(
            "groups `{other}` and `{group}` would share the Rust module `{module}`\nhelp: choose another group"
        );
    }
    Ok(())
}

/// External types live in `src/external/<group>/`: one API group per `--group`.
fn check_external_group(project: &Project, group: &Group, crd: &ExternalCrd) -> Result<()> {
    if let Some(other) = project
        .resources
        .iter()
        .find(|r| r.external && r.group == group.as_str() && r.domain != crd.domain)
    {
        let taken = [other.group.as_str(), other.domain.as_str()]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(".");
        bail!(
            "`--group {group}` is already the external API group `{taken}`, and the module `src/external/{}/` holds its types; `{}` would need the same\nhelp: pass the whole API group as `--group {}` (without `--external-api-domain`)",
            group.snake(),
            crd.api_group,
            crd.api_group
        );
    }
    Ok(())
}

/// In a single-group project a kind's controller, tests, RBAC roles and e2e module are named after the
/// kind alone, so the project holds each kind in one group only (a multigroup project names them after
/// the group too).
fn check_kind_in_one_group(project: &Project, group: &Group, kind: &Kind) -> Result<()> {
    if let Some(other) = project
        .resources
        .iter()
        .find(|r| r.kind == kind.as_str() && r.group != group.as_str())
    {
        bail!(
            "kind `{kind}` is already in group `{}`: in a single-group project a kind's controller, tests and RBAC roles are named after the kind alone, so the project holds it in one group only\nhelp: choose another kind, or `--group {}`, or move the project to the multigroup layout first (`rustbuilder edit --multigroup`)",
            other.group,
            other.group
        );
    }
    Ok(())
}

/// A controller's module and test module (`tests/controllers/<module>.rs`) must not be those of another
/// controller or kind of the project, nor a file of the test crate's own.
fn check_controller_module(
    project: &Project,
    options: &ApiOptions,
    named: Option<&ControllerName>,
    module: &str,
) -> Result<()> {
    // In a single-group project the test module is named after the controller alone.
    if !project.multigroup && ["main", "explore"].contains(&module) {
        bail!(
            "the controller module `{module}` would have its test at `tests/controllers/{module}.rs`, which is the controllers' test crate's own\nhelp: {}",
            match named {
                Some(_) => "choose another `--controller-name`",
                None => "choose another kind, or name the controller with `--controller-name`",
            }
        );
    }
    for resource in &project.resources {
        let kind: Kind = resource.kind.parse()?;
        let is_self = resource.group == options.group.as_str()
            && resource.version == options.version.as_str()
            && resource.kind == options.kind.as_str();
        let named_clash = || {
            resource
                .named_controllers()
                .iter()
                .any(|n| n.replace('-', "_") == module)
        };
        let clash = match named {
            // A named controller: not a kind's module, nor another named controller's.
            Some(_) => kind.snake() == module || (!is_self && named_clash()),
            // The kind's own controller: not a named controller's module.
            None => named_clash(),
        };
        if clash {
            let help = match named {
                Some(name) => format!(
                    "choose another `--controller-name`, e.g. `{}-{name}`",
                    options.kind.as_str().to_lowercase()
                ),
                None => "choose another kind".to_string(),
            };
            bail!(
                "the controller module `{module}` (and its test `tests/controllers/{module}.rs`) would be that of the controllers of kind `{}`\nhelp: {help}",
                resource.kind
            );
        }
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
    let group_snake = &api.group_snake;
    let version_dir = format!("src/api/{}{version}", api.group_path);
    if options.resource {
        if api.multigroup {
            plan.insert(Insertion {
                path: "src/api/mod.rs",
                marker: "groups",
                fragment: format!("pub mod {group_snake};"),
            })?;
            plan.insert(Insertion {
                path: &format!("src/api/{group_snake}/mod.rs"),
                marker: "versions",
                fragment: format!("pub mod {version};"),
            })?;
        } else {
            plan.insert(Insertion {
                path: "src/api/mod.rs",
                marker: "versions",
                fragment: format!("pub mod {version};"),
            })?;
        }
        plan.insert(Insertion {
            path: &format!("{version_dir}/mod.rs"),
            marker: "kinds",
            fragment: format!("mod {kind_snake};\npub use {kind_snake}::*;"),
        })?;
        // One line at a time: rustfmt sorts them among the others.
        for import in [
            "use rustbuilder_runtime::manifests::crd;".to_string(),
            format!("use {}::api;", base.crate_name),
        ] {
            plan.insert(Insertion {
                path: "src/bin/crdgen.rs",
                marker: "imports",
                fragment: import,
            })?;
        }
        plan.insert(Insertion {
            path: "src/bin/crdgen.rs",
            marker: "crds",
            fragment: format!("        crd::<{}::{kind}>(),", api.api_path),
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
                .map(|r| format!("- {}_{r}_role.yaml", api.kind_file))
                .join("\n"),
        })?;
    }
    if let Some(module) = &api.external_module {
        // `external::<group>::<version>`: one module per group and version, as for the project's APIs.
        let version_dir = format!("src/{}", module.replace("::", "/"));
        plan.insert(Insertion {
            path: "src/lib.rs",
            marker: "modules",
            fragment: format!("pub mod {};", external::MODULE),
        })?;
        plan.insert(Insertion {
            path: &format!("src/{}/mod.rs", external::MODULE),
            marker: "groups",
            fragment: format!("pub mod {group_snake};"),
        })?;
        plan.insert(Insertion {
            path: &format!("src/{}/{group_snake}/mod.rs", external::MODULE),
            marker: "versions",
            fragment: format!("pub mod {version};"),
        })?;
        plan.insert(Insertion {
            path: &format!("{version_dir}/mod.rs"),
            marker: "kinds",
            fragment: format!("mod {kind_snake};\npub use {kind_snake}::*;"),
        })?;
    }
    if options.controller {
        let module = &api.controller_module;
        if api.multigroup {
            plan.insert(Insertion {
                path: "src/controller/mod.rs",
                marker: "controllers",
                fragment: format!("pub mod {group_snake};"),
            })?;
        }
        plan.insert(Insertion {
            path: &format!("src/controller/{}mod.rs", api.group_path),
            marker: "controllers",
            fragment: format!("pub mod {module};"),
        })?;
        plan.insert(Insertion {
            path: "src/main.rs",
            marker: "imports",
            fragment: format!("use {}::controller;", base.crate_name),
        })?;
        // A multi-cluster manager runs each controller in every cluster its fleet engages.
        let (marker, manager) = match base.multicluster {
            true => ("clusters", "cluster"),
            false => ("controllers", "manager"),
        };
        plan.insert(Insertion {
            path: "src/main.rs",
            marker,
            fragment: format!(
                "    controllers.add(controller::{}::run({manager}.clone()));",
                api.controller_rel
            ),
        })?;
        plan.insert(Insertion {
            path: CONTROLLER_TESTS,
            marker: "modules",
            fragment: format!("mod {};", api.controller_test),
        })?;
    }
    Ok(())
}

/// Adds the kind's CRD, its controller and its sample to the explorer's test. A second controller of
/// a kind adds only itself: the CRD and the sample are there already (an insertion is made once).
fn wire_explorer(plan: &mut Plan, api: &ApiContext) -> Result<()> {
    plan.insert(Insertion {
        path: CONTROLLER_TESTS,
        marker: "modules",
        fragment: "mod explore;".to_string(),
    })?;
    let kind = format!("{}::{}", api.api_path, api.kind);
    plan.insert(Insertion {
        path: EXPLORE_TESTS,
        marker: "crds",
        fragment: format!("        .crd(crd::<{kind}>())"),
    })?;
    plan.insert(Insertion {
        path: EXPLORE_TESTS,
        marker: "controllers",
        fragment: format!(
            "        .controller(controller::{}::run)",
            api.controller_rel
        ),
    })?;
    plan.insert(Insertion {
        path: EXPLORE_TESTS,
        marker: "controllers",
        fragment: format!(
            "        .sample::<{kind}>(include_str!(\"../../config/samples/{}_{}_{}.yaml\"))",
            api.group_snake, api.version, api.kind_snake
        ),
    })
}

/// Names the version etcd stores a kind at in `src/bin/crdgen.rs`, once the kind has several versions:
/// the one it had first, until `create webhook --conversion` makes another the hub.
fn mark_storage_version(plan: &mut Plan, api: &ApiContext, storage: &str) -> Result<()> {
    let crdgen = plan.contents("src/bin/crdgen.rs")?.unwrap_or_default();
    let group_rel = api
        .api_path
        .strip_prefix("api::")
        .and_then(|p| p.strip_suffix(api.version.as_str()))
        .unwrap_or_default();
    if let Some(range) = storage_line_of(&crdgen, group_rel, &api.kind) {
        let call = format!(
            "storage_version::<api::{group_rel}{storage}::{}>()",
            api.kind
        );
        return plan.edit("src/bin/crdgen.rs", |text| {
            let mut text = text.to_string();
            text.replace_range(range, &call);
            text
        });
    }
    plan.insert(Insertion {
        path: "src/bin/crdgen.rs",
        marker: "crdoptions",
        fragment: storage_fragment(group_rel, &api.kind, storage),
    })
}

/// Kubernetes' ranking of versions: GA before beta before alpha, then the higher numbers.
fn version_priority(version: &str) -> (u8, u32, u32) {
    fn number(s: &str) -> (u32, &str) {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        (s[..end].parse().unwrap_or(0), &s[end..])
    }
    let Some(rest) = version.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let (major, rest) = number(rest);
    if rest.is_empty() {
        return (3, major, 0);
    }
    let (stability, rest) = if let Some(r) = rest.strip_prefix("beta") {
        (2, r)
    } else if let Some(r) = rest.strip_prefix("alpha") {
        (1, r)
    } else {
        return (0, major, 0);
    };
    (stability, major, number(rest).0)
}

/// The crdgen lines that name `kind`'s storage version.
pub(super) fn storage_fragment(group_rel: &str, kind: &str, version: &str) -> String {
    format!(
        "    // {kind} has several versions, stored in etcd at one of them (the hub of their conversion).\n    let crds = crds.storage_version::<api::{group_rel}{version}::{kind}>();"
    )
}

/// The byte range of the `storage_version::<api::...::Kind>()` call for `kind` in crdgen, if any.
pub(super) fn storage_line_of(
    crdgen: &str,
    group_rel: &str,
    kind: &str,
) -> Option<std::ops::Range<usize>> {
    let prefix = format!("storage_version::<api::{group_rel}");
    let suffix = format!("::{kind}>()");
    let mut from = 0;
    while let Some(at) = crdgen[from..].find(&prefix) {
        let start = from + at;
        let end = crdgen[start..].find(">()").map(|e| start + e + 3)?;
        let call = &crdgen[start..end];
        let version = &call[prefix.len()..call.len() - suffix.len().min(call.len())];
        if call.ends_with(&suffix) && !version.contains("::") {
            return Some(start..end);
        }
        from = end;
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_rank_as_kubernetes_ranks_them() {
        let mut versions = vec![
            "v1alpha1",
            "v2",
            "v1beta2",
            "v1",
            "v1beta1",
            "v10alpha1",
            "foo",
        ];
        versions.sort_by_key(|v| std::cmp::Reverse(super::version_priority(v)));
        assert_eq!(
            versions,
            [
                "v2",
                "v1",
                "v1beta2",
                "v1beta1",
                "v10alpha1",
                "v1alpha1",
                "foo"
            ]
        );
    }
}
