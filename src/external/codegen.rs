//! Rust types from a CRD's OpenAPI v3 schema, in the shape kube's `CustomResource` derive expects.
//!
//! The spec becomes `<Kind>Spec` with `#[derive(CustomResource)]`, the status `<Kind>Status`; every
//! object with properties below them becomes a struct named after its path (`CertificateSpecPrivateKey`),
//! string enums become Rust enums, `additionalProperties` a `BTreeMap`, int-or-string k8s-openapi's
//! `IntOrString`, and anything the schema leaves open (`x-kubernetes-preserve-unknown-fields`, no type)
//! a `serde_json::Value`. Fields the schema does not require are `Option`s. Names follow Rust's
//! conventions, with a serde rename wherever the JSON name differs. The text is not formatted here:
//! rustfmt lays it out when the plan is written.
//!
//! Another operator's types keep what its schema lets through, so that an object read and written
//! back loses nothing: a struct whose schema says `x-kubernetes-preserve-unknown-fields` keeps the
//! keys it does not list in a flattened map, and a `nullable` field keeps its `null` (see
//! `UNKNOWN_FIELDS` and `EXPLICIT_NULL` below). An own kind's types stay as its Go types were: they
//! define the CRD, and Go's structs keep neither.

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
    Ok(generate_types(resource, None, schema)?.rust)
}

/// What a project's own kind adds to [`Resource`]. Its CRD is written from the Rust types (`make
/// manifests`), so they carry all the schema says: validation as schemars and `x_kube` attributes, the
/// rest of the CRD as `#[kube(...)]` arguments.
#[derive(Debug, Clone, Default)]
pub struct Owned {
    /// `#[kube(...)]` arguments after group, version, kind, plural, namespaced and status, e.g.
    /// `shortname = "cj"`.
    pub kube_args: Vec<String>,
    /// The file next to the Rust file that holds the schemas kept as they are ([`OwnedTypes::kept`]),
    /// e.g. `cronjob.schemas.json`.
    pub kept_file: String,
}

/// The Rust types of an own kind.
#[derive(Debug, Clone)]
pub struct OwnedTypes {
    /// The Rust items, unformatted.
    pub rust: String,
    /// The schemas of the fields whose Rust type cannot say all of it (a Kubernetes type from
    /// k8s-openapi, whose schema lacks controller-gen's list types and validation; a list of scalars
    /// with a constraint per item schemars cannot put there), by path, e.g. `spec.jobTemplate`. Empty
    /// when there are none.
    pub kept: BTreeMap<String, Value>,
    /// What of the schema the types cannot express, one line each: keywords of the root schema other
    /// than its description and rules.
    pub gaps: Vec<String>,
}

/// The Rust types of an own kind from `schema`, its `openAPIV3Schema` at one version.
pub fn generate_owned(
    resource: &Resource<'_>,
    owned: &Owned,
    schema: &Value,
) -> Result<OwnedTypes> {
    generate_types(resource, Some(owned), schema)
}

fn generate_types(
    resource: &Resource<'_>,
    owned: Option<&Owned>,
    schema: &Value,
) -> Result<OwnedTypes> {
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
        owned: owned.cloned(),
        ..Generator::default()
    };
    let spec_name = format!("{}Spec", resource.kind);
    let status_name = format!("{}Status", resource.kind);
    generator.names.insert(spec_name.clone());
    generator.names.insert(status_name.clone());
    let mut root_args = Vec::new();
    if owned.is_some() {
        root_args = generator.root_args(schema);
    }
    let root = Root::Spec {
        resource,
        status: status.is_some().then_some(status_name.as_str()),
        root_args,
    };
    // Each type is followed by the types it holds, depth first.
    let mut items = vec![generator.object(&spec_name, spec, Some(root), "spec")?];
    if let Some(status) = status {
        items.push(generator.object(&status_name, status, Some(Root::Status), "status")?);
    }
    let mut imports = vec!["use serde::{Deserialize, Serialize};"];
    if owned.is_some() {
        imports.push("use kube::{CustomResource, KubeSchema};");
        if generator.uses_enum {
            imports.push("use schemars::JsonSchema;");
        }
    } else {
        imports.push("use kube::CustomResource;");
    }
    if generator.uses_map || generator.uses_unknown_fields {
        imports.push("use std::collections::BTreeMap;");
    }
    if generator.uses_int_or_string {
        imports.push("use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;");
    }
    let k8s: BTreeSet<&str> = generator.uses_k8s.iter().map(String::as_str).collect();
    let k8s_imports: Vec<String> = k8s
        .iter()
        .map(|path| format!("use k8s_openapi::{path};"))
        .collect();
    imports.extend(k8s_imports.iter().map(String::as_str));
    imports.sort_unstable();
    let mut out = imports.join("\n");
    out.push('\n');
    for item in items {
        out.push('\n');
        out.push_str(&item);
    }
    if generator.uses_explicit_null {
        out.push('\n');
        out.push_str(EXPLICIT_NULL_FN);
    }
    if let Some(owned) = owned
        && !generator.kept.is_empty()
    {
        for function in &generator.kept_fns {
            out.push('\n');
            out.push_str(function);
        }
        let _ = write!(
            out,
            "\n/// The schema at `path` in `{file}`, as the CRD the project came from had it.\n\
             fn kept_schema(path: &str) -> schemars::Schema {{\n\
             let kept: serde_json::Value = serde_json::from_str(include_str!({file:?})).expect(\"{file} is JSON\");\n\
             serde_json::from_value(kept[path].clone()).expect(\"{file} holds JSON schemas\")\n}}\n",
            file = owned.kept_file
        );
    }
    Ok(OwnedTypes {
        rust: out,
        kept: generator.kept,
        gaps: generator.gaps,
    })
}

/// The field of another operator's struct that keeps the keys its schema does not list, when the
/// schema says `x-kubernetes-preserve-unknown-fields: true` beside `properties` (ECK's
/// `nodeSets[].podTemplate`: a whole Pod template, of which the CRD lists a few fields). serde's
/// `flatten` gathers into it every key no other field takes, and writes them back beside the others.
/// A flattened `BTreeMap` is `Default` and `PartialEq`, so the struct derives what the others do.
const UNKNOWN_FIELDS: &str = "unknown_fields";

/// The doc comment of the [`UNKNOWN_FIELDS`] field.
const UNKNOWN_FIELDS_DOC: &str = "/// The keys the CRD does not list, kept as they are (the schema has\n\
/// `x-kubernetes-preserve-unknown-fields`): what is read here is written back.\n";

/// The function that reads an optional `nullable` field of another operator's type,
/// `Option<Option<T>>`: `None` is an absent field, `Some(None)` an explicit `null`, `Some(Some(v))` a
/// value. serde alone reads `null` and absent both as `None` (and skips `None` when writing), so a
/// `null` the other operator reads as a value of its own (a limit of `null`: "no limit") would be lost
/// on a write.
/// Writing needs nothing more: `skip_serializing_if = "Option::is_none"` leaves an absent field out
/// and `Some(None)` is written `null`. This is serde_with's `rust::double_option` in a few lines, so
/// a generated project needs no dependency for it (it has none on serde_with).
const EXPLICIT_NULL: &str = "explicit_null";

/// The [`EXPLICIT_NULL`] function as a generated file has it.
const EXPLICIT_NULL_FN: &str = "/// Reads an optional `nullable` field: `Some(None)` is an explicit `null`, `None` (serde's\n\
/// `default`) an absent field. Plain `Option` reads both as `None`, and a write drops the `null`.\n\
fn explicit_null<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>\n\
where\n\
    D: serde::Deserializer<'de>,\n\
    T: Deserialize<'de>,\n\
{\n\
    Option::<T>::deserialize(deserializer).map(Some)\n\
}\n";

/// Whether the object schema of a struct keeps keys it does not list. A nested object has
/// `properties` beside the flag (without them it is a `serde_json::Value`, which keeps all); a spec or
/// status may have none (the placeholder CRD of an external kind whose CRD was not at hand).
fn keeps_unknown_fields(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

/// Which top-level type an object is.
enum Root<'a, 'b> {
    /// The spec: the struct kube's derive turns into the resource, with its status type if any.
    Spec {
        resource: &'a Resource<'b>,
        status: Option<&'a str>,
        /// More `#[kube(...)]` arguments, for an own kind (the root schema's description and rules).
        root_args: Vec<String>,
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
    /// Whether a struct keeps the keys its schema does not list ([`UNKNOWN_FIELDS`]).
    uses_unknown_fields: bool,
    /// Whether a field tells an explicit `null` from an absent field ([`EXPLICIT_NULL`]).
    uses_explicit_null: bool,
    /// For an own kind: the CRD comes from these types.
    owned: Option<Owned>,
    /// Whether an enum derives `JsonSchema` (own kinds).
    uses_enum: bool,
    /// k8s-openapi types used, by path below `k8s_openapi::`.
    uses_k8s: BTreeSet<String>,
    /// Schemas kept as they are, by path, and the `schema_with` functions that return them.
    kept: BTreeMap<String, Value>,
    kept_fns: Vec<String>,
    /// What the types cannot express.
    gaps: Vec<String>,
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
        let owned = self.owned.is_some();
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
            let nullable = field.get("nullable").and_then(Value::as_bool) == Some(true);
            let required = required.contains(json_name.as_str());
            let optional = !required || nullable;
            // Another operator's `nullable` field keeps its `null`. An optional one tells it from an
            // absent field ([`EXPLICIT_NULL`]); a required one is always there, `None` written `null`.
            // An own kind's stays as its Go pointer was: `null` and absent are both `None`.
            let explicit_null = !owned && !required && nullable;
            let written_null = !owned && required && nullable;
            let nested = format!("{name}{}", type_word(json_name));
            let field_path = format!("{path}.{json_name}");
            let (ty, ty_default, attributes) = if owned {
                self.owned_field(&nested, field, &field_path)?
            } else {
                let (ty, ty_default) = self.field_type(&nested, field, &field_path)?;
                (ty, ty_default, Vec::new())
            };
            defaultable &= optional || ty_default;
            if !fields.is_empty() && owned {
                fields.push('\n');
            }
            doc(&mut fields, field.get("description"));
            let bare = ident.strip_prefix("r#").unwrap_or(&ident);
            let mut serde = Vec::new();
            if bare != json_name {
                serde.push(format!("rename = {}", quoted(json_name)));
            }
            if explicit_null {
                serde.push("default".to_string());
                serde.push(format!("deserialize_with = {}", quoted(EXPLICIT_NULL)));
                serde.push("skip_serializing_if = \"Option::is_none\"".to_string());
                self.uses_explicit_null = true;
            } else if optional && !written_null {
                serde.push("default".to_string());
                serde.push("skip_serializing_if = \"Option::is_none\"".to_string());
            }
            if !serde.is_empty() {
                let _ = writeln!(fields, "#[serde({})]", serde.join(", "));
            }
            for attribute in attributes {
                let _ = writeln!(fields, "{attribute}");
            }
            let ty = if explicit_null {
                format!("Option<Option<{ty}>>")
            } else if optional {
                format!("Option<{ty}>")
            } else {
                ty
            };
            let _ = writeln!(fields, "pub {ident}: {ty},");
        }
        if !owned && keeps_unknown_fields(schema) {
            let ident = field_ident(UNKNOWN_FIELDS, &mut field_names);
            fields.push_str(UNKNOWN_FIELDS_DOC);
            let _ = writeln!(
                fields,
                "#[serde(flatten)]\npub {ident}: BTreeMap<String, serde_json::Value>,"
            );
            self.uses_unknown_fields = true;
        }
        let nested_items = std::mem::replace(&mut self.items, outer_items);
        self.defaultable.insert(name.to_string(), defaultable);

        let mut out = String::new();
        // A nested type says where it is; what it means is on the field that holds it. For an own
        // kind that is a plain comment: a doc comment would become the schema's description.
        match root {
            Some(_) => doc(&mut out, schema.get("description")),
            None if owned => {
                let _ = writeln!(out, "// `{path}` of a {}.", self.kind);
            }
            None => self.location(&mut out, path),
        }
        let mut derives = vec![];
        if matches!(root, Some(Root::Spec { .. })) {
            derives.push("CustomResource");
        }
        if owned {
            derives.push("KubeSchema");
        }
        derives.extend(["Clone", "Debug"]);
        if defaultable {
            derives.push("Default");
        }
        derives.extend(["PartialEq", "Serialize", "Deserialize"]);
        let _ = writeln!(out, "#[derive({})]", derives.join(", "));
        if let Some(Root::Spec {
            resource,
            status,
            root_args,
        }) = &root
        {
            let mut args = vec![
                format!("group = {}", quoted(resource.group)),
                format!("version = {}", quoted(resource.version)),
                format!("kind = {}", quoted(resource.kind)),
                format!("plural = {}", quoted(resource.plural)),
            ];
            if resource.namespaced {
                args.push("namespaced".into());
            }
            if let Some(status) = status {
                args.push(format!("status = {}", quoted(status)));
            }
            if let Some(owned) = &self.owned {
                args.extend(owned.kube_args.iter().cloned());
                args.extend(root_args.iter().cloned());
            }
            if owned {
                // One argument a line: rustfmt leaves long attributes as they are.
                let _ = writeln!(out, "#[kube(\n    {}\n)]", args.join(",\n    "));
            } else {
                let _ = writeln!(out, "#[kube({})]", args.join(", "));
            }
            if !owned {
                // The CRD is installed from its YAML; the Rust types describe it, they do not define it.
                out.push_str("#[kube(schema = \"disabled\")]\n");
            }
        }
        if owned {
            // What the object schema says beyond its properties.
            let attributes = self.attributes(schema, Place::Struct);
            for attribute in attributes.unwrap_or_default() {
                let _ = writeln!(out, "{attribute}");
            }
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
                None if self.owned.is_some() && Shape::of(schema) == Shape::Time => {
                    self.uses_k8s
                        .insert("apimachinery::pkg::apis::meta::v1::Time".into());
                    Ok(("Time".into(), false))
                }
                None => Ok(("String".into(), true)),
            },
            Some("integer") => {
                let int = match schema.get("format").and_then(Value::as_str) {
                    Some("int32") => "i32",
                    _ => "i64",
                };
                Ok((int.into(), true))
            }
            Some("number") if self.owned.is_some() && Shape::of(schema) == Shape::F32 => {
                Ok(("f32".into(), true))
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
                // An own kind's schema stays as it is: the keywords go on the field.
                _ if self.owned.is_some() => Ok(("serde_json::Value".into(), true)),
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

    /// The type and attributes of the field holding the property `schema` of an own kind, and
    /// whether the type has a `Default`. A property whose type cannot carry all its schema keeps the
    /// schema as it is (`schema_with`).
    fn owned_field(
        &mut self,
        name: &str,
        schema: &Value,
        path: &str,
    ) -> Result<(String, bool, Vec<String>)> {
        if let Some(ty) = self.known_field_type(schema) {
            let keep = self.keep(
                path,
                schema,
                &format!("k8s-openapi's schema of `{ty}` lacks its list types and validation"),
            );
            return Ok((ty, true, vec![keep]));
        }
        let (ty, default) = self.field_type(name, schema, path)?;
        match self.attributes(schema, Place::Field) {
            Some(attributes) => Ok((ty, default, attributes)),
            None => {
                let keep = self.keep(
                    path,
                    schema,
                    "schemars cannot say all of it about the items",
                );
                Ok((ty, default, vec![keep]))
            }
        }
    }

    /// Keeps `schema` as it is for the field at `path`: returns the field's `schema_with` attribute.
    fn keep(&mut self, path: &str, schema: &Value, why: &str) -> String {
        let mut function: String = path
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect::<String>()
            .to_snake_case();
        function.push_str("_schema");
        let function = self.name(&function);
        let mut kept = schema.clone();
        plain_int_or_string(&mut kept);
        self.kept.insert(path.to_string(), kept);
        self.kept_fns.push(format!(
            "/// The schema of `{path}` as the CRD has it:\n/// {why}.\n\
             fn {function}(_: &mut schemars::SchemaGenerator) -> schemars::Schema {{\n\
             kept_schema({path:?})\n}}\n"
        ));
        format!("#[schemars(schema_with = {:?})]", function)
    }

    /// The k8s-openapi type of a property that is recognisably a Kubernetes type, or a list or map of
    /// one (see [`KNOWN`]).
    fn known_field_type(&mut self, schema: &Value) -> Option<String> {
        let (inner, wrap): (&Value, fn(&str) -> String) =
            match schema.get("type").and_then(Value::as_str) {
                Some("array") => (schema.get("items")?, |t| format!("Vec<{t}>")),
                Some("object") if schema.get("properties").is_none() => {
                    (schema.get("additionalProperties")?, |t| {
                        format!("BTreeMap<String, {t}>")
                    })
                }
                _ => (schema, |t| t.to_string()),
            };
        let known = KNOWN.iter().find(|k| (k.matches)(inner))?;
        let name = known.path.rsplit("::").next().expect("a path");
        self.uses_k8s.insert(known.path.to_string());
        let ty = wrap(name);
        self.uses_map |= ty.starts_with("BTreeMap");
        Some(ty)
    }

    /// The `#[kube(...)]` arguments of the root schema: its description and rules.
    fn root_args(&mut self, schema: &Value) -> Vec<String> {
        let mut args = Vec::new();
        let object = schema.as_object().cloned().unwrap_or_default();
        for (key, value) in &object {
            match key.as_str() {
                "type" | "properties" => {}
                "description" => {
                    if let Some(text) = value.as_str() {
                        args.push(format!("doc = {}", quoted(text)));
                    }
                }
                "x-kubernetes-validations" => {
                    for rule in value.as_array().into_iter().flatten() {
                        args.push(format!("validation = {}", cel_rule(rule)));
                    }
                }
                "required" if value == &serde_json::json!(["spec"]) => {}
                other => self.gaps.push(format!("the root schema's `{other}`")),
            }
        }
        args
    }

    /// The attributes that give the schema of a field (`Place::Field`) or struct (`Place::Struct`)
    /// what its Rust type does not: schemars' validation (`range`, `length`, `regex`), kube's
    /// `x_kube` rules and merge strategies, and `extend` for any other keyword. `None` when the
    /// items or values of a list or map say more than schemars can put there.
    fn attributes(&mut self, schema: &Value, place: Place) -> Option<Vec<String>> {
        let shape = Shape::of(schema);
        if place == Place::Field && shape == Shape::Struct {
            // The struct carries it.
            return Some(Vec::new());
        }
        let object = schema.as_object().cloned().unwrap_or_default();
        let mut parts: Vec<String> = Vec::new();
        let mut extend: Vec<String> = Vec::new();
        let mut x_kube: Vec<String> = Vec::new();
        let mut range: Vec<String> = Vec::new();
        let mut length: Vec<String> = Vec::new();
        let native = shape.native();
        for (key, value) in &object {
            let key = key.as_str();
            match key {
                "description" => {}
                _ if native.contains(&key) => {}
                "format" if Some(value.as_str().unwrap_or_default()) == shape.format() => {}
                "items" if shape == Shape::Array => {
                    parts.extend(self.inner(value)?);
                }
                "additionalProperties" if shape == Shape::Map => {
                    if !self.plain_member(value) {
                        return None;
                    }
                }
                // schemars' validation attributes act on the schema types they are for.
                "minimum" if shape.is_number() => range.push(format!("min = {value}")),
                "maximum" if shape.is_number() => range.push(format!("max = {value}")),
                "minLength" if shape == Shape::Str => length.push(format!("min = {value}")),
                "maxLength" if shape == Shape::Str => length.push(format!("max = {value}")),
                "minItems" if shape == Shape::Array => length.push(format!("min = {value}")),
                "maxItems" if shape == Shape::Array => length.push(format!("max = {value}")),
                "pattern" if value.is_string() && shape == Shape::Str => {
                    parts.push(format!("regex(pattern = {})", quoted(value.as_str()?)));
                }
                "x-kubernetes-validations" => {
                    for rule in value.as_array().into_iter().flatten() {
                        x_kube.push(format!("validation = {}", cel_rule(rule)));
                    }
                }
                "x-kubernetes-list-type" if place == Place::Field => {
                    let strategy = match value.as_str() {
                        Some("atomic") => "ListMerge::Atomic".to_string(),
                        Some("set") => "ListMerge::Set".to_string(),
                        Some("map") => {
                            let keys: Vec<String> = object
                                .get("x-kubernetes-list-map-keys")
                                .and_then(Value::as_array)
                                .into_iter()
                                .flatten()
                                .filter_map(Value::as_str)
                                .map(|k| format!("{}.into()", quoted(k)))
                                .collect();
                            format!("ListMerge::Map(vec![{}])", keys.join(", "))
                        }
                        _ => return None,
                    };
                    x_kube.push(format!("merge_strategy = {strategy}"));
                }
                "x-kubernetes-list-map-keys"
                    if place == Place::Field
                        && object.get("x-kubernetes-list-type") == Some(&Value::from("map")) => {}
                "x-kubernetes-map-type" if place == Place::Field && shape == Shape::Map => {
                    let strategy = match value.as_str() {
                        Some("atomic") => "MapMerge::Atomic",
                        Some("granular") => "MapMerge::Granular",
                        _ => return None,
                    };
                    x_kube.push(format!("merge_strategy = {strategy}"));
                }
                _ => extend.push(format!("{} = {}", quoted(key), json_literal(value))),
            }
        }
        // k8s-openapi's `Time` has a description of its own.
        if shape == Shape::Time && !object.contains_key("description") {
            extend.push("\"description\" = null".to_string());
        }
        // A format the Rust type implies but the schema does not have (`type: integer` alone).
        if shape.format().is_some() && !object.contains_key("format") {
            extend.push("\"format\" = null".to_string());
        }
        // `min` before `max`.
        range.sort_by_key(|p| !p.starts_with("min"));
        length.sort_by_key(|p| !p.starts_with("min"));
        if !range.is_empty() {
            parts.insert(0, format!("range({})", range.join(", ")));
        }
        if !length.is_empty() {
            parts.insert(0, format!("length({})", length.join(", ")));
        }
        if !extend.is_empty() {
            parts.push(format!("extend({})", extend.join(", ")));
        }
        let mut attributes = Vec::new();
        if !parts.is_empty() {
            attributes.push(format!("#[schemars({})]", parts.join(", ")));
        }
        if x_kube.len() > 1 {
            attributes.push(format!("#[x_kube(\n    {}\n)]", x_kube.join(",\n    ")));
        } else if !x_kube.is_empty() {
            attributes.push(format!("#[x_kube({})]", x_kube.join(", ")));
        }
        Some(attributes)
    }

    /// The schemars `inner(...)` part for the items of a list, if they need one; `None` when they
    /// say more than `inner` can carry.
    fn inner(&mut self, items: &Value) -> Option<Vec<String>> {
        let shape = Shape::of(items);
        if matches!(shape, Shape::Struct) {
            return Some(Vec::new());
        }
        if shape == Shape::Enum {
            return self.plain_member(items).then(Vec::new);
        }
        let mut parts = Vec::new();
        let mut range = Vec::new();
        let mut length = Vec::new();
        let native = shape.native();
        for (key, value) in items.as_object()? {
            match key.as_str() {
                k if native.contains(&k) => {}
                "format" if Some(value.as_str().unwrap_or_default()) == shape.format() => {}
                "minimum" if shape.is_number() => range.push(format!("min = {value}")),
                "maximum" if shape.is_number() => range.push(format!("max = {value}")),
                "minLength" if shape == Shape::Str => length.push(format!("min = {value}")),
                "maxLength" if shape == Shape::Str => length.push(format!("max = {value}")),
                "pattern" if value.is_string() && shape == Shape::Str => {
                    parts.push(format!("regex(pattern = {})", quoted(value.as_str()?)));
                }
                _ => return None,
            }
        }
        if shape.format().is_some() && items.get("format").is_none() {
            return None;
        }
        if matches!(shape, Shape::Array | Shape::Map) && !self.plain_member(items) {
            return None;
        }
        // `min` before `max`.
        range.sort_by_key(|p| !p.starts_with("min"));
        length.sort_by_key(|p| !p.starts_with("min"));
        if !range.is_empty() {
            parts.insert(0, format!("range({})", range.join(", ")));
        }
        if !length.is_empty() {
            parts.insert(0, format!("length({})", length.join(", ")));
        }
        Some(if parts.is_empty() {
            Vec::new()
        } else {
            vec![format!("inner({})", parts.join(", "))]
        })
    }

    /// Whether the items or values `schema` say nothing their Rust type does not.
    fn plain_member(&self, schema: &Value) -> bool {
        let shape = Shape::of(schema);
        if shape == Shape::Struct {
            return true;
        }
        let native = shape.native();
        let plain = schema.as_object().is_some_and(|object| {
            object.iter().all(|(key, value)| {
                native.contains(&key.as_str())
                    || (key == "format" && value.as_str() == shape.format())
                    || (key == "items" && self.plain_member(value))
                    || (key == "additionalProperties" && self.plain_member(value))
            })
        });
        plain && (shape.format().is_none() || schema.get("format").is_some())
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
            // `Self` is a keyword with no raw form (`r#Self` is refused): a variant cannot be named so.
            if ident == "Self" {
                ident = "SelfValue".into();
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
        if self.owned.is_some() {
            // A plain comment: a doc comment would become the schema's description.
            let _ = writeln!(out, "// `{path}` of a {}.", self.kind);
            out.push_str(
                "#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]\n",
            );
            self.uses_enum = true;
        } else {
            self.location(&mut out, path);
            out.push_str("#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]\n");
        }
        if trips_enum_variant_names(&name, &idents) {
            out.push_str("// The variants are the values the CRD allows.\n");
            out.push_str("#[allow(clippy::enum_variant_names)]\n");
        }
        let _ = writeln!(out, "pub enum {name} {{\n{variants}}}");
        self.items.push(out);
        name
    }
}

/// Where attributes go: on a field (its property's schema), or on a struct (the object's schema).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Field,
    Struct,
}

/// The Rust type a schema becomes, as far as the schema keywords it implies go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Struct,
    Enum,
    Str,
    Time,
    I32,
    I64,
    F32,
    F64,
    Bool,
    IntOrString,
    Array,
    Map,
    /// `serde_json::Value`: implies nothing.
    Any,
}

impl Shape {
    fn of(schema: &Value) -> Shape {
        if schema
            .get("x-kubernetes-int-or-string")
            .and_then(Value::as_bool)
            == Some(true)
        {
            return Shape::IntOrString;
        }
        let has_properties = schema
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| !p.is_empty());
        let format = schema.get("format").and_then(Value::as_str);
        match schema.get("type").and_then(Value::as_str) {
            Some("object") | None if has_properties => Shape::Struct,
            Some("string") if string_enum(schema).is_some() => Shape::Enum,
            Some("string") if format == Some("date-time") => Shape::Time,
            Some("string") => Shape::Str,
            Some("integer") if format == Some("int32") => Shape::I32,
            Some("integer") => Shape::I64,
            Some("number") if format == Some("float") => Shape::F32,
            Some("number") => Shape::F64,
            Some("boolean") => Shape::Bool,
            Some("array") => Shape::Array,
            Some("object")
                if schema
                    .get("additionalProperties")
                    .is_some_and(Value::is_object) =>
            {
                Shape::Map
            }
            _ => Shape::Any,
        }
    }

    /// The keywords the Rust type gives the schema by itself (`nullable` comes with `Option`).
    fn native(self) -> &'static [&'static str] {
        match self {
            Shape::Struct => &["type", "properties", "required", "nullable"],
            Shape::Enum => &["type", "enum", "nullable"],
            Shape::IntOrString => &["x-kubernetes-int-or-string", "anyOf", "nullable"],
            Shape::Any => &["nullable"],
            _ => &["type", "nullable"],
        }
    }

    fn is_number(self) -> bool {
        matches!(self, Shape::I32 | Shape::I64 | Shape::F32 | Shape::F64)
    }

    /// The format the Rust type gives the schema.
    fn format(self) -> Option<&'static str> {
        match self {
            Shape::I32 => Some("int32"),
            Shape::I64 => Some("int64"),
            Shape::F32 => Some("float"),
            Shape::F64 => Some("double"),
            Shape::Time => Some("date-time"),
            _ => None,
        }
    }
}

/// A Kubernetes type a property can be recognised as: its k8s-openapi path below `k8s_openapi::`.
struct Known {
    path: &'static str,
    matches: fn(&Value) -> bool,
}

/// The Kubernetes types a CRD's properties become when controller-gen embedded them: recognised by
/// their property names (those of k8s-openapi's type, so no data is lost), kept with the CRD's schema.
const KNOWN: &[Known] = &[
    Known {
        path: "api::batch::v1::JobTemplateSpec",
        matches: |s| template_of(s, JOB_SPEC, "template"),
    },
    Known {
        path: "api::core::v1::PodTemplateSpec",
        matches: |s| template_of(s, POD_SPEC, "containers"),
    },
    Known {
        path: "api::core::v1::Container",
        matches: |s| {
            let names = property_names(s);
            names.contains("name") && names.contains("image") && subset(&names, CONTAINER)
        },
    },
    Known {
        path: "api::core::v1::ObjectReference",
        matches: |s| property_names(s) == OBJECT_REFERENCE.iter().copied().collect(),
    },
    Known {
        path: "apimachinery::pkg::apis::meta::v1::Condition",
        matches: |s| property_names(s) == CONDITION.iter().copied().collect(),
    },
    Known {
        path: "apimachinery::pkg::apis::meta::v1::LabelSelector",
        matches: |s| property_names(s) == ["matchExpressions", "matchLabels"].into(),
    },
    Known {
        path: "api::core::v1::ResourceRequirements",
        matches: |s| {
            let names = property_names(s);
            names.contains("limits")
                && names.contains("requests")
                && subset(&names, &["claims", "limits", "requests"])
        },
    },
];

const JOB_SPEC: &[&str] = &[
    "activeDeadlineSeconds",
    "backoffLimit",
    "backoffLimitPerIndex",
    "completionMode",
    "completions",
    "managedBy",
    "manualSelector",
    "maxFailedIndexes",
    "parallelism",
    "podFailurePolicy",
    "podReplacementPolicy",
    "selector",
    "successPolicy",
    "suspend",
    "template",
    "ttlSecondsAfterFinished",
];
const POD_SPEC: &[&str] = &[
    "activeDeadlineSeconds",
    "affinity",
    "automountServiceAccountToken",
    "containers",
    "dnsConfig",
    "dnsPolicy",
    "enableServiceLinks",
    "ephemeralContainers",
    "hostAliases",
    "hostIPC",
    "hostNetwork",
    "hostPID",
    "hostUsers",
    "hostname",
    "hostnameOverride",
    "imagePullSecrets",
    "initContainers",
    "nodeName",
    "nodeSelector",
    "os",
    "overhead",
    "preemptionPolicy",
    "priority",
    "priorityClassName",
    "readinessGates",
    "resourceClaims",
    "resources",
    "restartPolicy",
    "runtimeClassName",
    "schedulerName",
    "schedulingGates",
    "schedulingGroup",
    "securityContext",
    "serviceAccount",
    "serviceAccountName",
    "setHostnameAsFQDN",
    "shareProcessNamespace",
    "subdomain",
    "terminationGracePeriodSeconds",
    "tolerations",
    "topologySpreadConstraints",
    "volumes",
];
const CONTAINER: &[&str] = &[
    "args",
    "command",
    "env",
    "envFrom",
    "image",
    "imagePullPolicy",
    "lifecycle",
    "livenessProbe",
    "name",
    "ports",
    "readinessProbe",
    "resizePolicy",
    "resources",
    "restartPolicy",
    "restartPolicyRules",
    "securityContext",
    "startupProbe",
    "stdin",
    "stdinOnce",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "tty",
    "volumeDevices",
    "volumeMounts",
    "workingDir",
];
const OBJECT_REFERENCE: &[&str] = &[
    "apiVersion",
    "fieldPath",
    "kind",
    "name",
    "namespace",
    "resourceVersion",
    "uid",
];
const CONDITION: &[&str] = &[
    "lastTransitionTime",
    "message",
    "observedGeneration",
    "reason",
    "status",
    "type",
];

fn property_names(schema: &Value) -> BTreeSet<&str> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

fn subset(names: &BTreeSet<&str>, of: &[&str]) -> bool {
    names.iter().all(|n| of.contains(n))
}

/// Whether `schema` is a `{metadata, spec}` template whose spec has `must` and only names of `spec`.
fn template_of(schema: &Value, spec: &[&str], must: &str) -> bool {
    let names = property_names(schema);
    let Some(inner) = schema.get("properties").and_then(|p| p.get("spec")) else {
        return false;
    };
    let inner_names = property_names(inner);
    subset(&names, &["metadata", "spec"])
        && inner_names.contains(must)
        && subset(&inner_names, spec)
}

/// A CEL rule of `x-kubernetes-validations` as kube's `Rule` builder.
fn cel_rule(rule: &Value) -> String {
    let text = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
    let mut out = format!("Rule::new({})", quoted(text));
    if let Some(message) = rule.get("message").and_then(Value::as_str) {
        let _ = write!(out, ".message({})", quoted(message));
    }
    if let Some(expression) = rule.get("messageExpression").and_then(Value::as_str) {
        let _ = write!(
            out,
            ".message(Message::Expression({}.into()))",
            quoted(expression)
        );
    }
    if let Some(reason) = rule.get("reason").and_then(Value::as_str) {
        let _ = write!(out, ".reason(Reason::{reason})");
    }
    if let Some(path) = rule.get("fieldPath").and_then(Value::as_str) {
        let _ = write!(out, ".field_path({})", quoted(path));
    }
    if let Some(optional) = rule.get("optionalOldSelf").and_then(Value::as_bool) {
        let _ = write!(out, ".optional_old_self({optional})");
    }
    out
}

/// A JSON value as schemars' `extend` takes it.
fn json_literal(value: &Value) -> String {
    serde_json::to_string(value).expect("JSON serializes")
}

/// Drops the `anyOf: [{type: integer}, {type: string}]` that goes with `x-kubernetes-int-or-string`
/// everywhere in `schema`: the flag says the same, and kube's schema rewriting would empty the
/// `anyOf`'s members.
fn plain_int_or_string(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            if object.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
                && object.get("anyOf")
                    == Some(&serde_json::json!([{ "type": "integer" }, { "type": "string" }]))
            {
                object.remove("anyOf");
            }
            object.values_mut().for_each(plain_int_or_string);
        }
        Value::Array(items) => items.iter_mut().for_each(plain_int_or_string),
        _ => {}
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
    fn objects_that_preserve_unknown_fields_keep_the_keys_they_do_not_list() {
        // ECK's `nodeSets[].podTemplate`: a Pod template of which the CRD lists a few fields.
        let out = generated(spec(
            json!({
                "nodeSets": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "podTemplate": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": true,
                                "properties": { "metadata": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } }
                            },
                            "unknownFields": { "type": "string" },
                        }
                    }
                },
                "closed": { "type": "object", "properties": { "name": { "type": "string" } } },
            }),
            &[],
        ));
        assert!(out.contains("use std::collections::BTreeMap;"), "{out}");
        assert!(
            out.contains(
                "    /// The keys the CRD does not list, kept as they are (the schema has\n    /// `x-kubernetes-preserve-unknown-fields`): what is read here is written back.\n    #[serde(flatten)]\n    pub unknown_fields: BTreeMap<String, serde_json::Value>,\n}"
            ),
            "{out}"
        );
        let template = &out[out
            .find("pub struct WidgetSpecNodeSetsPodTemplate {")
            .unwrap()..];
        let template = &template[..template.find("\n}").unwrap()];
        assert!(
            template.contains("pub metadata: Option<serde_json::Value>,"),
            "{out}"
        );
        assert!(template.contains("pub unknown_fields: BTreeMap<"), "{out}");
        // A property of that name pushes the map's field aside; it stays derivable.
        let node_set = &out[out.find("pub struct WidgetSpecNodeSets {").unwrap()..];
        assert!(
            !node_set[..node_set.find("\n}").unwrap()].contains("flatten"),
            "{out}"
        );
        assert!(
            out.contains("#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]\npub struct WidgetSpecNodeSetsPodTemplate {"),
            "{out}"
        );
        // Neither a schema without `properties` (a `serde_json::Value` keeps it all) nor one without the flag.
        assert_eq!(out.matches("#[serde(flatten)]").count(), 1, "{out}");
        // Own kinds stay as their Go types were.
        let (own, _) = owned(spec(
            json!({ "template": { "type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": { "name": { "type": "string" } } } }),
            &[],
        ));
        assert!(!own.contains("flatten"), "{own}");
        let mut taken = spec(json!({ "unknownFields": { "type": "string" } }), &[]);
        taken["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] = json!(true);
        let out = generated(taken);
        assert!(
            out.contains("    pub unknown_fields: Option<String>,"),
            "{out}"
        );
        assert!(
            out.contains("    #[serde(flatten)]\n    pub unknown_fields_2: BTreeMap<String, serde_json::Value>,"),
            "{out}"
        );
        // A spec that lists nothing (the placeholder CRD of an external kind) keeps it all.
        let open = json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true });
        let out =
            generated(json!({ "type": "object", "properties": { "spec": open, "status": open } }));
        assert_eq!(
            out.matches("pub unknown_fields: BTreeMap<String, serde_json::Value>,")
                .count(),
            2,
            "{out}"
        );
    }

    #[test]
    fn optional_nullable_fields_tell_an_explicit_null_from_an_absent_field() {
        let out = generated(spec(
            json!({
                "owner": { "type": "string", "nullable": true },
                "limits": { "type": "object", "nullable": true, "properties": { "cpu": { "type": "string" } } },
                "paused": { "type": "boolean" },
                "checked": { "type": "string", "nullable": true },
            }),
            &["checked"],
        ));
        assert!(
            out.contains("    #[serde(\n        default,\n        deserialize_with = \"explicit_null\",\n        skip_serializing_if = \"Option::is_none\"\n    )]\n    pub owner: Option<Option<String>>,"),
            "{out}"
        );
        assert!(
            out.contains("pub limits: Option<Option<WidgetSpecLimits>>,"),
            "{out}"
        );
        // Not nullable: `null` is no value of it.
        assert!(
            out.contains("#[serde(default, skip_serializing_if = \"Option::is_none\")]\n    pub paused: Option<bool>,"),
            "{out}"
        );
        // Required and nullable: always there, `None` written as `null`.
        assert!(
            out.contains("    pub paused: Option<bool>,\n    pub checked: Option<String>,")
                || out.contains("\n    pub checked: Option<String>,"),
            "{out}"
        );
        assert!(
            !out.contains("skip_serializing_if = \"Option::is_none\")]\n    pub checked"),
            "{out}"
        );
        // The helper, once.
        assert_eq!(
            out.matches("fn explicit_null<'de, D, T>(").count(),
            1,
            "{out}"
        );
        assert!(
            out.contains("    Option::<T>::deserialize(deserializer).map(Some)\n}"),
            "{out}"
        );
        // The struct still derives `Default`.
        assert!(
            out.contains("#[derive(CustomResource, Clone, Debug, Default, PartialEq"),
            "{out}"
        );
        // No nullable field, no helper; own kinds stay as their Go types were.
        let out = generated(spec(json!({ "owner": { "type": "string" } }), &[]));
        assert!(!out.contains("explicit_null"), "{out}");
        let (own, _) = owned(spec(
            json!({ "owner": { "type": "string", "nullable": true } }),
            &[],
        ));
        assert!(
            !own.contains("explicit_null") && own.contains("pub owner: Option<String>,"),
            "{own}"
        );
    }

    #[test]
    fn an_enum_value_that_is_a_keyword_without_a_raw_form_names_a_variant_that_compiles() {
        // Antrea's ClusterNetworkPolicy has `match: Self`; `self` makes the same variant name.
        let schema = spec(
            json!({ "match": { "type": "string", "enum": ["Self", "self", "Other"] } }),
            &[],
        );
        let out = generated(schema);
        assert!(
            out.contains("#[serde(rename = \"Self\")]\n    SelfValue,"),
            "{out}"
        );
        assert!(
            out.contains("#[serde(rename = \"self\")]\n    SelfValue2,"),
            "{out}"
        );
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

    /// The generated text of an own kind, formatted, and the schemas it keeps.
    fn owned(schema: serde_json::Value) -> (String, BTreeMap<String, Value>) {
        let owned = Owned {
            kube_args: vec!["shortname = \"wg\"".into()],
            kept_file: "widget.schemas.json".into(),
        };
        let types = generate_owned(&resource(true), &owned, &schema).unwrap();
        let (outcome, errors) = crate::rustfmt::format(&["widget.rs".into()], &[types.rust], None);
        let crate::rustfmt::Outcome::Formatted(mut texts) = outcome else {
            panic!("{}", crate::rustfmt::MISSING);
        };
        assert!(
            errors.is_empty(),
            "the generated Rust does not parse:\n{errors}"
        );
        (texts.remove(0), types.kept)
    }

    #[test]
    fn own_kinds_carry_their_validation_as_attributes() {
        let (out, kept) = owned(spec(
            json!({
                "captain": { "type": "string", "minLength": 3, "maxLength": 20, "pattern": "^[a-z]+$" },
                "crew": { "type": "integer", "format": "int32", "minimum": 1, "maximum": 500, "exclusiveMaximum": true, "default": 10 },
                "tonnage": { "type": "integer" },
                "home": { "type": "string", "format": "uri" },
                "flags": { "type": "array", "items": { "type": "string", "maxLength": 1 }, "minItems": 1, "x-kubernetes-list-type": "set" },
                "labels": { "type": "object", "additionalProperties": { "type": "string" }, "x-kubernetes-map-type": "atomic" },
                "ports": {
                    "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                    "items": { "type": "object", "required": ["name"], "properties": { "name": { "type": "string" } } }
                },
                "size": { "type": "integer", "format": "int32", "x-kubernetes-validations": [{ "rule": "self > 0", "message": "positive" }] },
                "ledger": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                "sailed": { "type": "string", "format": "date-time" },
            }),
            &["captain"],
        ));
        assert!(
            out.contains("#[derive(CustomResource, KubeSchema, Clone, Debug"),
            "{out}"
        );
        assert!(!out.contains("schema = \"disabled\""), "{out}");
        assert!(out.contains("    shortname = \"wg\"\n"), "{out}");
        assert!(out.contains("#[schemars(length(min = 3, max = 20), regex(pattern = \"^[a-z]+$\"))]\n    pub captain: String,"), "{out}");
        assert!(out.contains("#[schemars(range(min = 1, max = 500), extend(\"default\" = 10, \"exclusiveMaximum\" = true))]\n    pub crew: Option<i32>,"), "{out}");
        // i64 would say `format: int64`; the CRD says none.
        assert!(
            out.contains("#[schemars(extend(\"format\" = null))]\n    pub tonnage: Option<i64>,"),
            "{out}"
        );
        assert!(
            out.contains(
                "#[schemars(extend(\"format\" = \"uri\"))]\n    pub home: Option<String>,"
            ),
            "{out}"
        );
        assert!(out.contains("#[schemars(length(min = 1), inner(length(max = 1)))]\n    #[x_kube(merge_strategy = ListMerge::Set)]\n    pub flags: Option<Vec<String>>,"), "{out}");
        assert!(out.contains("#[x_kube(merge_strategy = MapMerge::Atomic)]\n    pub labels: Option<BTreeMap<String, String>>,"), "{out}");
        assert!(out.contains("#[x_kube(merge_strategy = ListMerge::Map(vec![\"name\".into()]))]\n    pub ports: Option<Vec<WidgetSpecPorts>>,"), "{out}");
        assert!(out.contains("#[x_kube(validation = Rule::new(\"self > 0\").message(\"positive\"))]\n    pub size: Option<i32>,"), "{out}");
        assert!(out.contains("#[schemars(extend(\"type\" = \"object\", \"x-kubernetes-preserve-unknown-fields\" = true))]\n    pub ledger: Option<serde_json::Value>,"), "{out}");
        assert!(
            out.contains("use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;"),
            "{out}"
        );
        assert!(out.contains("pub sailed: Option<Time>,"), "{out}");
        // Nested types carry a plain comment: a doc comment would become their description.
        assert!(
            out.contains("// `spec.ports[]` of a Widget.\n#[derive(KubeSchema,"),
            "{out}"
        );
        assert!(kept.is_empty(), "{kept:?}");
    }

    #[test]
    fn enums_structs_and_rules_of_own_kinds() {
        let mut schema = spec(
            json!({
                "engine": {
                    "type": "object",
                    "required": ["kind"],
                    "x-kubernetes-map-type": "atomic",
                    "x-kubernetes-validations": [{ "rule": "has(self.kind)", "messageExpression": "'no ' + 'kind'", "reason": "FieldValueRequired", "fieldPath": ".kind" }],
                    "properties": { "kind": { "type": "string", "enum": ["Sail", "Steam"], "default": "Sail" } }
                },
            }),
            &[],
        );
        schema["description"] = json!("A widget.");
        schema["x-kubernetes-validations"] =
            json!([{ "rule": "self.metadata.name.size() < 9", "optionalOldSelf": true }]);
        let (out, _) = owned(schema);
        assert!(out.contains("    doc = \"A widget.\",\n"), "{out}");
        assert!(out.contains("    validation = Rule::new(\"self.metadata.name.size() < 9\").optional_old_self(true)\n)]"), "{out}");
        assert!(out.contains("#[schemars(extend(\"x-kubernetes-map-type\" = \"atomic\"))]\n#[x_kube(validation = Rule::new(\"has(self.kind)\").message(Message::Expression(\"'no ' + 'kind'\".into())).reason(Reason::FieldValueRequired).field_path(\".kind\"))]\npub struct WidgetSpecEngine {"), "{out}");
        assert!(
            out.contains(
                "#[schemars(extend(\"default\" = \"Sail\"))]\n    pub kind: WidgetSpecEngineKind,"
            ),
            "{out}"
        );
        assert!(out.contains("#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]\npub enum WidgetSpecEngineKind {"), "{out}");
        assert!(out.contains("use schemars::JsonSchema;"), "{out}");
    }

    #[test]
    fn what_the_root_schema_says_beyond_kube_is_reported() {
        let mut schema = spec(json!({}), &[]);
        schema["required"] = json!(["spec"]);
        schema["x-kubernetes-preserve-unknown-fields"] = json!(true);
        let owned = Owned::default();
        let types = generate_owned(&resource(true), &owned, &schema).unwrap();
        assert_eq!(
            types.gaps,
            ["the root schema's `x-kubernetes-preserve-unknown-fields`"]
        );
    }

    #[test]
    fn kubernetes_types_become_k8s_openapi_types_with_the_crds_schema() {
        let port = json!({ "anyOf": [{ "type": "integer" }, { "type": "string" }], "x-kubernetes-int-or-string": true });
        let (out, kept) = owned(spec(
            json!({
                "jobTemplate": {
                    "type": "object",
                    "properties": {
                        "metadata": { "type": "object" },
                        "spec": { "type": "object", "properties": {
                            "template": { "type": "object", "properties": { "port": port } },
                            "suspend": { "type": "boolean" }
                        } }
                    }
                },
                "readings": { "type": "array", "items": { "type": "integer" } },
            }),
            &["jobTemplate"],
        ));
        assert!(
            out.contains("use k8s_openapi::api::batch::v1::JobTemplateSpec;"),
            "{out}"
        );
        assert!(out.contains("#[schemars(schema_with = \"spec_job_template_schema\")]\n    pub job_template: JobTemplateSpec,"), "{out}");
        assert!(out.contains("fn spec_job_template_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {\n    kept_schema(\"spec.jobTemplate\")\n}"), "{out}");
        assert!(
            out.contains("include_str!(\"widget.schemas.json\")"),
            "{out}"
        );
        // Items schemars cannot describe (an integer without a format) keep their schema too.
        assert!(out.contains("#[schemars(schema_with = \"spec_readings_schema\")]\n    pub readings: Option<Vec<i64>>,"), "{out}");
        assert_eq!(
            kept.keys().collect::<Vec<_>>(),
            ["spec.jobTemplate", "spec.readings"]
        );
        // The int-or-string flag says what its `anyOf` says; kube would empty the `anyOf`.
        assert_eq!(
            kept["spec.jobTemplate"]
                .pointer("/properties/spec/properties/template/properties/port"),
            Some(&json!({ "x-kubernetes-int-or-string": true }))
        );
        // A look-alike with a field k8s-openapi's type lacks is generated, not recognised.
        let (out, kept) = owned(spec(
            json!({ "ref": { "type": "object", "properties": { "matchLabels": { "type": "object", "additionalProperties": { "type": "string" } }, "matchExpressions": { "type": "array", "items": { "type": "string" } }, "extra": { "type": "string" } } } }),
            &[],
        ));
        assert!(out.contains("pub r#ref: Option<WidgetSpecRef>,"), "{out}");
        assert!(kept.is_empty());
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
