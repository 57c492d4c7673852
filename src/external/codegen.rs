//! Rust types from a CRD's OpenAPI v3 schema, in the shape kube's `CustomResource` derive expects.
//!
//! The spec becomes `<Kind>Spec` with `#[derive(CustomResource)]`, the status `<Kind>Status`; every
//! object with properties below them becomes a struct named after its path (`CertificateSpecPrivateKey`),
//! string enums become Rust enums, `additionalProperties` a `BTreeMap`, int-or-string k8s-openapi's
//! `IntOrString`, and anything the schema leaves open (`x-kubernetes-preserve-unknown-fields`, no type)
//! a `serde_json::Value`. Fields the schema does not require are `Option`s. Names follow Rust's
//! conventions, with a serde rename wherever the JSON name differs. The text is not formatted here:
//! rustfmt lays it out when the plan is written.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use anyhow::{Result, bail};
use heck::{ToPascalCase, ToSnakeCase};
use serde_json::Value;

/// What the `#[kube(...)]` attribute says about the resource.
#[derive(Debug, Clone)]
pub struct Resource<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    pub plural: &'a str,
    pub namespaced: bool,
}

/// The Rust items (imports, then types) for `schema`, the `openAPIV3Schema` of one version of a CRD.
pub fn generate(resource: &Resource<'_>, schema: &Value) -> Result<String> {
    let properties = schema.get("properties").and_then(Value::as_object);
    let Some(spec) = properties.and_then(|p| p.get("spec")) else {
        bail!(
            "the schema of `{}` has no `spec`: kube's `CustomResource` derive, which the generated types use, needs one",
            resource.kind
        );
    };
    let status = properties.and_then(|p| p.get("status"));
    let mut generator = Generator {
        kind: resource.kind.to_string(),
        ..Generator::default()
    };
    let spec_name = format!("{}Spec", resource.kind);
    let status_name = format!("{}Status", resource.kind);
    generator.names.insert(spec_name.clone());
    generator.names.insert(status_name.clone());
    let root = Root::Spec {
        resource,
        status: status.is_some().then_some(status_name.as_str()),
    };
    // Each type is followed by the types it holds, depth first.
    let mut items = vec![generator.object(&spec_name, spec, Some(root), "spec")?];
    if let Some(status) = status {
        items.push(generator.object(&status_name, status, Some(Root::Status), "status")?);
    }
    let mut imports = vec![
        "use kube::CustomResource;",
        "use serde::{Deserialize, Serialize};",
    ];
    if generator.uses_map {
        imports.push("use std::collections::BTreeMap;");
    }
    if generator.uses_int_or_string {
        imports.push("use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;");
    }
    imports.sort_unstable();
    let mut out = imports.join("\n");
    out.push('\n');
    for item in items {
        out.push('\n');
        out.push_str(&item);
    }
    Ok(out)
}

/// Which top-level type an object is.
enum Root<'a, 'b> {
    /// The spec: the struct kube's derive turns into the resource, with its status type if any.
    Spec {
        resource: &'a Resource<'b>,
        status: Option<&'a str>,
    },
    Status,
}

#[derive(Default)]
struct Generator {
    /// The kind, for the doc comments of nested types.
    kind: String,
    /// Type names already taken.
    names: BTreeSet<String>,
    /// The nested structs and enums of the struct being generated, in the order they were met.
    items: Vec<String>,
    /// Whether a `Default` derive is possible, by struct name.
    defaultable: BTreeMap<String, bool>,
    uses_map: bool,
    uses_int_or_string: bool,
}

impl Generator {
    /// A free type name based on `wanted`.
    fn name(&mut self, wanted: &str) -> String {
        let mut name = wanted.to_string();
        let mut n = 2;
        while self.names.contains(&name) {
            name = format!("{wanted}{n}");
            n += 1;
        }
        self.names.insert(name.clone());
        name
    }

    /// The struct `name` for the object schema `schema`. Nested types are pushed to `self.items`;
    /// the struct itself is returned (roots) or pushed too (nested, see [`Generator::field_type`]).
    fn object(
        &mut self,
        name: &str,
        schema: &Value,
        root: Option<Root<'_, '_>>,
        path: &str,
    ) -> Result<String> {
        let properties = schema
            .get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let required: BTreeSet<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        // Nested types are emitted after this one: collect them separately, then splice.
        let outer_items = std::mem::take(&mut self.items);
        let mut fields = String::new();
        let mut defaultable = true;
        let mut field_names = BTreeSet::new();
        for (json_name, field) in &properties {
            let ident = field_ident(json_name, &mut field_names);
            let optional = !required.contains(json_name.as_str())
                || field.get("nullable").and_then(Value::as_bool) == Some(true);
            let nested = format!("{name}{}", type_word(json_name));
            let (ty, ty_default) =
                self.field_type(&nested, field, &format!("{path}.{json_name}"))?;
            defaultable &= optional || ty_default;
            doc(&mut fields, field.get("description"));
            let bare = ident.strip_prefix("r#").unwrap_or(&ident);
            let mut serde = Vec::new();
            if bare != json_name {
                serde.push(format!("rename = {}", quoted(json_name)));
            }
            if optional {
                serde.push("default".to_string());
                serde.push("skip_serializing_if = \"Option::is_none\"".to_string());
            }
            if !serde.is_empty() {
                let _ = writeln!(fields, "#[serde({})]", serde.join(", "));
            }
            let ty = if optional {
                format!("Option<{ty}>")
            } else {
                ty
            };
            let _ = writeln!(fields, "pub {ident}: {ty},");
        }
        let nested_items = std::mem::replace(&mut self.items, outer_items);
        self.defaultable.insert(name.to_string(), defaultable);

        let mut out = String::new();
        // A nested type says where it is; what it means is on the field that holds it.
        match root {
            Some(_) => doc(&mut out, schema.get("description")),
            None => self.location(&mut out, path),
        }
        let mut derives = vec![];
        if matches!(root, Some(Root::Spec { .. })) {
            derives.push("CustomResource");
        }
        derives.extend(["Clone", "Debug"]);
        if defaultable {
            derives.push("Default");
        }
        derives.extend(["PartialEq", "Serialize", "Deserialize"]);
        let _ = writeln!(out, "#[derive({})]", derives.join(", "));
        if let Some(Root::Spec { resource, status }) = &root {
            let _ = write!(
                out,
                "#[kube(group = {}, version = {}, kind = {}, plural = {}",
                quoted(resource.group),
                quoted(resource.version),
                quoted(resource.kind),
                quoted(resource.plural)
            );
            if resource.namespaced {
                out.push_str(", namespaced");
            }
            if let Some(status) = status {
                let _ = write!(out, ", status = {}", quoted(status));
            }
            out.push_str(")]\n");
            // The CRD is installed from its YAML; the Rust types describe it, they do not define it.
            out.push_str("#[kube(schema = \"disabled\")]\n");
        }
        let _ = writeln!(out, "pub struct {name} {{\n{fields}}}");
        // The struct, then the types it holds, in the order of its fields.
        let mut emitted = out;
        for item in nested_items {
            emitted.push('\n');
            emitted.push_str(&item);
        }
        if root.is_none() {
            self.items.push(emitted);
            return Ok(String::new());
        }
        Ok(emitted)
    }

    /// The Rust type of a property, and whether it has a `Default`. `name` is the type name to use if
    /// the property needs a struct or enum of its own.
    fn field_type(&mut self, name: &str, schema: &Value, path: &str) -> Result<(String, bool)> {
        let flag = |key: &str| schema.get(key).and_then(Value::as_bool) == Some(true);
        if flag("x-kubernetes-int-or-string") {
            self.uses_int_or_string = true;
            return Ok(("IntOrString".into(), true));
        }
        let has_properties = schema
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| !p.is_empty());
        let ty = schema.get("type").and_then(Value::as_str);
        match ty {
            Some("string") => match string_enum(schema) {
                Some(values) => Ok((self.enumeration(name, &values, path), false)),
                None => Ok(("String".into(), true)),
            },
            Some("integer") => {
                let int = match schema.get("format").and_then(Value::as_str) {
                    Some("int32") => "i32",
                    _ => "i64",
                };
                Ok((int.into(), true))
            }
            Some("number") => Ok(("f64".into(), true)),
            Some("boolean") => Ok(("bool".into(), true)),
            Some("array") => {
                let items = schema.get("items").unwrap_or(&Value::Null);
                let (item, _) = self.field_type(name, items, &format!("{path}[]"))?;
                Ok((format!("Vec<{item}>"), true))
            }
            Some("object") | None if has_properties => {
                let name = self.name(name);
                self.object(&name, schema, None, path)?;
                let default = self.defaultable.get(&name).copied().unwrap_or(false);
                Ok((name, default))
            }
            Some("object") => match schema.get("additionalProperties") {
                Some(values @ Value::Object(_)) => {
                    self.uses_map = true;
                    let (value, _) = self.field_type(name, values, &format!("{path}.*"))?;
                    Ok((format!("BTreeMap<String, {value}>"), true))
                }
                _ if flag("x-kubernetes-preserve-unknown-fields")
                    || flag("x-kubernetes-embedded-resource") =>
                {
                    Ok(("serde_json::Value".into(), true))
                }
                _ => {
                    // An object the schema says nothing more about: any keys, any values.
                    self.uses_map = true;
                    Ok(("BTreeMap<String, serde_json::Value>".into(), true))
                }
            },
            // No type (anyOf/oneOf alone, or preserve-unknown-fields): anything JSON.
            None => Ok(("serde_json::Value".into(), true)),
            Some(other) => bail!("unsupported schema type `{other}` (at `{name}`)"),
        }
    }

    /// The doc comment of a nested type: where it is in the resource.
    fn location(&self, out: &mut String, path: &str) {
        let _ = writeln!(out, "/// `{path}` of a {}.", self.kind);
    }

    /// A Rust enum for a string enum; returns its name.
    fn enumeration(&mut self, name: &str, values: &[String], path: &str) -> String {
        let name = self.name(name);
        let mut taken = BTreeSet::new();
        let mut variants = String::new();
        let mut idents = Vec::new();
        for value in values {
            let mut ident = value.to_pascal_case();
            if ident.is_empty() {
                ident = "Empty".into();
            }
            if ident.starts_with(|c: char| c.is_ascii_digit()) {
                ident = format!("V{ident}");
            }
            let base = ident.clone();
            let mut n = 2;
            while !taken.insert(ident.clone()) {
                ident = format!("{base}{n}");
                n += 1;
            }
            if ident != *value {
                let _ = writeln!(variants, "#[serde(rename = {})]", quoted(value));
            }
            let _ = writeln!(variants, "{ident},");
            idents.push(ident);
        }
        let mut out = String::new();
        self.location(&mut out, path);
        out.push_str("#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]\n");
        if trips_enum_variant_names(&name, &idents) {
            out.push_str("// The variants are the values the CRD allows.\n");
            out.push_str("#[allow(clippy::enum_variant_names)]\n");
        }
        let _ = writeln!(out, "pub enum {name} {{\n{variants}}}");
        self.items.push(out);
        name
    }
}

/// The values of a string enum, if the schema restricts the string to some.
fn string_enum(schema: &Value) -> Option<Vec<String>> {
    let values = schema.get("enum")?.as_array()?;
    let strings: Vec<String> = values
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    (!strings.is_empty() && strings.len() == values.len()).then_some(strings)
}

/// Whether clippy's `enum_variant_names` would object to these variants: one that starts or ends with
/// the enum's name, or three or more sharing a first or last word.
fn trips_enum_variant_names(name: &str, variants: &[String]) -> bool {
    fn words(ident: &str) -> Vec<String> {
        ident
            .to_snake_case()
            .split('_')
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect()
    }
    let lower = name.to_lowercase();
    if variants.iter().any(|v| {
        let v = v.to_lowercase();
        v.len() > lower.len() && (v.starts_with(&lower) || v.ends_with(&lower))
    }) {
        return true;
    }
    if variants.len() < 3 {
        return false;
    }
    let split: Vec<Vec<String>> = variants.iter().map(|v| words(v)).collect();
    let shared = |pick: fn(&Vec<String>) -> Option<&String>| {
        let first = split.first().and_then(pick);
        first.is_some() && split.iter().all(|w| w.len() > 1 && pick(w) == first)
    };
    shared(|w| w.first()) || shared(|w| w.last())
}

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "box", "break", "const", "continue", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "macro", "match", "mod",
    "move", "mut", "priv", "pub", "ref", "return", "static", "struct", "trait", "true", "try",
    "type", "typeof", "unsafe", "use", "where", "while", "yield", "abstract", "become", "do",
    "final", "override", "unsized", "virtual",
];

/// The Rust field name for a JSON property: snake case, a raw identifier for keywords, unique.
fn field_ident(json_name: &str, taken: &mut BTreeSet<String>) -> String {
    let mut ident = json_name.to_snake_case();
    if ident.is_empty() || ident.starts_with(|c: char| c.is_ascii_digit()) {
        ident = format!("field_{ident}");
    }
    if matches!(ident.as_str(), "self" | "crate" | "super" | "_") {
        ident.push('_');
    }
    let base = ident.clone();
    let mut n = 2;
    while !taken.insert(ident.clone()) {
        ident = format!("{base}_{n}");
        n += 1;
    }
    if KEYWORDS.contains(&ident.as_str()) {
        ident = format!("r#{ident}");
    }
    ident
}

/// A property name as the part of a type name: `privateKey` → `PrivateKey`.
fn type_word(json_name: &str) -> String {
    let word = json_name.to_pascal_case();
    if word.is_empty() {
        "Field".into()
    } else if word.starts_with(|c: char| c.is_ascii_digit()) {
        format!("F{word}")
    } else {
        word
    }
}

/// A Rust string literal.
fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// Doc comment lines for a schema description. Markdown in descriptions stays readable without
/// surprising rustdoc or clippy: lines lose their indentation (an indented block would be a doctest),
/// lines continuing a list item are indented under it, and code fences are marked as text.
fn doc(out: &mut String, description: Option<&Value>) {
    let Some(text) = description.and_then(Value::as_str) else {
        return;
    };
    let text = text.trim();
    if text.is_empty() {
        return;
    }
    let mut in_fence = false;
    let mut list_indent: Option<usize> = None;
    for raw in text.lines() {
        let line = raw.trim_end();
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            let marker = if !in_fence && trimmed == "```" {
                "```text"
            } else {
                trimmed
            };
            in_fence = !in_fence;
            let _ = writeln!(out, "/// {marker}");
            continue;
        }
        if in_fence {
            let _ = writeln!(out, "/// {line}");
            continue;
        }
        if trimmed.is_empty() {
            list_indent = None;
            let _ = writeln!(out, "///");
            continue;
        }
        let text = if let Some(width) = list_marker(trimmed) {
            list_indent = Some(width);
            trimmed.to_string()
        } else if let Some(width) = list_indent {
            format!("{}{trimmed}", " ".repeat(width))
        } else {
            trimmed.to_string()
        };
        let _ = writeln!(out, "/// {text}");
    }
    if in_fence {
        let _ = writeln!(out, "/// ```");
    }
}

/// The width of a Markdown list marker at the start of `line` (`- `, `* `, `+ `, `1. `), if any.
fn list_marker(line: &str) -> Option<usize> {
    if ["- ", "* ", "+ "].iter().any(|m| line.starts_with(m)) {
        return Some(2);
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    (digits > 0 && line[digits..].starts_with(". ")).then_some(digits + 2)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn resource(namespaced: bool) -> Resource<'static> {
        Resource {
            group: "example.io",
            version: "v1",
            kind: "Widget",
            plural: "widgets",
            namespaced,
        }
    }

    /// The generated text, checked to be Rust rustfmt can parse, and formatted like a project's file.
    fn generated(schema: serde_json::Value) -> String {
        let text = generate(&resource(true), &schema).unwrap();
        let (outcome, errors) = crate::rustfmt::format(&["widget.rs".into()], &[text], None);
        let crate::rustfmt::Outcome::Formatted(mut texts) = outcome else {
            panic!("{}", crate::rustfmt::MISSING);
        };
        assert!(
            errors.is_empty(),
            "the generated Rust does not parse:\n{errors}"
        );
        texts.remove(0)
    }

    fn spec(properties: serde_json::Value, required: &[&str]) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "spec": { "type": "object", "required": required, "properties": properties }
            }
        })
    }

    #[test]
    fn required_fields_are_plain_and_others_options() {
        let out = generated(spec(
            json!({
                "replicas": { "type": "integer", "format": "int32" },
                "paused": { "type": "boolean" },
                "ratio": { "type": "number" },
                "owner": { "type": "string", "nullable": true },
                "name": { "type": "string", "description": "The name." },
                "generation": { "type": "integer" },
            }),
            &["name", "owner", "generation"],
        ));
        assert!(
            out.contains("    /// The name.\n    pub name: String,"),
            "{out}"
        );
        assert!(out.contains("pub generation: i64,"), "{out}");
        // Nullable: `null` must deserialize, even though the field is required.
        assert!(out.contains("pub owner: Option<String>,"), "{out}");
        assert!(
            out.contains(
                "#[serde(default, skip_serializing_if = \"Option::is_none\")]\n    pub replicas: Option<i32>,"
            ),
            "{out}"
        );
        assert!(out.contains("pub paused: Option<bool>,"), "{out}");
        assert!(out.contains("pub ratio: Option<f64>,"), "{out}");
        // No status in the schema: no status type.
        assert!(!out.contains("status"), "{out}");
        assert!(
            out.contains("#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]"),
            "{out}"
        );
        assert!(
            out.contains("    namespaced\n)]") || out.contains(", namespaced)]"),
            "{out}"
        );
        assert!(out.contains("#[kube(schema = \"disabled\")]"), "{out}");
    }

    #[test]
    fn nested_objects_and_arrays_become_structs_named_by_their_path() {
        let out = generated(spec(
            json!({
                "issuerRef": {
                    "type": "object",
                    "description": "The issuer.",
                    "required": ["name"],
                    "properties": { "name": { "type": "string" }, "kind": { "type": "string" } }
                },
                "ports": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": { "containerPort": { "type": "integer", "format": "int32" } }
                    }
                },
                "hosts": { "type": "array", "items": { "type": "string" } },
            }),
            &["issuerRef"],
        ));
        assert!(out.contains("    /// The issuer.\n    #[serde(rename = \"issuerRef\")]\n    pub issuer_ref: WidgetSpecIssuerRef,"), "{out}");
        assert!(out.contains("/// `spec.issuerRef` of a Widget.\n#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]\npub struct WidgetSpecIssuerRef {"), "{out}");
        assert!(
            out.contains("pub ports: Option<Vec<WidgetSpecPorts>>,"),
            "{out}"
        );
        assert!(out.contains("/// `spec.ports[]` of a Widget."), "{out}");
        assert!(out.contains("#[serde(rename = \"containerPort\", default, skip_serializing_if = \"Option::is_none\")]") || out.contains("rename = \"containerPort\","), "{out}");
        assert!(out.contains("pub container_port: Option<i32>,"), "{out}");
        assert!(out.contains("pub hosts: Option<Vec<String>>,"), "{out}");
        // Depth first: each type right after the one that holds it.
        let order: Vec<usize> = [
            "pub struct WidgetSpec ",
            "pub struct WidgetSpecIssuerRef",
            "pub struct WidgetSpecPorts",
        ]
        .iter()
        .map(|s| out.find(s).unwrap_or_else(|| panic!("{s} missing:\n{out}")))
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{out}");
    }

    #[test]
    fn maps_come_from_additional_properties() {
        let out = generated(spec(
            json!({
                "labels": { "type": "object", "additionalProperties": { "type": "string" } },
                "limits": {
                    "type": "object",
                    "additionalProperties": { "x-kubernetes-int-or-string": true, "anyOf": [{ "type": "integer" }, { "type": "string" }] }
                },
                "backends": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "properties": { "weight": { "type": "integer" } }
                    }
                },
                "anything": { "type": "object" },
            }),
            &["labels"],
        ));
        assert!(out.contains("use std::collections::BTreeMap;"), "{out}");
        assert!(
            out.contains("pub labels: BTreeMap<String, String>,"),
            "{out}"
        );
        assert!(
            out.contains("pub limits: Option<BTreeMap<String, IntOrString>>,"),
            "{out}"
        );
        assert!(
            out.contains("pub backends: Option<BTreeMap<String, WidgetSpecBackends>>,"),
            "{out}"
        );
        assert!(out.contains("/// `spec.backends.*` of a Widget."), "{out}");
        assert!(
            out.contains("pub anything: Option<BTreeMap<String, serde_json::Value>>,"),
            "{out}"
        );
    }

    #[test]
    fn int_or_string_and_open_fields() {
        let out = generated(spec(
            json!({
                "port": { "x-kubernetes-int-or-string": true, "anyOf": [{ "type": "integer" }, { "type": "string" }] },
                "config": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                "template": { "type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true },
                "raw": { "x-kubernetes-preserve-unknown-fields": true },
            }),
            &["port"],
        ));
        assert!(
            out.contains("use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;"),
            "{out}"
        );
        assert!(out.contains("pub port: IntOrString,"), "{out}");
        assert!(
            out.contains("pub config: Option<serde_json::Value>,"),
            "{out}"
        );
        assert!(
            out.contains("pub template: Option<serde_json::Value>,"),
            "{out}"
        );
        assert!(out.contains("pub raw: Option<serde_json::Value>,"), "{out}");
        assert!(!out.contains("BTreeMap"), "{out}");
    }

    #[test]
    fn string_enums_become_rust_enums() {
        let out = generated(spec(
            json!({
                "policy": { "type": "string", "enum": ["Always", "IfNotPresent", "Never"] },
                "usages": { "type": "array", "items": { "type": "string", "enum": ["server auth", "client auth", "", "1x"] } },
                "action": { "type": "string", "enum": ["audit", "enforce", "Audit", "Enforce"] },
                "size": { "type": "integer", "enum": [1, 2, 3] },
            }),
            &["policy"],
        ));
        assert!(out.contains("pub policy: WidgetSpecPolicy,"), "{out}");
        assert!(
            out.contains(
                "pub enum WidgetSpecPolicy {\n    Always,\n    IfNotPresent,\n    Never,\n}"
            ),
            "{out}"
        );
        assert!(
            out.contains("    #[serde(rename = \"server auth\")]\n    ServerAuth,"),
            "{out}"
        );
        assert!(
            out.contains("    #[serde(rename = \"\")]\n    Empty,"),
            "{out}"
        );
        assert!(
            out.contains("    #[serde(rename = \"1x\")]\n    V1x,"),
            "{out}"
        );
        // Values that differ only in case are distinct variants.
        assert!(
            out.contains("    #[serde(rename = \"audit\")]\n    Audit,"),
            "{out}"
        );
        assert!(
            out.contains("    #[serde(rename = \"Audit\")]\n    Audit2,"),
            "{out}"
        );
        // A required enum has no default, so the spec derives none.
        assert!(
            !out.contains("#[derive(CustomResource, Clone, Debug, Default"),
            "{out}"
        );
        // Integer enums stay integers.
        assert!(out.contains("pub size: Option<i64>,"), "{out}");
    }

    #[test]
    fn variants_clippy_would_object_to_are_allowed_with_a_reason() {
        assert!(trips_enum_variant_names(
            "Mode",
            &["ModeA".into(), "B".into()]
        ));
        assert!(trips_enum_variant_names(
            "Phase",
            &[
                "PendingState".into(),
                "RunningState".into(),
                "DoneState".into()
            ]
        ));
        assert!(!trips_enum_variant_names(
            "Phase",
            &["Pending".into(), "Running".into(), "Done".into()]
        ));
        let out = generated(spec(
            json!({ "phase": { "type": "string", "enum": ["PhasePending", "PhaseRunning", "PhaseDone"] } }),
            &[],
        ));
        assert!(
            out.contains("#[allow(clippy::enum_variant_names)]\npub enum WidgetSpecPhase"),
            "{out}"
        );
    }

    #[test]
    fn names_are_rust_names_with_renames() {
        let out = generated(spec(
            json!({
                "type": { "type": "string" },
                "self": { "type": "string" },
                "x-forwarded-for": { "type": "string" },
                "3d": { "type": "boolean" },
                "fooBar": { "type": "string" },
                "foo_bar": { "type": "string" },
                "URL": { "type": "string" },
            }),
            &[],
        ));
        assert!(out.contains("pub r#type: Option<String>,"), "{out}");
        assert!(out.contains("#[serde(rename = \"self\", default, skip_serializing_if = \"Option::is_none\")]\n    pub self_: Option<String>,"), "{out}");
        assert!(out.contains("rename = \"x-forwarded-for\""), "{out}");
        assert!(
            out.contains("pub x_forwarded_for: Option<String>,"),
            "{out}"
        );
        assert!(out.contains("pub field_3d: Option<bool>,"), "{out}");
        assert!(out.contains("pub foo_bar: Option<String>,"), "{out}");
        assert!(out.contains("pub foo_bar_2: Option<String>,"), "{out}");
        assert!(out.contains("pub url: Option<String>,"), "{out}");
    }

    #[test]
    fn a_status_becomes_the_status_type() {
        let mut schema = spec(json!({ "size": { "type": "integer" } }), &[]);
        schema["properties"]["status"] = json!({
            "type": "object",
            "properties": {
                "conditions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["type", "status"],
                        "properties": {
                            "type": { "type": "string" },
                            "status": { "type": "string", "enum": ["True", "False", "Unknown"] }
                        }
                    }
                }
            }
        });
        let out = generated(schema);
        assert!(out.contains("status = \"WidgetStatus\""), "{out}");
        assert!(out.contains("pub struct WidgetStatus {"), "{out}");
        assert!(
            out.contains("pub conditions: Option<Vec<WidgetStatusConditions>>,"),
            "{out}"
        );
        assert!(
            out.contains("pub status: WidgetStatusConditionsStatus,"),
            "{out}"
        );
        assert!(
            out.contains("/// `status.conditions[].status` of a Widget."),
            "{out}"
        );
    }

    #[test]
    fn cluster_scoped_kinds_are_not_namespaced() {
        let text = generate(&resource(false), &spec(json!({}), &[])).unwrap();
        assert!(!text.contains("namespaced"), "{text}");
        assert!(text.contains("pub struct WidgetSpec {\n}"), "{text}");
    }

    #[test]
    fn a_schema_without_spec_is_refused() {
        let err = generate(
            &resource(true),
            &json!({ "type": "object", "properties": { "data": { "type": "object" } } }),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("has no `spec`"), "{err}");
    }

    #[test]
    fn descriptions_become_doc_comments_rustdoc_and_clippy_accept() {
        let mut out = String::new();
        doc(
            &mut out,
            Some(&json!(
                "Usages.\n  If unset, defaults to:\n- digital signature\nand more of it\n\n    indented\n```\nkubectl get x\n```"
            )),
        );
        assert_eq!(
            out,
            "/// Usages.\n/// If unset, defaults to:\n/// - digital signature\n///   and more of it\n///\n/// indented\n/// ```text\n/// kubectl get x\n/// ```\n"
        );
        let mut out = String::new();
        doc(
            &mut out,
            Some(&json!("10. tenth\nstill tenth\n```yaml\na: 1")),
        );
        assert_eq!(
            out,
            "/// 10. tenth\n///     still tenth\n/// ```yaml\n/// a: 1\n/// ```\n"
        );
        let mut out = String::new();
        doc(&mut out, Some(&json!("  ")));
        assert_eq!(out, "");
    }
}
