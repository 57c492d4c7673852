//! Another operator's CRD, for a controller of a type the project does not own
//! (`create api --resource=false --external-api-path <CRD file>`).
//!
//! The CRD is read from a YAML file — the upstream manifest, or what `kubectl get crd <name> -o yaml`
//! prints for an installed one — checked against the group, version and kind asked for, and turned into
//! Rust types ([`codegen`]). The project keeps a copy, without what the API server adds to an installed
//! object, in `config/crd/external/`: its tests install it, and `alpha generate` reads it again.

pub mod codegen;
pub mod go_module;

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::model::{Domain, Group, Kind, Version};

/// Where a project keeps the CRDs of the external types it uses.
pub const CRD_DIR: &str = "config/crd/external";

/// The Rust module that holds the external types: `src/external/`.
pub const MODULE: &str = "external";

const HOW_TO_GET: &str = "pass the YAML of the CRD, e.g. the operator's release manifest or `kubectl get crd <plural>.<group> -o yaml > crd.yaml`";

/// One CustomResourceDefinition, read and checked.
#[derive(Debug, Clone)]
pub struct ExternalCrd {
    /// The API group, e.g. `cert-manager.io`.
    pub api_group: String,
    /// The domain: what follows `<group>.` in the API group (empty when the group is all of it).
    pub domain: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
    /// The CRD as the project keeps it.
    object: Value,
}

impl ExternalCrd {
    /// Reads the CRD of `group`/`kind` from the YAML file `path` (one CRD, or several documents or a
    /// `List` among which it is), checking that it serves `version`. With `domain`, the CRD's group must
    /// be `<group>.<domain>`; without, the domain is what follows `<group>.` in it.
    pub fn read(
        path: &Path,
        group: &Group,
        version: &Version,
        kind: &Kind,
        domain: Option<&Domain>,
    ) -> Result<Self> {
        let shown = path.display();
        let text = std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!("cannot read the CRD file `{shown}`: {e}\nhelp: {HOW_TO_GET}")
        })?;
        let crds = parse(&text).with_context(|| format!("`{shown}` is not a CRD file"))?;
        if crds.is_empty() {
            bail!("`{shown}` holds no CustomResourceDefinition\nhelp: {HOW_TO_GET}");
        }
        let of_kind: Vec<&Value> = crds
            .iter()
            .filter(|c| str_at(c, &["spec", "names", "kind"]) == Some(kind.as_str()))
            .collect();
        let wanted = match domain {
            Some(domain) => Some(group.qualified(domain)?),
            None => None,
        };
        let matches = |crd: &&&Value| {
            let api_group = str_at(crd, &["spec", "group"]).unwrap_or_default();
            match &wanted {
                Some(wanted) => api_group == wanted,
                None => {
                    api_group == group.as_str()
                        || api_group.starts_with(&format!("{}.", group.as_str()))
                }
            }
        };
        let Some(crd) = of_kind.iter().find(matches) else {
            let found: Vec<String> = crds
                .iter()
                .map(|c| {
                    format!(
                        "`{}` in `{}`",
                        str_at(c, &["spec", "names", "kind"]).unwrap_or("?"),
                        str_at(c, &["spec", "group"]).unwrap_or("?")
                    )
                })
                .collect();
            let asked = match &wanted {
                Some(wanted) => format!("kind `{kind}` in API group `{wanted}`"),
                None => format!("kind `{kind}` in API group `{group}` or `{group}.<domain>`"),
            };
            let help = match of_kind.first() {
                Some(other) => {
                    let api_group = str_at(other, &["spec", "group"]).unwrap_or_default();
                    let (g, d) = api_group.split_once('.').unwrap_or((api_group, ""));
                    if d.is_empty() {
                        format!("its group is `{api_group}`: pass `--group {g}` without `--external-api-domain`")
                    } else {
                        format!(
                            "its group is `{api_group}`: pass `--group {g} --external-api-domain {d}`"
                        )
                    }
                }
                None => "check `--kind` and `--group` against the CRD's `spec.names.kind` and `spec.group`".to_string(),
            };
            bail!(
                "`{shown}` has no CRD of {asked}; it has {}\nhelp: {help}",
                found.join(", ")
            );
        };
        let api_group = str_at(crd, &["spec", "group"])
            .unwrap_or_default()
            .to_string();
        let domain = api_group
            .strip_prefix(group.as_str())
            .and_then(|rest| rest.strip_prefix('.'))
            .unwrap_or_default()
            .to_string();
        let name = str_at(crd, &["metadata", "name"]).unwrap_or_default();
        let served: Vec<&str> = versions(crd)
            .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
            .filter_map(|v| str_at(v, &["name"]))
            .collect();
        if !served.contains(&version.as_str()) {
            bail!(
                "the CRD `{name}` does not serve version `{version}`: it serves {}\nhelp: pass `--version {}`",
                list(&served),
                served.first().copied().unwrap_or("<version>")
            );
        }
        let plural = str_at(crd, &["spec", "names", "plural"])
            .with_context(|| format!("the CRD `{name}` has no `spec.names.plural`"))?
            .to_string();
        let namespaced = match str_at(crd, &["spec", "scope"]) {
            Some("Namespaced") => true,
            Some("Cluster") => false,
            other => bail!(
                "the CRD `{name}` has scope {other:?}: a CRD is `Namespaced` or `Cluster`\nhelp: {HOW_TO_GET}"
            ),
        };
        let crd = Self {
            api_group,
            domain,
            kind: kind.to_string(),
            plural,
            namespaced,
            object: cleaned((*crd).clone()),
        };
        crd.schema(version)?;
        Ok(crd)
    }

    /// The CRD's name, `<plural>.<group>`.
    pub fn name(&self) -> String {
        format!("{}.{}", self.plural, self.api_group)
    }

    /// Where the project keeps it: `config/crd/external/<group>_<plural>.yaml`.
    pub fn file(&self) -> String {
        format!("{CRD_DIR}/{}_{}.yaml", self.api_group, self.plural)
    }

    /// The CRD as the project keeps it: the object without what an API server adds to it, after a
    /// comment saying where it comes from. Reading this file again gives the same text.
    pub fn yaml(&self) -> Result<String> {
        let body = serde_yaml::to_string(&self.object)?;
        Ok(format!(
            "# The CRD of `{}`, another operator's kind: this project has a controller for it,\n\
             # not the type. Its Rust types in src/external/ are generated from this file, and the tests\n\
             # install it; `make manifests` and `make install` leave it out. To follow a new release of the\n\
             # CRD, replace this file with it and regenerate the types (see the head of their file).\n{body}",
            self.name()
        ))
    }

    /// The Rust types of `version` ([`codegen::generate`]).
    pub fn rust_types(&self, version: &Version) -> Result<String> {
        let resource = codegen::Resource {
            group: &self.api_group,
            version: version.as_str(),
            kind: &self.kind,
            plural: &self.plural,
            namespaced: self.namespaced,
        };
        codegen::generate(&resource, self.schema(version)?)
            .with_context(|| format!("cannot generate Rust types from the CRD `{}`", self.name()))
    }

    /// The smallest `spec` the schema of `version` admits: its required fields, recursively, each with
    /// a placeholder of its type (the first value of an enum, its minimum, `"sample"`), for a test
    /// that creates an object of the kind.
    pub fn sample_spec(&self, version: &Version) -> Result<Value> {
        let schema = self.schema(version)?;
        Ok(schema
            .get("properties")
            .and_then(|p| p.get("spec"))
            .map_or_else(|| Value::Object(Default::default()), minimal))
    }

    fn schema(&self, version: &Version) -> Result<&Value> {
        versions(&self.object)
            .find(|v| str_at(v, &["name"]) == Some(version.as_str()))
            .and_then(|v| v.get("schema")?.get("openAPIV3Schema"))
            .with_context(|| {
                format!(
                    "the CRD `{}` has no `schema.openAPIV3Schema` for version `{version}`: there is nothing to generate types from\nhelp: {HOW_TO_GET}",
                    self.name()
                )
            })
    }
}

/// The CustomResourceDefinitions of a YAML text: every document, and the items of `List`s.
/// The smallest value `schema` admits (see [`ExternalCrd::sample_spec`]).
fn minimal(schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return Value::from(1);
    }
    let minimum = || {
        schema
            .get("minimum")
            .and_then(Value::as_i64)
            .map_or(1, |m| m.max(1))
    };
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => {
            let properties = schema.get("properties");
            let fields = schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter_map(|name| {
                    let field = properties?.get(name)?;
                    Some((name.to_string(), minimal(field)))
                });
            Value::Object(fields.collect())
        }
        Some("array") => {
            let count = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = schema.get("items").map_or(Value::Null, minimal);
            Value::Array((0..count).map(|_| item.clone()).collect())
        }
        Some("integer") => Value::from(minimum()),
        Some("number") => Value::from(minimum() as f64),
        Some("boolean") => Value::Bool(false),
        Some("string") => match schema.get("format").and_then(Value::as_str) {
            Some("date-time") => Value::from("2026-01-01T00:00:00Z"),
            _ => Value::from("sample"),
        },
        _ => Value::Object(Default::default()),
    }
}

pub(crate) fn parse(text: &str) -> Result<Vec<Value>> {
    let mut crds = Vec::new();
    let mut others = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value: serde_yaml::Value = serde::Deserialize::deserialize(document)?;
        let value: Value = serde_json::to_value(value)?;
        if value.is_null() {
            continue;
        }
        let items = match value.get("items").and_then(Value::as_array) {
            Some(items) if str_at(&value, &["kind"]) == Some("List") => items.clone(),
            _ => vec![value],
        };
        for item in items {
            match (str_at(&item, &["apiVersion"]), str_at(&item, &["kind"])) {
                (Some("apiextensions.k8s.io/v1"), Some("CustomResourceDefinition")) => {
                    crds.push(item)
                }
                (Some(api), Some("CustomResourceDefinition")) => bail!(
                    "its CRD is `{api}`: rustbuilder reads `apiextensions.k8s.io/v1` CRDs\nhelp: use the operator's current release of the CRD"
                ),
                (_, kind) => others.push(kind.unwrap_or("(none)").to_string()),
            }
        }
    }
    if crds.is_empty() && !others.is_empty() {
        bail!(
            "it holds no CustomResourceDefinition, only kind {}\nhelp: {HOW_TO_GET}",
            list(&others.iter().map(String::as_str).collect::<Vec<_>>())
        );
    }
    Ok(crds)
}

/// The CRD without the fields an API server sets on an installed object, so it can be installed again.
fn cleaned(mut crd: Value) -> Value {
    if let Some(object) = crd.as_object_mut() {
        object.remove("status");
    }
    if let Some(metadata) = crd.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in [
            "creationTimestamp",
            "generation",
            "managedFields",
            "resourceVersion",
            "selfLink",
            "uid",
        ] {
            metadata.remove(key);
        }
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
            if annotations.is_empty() {
                metadata.remove("annotations");
            }
        }
    }
    crd
}

fn versions(crd: &Value) -> impl Iterator<Item = &Value> {
    crd.get("spec")
        .and_then(|s| s.get("versions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(value, |v, key| v.get(key))
        .and_then(Value::as_str)
}

fn list(items: &[&str]) -> String {
    if items.is_empty() {
        return "none".to_string();
    }
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_sample_spec_holds_the_required_fields_only() {
        let crd: ExternalCrd = ExternalCrd {
            api_group: "example.io".into(),
            domain: "io".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            namespaced: true,
            object: serde_json::json!({ "spec": { "versions": [{ "name": "v1", "schema": { "openAPIV3Schema": {
                "type": "object",
                "properties": { "spec": {
                    "type": "object",
                    "required": ["secretName", "issuerRef", "usages", "replicas", "mode"],
                    "properties": {
                        "secretName": { "type": "string" },
                        "issuerRef": { "type": "object", "required": ["name"], "properties": {
                            "name": { "type": "string" }, "kind": { "type": "string" } } },
                        "usages": { "type": "array", "minItems": 1, "items": { "type": "string", "enum": ["server auth", "client auth"] } },
                        "replicas": { "type": "integer", "minimum": 3 },
                        "mode": { "x-kubernetes-int-or-string": true },
                        "duration": { "type": "string" },
                    },
                } },
            } } }] } }),
        };
        assert_eq!(
            crd.sample_spec(&"v1".parse().unwrap()).unwrap(),
            serde_json::json!({
                "secretName": "sample",
                "issuerRef": { "name": "sample" },
                "usages": ["server auth"],
                "replicas": 3,
                "mode": 1,
            })
        );
    }

    use super::*;

    const FIXTURE: &str = include_str!("../../tests/fixtures/certificate-crd.yaml");

    fn read_text(
        text: &str,
        group: &str,
        version: &str,
        domain: Option<&str>,
    ) -> Result<ExternalCrd> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crd.yaml");
        std::fs::write(&path, text).unwrap();
        ExternalCrd::read(
            &path,
            &group.parse().unwrap(),
            &version.parse().unwrap(),
            &"Certificate".parse().unwrap(),
            domain.map(|d| d.parse().unwrap()).as_ref(),
        )
    }

    fn error(result: Result<ExternalCrd>) -> String {
        format!("{:#}", result.unwrap_err())
    }

    #[test]
    fn reads_a_crd_and_infers_its_domain() {
        let crd = read_text(FIXTURE, "cert-manager", "v1", None).unwrap();
        assert_eq!(crd.api_group, "cert-manager.io");
        assert_eq!(crd.domain, "io");
        assert_eq!(
            (crd.plural.as_str(), crd.namespaced),
            ("certificates", true)
        );
        assert_eq!(crd.name(), "certificates.cert-manager.io");
        assert_eq!(
            crd.file(),
            "config/crd/external/cert-manager.io_certificates.yaml"
        );
        // The whole API group as `--group`: no domain.
        assert_eq!(
            read_text(FIXTURE, "cert-manager.io", "v1", None)
                .unwrap()
                .domain,
            ""
        );
        // An explicit domain must make the CRD's group.
        assert_eq!(
            read_text(FIXTURE, "cert-manager", "v1", Some("io"))
                .unwrap()
                .domain,
            "io"
        );
    }

    #[test]
    fn the_copy_leaves_out_what_the_api_server_added_and_reads_back_the_same() {
        let crd = read_text(FIXTURE, "cert-manager", "v1", None).unwrap();
        let yaml = crd.yaml().unwrap();
        for gone in [
            "resourceVersion",
            "uid:",
            "creationTimestamp",
            "generation:",
            "storedVersions",
            "acceptedNames",
        ] {
            assert!(!yaml.contains(gone), "{gone} is still in:\n{yaml}");
        }
        assert!(
            yaml.starts_with("# The CRD of `certificates.cert-manager.io`"),
            "{yaml}"
        );
        let again = read_text(&yaml, "cert-manager", "v1", None).unwrap();
        assert_eq!(again.yaml().unwrap(), yaml);
        assert_eq!(
            again.rust_types(&"v1".parse().unwrap()).unwrap(),
            crd.rust_types(&"v1".parse().unwrap()).unwrap()
        );
    }

    #[test]
    fn finds_its_crd_among_several_documents_and_in_lists() {
        let other = FIXTURE
            .replace("kind: Certificate\n", "kind: Issuer\n")
            .replace("plural: certificates", "plural: issuers");
        let documents = format!("{other}\n---\n{FIXTURE}");
        assert_eq!(
            read_text(&documents, "cert-manager", "v1", None)
                .unwrap()
                .plural,
            "certificates"
        );
        let list = format!(
            "apiVersion: v1\nkind: List\nitems:\n{}",
            FIXTURE
                .lines()
                .filter(|l| !l.starts_with('#'))
                .enumerate()
                .map(|(i, l)| if i == 0 {
                    format!("- {l}\n")
                } else {
                    format!("  {l}\n")
                })
                .collect::<String>()
        );
        assert_eq!(
            read_text(&list, "cert-manager", "v1", None).unwrap().plural,
            "certificates"
        );
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let missing = ExternalCrd::read(
            Path::new("/nonexistent/crd.yaml"),
            &"cert-manager".parse().unwrap(),
            &"v1".parse().unwrap(),
            &"Certificate".parse().unwrap(),
            None,
        );
        let err = error(missing);
        assert!(
            err.starts_with("cannot read the CRD file `/nonexistent/crd.yaml`"),
            "{err}"
        );
        assert!(err.contains("\nhelp: pass the YAML of the CRD"), "{err}");

        let err = error(read_text("a: [unclosed", "cert-manager", "v1", None));
        assert!(err.contains("is not a CRD file"), "{err}");

        let err = error(read_text(
            "apiVersion: v1\nkind: ConfigMap\n",
            "cert-manager",
            "v1",
            None,
        ));
        assert!(
            err.contains("holds no CustomResourceDefinition, only kind `ConfigMap`"),
            "{err}"
        );

        let err = error(read_text("", "cert-manager", "v1", None));
        assert!(err.contains("holds no CustomResourceDefinition"), "{err}");

        let beta = FIXTURE.replace("apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1");
        let err = error(read_text(&beta, "cert-manager", "v1", None));
        assert!(
            err.contains("reads `apiextensions.k8s.io/v1` CRDs"),
            "{err}"
        );
    }

    #[test]
    fn group_version_and_kind_must_be_the_crds() {
        let err = error(read_text(FIXTURE, "certmanager", "v1", None));
        assert!(err.contains("has no CRD of kind `Certificate` in API group `certmanager` or `certmanager.<domain>`; it has `Certificate` in `cert-manager.io`"), "{err}");
        assert!(err.contains("\nhelp: its group is `cert-manager.io`: pass `--group cert-manager --external-api-domain io`"), "{err}");

        let err = error(read_text(
            FIXTURE,
            "cert-manager",
            "v1",
            Some("example.com"),
        ));
        assert!(
            err.contains("in API group `cert-manager.example.com`"),
            "{err}"
        );

        let err = error(read_text(FIXTURE, "cert-manager", "v1beta1", None));
        assert!(
            err.contains("does not serve version `v1beta1`: it serves `v1`"),
            "{err}"
        );
        assert!(err.contains("\nhelp: pass `--version v1`"), "{err}");

        let unserved = FIXTURE.replace("served: true", "served: false");
        let err = error(read_text(&unserved, "cert-manager", "v1", None));
        assert!(err.contains("it serves none"), "{err}");

        let other_kind = FIXTURE.replace("kind: Certificate\n", "kind: Issuer\n");
        let err = error(read_text(&other_kind, "cert-manager", "v1", None));
        assert!(
            err.contains("it has `Issuer` in `cert-manager.io`"),
            "{err}"
        );
        assert!(
            err.contains("\nhelp: check `--kind` and `--group`"),
            "{err}"
        );
    }
}
