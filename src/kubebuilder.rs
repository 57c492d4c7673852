//! Kubebuilder's own PROJECT file (layout `go.kubebuilder.io/v4`), read as a rustbuilder project.
//!
//! `alpha generate --input-dir <a Kubebuilder project>` starts here. The file is walked key by key: each
//! key Kubebuilder v4 writes is either mapped to what rustbuilder records and generates, noted when it
//! only means something to Go (the module path, Go import paths, Kubebuilder's own version), or refused
//! by name before anything is written. Nothing is dropped silently. The result is a [`Project`] in
//! rustbuilder's layout, which `alpha generate` replays as it replays its own.
//!
//! Another operator's kinds (`external: true`) need their CRD to generate Rust types from. Kubebuilder
//! records only the Go module that holds the Go types; the CRD is looked for in the input directory
//! (`config/crd/external/`), then in that module as Go's module cache holds it, and otherwise a
//! placeholder CRD that accepts any fields stands in, with a note naming the file to replace.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use serde_yaml::{Mapping, Value};

use crate::core_types;
use crate::external::go_module;
use crate::model::{Kind, ProjectName};
#[cfg(test)]
use crate::project::is_kubebuilder;
use crate::project::{self, Api, Controller, PluginConfig, PluginResource, Project, Resource};

/// A Kubebuilder PROJECT translated: the project to generate, what was translated or ignored (for the
/// user to read), and the CRDs of external kinds found outside the input directory.
#[derive(Debug)]
pub struct Imported {
    pub project: Project,
    pub notes: Vec<String>,
    /// Holds the placeholder CRDs the project's external kinds point at until they are copied in.
    _placeholders: Option<tempfile::TempDir>,
}

/// The layouts rustbuilder reads as Kubebuilder's Go v4 scaffold (the bundle, or its two parts).
const GO_V4_LAYOUTS: &[&[&str]] = &[
    &["go.kubebuilder.io/v4"],
    &[
        "base.go.kubebuilder.io/v4",
        "kustomize.common.kubebuilder.io/v2",
    ],
    &[
        "kustomize.common.kubebuilder.io/v2",
        "base.go.kubebuilder.io/v4",
    ],
];

const HELP_MIGRATE: &str = "help: move the project to Kubebuilder's go/v4 layout first (`kubebuilder alpha generate` with Kubebuilder 4), then run this again";

/// Reads the Kubebuilder PROJECT `text` of the project in `input`.
pub fn import(text: &str, input: &Path) -> Result<Imported> {
    let root: Mapping = serde_yaml::from_str(text).context("PROJECT is not a YAML mapping")?;
    let mut importer = Importer {
        input,
        notes: Vec::new(),
        paths: Vec::new(),
        placeholders: None,
    };
    let project = importer.project(&root)?;
    Ok(Imported {
        project,
        notes: importer.notes,
        _placeholders: importer.placeholders,
    })
}

struct Importer<'a> {
    input: &'a Path,
    notes: Vec<String>,
    /// Each resource's Go import path and what stands for it in the Rust project.
    paths: Vec<(String, String)>,
    placeholders: Option<tempfile::TempDir>,
}

/// The keys of one mapping, taken one at a time, so that whatever is left at the end is a key nobody
/// knows: [`Fields::finish`] refuses it by name.
struct Fields<'m> {
    map: &'m Mapping,
    /// Where the mapping is in PROJECT, for messages: `resources[3].webhooks`.
    at: String,
    taken: Vec<&'static str>,
}

impl<'m> Fields<'m> {
    fn new(map: &'m Mapping, at: impl Into<String>) -> Self {
        Self {
            map,
            at: at.into(),
            taken: Vec::new(),
        }
    }

    fn path(&self, key: &str) -> String {
        if self.at.is_empty() {
            format!("`{key}`")
        } else {
            format!("`{}.{key}`", self.at)
        }
    }

    fn take(&mut self, key: &'static str) -> Option<&'m Value> {
        self.taken.push(key);
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn string(&mut self, key: &'static str) -> Result<Option<String>> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(other) => bail!(
                "PROJECT's {} is {}, not a string\nhelp: fix or remove the key",
                self.path(key),
                describe(other)
            ),
        }
    }

    fn required(&mut self, key: &'static str) -> Result<String> {
        self.string(key)?.with_context(|| {
            format!(
                "PROJECT has no {}: Kubebuilder always writes it\nhelp: add it, e.g. from the project's `kubebuilder create api` command",
                self.path(key)
            )
        })
    }

    fn flag(&mut self, key: &'static str) -> Result<bool> {
        match self.take(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => bail!(
                "PROJECT's {} is {}, not `true` or `false`\nhelp: fix or remove the key",
                self.path(key),
                describe(other)
            ),
        }
    }

    fn mapping(&mut self, key: &'static str) -> Result<Option<&'m Mapping>> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Mapping(m)) => Ok(Some(m)),
            Some(other) => bail!(
                "PROJECT's {} is {}, not a mapping\nhelp: fix or remove the key",
                self.path(key),
                describe(other)
            ),
        }
    }

    fn sequence(&mut self, key: &'static str) -> Result<&'m [Value]> {
        match self.take(key) {
            None => Ok(&[]),
            Some(Value::Sequence(items)) => Ok(items),
            Some(other) => bail!(
                "PROJECT's {} is {}, not a list\nhelp: fix or remove the key",
                self.path(key),
                describe(other)
            ),
        }
    }

    fn strings(&mut self, key: &'static str) -> Result<Vec<String>> {
        let at = self.path(key);
        self.sequence(key)?
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => bail!(
                    "PROJECT's {at} holds {}, not a string\nhelp: fix the list",
                    describe(other)
                ),
            })
            .collect()
    }

    /// Refuses any key that was not taken: rustbuilder does not know what it asks for.
    fn finish(self) -> Result<()> {
        for key in self.map.keys() {
            let name = match key {
                Value::String(s) => s.as_str(),
                _ => "(not a string)",
            };
            if !self.taken.contains(&name) {
                bail!(
                    "PROJECT's {} is not a key of Kubebuilder's go/v4 PROJECT format that rustbuilder knows: it cannot tell what to generate for it\nhelp: remove it if the project does not need it, or scaffold what it stands for by hand after `alpha generate`",
                    self.path(name)
                );
            }
        }
        Ok(())
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "empty".into(),
        Value::Bool(b) => format!("`{b}`"),
        Value::Number(n) => format!("the number `{n}`"),
        Value::String(s) => format!("the string `{s}`"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(_) => "a tagged value".into(),
    }
}

fn as_mapping<'v>(value: &'v Value, at: &str) -> Result<&'v Mapping> {
    value.as_mapping().with_context(|| {
        format!(
            "PROJECT's `{at}` is {}, not a mapping\nhelp: fix the entry",
            describe(value)
        )
    })
}

impl Importer<'_> {
    fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    fn project(&mut self, root: &Mapping) -> Result<Project> {
        let mut fields = Fields::new(root, "");
        let version = fields.required("version")?;
        if version != "3" {
            bail!(
                "PROJECT version {version:?} is Kubebuilder's older format: rustbuilder reads version \"3\" with the go/v4 layout\n{HELP_MIGRATE}"
            );
        }
        let layout = match fields.take("layout") {
            Some(Value::String(one)) => vec![one.clone()],
            Some(Value::Sequence(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            _ => bail!("PROJECT has no `layout`\n{HELP_MIGRATE}"),
        };
        if !GO_V4_LAYOUTS
            .iter()
            .any(|known| *known == layout.as_slice())
        {
            bail!(
                "PROJECT's layout `{}` is not Kubebuilder's go/v4 scaffold, the one rustbuilder reads\n{HELP_MIGRATE}",
                layout.join(", ")
            );
        }
        if let Some(cli) = fields.string("cliVersion")? {
            self.note(format!(
                "`cliVersion: {cli}` is Kubebuilder's version; the new PROJECT records rustbuilder's"
            ));
        }
        let domain = fields.string("domain")?.unwrap_or_default();
        if domain.is_empty() {
            bail!(
                "PROJECT has no `domain`: rustbuilder's API groups are `<group>.<domain>`\nhelp: add the domain the project was initialized with (`kubebuilder init --domain ...`)"
            );
        }
        let name = match fields.string("projectName")? {
            Some(name) => name,
            None => {
                let dir = std::path::absolute(self.input)?;
                let name = dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                self.note(format!(
                    "PROJECT has no `projectName`: the project is named after its directory, `{name}`"
                ));
                name
            }
        };
        let name: ProjectName = name.parse().context("PROJECT's `projectName`")?;
        let repo = fields.string("repo")?;
        let mut project = Project::new(&domain.parse()?, name.as_str(), None);
        project.repo = repo.and_then(|repo| self.repository(&repo));
        project.multigroup = fields.flag("multigroup")?;
        project.namespaced = fields.flag("namespaced")?;
        if fields.flag("componentConfig")? {
            bail!(
                "PROJECT's `componentConfig: true` asks for a manager configured from a ComponentConfig file, which Kubebuilder v4 no longer scaffolds and rustbuilder does not have\nhelp: remove the key; the manager takes its settings from flags and environment variables"
            );
        }
        let plugins = fields.mapping("plugins")?;
        let resources = fields.sequence("resources")?;
        fields.finish()?;

        let rust = project
            .plugins
            .entry(project::RUST_PLUGIN.to_string())
            .or_default();
        rust.license = Some("apache2".to_string());
        for (i, resource) in resources.iter().enumerate() {
            let at = format!("resources[{i}]");
            let resource = self.resource(as_mapping(resource, &at)?, &at, &project)?;
            project.resources.push(resource);
        }
        if let Some((go, rust)) = self.paths.first() {
            let more = match self.paths.len() - 1 {
                0 => String::new(),
                1 => " (and 1 more)".to_string(),
                n => format!(" (and {n} more)"),
            };
            self.note(format!(
                "the Go import paths of the resources (`path`) become Rust paths: `{go}` becomes {rust}{more}"
            ));
        }
        if let Some(plugins) = plugins {
            self.plugins(plugins, &mut project)?;
        }
        check_unique(&project)?;
        Ok(project)
    }

    /// Kubebuilder's `repo` is the Go module path. On a code forge it is also where the code lives:
    /// Cargo's `repository`; otherwise it means nothing to Cargo.
    fn repository(&mut self, repo: &str) -> Option<String> {
        const FORGES: &[&str] = &[
            "github.com/",
            "gitlab.com/",
            "bitbucket.org/",
            "codeberg.org/",
        ];
        if FORGES.iter().any(|forge| repo.starts_with(forge)) {
            let url = format!("https://{repo}");
            self.note(format!(
                "`repo: {repo}` (the Go module path) becomes Cargo's `repository = \"{url}\"`"
            ));
            Some(url)
        } else {
            self.note(format!(
                "`repo: {repo}` is the Go module path: Cargo has no counterpart, so it is left out"
            ));
            None
        }
    }

    fn resource(&mut self, map: &Mapping, at: &str, project: &Project) -> Result<Resource> {
        let mut fields = Fields::new(map, at);
        let group = fields.required("group")?;
        let version = fields.required("version")?;
        let kind = fields.required("kind")?;
        let gvk = format!("`{group}/{version}, Kind={kind}` ({at})");
        let kind_name: Kind = kind.parse().with_context(|| format!("PROJECT's {gvk}"))?;
        let domain = fields.string("domain")?.unwrap_or_default();
        let plural = fields.string("plural")?;
        let core = fields.flag("core")?;
        let external = fields.flag("external")?;
        let controller = fields.flag("controller")?;
        let controllers = fields
            .sequence("controllers")?
            .iter()
            .enumerate()
            .map(|(j, c)| {
                let at = format!("{at}.controllers[{j}]");
                let mut c = Fields::new(as_mapping(c, &at)?, at);
                let name = c.required("name")?;
                c.finish()?;
                Ok(Controller { name })
            })
            .collect::<Result<Vec<_>>>()?;
        let go_path = fields.string("path")?;
        let module = fields.string("module")?;
        let api = match fields.mapping("api")? {
            Some(api) => Some(self.api(api, &format!("{at}.api"))?),
            None => None,
        };
        let webhooks = match fields.mapping("webhooks")? {
            Some(w) => Some(self.webhooks(w, &format!("{at}.webhooks"), &gvk)?),
            None => None,
        };
        fields.finish()?;

        if core && external {
            bail!(
                "PROJECT's {gvk} is both `core` and `external`: a kind is Kubernetes' own or another operator's\nhelp: keep the one that is true"
            );
        }
        if (core || external) && api.is_some() {
            bail!(
                "PROJECT's {gvk} has an `api` and is {}: the project cannot own the type of a kind it does not own\nhelp: remove `api`, or `{}`",
                if core { "`core`" } else { "`external`" },
                if core { "core" } else { "external" },
            );
        }
        if module.is_some() && !external {
            bail!(
                "PROJECT's {gvk} has a `module` but is not `external`: only another operator's kind comes from a module\nhelp: remove `module`, or add `external: true`"
            );
        }
        let mut resource = Resource {
            api,
            controller,
            controllers,
            core,
            domain,
            external,
            group,
            kind,
            module,
            path: None,
            plural,
            version,
            webhooks,
        };
        if core {
            let Some(builtin) =
                core_types::find(&resource.group, &resource.version, &resource.kind)
            else {
                bail!(
                    "PROJECT's {gvk} is `core: true`, but it is not a Kubernetes built-in kind k8s-openapi has\nhelp: check the group and version (built-in groups are written as on Kubebuilder's command line: `core`, `apps`, `networking`)"
                );
            };
            resource.path = Some(builtin.path.to_string());
            resource.domain = builtin.domain.to_string();
            resource.plural = None;
        } else if external {
            resource.path = Some(self.external_crd(&resource, &gvk)?);
        } else if resource.api.is_some() {
            let group_rel = if project.multigroup {
                format!("{}::", resource.group.replace(['-', '.'], "_"))
            } else {
                String::new()
            };
            resource.path = Some(format!(
                "{}::api::{group_rel}{}::{}",
                ProjectName::crate_name(&project.project_name.parse()?),
                resource.version,
                resource.kind
            ));
            if resource.domain.is_empty() {
                resource.domain = project.domain.clone();
            } else if resource.domain != project.domain {
                bail!(
                    "PROJECT's {gvk} is in domain `{}`, not the project's `{}`: rustbuilder puts a project's own kinds in `<group>.<domain>` of the project's domain\nhelp: add it later as another operator's kind (`create api --resource=false --external-api-path <its CRD>`)",
                    resource.domain,
                    project.domain
                );
            }
        }
        if resource.plural.as_deref() == Some(kind_name.default_plural().as_str()) {
            resource.plural = None;
        }
        if let Some(go_path) = go_path {
            let rust = match (&resource.path, external) {
                (Some(_), true) => format!("the CRD's copy in `{}/`", crate::external::CRD_DIR),
                (Some(path), false) => format!("`{path}`"),
                (None, _) => "nothing (no type)".to_string(),
            };
            self.paths.push((go_path, rust));
        }
        Ok(resource)
    }

    fn api(&mut self, map: &Mapping, at: &str) -> Result<Api> {
        let mut fields = Fields::new(map, at);
        let crd_version = fields.string("crdVersion")?.unwrap_or_else(|| "v1".into());
        let namespaced = fields.flag("namespaced")?;
        let ssa = fields.flag("ssa")?;
        fields.finish()?;
        if crd_version != "v1" {
            bail!(
                "PROJECT's `{at}.crdVersion` is `{crd_version}`: Kubernetes serves `apiextensions.k8s.io/v1` CRDs only\nhelp: set it to `v1`"
            );
        }
        if ssa {
            self.note(format!(
                "`{at}.ssa: true` is kept: every rustbuilder controller writes with server-side apply"
            ));
        }
        Ok(Api {
            crd_version,
            namespaced,
            ssa,
        })
    }

    fn webhooks(&mut self, map: &Mapping, at: &str, gvk: &str) -> Result<project::Webhooks> {
        let mut fields = Fields::new(map, at);
        let webhook_version = fields
            .string("webhookVersion")?
            .unwrap_or_else(|| "v1".into());
        let webhooks = project::Webhooks {
            conversion: fields.flag("conversion")?,
            defaulting: fields.flag("defaulting")?,
            defaulting_path: fields.string("defaultingPath")?,
            spoke: fields.strings("spoke")?,
            validation: fields.flag("validation")?,
            validation_path: fields.string("validationPath")?,
            webhook_version,
        };
        for key in ["multiGVK", "name", "groups", "resources", "versions"] {
            if fields.map.contains_key(key) {
                bail!(
                    "PROJECT's `{at}.{key}` belongs to a standalone webhook for several kinds, which rustbuilder does not scaffold yet\nhelp: remove the standalone webhook from PROJECT and register it by hand with the manager (`manager.webhooks()`)"
                );
            }
        }
        fields.finish()?;
        if webhooks.webhook_version != "v1" {
            bail!(
                "PROJECT's `{at}.webhookVersion` is `{}`: the API server speaks AdmissionReview `v1`\nhelp: set it to `v1`",
                webhooks.webhook_version
            );
        }
        if webhooks.defaulting_path.is_some() && !webhooks.defaulting {
            bail!(
                "PROJECT's {gvk} has a `defaultingPath` but no defaulting webhook\nhelp: add `defaulting: true`, or remove `defaultingPath`"
            );
        }
        if webhooks.validation_path.is_some() && !webhooks.validation {
            bail!(
                "PROJECT's {gvk} has a `validationPath` but no validating webhook\nhelp: add `validation: true`, or remove `validationPath`"
            );
        }
        if !webhooks.spoke.is_empty() && !webhooks.conversion {
            bail!(
                "PROJECT's {gvk} lists `spoke` versions but no conversion webhook\nhelp: add `conversion: true`, or remove `spoke`"
            );
        }
        Ok(webhooks)
    }

    fn plugins(&mut self, plugins: &Mapping, project: &mut Project) -> Result<()> {
        for (key, config) in plugins {
            let key = key.as_str().unwrap_or_default();
            let at = format!("plugins.{key}");
            let empty = Mapping::new();
            let config = match config {
                Value::Null => &empty,
                other => as_mapping(other, &at)?,
            };
            let mut fields = Fields::new(config, at.clone());
            let (ours, entry) = match key {
                "deploy-image.go.kubebuilder.io/v1-alpha" => {
                    let resources = fields
                        .sequence("resources")?
                        .iter()
                        .enumerate()
                        .map(|(i, r)| deploy_image_resource(r, &format!("{at}.resources[{i}]")))
                        .collect::<Result<Vec<_>>>()?;
                    (
                        project::DEPLOY_IMAGE_PLUGIN,
                        PluginConfig {
                            resources,
                            ..Default::default()
                        },
                    )
                }
                "grafana.kubebuilder.io/v1-alpha" => {
                    (project::GRAFANA_PLUGIN, PluginConfig::default())
                }
                "autoupdate.kubebuilder.io/v1-alpha" => (
                    project::AUTOUPDATE_PLUGIN,
                    PluginConfig {
                        // The workflow comments a GitHub Models summary of each update, as Kubebuilder's.
                        use_gh_models: fields.flag("useGhModels")?.then_some(true),
                        ..Default::default()
                    },
                ),
                "helm.kubebuilder.io/v2-alpha" => {
                    let manifests = fields.string("manifests")?;
                    let output = fields.string("output")?;
                    (
                        project::HELM_PLUGIN,
                        PluginConfig {
                            manifests,
                            output,
                            ..Default::default()
                        },
                    )
                }
                "helm.kubebuilder.io/v1-alpha" => {
                    self.note(format!(
                        "`{key}` becomes rustbuilder's Helm plugin, which writes the v2-alpha chart in dist/chart/"
                    ));
                    (project::HELM_PLUGIN, PluginConfig::default())
                }
                "declarative.go.kubebuilder.io/v1" => bail!(
                    "PROJECT uses the plugin `{key}`, which Kubebuilder v4 removed and rustbuilder does not have\nhelp: remove it from `plugins`; its kinds are generated as plain APIs"
                ),
                other => bail!(
                    "PROJECT uses the plugin `{other}`, which rustbuilder does not know\nhelp: remove it from `plugins`; rustbuilder has deploy-image, grafana, autoupdate and helm"
                ),
            };
            fields.finish()?;
            project.plugins.insert(ours.to_string(), entry);
        }
        Ok(())
    }

    /// The CRD of an external kind: the input's `config/crd/external/` copy, else the one in the Go
    /// module PROJECT names as Go's module cache holds it, else a placeholder.
    fn external_crd(&mut self, resource: &Resource, gvk: &str) -> Result<String> {
        let api_group = if resource.domain.is_empty() {
            resource.group.clone()
        } else {
            format!("{}.{}", resource.group, resource.domain)
        };
        let kind: Kind = resource.kind.parse()?;
        let plural = resource
            .plural
            .clone()
            .unwrap_or_else(|| kind.default_plural().to_string());
        let ours = format!("{}/{api_group}_{plural}.yaml", crate::external::CRD_DIR);
        if self.input.join(&ours).is_file() {
            return Ok(ours);
        }
        if let Some(module) = &resource.module
            && let Some(found) = go_module::crd(module, &api_group, &resource.kind)
        {
            self.note(format!(
                "{gvk}: its CRD comes from `{}` (Go's module cache of `{module}`)",
                found.display()
            ));
            return Ok(found.display().to_string());
        }
        let dir = match &self.placeholders {
            Some(dir) => dir.path().to_path_buf(),
            None => {
                let dir = tempfile::tempdir()?;
                let path = dir.path().to_path_buf();
                self.placeholders = Some(dir);
                path
            }
        };
        let file = dir.join(format!("{api_group}_{plural}.yaml"));
        let namespaced = true;
        std::fs::write(
            &file,
            placeholder_crd(
                &api_group,
                &resource.version,
                &resource.kind,
                &plural,
                namespaced,
            ),
        )?;
        self.note(format!(
            "{gvk}: no CRD at hand (neither `{ours}` in the input, nor {} in Go's module cache), so its Rust type accepts any `spec` and `status` for now\nhelp: replace `{ours}` in the new project with the real CRD (`kubectl get crd {plural}.{api_group} -o yaml`), then run `rustbuilder alpha generate` in it to type the fields",
            resource
                .module
                .as_deref()
                .map_or("a module".to_string(), |m| format!("`{m}`"))
        ));
        Ok(file.display().to_string())
    }
}

fn deploy_image_resource(value: &Value, at: &str) -> Result<PluginResource> {
    let mut fields = Fields::new(as_mapping(value, at)?, at);
    let domain = fields.string("domain")?.unwrap_or_default();
    let group = fields.required("group")?;
    let kind = fields.required("kind")?;
    let version = fields.required("version")?;
    let options = match fields.mapping("options")? {
        Some(options) => {
            let at = format!("{at}.options");
            let mut o = Fields::new(options, at);
            let mut out = std::collections::BTreeMap::new();
            for key in ["image", "containerCommand", "containerPort", "runAsUser"] {
                if let Some(value) = o.string(key)? {
                    out.insert(key.to_string(), value);
                }
            }
            o.finish()?;
            out
        }
        None => Default::default(),
    };
    fields.finish()?;
    Ok(PluginResource {
        domain,
        group,
        kind,
        options,
        version,
    })
}

/// A resource appears once per group, version and kind.
fn check_unique(project: &Project) -> Result<()> {
    for (i, a) in project.resources.iter().enumerate() {
        if let Some(b) = project.resources[i + 1..]
            .iter()
            .find(|b| (&a.group, &a.version, &a.kind) == (&b.group, &b.version, &b.kind))
        {
            bail!(
                "PROJECT lists `{}/{}, Kind={}` twice\nhelp: merge the two entries into one",
                b.group,
                b.version,
                b.kind
            );
        }
    }
    Ok(())
}

/// A CRD that accepts any `spec` and `status`: it stands in for another operator's CRD until the real
/// one replaces it.
fn placeholder_crd(
    api_group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
) -> String {
    let scope = if namespaced { "Namespaced" } else { "Cluster" };
    let open = serde_json::json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let crd = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{plural}.{api_group}"),
            "annotations": {
                "rustbuilder.dev/placeholder": "the real CRD of this kind was not at hand: replace this file with it"
            }
        },
        "spec": {
            "group": api_group,
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_lowercase(),
            },
            "scope": scope,
            "versions": [{
                "name": version,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": open, "status": open},
                }},
                "subresources": {"status": {}},
            }],
        },
    });
    serde_yaml::to_string(&crd).expect("a CRD serializes to YAML")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "\
domain: example.com
layout:
- go.kubebuilder.io/v4
projectName: project
repo: github.com/example/project
resources:
- api:
    crdVersion: v1
    namespaced: true
  controller: true
  domain: example.com
  group: cache
  kind: Memcached
  path: github.com/example/project/api/v1alpha1
  version: v1alpha1
version: \"3\"
";

    fn import_text(text: &str) -> Result<Imported> {
        import(text, Path::new("."))
    }

    #[test]
    fn recognises_kubebuilder_layouts_only() {
        assert!(is_kubebuilder(MINIMAL));
        assert!(!is_kubebuilder(
            "layout:\n- rust.rustbuilder.dev/v1-alpha\nversion: \"3\"\n"
        ));
    }

    #[test]
    fn maps_go_paths_to_rust_and_notes_them() {
        let imported = import_text(MINIMAL).unwrap();
        let project = imported.project;
        assert_eq!(project.layout, [project::RUST_PLUGIN]);
        assert_eq!(
            project.repo.as_deref(),
            Some("https://github.com/example/project")
        );
        let memcached = &project.resources[0];
        assert_eq!(
            memcached.path.as_deref(),
            Some("project::api::v1alpha1::Memcached")
        );
        assert!(
            imported
                .notes
                .iter()
                .any(|n| n.contains("`github.com/example/project/api/v1alpha1` becomes `project::api::v1alpha1::Memcached`")),
            "{:?}",
            imported.notes
        );
    }

    #[test]
    fn refuses_unknown_keys_by_name() {
        let text = MINIMAL.replace("  controller: true\n", "  controller: true\n  shiny: 1\n");
        let err = format!("{:#}", import_text(&text).unwrap_err());
        assert!(err.contains("`resources[0].shiny`"), "{err}");
        let text = MINIMAL.replace("projectName:", "bogus: x\nprojectName:");
        let err = format!("{:#}", import_text(&text).unwrap_err());
        assert!(err.contains("`bogus`"), "{err}");
        let text = format!("{MINIMAL}plugins:\n  something.example.com/v1: {{}}\n");
        let err = format!("{:#}", import_text(&text).unwrap_err());
        assert!(err.contains("`something.example.com/v1`"), "{err}");
    }

    #[test]
    fn refuses_contradictions() {
        let text = MINIMAL.replace("  controller: true\n", "  controller: true\n  core: true\n");
        let err = format!("{:#}", import_text(&text).unwrap_err());
        assert!(err.contains("has an `api` and is `core`"), "{err}");
        let text = MINIMAL.replace(
            "  controller: true\n",
            "  controller: true\n  webhooks:\n    validationPath: /v\n    webhookVersion: v1\n",
        );
        let err = format!("{:#}", import_text(&text).unwrap_err());
        assert!(
            err.contains("`validationPath` but no validating webhook"),
            "{err}"
        );
        let text = MINIMAL.replace("go.kubebuilder.io/v4", "go.kubebuilder.io/v3");
        let err = format!("{:#}", import_text(&text).unwrap_err());
        assert!(err.contains("not Kubebuilder's go/v4 scaffold"), "{err}");
    }
}
