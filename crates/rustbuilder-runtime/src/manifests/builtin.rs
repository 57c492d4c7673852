//! Kubernetes' own types inside a CRD, described as the API server describes them.
//!
//! A CRD field of a Kubernetes type (a `JobTemplateSpec`, a `PodSpec`, a `Condition`) takes its
//! schema from k8s-openapi, which has no list or map types: `containers` would be an atomic list, so
//! two field managers applying different containers would conflict, and a selector's labels would
//! merge key by key. [`crd`] writes what the API server publishes for those types instead: list
//! types and their keys, map types, required fields and the defaults Kubernetes declares, plus
//! what controller-gen adds from the types' Go markers (the integer-or-string form of quantities
//! and ports, the bounds of a `Condition`).
//!
//! The table of those facts (`builtin_schemas.json`) comes from the OpenAPI of the API server at
//! the pinned Kubernetes version; the runtime's `builtin_schemas` test checks it against one and
//! writes it again with `RUSTBUILDER_BLESS=1`.
//!
//! The walk pairs each node of the CRD's schema (inlined, as kube writes it) with the node of the
//! same place in the schema schemars makes with its definitions kept: wherever the second refers
//! to a Kubernetes definition, the table's entry for that definition is laid over the first.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The CRD of `K` as `K::crd()` writes it, with the schemas of the Kubernetes types its fields use
/// as the API server has them (list and map types, required fields, defaults).
///
/// ```no_run
/// # #[derive(kube::CustomResource, Clone, Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
/// # #[kube(group = "batch.example.com", version = "v1", kind = "CronJob", namespaced)]
/// # struct CronJobSpec { job_template: k8s_openapi::api::batch::v1::JobTemplateSpec }
/// use rustbuilder_runtime::manifests::{Crds, crd};
///
/// fn main() -> std::process::ExitCode {
///     Crds::new([crd::<CronJob>()]).main()
/// }
/// ```
pub fn crd<K: CustomResourceExt + JsonSchema>() -> CustomResourceDefinition {
    let mut crd = K::crd();
    let typed = typed_schema::<K>();
    let definitions = typed
        .pointer(DEFINITIONS)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.take())
        else {
            continue;
        };
        let mut schema = serde_json::to_value(schema).expect("a JSONSchemaProps is JSON");
        let walk = Walk {
            definitions: &definitions,
            table: &TABLE,
        };
        walk.annotate(&mut schema, &typed, 0);
        let schema = serde_json::from_value(schema).expect("the table adds only schema keywords");
        if let Some(s) = version.schema.as_mut() {
            s.open_api_v3_schema = Some(schema);
        }
    }
    crd
}

/// Where schemars keeps the definitions of an OpenAPI 3 schema.
const DEFINITIONS: &str = "/components/schemas";

/// `K`'s schema with its definitions kept (`$ref`s to them by name: Kubernetes' types are named as
/// the API server names them, e.g. `io.k8s.api.core.v1.Container`).
fn typed_schema<K: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| s.meta_schema = None)
        .into_generator();
    generator.into_root_schema_for::<K>().to_value()
}

/// What the API server publishes for one Kubernetes type, as [`crd`] lays it over the type's node.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Entry {
    /// The type's required fields; absent: none.
    required: Option<Vec<String>>,
    /// Keywords of the type's node itself (`x-kubernetes-map-type`, an integer-or-string form).
    schema: Map<String, Value>,
    /// Keywords of the type's fields (list and map types, defaults, bounds), by field.
    properties: BTreeMap<String, Map<String, Value>>,
}

impl Entry {
    fn lay_over(&self, node: &mut Map<String, Value>) {
        match &self.required {
            Some(required) => node.insert("required".into(), required.clone().into()),
            None => node.remove("required"),
        };
        node.extend(self.schema.clone());
        let Some(Value::Object(fields)) = node.get_mut("properties") else {
            return;
        };
        for (name, keywords) in &self.properties {
            if let Some(Value::Object(field)) = fields.get_mut(name) {
                field.extend(keywords.clone());
            }
        }
    }
}

static TABLE: LazyLock<BTreeMap<String, Entry>> = LazyLock::new(|| {
    serde_json::from_str(include_str!("builtin_schemas.json"))
        .expect("builtin_schemas.json is the table the builtin_schemas test writes")
});

/// The two schemas walked side by side.
struct Walk<'a> {
    definitions: &'a Map<String, Value>,
    table: &'a BTreeMap<String, Entry>,
}

/// Deeper than any Kubernetes type nests; recursive types (none in CRDs today) stop here.
const MAX_DEPTH: usize = 64;

impl Walk<'_> {
    fn annotate(&self, node: &mut Value, typed: &Value, depth: usize) {
        let Value::Object(node) = node else { return };
        if depth > MAX_DEPTH {
            return;
        }
        let mut typed = typed;
        // Through `$ref`s and the wrappers schemars puts around them (`Option`, a field's own
        // description), laying over the entry of every Kubernetes definition on the way.
        for _ in 0..MAX_DEPTH {
            if let Some(name) = reference(typed) {
                if let Some(entry) = self.table.get(name) {
                    entry.lay_over(node);
                }
                match self.definitions.get(name) {
                    Some(definition) => typed = definition,
                    None => return,
                }
            } else if let Some(inner) = only_schema_of(typed) {
                typed = inner;
            } else {
                break;
            }
        }
        if let (Some(Value::Object(fields)), Some(Value::Object(typed_fields))) =
            (node.get_mut("properties"), typed.get("properties"))
        {
            for (name, field) in fields.iter_mut() {
                if let Some(typed_field) = typed_fields.get(name) {
                    self.annotate(field, typed_field, depth + 1);
                }
            }
        }
        for keyword in ["items", "additionalProperties"] {
            if let (Some(inner), Some(typed_inner)) = (node.get_mut(keyword), typed.get(keyword)) {
                self.annotate(inner, typed_inner, depth + 1);
            }
        }
    }
}

/// The definition a schema refers to: `{"$ref": "#/components/schemas/<name>"}`.
fn reference(schema: &Value) -> Option<&str> {
    schema
        .get("$ref")?
        .as_str()?
        .strip_prefix("#")?
        .strip_prefix(DEFINITIONS)?
        .strip_prefix('/')
}

/// The one schema a wrapper stands for: `allOf`, `anyOf` or `oneOf` holding one schema besides
/// the one of `null` (an `Option`'s other branch).
fn only_schema_of(schema: &Value) -> Option<&Value> {
    ["allOf", "anyOf", "oneOf"].iter().find_map(|keyword| {
        let mut others = schema
            .get(*keyword)?
            .as_array()?
            .iter()
            .filter(|s| !is_null(s));
        let only = others.next()?;
        others.next().is_none().then_some(only)
    })
}

/// `{"type": "null"}`, or `{"enum": [null], "nullable": true}` as schemars writes it for OpenAPI 3.
fn is_null(schema: &Value) -> bool {
    schema.get("type") == Some(&Value::from("null"))
        || schema.get("enum") == Some(&Value::Array(vec![Value::Null]))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::batch::v1::JobTemplateSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use kube::CustomResource;
    use serde::Serialize;
    use serde_json::json;

    use super::*;

    #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "batch.example.com",
        version = "v1",
        kind = "CronJob",
        namespaced
    )]
    #[kube(status = "CronJobStatus")]
    #[serde(rename_all = "camelCase")]
    struct CronJobSpec {
        /// The Job to run.
        job_template: JobTemplateSpec,
        /// An optional template.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spare: Option<JobTemplateSpec>,
        /// Our own list of names, left as it is.
        #[serde(default)]
        names: Vec<String>,
    }

    #[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
    struct CronJobStatus {
        #[serde(default)]
        conditions: Vec<Condition>,
    }

    fn schema() -> Value {
        let crd = crd::<CronJob>();
        let schema = crd.spec.versions[0].schema.clone().unwrap();
        serde_json::to_value(schema.open_api_v3_schema).unwrap()
    }

    fn at<'v>(schema: &'v Value, path: &str) -> &'v Value {
        path.split('.').fold(schema, |node, field| match field {
            "[]" => &node["items"],
            "{}" => &node["additionalProperties"],
            field => &node["properties"][field],
        })
    }

    const POD: &str = "spec.jobTemplate.spec.template.spec";

    #[test]
    fn built_in_lists_and_maps_merge_as_the_api_server_merges_them() {
        let schema = schema();
        let containers = at(&schema, &format!("{POD}.containers"));
        assert_eq!(containers["x-kubernetes-list-type"], "map");
        assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
        let ports = at(&schema, &format!("{POD}.containers.[].ports"));
        assert_eq!(
            ports["x-kubernetes-list-map-keys"],
            json!(["containerPort", "protocol"])
        );
        let protocol = at(&schema, &format!("{POD}.containers.[].ports.[].protocol"));
        assert_eq!(protocol["default"], "TCP");
        let args = at(&schema, &format!("{POD}.containers.[].args"));
        assert_eq!(args["x-kubernetes-list-type"], "atomic");
        let selector = at(&schema, "spec.jobTemplate.spec.selector");
        assert_eq!(selector["x-kubernetes-map-type"], "atomic");
        // Through an `Option` too.
        let spare = at(&schema, "spec.spare.spec.template.spec.containers");
        assert_eq!(spare["x-kubernetes-list-type"], "map");
        // A field of ours is not touched.
        assert_eq!(
            at(&schema, "spec.names").get("x-kubernetes-list-type"),
            None
        );
    }

    #[test]
    fn required_fields_defaults_and_markers_follow_kubernetes() {
        let schema = schema();
        // k8s-openapi requires the name of a local reference; Kubernetes defaults it to "".
        let secret = at(
            &schema,
            &format!("{POD}.containers.[].envFrom.[].secretRef"),
        );
        assert_eq!(secret.get("required"), None, "{secret}");
        assert_eq!(secret["x-kubernetes-map-type"], "atomic");
        assert_eq!(secret["properties"]["name"]["default"], "");
        let container = at(&schema, &format!("{POD}.containers.[]"));
        assert_eq!(container["required"], json!(["name"]));
        // No zero default on a required field, none on list items.
        let port = at(
            &schema,
            &format!("{POD}.containers.[].ports.[].containerPort"),
        );
        assert_eq!(port.get("default"), None);
        // Quantities and ports are integers or strings, as controller-gen writes them.
        let limit = at(
            &schema,
            &format!("{POD}.containers.[].resources.limits.{{}}"),
        );
        assert_eq!(limit["x-kubernetes-int-or-string"], true);
        assert_eq!(
            limit["anyOf"],
            json!([{ "type": "integer" }, { "type": "string" }])
        );
        assert!(limit["pattern"].as_str().unwrap().starts_with("^(\\+|-)?"));
        let condition = at(&schema, "status.conditions.[]");
        assert_eq!(
            condition["properties"]["status"]["enum"],
            json!(["True", "False", "Unknown"])
        );
        assert_eq!(condition["properties"]["reason"]["minLength"], 1);
    }

    #[test]
    fn the_crd_stays_a_valid_crd_with_nothing_else_changed() {
        let plain = serde_json::to_value(CronJob::crd()).unwrap();
        let annotated = serde_json::to_value(crd::<CronJob>()).unwrap();
        // Only keywords are added or required lists changed: the same properties everywhere.
        fn fields(v: &Value, path: String, out: &mut Vec<String>) {
            if let Some(props) = v.get("properties").and_then(Value::as_object) {
                for (k, v) in props {
                    out.push(format!("{path}.{k}"));
                    fields(v, format!("{path}.{k}"), out);
                }
            }
            for keyword in ["items", "additionalProperties"] {
                if let Some(inner) = v.get(keyword) {
                    fields(inner, format!("{path}.{keyword}"), out);
                }
            }
        }
        let version = |v: &Value| v["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
        let (mut before, mut after) = (Vec::new(), Vec::new());
        fields(&version(&plain), String::new(), &mut before);
        fields(&version(&annotated), String::new(), &mut after);
        assert!(before.len() > 500, "{}", before.len());
        assert_eq!(before, after);
        assert_ne!(plain, annotated);
    }
}
