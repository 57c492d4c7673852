//! The manifests derived from the code, behind `make manifests`: the CRDs, from the Rust types; the
//! manager's ClusterRole, from the `// +rustbuilder:rbac:` markers in `src/`; and the webhook
//! configurations, from the `// +rustbuilder:webhook:` markers ([`webhooks`]).
//!
//! An operator's `src/bin/crdgen.rs` is one call. [`crd`] is kube's `Memcached::crd()` with the list
//! and map types, required fields and defaults of the Kubernetes types a kind embeds, as the API
//! server publishes them:
//!
//! ```no_run
//! use rustbuilder_runtime::manifests::crd;
//! # #[derive(kube::CustomResource, Clone, Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
//! # #[kube(group = "cache.example.com", version = "v1alpha1", kind = "Memcached", namespaced)]
//! # struct MemcachedSpec { size: i32 }
//!
//! fn main() -> std::process::ExitCode {
//!     rustbuilder_runtime::manifests::main(vec![crd::<Memcached>()])
//! }
//! ```
//!
//! A kind with several versions gets one CRD listing them all: [`Crds`] merges the CRDs of one name,
//! stores the version given to [`Crds::storage_version`] (the hub of a conversion), and with
//! [`Crds::conversion_webhook`] has the API server convert between versions through the operator's
//! `/convert` webhook:
//!
//! ```no_run
//! # mod v1alpha1 {
//! # #[derive(kube::CustomResource, Clone, Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
//! # #[kube(group = "cache.example.com", version = "v1alpha1", kind = "Memcached", namespaced)]
//! # pub struct MemcachedSpec { size: i32 }
//! # }
//! # mod v1 {
//! # #[derive(kube::CustomResource, Clone, Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
//! # #[kube(group = "cache.example.com", version = "v1", kind = "Memcached", namespaced)]
//! # pub struct MemcachedSpec { replicas: i32 }
//! # }
//! use rustbuilder_runtime::manifests::{Crds, crd};
//!
//! fn main() -> std::process::ExitCode {
//!     Crds::new([crd::<v1alpha1::Memcached>(), crd::<v1::Memcached>()])
//!         .storage_version::<v1::Memcached>()
//!         .conversion_webhook::<v1::Memcached>()
//!         .main()
//! }
//! ```
//!
//! A marker grants the manager some verbs on some resources, e.g.
//! `// +rustbuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch` (`core` or `""` is the
//! core group). Put one next to the code that makes the calls.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, ServiceReference, WebhookClientConfig,
    WebhookConversion,
};
use kube::Resource;

mod builtin;
pub mod webhooks;

pub use builtin::crd;
use webhooks::WEBHOOK_FILE;

/// The marker prefix controllers use to declare the permissions they need.
pub const RBAC_MARKER: &str = "+rustbuilder:rbac:";

/// Where the CRDs go, relative to the project.
pub const CRD_DIR: &str = "config/crd/bases";

/// Where the manager's ClusterRole goes, relative to the project.
pub const ROLE_FILE: &str = "config/rbac/role.yaml";

/// The Service in front of the webhook server, as `config/webhook/service.yaml` names it before
/// kustomize adds the project's prefix and namespace.
pub const WEBHOOK_SERVICE: (&str, &str) = ("webhook-service", "system");

/// Why the manifests could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or directory could not be read or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// `read`, `write`, `create` or `remove`.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A `// +rustbuilder:rbac:` or `// +rustbuilder:webhook:` marker cannot be read.
    #[error("{location}: {message}")]
    Marker {
        /// `file:line` of the marker (relative to the project).
        location: String,
        /// What is wrong, and how to write it.
        message: String,
    },
    /// The CRDs of a kind cannot be merged or written.
    #[error("CRD {name}: {message}")]
    Crd {
        /// The CRD's name, `<plural>.<group>`.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The project's PROJECT file cannot be read.
    #[error("{}: {message}", path.display())]
    Project {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

impl Error {
    fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

const USAGE: &str = "\
Prints the CustomResourceDefinitions of the project as YAML, or writes the manifests derived from the code.

Usage: crdgen [--write | --check] [--dir DIR]

Options:
  --write      write config/crd/bases/<group>_<plural>.yaml (removing CRDs of kinds that are gone),
               config/rbac/role.yaml (from the `// +rustbuilder:rbac:` markers in src/) and
               config/webhook/manifests.yaml (from the `// +rustbuilder:webhook:` markers; removed
               when there are none)
  --check      exit 1 if any of those files is missing or out of date, listing them
  --dir DIR    the project directory [default: .]
  -h, --help   print this help";

/// The whole `crdgen` program for single-version kinds: `Crds::new(crds).main()` (see
/// [`Crds::main`]).
pub fn main(crds: Vec<CustomResourceDefinition>) -> ExitCode {
    Crds::new(crds).main()
}

/// The CRDs of a project, one per kind and version as `Kind::crd()` makes them, merged into one CRD
/// per kind: what `crdgen` prints and writes.
#[derive(Clone, Debug, Default)]
#[must_use = "a builder does nothing until `main()` or `merged()`"]
pub struct Crds {
    crds: Vec<CustomResourceDefinition>,
    /// CRD name → the version stored in etcd.
    storage: BTreeMap<String, String>,
    /// CRD names whose versions are converted by the webhook.
    conversion: BTreeSet<String>,
}

impl Crds {
    /// The CRDs, e.g. `[crd::<v1alpha1::Memcached>(), crd::<v1::Memcached>(), crd::<Other>()]`.
    pub fn new(crds: impl IntoIterator<Item = CustomResourceDefinition>) -> Self {
        Crds {
            crds: crds.into_iter().collect(),
            ..Crds::default()
        }
    }

    /// Stores `K`'s kind at `K`'s version (the hub of its conversion). Needed when the kind has
    /// several versions.
    pub fn storage_version<K: Resource<DynamicType = ()>>(mut self) -> Self {
        let version = K::version(&()).into_owned();
        self.storage.insert(crd_name::<K>(), version);
        self
    }

    /// Has the API server convert `K`'s kind between its versions by calling the operator's
    /// conversion webhook: `spec.conversion.strategy: Webhook`, through the Service
    /// `webhook-service` in `system` (kustomize adds the project's prefix and namespace) on
    /// `/convert`. Any version of the kind names it.
    pub fn conversion_webhook<K: Resource<DynamicType = ()>>(mut self) -> Self {
        self.conversion.insert(crd_name::<K>());
        self
    }

    /// One CRD per kind, sorted by name: the versions of a kind merged, sorted by name, the storage
    /// version marked, the conversion webhook set. Errors when a kind has several versions and no
    /// storage version, or a storage version or conversion names a kind that has no CRD.
    pub fn merged(&self) -> Result<Vec<CustomResourceDefinition>, Error> {
        let mut by_name: BTreeMap<String, Vec<CustomResourceDefinition>> = BTreeMap::new();
        for crd in &self.crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            by_name.entry(name).or_default().push(crd.clone());
        }
        for name in self.storage.keys().chain(&self.conversion) {
            if !by_name.contains_key(name) {
                return Err(Error::Crd {
                    name: name.clone(),
                    message: "no such CRD\nhelp: pass its `crd::<Kind>()` to `Crds::new`".into(),
                });
            }
        }
        let mut merged = Vec::new();
        for (name, versions) in by_name {
            let mut crd = match (versions.len(), self.storage.get(&name)) {
                (1, None) => versions.into_iter().next().expect("one"),
                (_, Some(storage)) => {
                    kube::core::crd::merge_crds(versions, storage).map_err(|e| Error::Crd {
                        name: name.clone(),
                        message: e.to_string(),
                    })?
                }
                (_, None) => {
                    let names: Vec<String> = versions
                        .iter()
                        .flat_map(|c| c.spec.versions.iter().map(|v| v.name.clone()))
                        .collect();
                    return Err(Error::Crd {
                        name,
                        message: format!(
                            "versions {} but no storage version\n\
                             help: name the hub: `Crds::new(..).storage_version::<vX::Kind>()`",
                            names.join(", ")
                        ),
                    });
                }
            };
            crd.spec.versions.sort_by(|a, b| a.name.cmp(&b.name));
            if self.conversion.contains(&name) {
                crd.spec.conversion = Some(conversion_webhook());
            }
            merged.push(crd);
        }
        Ok(merged)
    }

    /// The whole `crdgen` program: parses the command line and prints or writes the manifests.
    ///
    /// - no arguments: prints every (merged) CRD as YAML documents on stdout (for
    ///   `kubectl apply -f -`);
    /// - `--write`: writes `config/crd/bases/<group>_<plural>.yaml`, `config/rbac/role.yaml` and
    ///   `config/webhook/manifests.yaml` under `--dir` (default `.`), and removes CRD files of kinds
    ///   that are gone and the webhook file when no marker is left;
    /// - `--check`: writes nothing, and exits 1 listing the files `--write` would change.
    pub fn main(self) -> ExitCode {
        let mut mode = Mode::Print;
        let mut dir = PathBuf::from(".");
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--write" => mode = Mode::Write,
                "--check" => mode = Mode::Check,
                "--dir" => match args.next() {
                    Some(value) => dir = value.into(),
                    None => return usage_error("--dir needs a value"),
                },
                "-h" | "--help" => {
                    println!("{USAGE}");
                    return ExitCode::SUCCESS;
                }
                other => match other.strip_prefix("--dir=") {
                    Some(value) => dir = value.into(),
                    None => return usage_error(&format!("unexpected argument `{other}`")),
                },
            }
        }
        let crds = match self.merged() {
            Ok(crds) => crds,
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        };
        match run(mode, &dir, &crds) {
            Ok(code) => code,
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        }
    }
}

/// `<plural>.<group>`, the name of `K`'s CRD.
fn crd_name<K: Resource<DynamicType = ()>>() -> String {
    format!("{}.{}", K::plural(&()), K::group(&()))
}

/// Conversion through the webhook Service's `/convert`, with ConversionReview v1.
fn conversion_webhook() -> CustomResourceConversion {
    let (name, namespace) = WEBHOOK_SERVICE;
    CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    name: name.into(),
                    namespace: namespace.into(),
                    path: Some(crate::webhook::CONVERT_PATH.into()),
                    port: None,
                }),
                ..WebhookClientConfig::default()
            }),
            conversion_review_versions: vec!["v1".into()],
        }),
    }
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("error: {message}\n\n{USAGE}");
    ExitCode::from(2)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Print,
    Write,
    Check,
}

fn run(mode: Mode, dir: &Path, crds: &[CustomResourceDefinition]) -> Result<ExitCode, Error> {
    let files = crd_files(crds)?;
    if mode == Mode::Print {
        for (_, yaml) in &files {
            print!("{yaml}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut wanted: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|(name, yaml)| (Path::new(CRD_DIR).join(name), yaml))
        .collect();
    let scope = RoleScope::of_project(dir)?;
    wanted.push((ROLE_FILE.into(), render_role(&rbac_rules(dir)?, scope)));
    let mut gone = stale_crd_files(dir, &wanted)?;
    match webhooks::render(&webhooks::webhook_markers(dir)?) {
        Some(text) => wanted.push((WEBHOOK_FILE.into(), text)),
        None if webhooks::is_generated(&dir.join(WEBHOOK_FILE)) => gone.push(WEBHOOK_FILE.into()),
        None => {}
    }

    let mut stale = Vec::new();
    for (path, text) in &wanted {
        let current = std::fs::read_to_string(dir.join(path)).ok();
        if current.as_deref() != Some(text.as_str()) {
            stale.push(path.clone());
        }
    }
    if mode == Mode::Check {
        if stale.is_empty() && gone.is_empty() {
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!("These manifests are out of date; run `make manifests`:");
        for path in &stale {
            eprintln!("  {}", path.display());
        }
        for path in &gone {
            eprintln!("  {} (to be removed)", path.display());
        }
        return Ok(ExitCode::FAILURE);
    }
    for (path, text) in &wanted {
        if !stale.contains(path) {
            continue;
        }
        let full = dir.join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
        }
        std::fs::write(&full, text).map_err(|e| Error::io("write", &full, e))?;
        eprintln!("wrote {}", path.display());
    }
    for path in &gone {
        let full = dir.join(path);
        std::fs::remove_file(&full).map_err(|e| Error::io("remove", &full, e))?;
        eprintln!("removed {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Each CRD as (`<group>_<plural>.yaml`, `---` + YAML), sorted by file name.
pub(crate) fn crd_files(crds: &[CustomResourceDefinition]) -> Result<Vec<(String, String)>, Error> {
    let mut files = Vec::new();
    for crd in crds {
        let name = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
        let yaml = serde_yaml::to_string(crd).map_err(|e| Error::Crd {
            name: name.clone(),
            message: e.to_string(),
        })?;
        files.push((name, format!("---\n{yaml}")));
    }
    files.sort();
    Ok(files)
}

/// CRD files in `dir/config/crd/bases` that `wanted` does not list.
fn stale_crd_files(dir: &Path, wanted: &[(PathBuf, String)]) -> Result<Vec<PathBuf>, Error> {
    let bases = dir.join(CRD_DIR);
    let entries = match std::fs::read_dir(&bases) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("read", &bases, e)),
    };
    let mut gone = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("read", &bases, e))?;
        let name = entry.file_name();
        let relative = Path::new(CRD_DIR).join(&name);
        let is_yaml = Path::new(&name).extension().is_some_and(|e| e == "yaml");
        if !is_yaml || wanted.iter().any(|(path, _)| *path == relative) {
            continue;
        }
        // Only CRDs: leave other files (e.g. a hand-written kustomization) alone.
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if text.contains("kind: CustomResourceDefinition") {
            gone.push(relative);
        }
    }
    gone.sort();
    Ok(gone)
}

/// One RBAC rule: API groups, resources and verbs, each sorted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    /// API groups; `""` is the core group.
    pub api_groups: Vec<String>,
    /// Resources, e.g. `deployments` or `memcacheds/status`.
    pub resources: Vec<String>,
    /// Verbs, e.g. `get`; `*` is every verb.
    pub verbs: Vec<String>,
}

/// Collects the markers of every `.rs` file under `dir/src` into merged, sorted rules.
pub fn rbac_rules(dir: &Path) -> Result<Vec<Rule>, Error> {
    let mut rules = Vec::new();
    for (location, body) in markers(dir, RBAC_MARKER)? {
        rules.push(parse_marker(&body).map_err(|message| Error::Marker { location, message })?);
    }
    Ok(merge(rules))
}

/// The text after `prefix`, if `line` is a `//` comment (not a doc comment) starting with it.
fn marker_with<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    let comment = line.trim_start().strip_prefix("//")?.trim_start();
    comment.strip_prefix(prefix)
}

/// Every `// <prefix>` marker in the `.rs` files under `dir/src`, as (location, body), in file order.
fn markers(dir: &Path, prefix: &str) -> Result<Vec<(String, String)>, Error> {
    let mut files = Vec::new();
    rust_files(&dir.join("src"), &mut files)?;
    files.sort();
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|e| Error::io("read", file, e))?;
        let relative = file.strip_prefix(dir).unwrap_or(file);
        for (n, line) in text.lines().enumerate() {
            if let Some(body) = marker_with(line, prefix) {
                found.push((
                    format!("{}:{}", relative.display(), n + 1),
                    body.to_string(),
                ));
            }
        }
    }
    Ok(found)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("read", dir, e)),
    };
    for entry in entries {
        let path = entry.map_err(|e| Error::io("read", dir, e))?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Parses a marker body: `groups=apps,resources=deployments;deployments/status,verbs=get;list`.
pub(crate) fn parse_marker(body: &str) -> Result<Rule, String> {
    let example =
        format!("`// {RBAC_MARKER}groups=apps,resources=deployments,verbs=get;list;watch`");
    let mut rule = Rule {
        api_groups: Vec::new(),
        resources: Vec::new(),
        verbs: Vec::new(),
    };
    for pair in body.trim().split(',') {
        let (key, value) = pair.split_once('=').ok_or_else(|| {
            format!("invalid RBAC marker: `{pair}` is not `key=value`\nhelp: write e.g. {example}")
        })?;
        let values = value
            .split(';')
            .map(|v| v.trim().trim_matches('"').to_string());
        match key.trim() {
            "groups" => rule
                .api_groups
                .extend(values.map(|g| if g == "core" { String::new() } else { g })),
            "resources" => rule.resources.extend(values),
            "verbs" => rule.verbs.extend(values),
            other => {
                return Err(format!(
                    "unknown key `{other}` in RBAC marker\nhelp: the keys are `groups`, `resources` and `verbs`"
                ));
            }
        }
    }
    let empty = rule
        .resources
        .iter()
        .chain(&rule.verbs)
        .any(String::is_empty);
    if rule.resources.is_empty() || rule.verbs.is_empty() || empty {
        return Err(format!(
            "RBAC marker needs `resources=` and `verbs=` with values\nhelp: write e.g. {example}"
        ));
    }
    if rule.api_groups.is_empty() {
        rule.api_groups.push(String::new());
    }
    Ok(rule)
}

/// Unions the verbs of each (group, resource), then puts the resources of a group with identical verbs
/// in one rule; sorted, so the output does not depend on the order of the markers.
pub fn merge(markers: Vec<Rule>) -> Vec<Rule> {
    let mut verbs: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for rule in markers {
        for group in &rule.api_groups {
            for resource in &rule.resources {
                verbs
                    .entry((group.clone(), resource.clone()))
                    .or_default()
                    .extend(rule.verbs.iter().cloned());
            }
        }
    }
    let mut by_verbs: BTreeMap<(String, Vec<String>), Vec<String>> = BTreeMap::new();
    for ((group, resource), set) in verbs {
        let set = if set.contains("*") {
            vec!["*".to_string()]
        } else {
            set.into_iter().collect()
        };
        by_verbs.entry((group, set)).or_default().push(resource);
    }
    let mut rules: Vec<Rule> = by_verbs
        .into_iter()
        .map(|((group, verbs), resources)| Rule {
            api_groups: vec![group],
            resources,
            verbs,
        })
        .collect();
    rules.sort();
    rules
}

/// Where the manager's permissions apply: the whole cluster, or the namespace it watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleScope {
    /// A ClusterRole: the manager watches all namespaces.
    Cluster,
    /// A Role in the manager's namespace (`system`, renamed by kustomize): the project was made with
    /// `rustbuilder init --namespaced` (`namespaced: true` in PROJECT) and the manager watches its own
    /// namespace only.
    Namespace,
}

impl RoleScope {
    /// The scope PROJECT in `dir` asks for; a directory without PROJECT gets a ClusterRole.
    pub fn of_project(dir: &Path) -> Result<Self, Error> {
        let path = dir.join("PROJECT");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(RoleScope::Cluster),
            Err(e) => return Err(Error::io("read", &path, e)),
        };
        let project: serde_yaml::Value =
            serde_yaml::from_str(&text).map_err(|e| Error::Project {
                path: path.clone(),
                message: format!("not valid YAML: {e}"),
            })?;
        Ok(match project.get("namespaced").and_then(|v| v.as_bool()) {
            Some(true) => RoleScope::Namespace,
            _ => RoleScope::Cluster,
        })
    }
}

/// The manager's role, `manager-role`, as YAML: a ClusterRole, or a Role in its namespace.
pub fn render_role(rules: &[Rule], scope: RoleScope) -> String {
    let mut out = String::from(
        "# Generated by `make manifests` from the `// +rustbuilder:rbac:` markers in src/. Do not edit.\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\n",
    );
    out.push_str(match scope {
        RoleScope::Cluster => "kind: ClusterRole\nmetadata:\n  name: manager-role\n",
        RoleScope::Namespace => {
            "kind: Role\nmetadata:\n  name: manager-role\n  namespace: system\n"
        }
    });
    if rules.is_empty() {
        out.push_str("rules: []\n");
        return out;
    }
    out.push_str("rules:\n");
    for rule in rules {
        let mut first = true;
        for (key, values) in [
            ("apiGroups", &rule.api_groups),
            ("resources", &rule.resources),
            ("verbs", &rule.verbs),
        ] {
            let _ = writeln!(out, "{}{key}:", if first { "- " } else { "  " });
            first = false;
            for value in values {
                let quoted = if value.is_empty() || value == "*" {
                    format!("\"{value}\"")
                } else {
                    value.clone()
                };
                let _ = writeln!(out, "  - {quoted}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_role_scope_follows_project() {
        let dir = std::env::temp_dir().join(format!("role-scope-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(RoleScope::of_project(&dir).unwrap(), RoleScope::Cluster);
        std::fs::write(
            dir.join("PROJECT"),
            "domain: example.com\nnamespaced: true\n",
        )
        .unwrap();
        assert_eq!(RoleScope::of_project(&dir).unwrap(), RoleScope::Namespace);
        std::fs::write(dir.join("PROJECT"), "domain: example.com\n").unwrap();
        assert_eq!(RoleScope::of_project(&dir).unwrap(), RoleScope::Cluster);
        std::fs::write(dir.join("PROJECT"), "namespaced: [").unwrap();
        let error = RoleScope::of_project(&dir).unwrap_err();
        assert!(matches!(error, Error::Project { .. }), "{error:?}");
        assert!(
            error.to_string().contains("PROJECT: not valid YAML"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Rule {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Rule {
            api_groups: strings(groups),
            resources: strings(resources),
            verbs: strings(verbs),
        }
    }

    #[test]
    fn merges_markers_deterministically() {
        let markers = [
            "groups=apps,resources=deployments,verbs=get;list;watch",
            "groups=apps,resources=deployments,verbs=create;patch",
            "groups=\"\",resources=pods,verbs=get;list;watch",
            "groups=core,resources=configmaps,verbs=get;list;watch",
        ];
        let parsed: Vec<Rule> = markers.iter().map(|m| parse_marker(m).unwrap()).collect();
        let mut reversed = parsed.clone();
        reversed.reverse();
        let rules = merge(parsed);
        assert_eq!(merge(reversed), rules, "order of markers matters");
        assert_eq!(
            rules,
            vec![
                rule(&[""], &["configmaps", "pods"], &["get", "list", "watch"]),
                rule(
                    &["apps"],
                    &["deployments"],
                    &["create", "get", "list", "patch", "watch"]
                ),
            ]
        );
    }

    #[test]
    fn wildcard_verbs_absorb_the_others() {
        let rules = merge(vec![
            parse_marker("groups=apps,resources=deployments,verbs=get").unwrap(),
            parse_marker("groups=apps,resources=deployments,verbs=*").unwrap(),
        ]);
        assert_eq!(rules, vec![rule(&["apps"], &["deployments"], &["*"])]);
    }

    #[test]
    fn a_marker_without_groups_is_for_the_core_group() {
        let parsed = parse_marker("resources=secrets,verbs=get").unwrap();
        assert_eq!(parsed, rule(&[""], &["secrets"], &["get"]));
    }

    #[test]
    fn bad_markers_are_errors() {
        for bad in [
            "groups=apps,resources=deployments",
            "groups=apps,resource=deployments,verbs=get",
            "groups=apps resources=deployments",
            "groups=apps,resources=,verbs=get",
            "groups=apps,resources=deployments,verbs=get;",
        ] {
            assert!(parse_marker(bad).is_err(), "{bad} accepted");
        }
        let error = parse_marker("groups=apps,resource=x,verbs=get").unwrap_err();
        assert!(error.contains("help: the keys are"), "{error}");
    }

    fn marker_body(line: &str) -> Option<&str> {
        marker_with(line, RBAC_MARKER)
    }

    #[test]
    fn markers_are_comments_only() {
        assert_eq!(
            marker_body("  // +rustbuilder:rbac:groups=apps"),
            Some("groups=apps")
        );
        assert_eq!(
            marker_body("//+rustbuilder:rbac:verbs=get"),
            Some("verbs=get")
        );
        assert_eq!(marker_body("let s = \"+rustbuilder:rbac:\";"), None);
        assert_eq!(marker_body("/// +rustbuilder:rbac:x"), None);
    }

    /// The exact text the CLI wrote before this module existed, apart from the header line.
    #[test]
    fn renders_the_role_byte_for_byte() {
        let rules = merge(vec![
            parse_marker("groups=cache.example.com,resources=memcacheds,verbs=list;watch;patch")
                .unwrap(),
            parse_marker("groups=cache.example.com,resources=memcacheds/status,verbs=patch")
                .unwrap(),
            parse_marker("groups=core,resources=events,verbs=*").unwrap(),
        ]);
        let expected = "\
# Generated by `make manifests` from the `// +rustbuilder:rbac:` markers in src/. Do not edit.
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: manager-role
rules:
- apiGroups:
  - \"\"
  resources:
  - events
  verbs:
  - \"*\"
- apiGroups:
  - cache.example.com
  resources:
  - memcacheds
  verbs:
  - list
  - patch
  - watch
- apiGroups:
  - cache.example.com
  resources:
  - memcacheds/status
  verbs:
  - patch
";
        assert_eq!(render_role(&rules, RoleScope::Cluster), expected);
        assert!(
            render_role(&[], RoleScope::Cluster).ends_with("  name: manager-role\nrules: []\n")
        );
        let namespaced = render_role(&rules, RoleScope::Namespace);
        assert!(
            namespaced.contains(
                "kind: Role\nmetadata:\n  name: manager-role\n  namespace: system\nrules:\n"
            ),
            "{namespaced}"
        );
    }

    #[test]
    fn reads_markers_under_src_with_locations_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src/controller");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(
            src.join("a.rs"),
            "// +rustbuilder:rbac:groups=apps,resources=deployments,verbs=get\nfn main() {}\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("src/notes.txt"), "// +rustbuilder:rbac:bad").unwrap();
        let rules = rbac_rules(dir.path()).unwrap();
        assert_eq!(rules, vec![rule(&["apps"], &["deployments"], &["get"])]);

        std::fs::write(src.join("b.rs"), "\n  // +rustbuilder:rbac:groups=apps\n").unwrap();
        let error = rbac_rules(dir.path()).unwrap_err();
        assert!(
            matches!(&error, Error::Marker { location, .. } if location == "src/controller/b.rs:2"),
            "{error:?}"
        );
    }

    fn crd(group: &str, plural: &str) -> CustomResourceDefinition {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": { "name": format!("{plural}.{group}") },
            "spec": {
                "group": group,
                "names": { "kind": "Thing", "plural": plural },
                "scope": "Namespaced",
                "versions": []
            }
        }))
        .unwrap()
    }

    #[test]
    fn crd_files_are_named_group_plural() {
        let files = crd_files(&[
            crd("b.example.com", "things"),
            crd("a.example.com", "items"),
        ])
        .unwrap();
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["a.example.com_items.yaml", "b.example.com_things.yaml"]
        );
        assert!(files[0].1.starts_with(
            "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        ));
    }

    #[test]
    fn write_then_check_then_remove_a_gone_kind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path();
        std::fs::create_dir_all(path.join("src")).unwrap();
        std::fs::write(
            path.join("src/lib.rs"),
            "// +rustbuilder:rbac:groups=apps,resources=deployments,verbs=get\n",
        )
        .unwrap();
        let two = [
            crd("a.example.com", "items"),
            crd("a.example.com", "things"),
        ];
        assert_eq!(run(Mode::Check, path, &two).unwrap(), ExitCode::FAILURE);
        assert_eq!(run(Mode::Write, path, &two).unwrap(), ExitCode::SUCCESS);
        assert_eq!(run(Mode::Check, path, &two).unwrap(), ExitCode::SUCCESS);
        let role = std::fs::read_to_string(path.join(ROLE_FILE)).unwrap();
        assert!(role.contains("  - deployments\n"), "{role}");
        // Not a CRD: kept even though no kind names it.
        std::fs::write(
            path.join(CRD_DIR).join("kustomization.yaml"),
            "resources: []\n",
        )
        .unwrap();

        let one = [crd("a.example.com", "items")];
        assert_eq!(run(Mode::Check, path, &one).unwrap(), ExitCode::FAILURE);
        assert_eq!(run(Mode::Write, path, &one).unwrap(), ExitCode::SUCCESS);
        let mut left: Vec<String> = std::fs::read_dir(path.join(CRD_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["a.example.com_items.yaml", "kustomization.yaml"]);
        assert_eq!(run(Mode::Check, path, &one).unwrap(), ExitCode::SUCCESS);
    }

    mod v1alpha1 {
        #[derive(
            kube::CustomResource,
            Clone,
            Debug,
            serde::Deserialize,
            serde::Serialize,
            schemars::JsonSchema,
        )]
        #[kube(
            group = "cache.example.com",
            version = "v1alpha1",
            kind = "Memcached",
            namespaced
        )]
        pub struct MemcachedSpec {
            size: i32,
        }
    }

    mod v1 {
        #[derive(
            kube::CustomResource,
            Clone,
            Debug,
            serde::Deserialize,
            serde::Serialize,
            schemars::JsonSchema,
        )]
        #[kube(
            group = "cache.example.com",
            version = "v1",
            kind = "Memcached",
            namespaced
        )]
        pub struct MemcachedSpec {
            replicas: i32,
        }
    }

    fn two_versions() -> Crds {
        use kube::CustomResourceExt;
        Crds::new([
            v1::Memcached::crd(),
            v1alpha1::Memcached::crd(),
            crd("a.example.com", "items"),
        ])
    }

    #[test]
    fn versions_of_a_kind_merge_into_one_crd_stored_at_the_hub() {
        let merged = two_versions()
            .storage_version::<v1::Memcached>()
            .merged()
            .unwrap();
        let names: Vec<&str> = merged
            .iter()
            .map(|c| c.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(
            names,
            ["items.a.example.com", "memcacheds.cache.example.com"]
        );
        let memcached = &merged[1];
        let versions: Vec<(&str, bool)> = memcached
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.storage))
            .collect();
        assert_eq!(versions, [("v1", true), ("v1alpha1", false)]);
        assert!(
            memcached.spec.conversion.is_none(),
            "no webhook unless asked"
        );
    }

    #[test]
    fn a_conversion_webhook_goes_through_the_webhook_service() {
        let merged = two_versions()
            .storage_version::<v1::Memcached>()
            .conversion_webhook::<v1alpha1::Memcached>()
            .merged()
            .unwrap();
        let conversion = serde_json::to_value(&merged[1].spec.conversion).unwrap();
        assert_eq!(
            conversion,
            serde_json::json!({
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {
                        "service": { "name": "webhook-service", "namespace": "system", "path": "/convert" }
                    },
                    "conversionReviewVersions": ["v1"]
                }
            })
        );
        // The YAML is the same whatever the order of the CRDs given.
        use kube::CustomResourceExt;
        let reversed = Crds::new([v1alpha1::Memcached::crd(), v1::Memcached::crd()])
            .storage_version::<v1::Memcached>()
            .conversion_webhook::<v1::Memcached>()
            .merged()
            .unwrap();
        assert_eq!(
            crd_files(&reversed).unwrap()[0],
            crd_files(&merged).unwrap()[1]
        );
    }

    #[test]
    fn several_versions_need_a_storage_version() {
        let error = two_versions().merged().unwrap_err();
        assert!(
            error
                .to_string()
                .contains("versions v1, v1alpha1 but no storage version"),
            "{error}"
        );
        assert!(error.to_string().contains("help: name the hub"), "{error}");
        let error = Crds::new([crd("a.example.com", "items")])
            .conversion_webhook::<v1::Memcached>()
            .merged()
            .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("CRD memcacheds.cache.example.com: no such CRD"),
            "{error}"
        );
    }

    #[test]
    fn the_webhook_file_follows_the_markers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path();
        std::fs::create_dir_all(path.join("src/webhook")).unwrap();
        let crds = [crd("a.example.com", "items")];
        assert_eq!(run(Mode::Write, path, &crds).unwrap(), ExitCode::SUCCESS);
        assert!(!path.join(WEBHOOK_FILE).exists(), "no markers, no file");

        let marker = "// +rustbuilder:webhook:path=/validate-a-example-com-v1-item,mutating=false,failurePolicy=fail,sideEffects=None,groups=a.example.com,resources=items,verbs=create;update,versions=v1,name=vitem-v1.kb.io,admissionReviewVersions=v1\n";
        std::fs::write(path.join("src/webhook/item.rs"), marker).unwrap();
        assert_eq!(run(Mode::Check, path, &crds).unwrap(), ExitCode::FAILURE);
        assert_eq!(run(Mode::Write, path, &crds).unwrap(), ExitCode::SUCCESS);
        let text = std::fs::read_to_string(path.join(WEBHOOK_FILE)).unwrap();
        assert!(
            text.contains("kind: ValidatingWebhookConfiguration"),
            "{text}"
        );
        assert!(!text.contains("MutatingWebhookConfiguration"), "{text}");
        assert_eq!(run(Mode::Check, path, &crds).unwrap(), ExitCode::SUCCESS);

        // The marker is gone: so is the file, and --check says so first.
        std::fs::write(path.join("src/webhook/item.rs"), "").unwrap();
        assert_eq!(run(Mode::Check, path, &crds).unwrap(), ExitCode::FAILURE);
        assert_eq!(run(Mode::Write, path, &crds).unwrap(), ExitCode::SUCCESS);
        assert!(!path.join(WEBHOOK_FILE).exists());
        // A hand-written file is left alone.
        std::fs::write(
            path.join(WEBHOOK_FILE),
            "kind: ValidatingWebhookConfiguration\n",
        )
        .unwrap();
        assert_eq!(run(Mode::Check, path, &crds).unwrap(), ExitCode::SUCCESS);

        // A bad marker names its place.
        std::fs::write(
            path.join("src/webhook/item.rs"),
            "\n// +rustbuilder:webhook:path=/x\n",
        )
        .unwrap();
        let error = run(Mode::Check, path, &crds).unwrap_err();
        assert!(
            error.to_string().starts_with("src/webhook/item.rs:2: "),
            "{error}"
        );
    }
}
