//! A Kubebuilder project's own kinds, from its CRDs: when the directory `alpha generate` reads holds
//! `config/crd/bases/<group>.<domain>_<plural>.yaml` written by controller-gen (it has the
//! `controller-gen.kubebuilder.io/version` annotation; a rustbuilder project's own are left alone, its
//! types are the source of them), each kind PROJECT
//! names that has a CRD there gets Rust types generated from its schema ([`codegen::generate_owned`])
//! in place of the scaffolded ones, so that `make manifests` writes the same CRD again.
//!
//! The scaffold around such a kind is made to fit its types: the controller and its test start empty
//! (the scaffolded ones set fields a migrated kind does not have), the sample sets the fields the CRD
//! requires, and `crdgen` stores the kind at the version the CRD stores. A kind without a CRD there
//! keeps the scaffolded types.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Serialize;
use serde_json::Value;

use super::rust::ProjectContext;
use crate::external::codegen::{self, Owned, OwnedTypes};
use crate::model::{Group, Kind};
use crate::project::{self, Project, Resource};
use crate::scaffold::{IfExists, Plan};

/// Where controller-gen writes a Kubebuilder project's CRDs.
pub const CRD_DIR: &str = "config/crd/bases";

/// The annotation controller-gen puts on the CRDs it writes: the CRDs the types come from.
pub const CONTROLLER_GEN_ANNOTATION: &str = "controller-gen.kubebuilder.io/version";

/// One version of a kind's CRD, ready to generate from.
#[derive(Debug, Clone)]
pub struct MigratedVersion {
    /// The CRD.
    pub crd: Value,
    /// Its entry in `spec.versions`.
    pub version: Value,
}

/// The CRDs controller-gen wrote in `input`'s `config/crd/bases/`, by `(API group, kind)`. None
/// when there is no such directory.
pub fn read_crds(input: &Path) -> Result<BTreeMap<(String, String), Value>> {
    let dir = input.join(CRD_DIR);
    let mut crds = BTreeMap::new();
    if !dir.is_dir() {
        return Ok(crds);
    }
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("failed to read `{}`", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.sort();
    for path in files {
        if !path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("failed to read `{}`", path.display()))?;
        let parsed = crate::external::parse(&text)
            .with_context(|| format!("`{}` is not a CRD file", path.display()))?;
        // Only controller-gen's: a rustbuilder project's own `crdgen` writes CRDs there too, from
        // types it already has.
        for crd in parsed.into_iter().filter(|c| {
            c.pointer("/metadata/annotations")
                .and_then(Value::as_object)
                .is_some_and(|a| a.contains_key(CONTROLLER_GEN_ANNOTATION))
        }) {
            let group = text_at(&crd, &["spec", "group"]).to_string();
            let kind = text_at(&crd, &["spec", "names", "kind"]).to_string();
            crds.insert((group, kind), crd);
        }
    }
    Ok(crds)
}

/// Replaces the scaffolded types of every own kind of `project` that has a CRD in `input` by types
/// generated from it, in the project scaffolded at `output`; adjusts its controllers, tests, sample
/// and storage version to them.
pub fn apply(project: &Project, input: &Path, output: &Path) -> Result<()> {
    let crds = read_crds(input)?;
    if crds.is_empty() {
        return Ok(());
    }
    let base = ProjectContext::of(project, output)?;
    let mut plan = Plan::new(output);
    for resource in &project.resources {
        if resource.api.is_none() || resource.external || resource.core {
            continue;
        }
        // deploy-image's controller is built on the fields of its own scaffolded type.
        if project
            .plugin_resource(project::DEPLOY_IMAGE_PLUGIN, resource)
            .is_some()
        {
            continue;
        }
        let group: Group = resource.group.parse()?;
        let api_group = if resource.domain.is_empty() {
            group.to_string()
        } else {
            format!("{}.{}", resource.group, resource.domain)
        };
        let Some(crd) = crds.get(&(api_group.clone(), resource.kind.clone())) else {
            continue;
        };
        let Some(version) = crd_versions(crd)
            .find(|v| text_at(v, &["name"]) == resource.version)
            .cloned()
        else {
            continue;
        };
        migrate_kind(
            &mut plan,
            project,
            &base,
            resource,
            &MigratedVersion {
                crd: crd.clone(),
                version,
            },
        )
        .with_context(|| {
            format!(
                "cannot generate the types of `{}/{}, Kind={}` from its CRD in `{CRD_DIR}`",
                api_group, resource.version, resource.kind
            )
        })?;
    }
    plan.force();
    plan.apply()?;
    Ok(())
}

/// What the migration templates see, on top of the project's values.
#[derive(Serialize)]
struct KindContext {
    kind: String,
    kind_snake: String,
    qualified_group: String,
    plural: String,
    api_path: String,
    controller_module: String,
    /// The stem of the controller's test: the module, after the group in a multigroup project.
    controller_test: String,
    controller_rel: String,
    controller_name: String,
    group_path: String,
}

fn migrate_kind(
    plan: &mut Plan,
    project: &Project,
    base: &ProjectContext,
    resource: &Resource,
    migrated: &MigratedVersion,
) -> Result<()> {
    let kind: Kind = resource.kind.parse()?;
    let group: Group = resource.group.parse()?;
    let kind_snake = kind.snake();
    let (group_path, group_rel) = if project.multigroup {
        (
            format!("{}/", group.snake()),
            format!("{}::", group.snake()),
        )
    } else {
        (String::new(), String::new())
    };
    let crd = &migrated.crd;
    let api_group = text_at(crd, &["spec", "group"]);
    let plural = text_at(crd, &["spec", "names", "plural"]);
    let version = text_at(&migrated.version, &["name"]);
    let version_dir = format!("src/api/{group_path}{version}");
    let kept_file = format!("{kind_snake}.schemas.json");
    let types = rust_types(crd, &migrated.version, &kept_file)?;
    let header = crate::scaffold::render(
        "partials/header.rs.tera",
        &tera::Context::from_serialize(base)?,
    )?;
    let header = if header.trim().is_empty() {
        String::new()
    } else {
        format!("{header}\n")
    };
    let text = format!(
        "{header}//! The `{kind}` API ({api_group}/{version}), generated from the CRD of the project this one\n\
         //! was made from.\n//!\n\
         //! The types are yours to edit: `make manifests` writes the CRD from them (doc comments become\n\
         //! descriptions; schemars and `x_kube` attributes, validation).\n{}\n{}",
        types
            .gaps
            .iter()
            .map(|gap| format!("//!\n//! Not carried over from the CRD: {gap}.\n"))
            .collect::<String>(),
        types.rust
    );
    plan.add_generated(format!("{version_dir}/{kind_snake}.rs"), text);
    if !types.kept.is_empty() {
        let mut json = serde_json::to_string_pretty(&types.kept)?;
        json.push('\n');
        plan.add(
            format!("{version_dir}/{kept_file}"),
            json,
            IfExists::Overwrite,
        );
    }
    let sample = format!(
        "config/samples/{}_{version}_{kind_snake}.yaml",
        group.snake()
    );
    plan.add(
        sample,
        sample_yaml(crd, &migrated.version, &project.project_name),
        IfExists::Overwrite,
    );

    // The controllers of the kind start empty: the scaffolded ones use the scaffolded fields.
    let mut modules: Vec<(String, String)> = Vec::new();
    if resource.has_default_controller() {
        modules.push((kind_snake.clone(), kind.as_str().to_lowercase()));
    }
    for name in resource.named_controllers() {
        let name: crate::model::ControllerName = name.parse()?;
        modules.push((name.snake(), name.as_str().to_string()));
    }
    for (module, own_name) in modules {
        let context = KindContext {
            kind: kind.to_string(),
            kind_snake: kind_snake.clone(),
            qualified_group: api_group.to_string(),
            plural: plural.to_string(),
            api_path: format!("api::{group_rel}{version}"),
            controller_rel: format!("{group_rel}{module}"),
            controller_name: if project.multigroup {
                format!("{}-{own_name}", resource.group)
            } else {
                own_name
            },
            controller_test: super::rust::group_prefix(project.multigroup, &group.snake(), &module),
            controller_module: module,
            group_path: group_path.clone(),
        };
        let mut tera = tera::Context::from_serialize(base)?;
        tera.extend(tera::Context::from_serialize(&context)?);
        plan.add_set("migrate", &tera)?;
    }

    // crdgen stores the kind at the version its CRD stores.
    let versions: Vec<&Value> = crd_versions(crd).collect();
    if versions.len() > 1 && migrated.version.get("storage") == Some(&Value::Bool(true)) {
        let kind_name = kind.as_str();
        plan.edit("src/bin/crdgen.rs", |text| {
            let mut out = text.to_string();
            for other in &versions {
                let name = text_at(other, &["name"]);
                if name == version {
                    continue;
                }
                out = out.replace(
                    &format!("storage_version::<api::{group_rel}{name}::{kind_name}>()"),
                    &format!("storage_version::<api::{group_rel}{version}::{kind_name}>()"),
                );
            }
            out
        })?;
    }
    Ok(())
}

/// The Rust types of one version of a CRD, with everything of the CRD the `#[kube(...)]` attribute
/// carries.
pub fn rust_types(crd: &Value, version: &Value, kept_file: &str) -> Result<OwnedTypes> {
    let name = text_at(version, &["name"]);
    let schema = version
        .get("schema")
        .and_then(|s| s.get("openAPIV3Schema"))
        .with_context(|| format!("version `{name}` of the CRD has no `schema.openAPIV3Schema`"))?;
    let names = crd.get("spec").and_then(|s| s.get("names"));
    let kind = text_at(crd, &["spec", "names", "kind"]);
    let mut args = Vec::new();
    let names_list = |key: &str| -> Vec<String> {
        names
            .and_then(|n| n.get(key))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    if let Some(singular) = names
        .and_then(|n| n.get("singular"))
        .and_then(Value::as_str)
        && singular != kind.to_lowercase()
    {
        args.push(format!("singular = {singular:?}"));
    }
    for short in names_list("shortNames") {
        args.push(format!("shortname = {short:?}"));
    }
    for category in names_list("categories") {
        args.push(format!("category = {category:?}"));
    }
    for column in version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        args.push(format!("printcolumn = {}", raw_json(column)));
    }
    if let Some(scale) = version.get("subresources").and_then(|s| s.get("scale")) {
        args.push(format!("scale = {}", raw_json(scale)));
    }
    for field in version
        .get("selectableFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(path) = field.get("jsonPath").and_then(Value::as_str) {
            args.push(format!("selectable = {path:?}"));
        }
    }
    if version.get("served") == Some(&Value::Bool(false)) {
        args.push("served = false".into());
    }
    if version.get("storage") == Some(&Value::Bool(false)) {
        args.push("storage = false".into());
    }
    if version.get("deprecated") == Some(&Value::Bool(true)) {
        match version.get("deprecationWarning").and_then(Value::as_str) {
            Some(warning) => args.push(format!("deprecated = {warning:?}")),
            None => args.push("deprecated".into()),
        }
    }
    let resource = codegen::Resource {
        group: text_at(crd, &["spec", "group"]),
        version: name,
        kind,
        plural: text_at(crd, &["spec", "names", "plural"]),
        namespaced: text_at(crd, &["spec", "scope"]) != "Cluster",
    };
    let owned = Owned {
        kube_args: args,
        kept_file: kept_file.to_string(),
    };
    codegen::generate_owned(&resource, &owned, schema)
}

/// A sample object of the version: the fields the schema requires, with their defaults or a value
/// of their type.
fn sample_yaml(crd: &Value, version: &Value, project_name: &str) -> String {
    let group = text_at(crd, &["spec", "group"]);
    let kind = text_at(crd, &["spec", "names", "kind"]);
    let name = text_at(version, &["name"]);
    let spec = version
        .pointer("/schema/openAPIV3Schema/properties/spec")
        .map(example)
        .unwrap_or(Value::Object(Default::default()));
    let spec_yaml = match &spec {
        Value::Object(map) if map.is_empty() => "spec: {}\n".to_string(),
        _ => {
            let text = serde_yaml::to_string(&spec).unwrap_or_default();
            let indented: String = text.lines().map(|l| format!("  {l}\n")).collect();
            format!("spec:\n{indented}")
        }
    };
    format!(
        "apiVersion: {group}/{name}\nkind: {kind}\nmetadata:\n  labels:\n    app.kubernetes.io/name: {project_name}\n    app.kubernetes.io/managed-by: kustomize\n  name: {}-sample\n# TODO(user): set the fields of your {kind}; these are the ones its schema requires.\n{spec_yaml}",
        kind.to_lowercase()
    )
}

/// A value `schema` accepts: its default, its first enum value, or the least value of its type;
/// for objects, the required properties.
fn example(schema: &Value) -> Value {
    if let Some(default) = schema.get("default") {
        return default.clone();
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    let minimum = || schema.get("minimum").cloned().unwrap_or(Value::from(0));
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => Value::from(""),
        Some("integer" | "number") => minimum(),
        Some("boolean") => Value::from(false),
        Some("array") => Value::Array(Vec::new()),
        _ => {
            let mut object = serde_json::Map::new();
            let properties = schema.get("properties").and_then(Value::as_object);
            for name in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if let Some(property) = properties.and_then(|p| p.get(name)) {
                    object.insert(name.to_string(), example(property));
                }
            }
            Value::Object(object)
        }
    }
}

/// A JSON value as a raw string literal, as `#[kube(printcolumn = ...)]` takes it.
fn raw_json(value: &Value) -> String {
    let json = serde_json::to_string(value).expect("JSON serializes");
    let mut hashes = String::from("#");
    while json.contains(&format!("\"{hashes}")) {
        hashes.push('#');
    }
    format!("r{hashes}\"{json}\"{hashes}")
}

fn crd_versions(crd: &Value) -> impl Iterator<Item = &Value> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn text_at<'a>(value: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .try_fold(value, |v, key| v.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd(version: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "spec": {
                "group": "fleet.example.com",
                "names": { "kind": "Frigate", "plural": "frigates", "singular": "boat", "shortNames": ["fg"], "categories": ["fleet"] },
                "scope": "Cluster",
                "versions": [version]
            }
        })
    }

    #[test]
    fn the_crd_beyond_the_schema_becomes_kube_arguments() {
        let version = json!({
            "name": "v1beta1",
            "served": false,
            "storage": false,
            "deprecated": true,
            "deprecationWarning": "use v1",
            "additionalPrinterColumns": [{ "name": "Crew", "type": "integer", "jsonPath": ".spec.crew" }],
            "selectableFields": [{ "jsonPath": ".spec.captain" }],
            "subresources": { "status": {}, "scale": { "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas" } },
            "schema": { "openAPIV3Schema": { "type": "object", "properties": {
                "spec": { "type": "object", "properties": { "replicas": { "type": "integer", "format": "int32" } } },
                "status": { "type": "object", "properties": { "replicas": { "type": "integer", "format": "int32" } } }
            } } }
        });
        let types = rust_types(&crd(version.clone()), &version, "frigate.schemas.json").unwrap();
        let rust = types.rust;
        for arg in [
            "plural = \"frigates\"",
            "status = \"FrigateStatus\"",
            "singular = \"boat\"",
            "shortname = \"fg\"",
            "category = \"fleet\"",
            r##"printcolumn = r#"{"jsonPath":".spec.crew","name":"Crew","type":"integer"}"#"##,
            r##"scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas"}"#"##,
            "selectable = \".spec.captain\"",
            "served = false",
            "storage = false",
            "deprecated = \"use v1\"",
        ] {
            assert!(rust.contains(&format!("\n    {arg}")), "{arg}:\n{rust}");
        }
        // Cluster scope: not namespaced.
        assert!(!rust.contains("namespaced"), "{rust}");
    }

    #[test]
    fn a_raw_string_outlasts_its_content() {
        assert_eq!(raw_json(&json!({ "a": "b" })), r##"r#"{"a":"b"}"#"##);
        assert_eq!(
            raw_json(&json!({ "a": "\"#" })),
            r###"r##"{"a":"\"#"}"##"###
        );
    }

    #[test]
    fn the_sample_sets_what_the_schema_requires() {
        let version = json!({ "name": "v1", "schema": { "openAPIV3Schema": { "properties": { "spec": {
            "type": "object",
            "required": ["schedule", "policy", "limit", "template"],
            "properties": {
                "schedule": { "type": "string" },
                "policy": { "type": "string", "enum": ["Allow", "Forbid"] },
                "limit": { "type": "integer", "minimum": 3 },
                "template": { "type": "object", "required": ["mode"], "properties": { "mode": { "type": "string", "default": "fast" } } },
                "optional": { "type": "string" }
            }
        } } } } });
        let yaml = sample_yaml(&crd(version.clone()), &version, "fleet");
        assert!(
            yaml.starts_with("apiVersion: fleet.example.com/v1\nkind: Frigate\n"),
            "{yaml}"
        );
        assert!(yaml.contains("  name: frigate-sample\n"), "{yaml}");
        let parsed: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
        let spec = serde_json::to_value(&parsed["spec"]).unwrap();
        assert_eq!(
            spec,
            json!({ "schedule": "", "policy": "Allow", "limit": 3, "template": { "mode": "fast" } })
        );
    }
}
