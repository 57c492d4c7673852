//! What the explorer does to the project's objects: a sequence of steps derived from a kind's CRD
//! schema and its sample (create it; move each spec field to its bounds, its other enum members, its
//! other truth value; remove the optional ones; have another writer edit and delete what the
//! operator made; delete the object and create it again), extendable with steps of your own.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// The field manager of the explorer's own writes, and of the "other writer".
pub const DRIVER: &str = "explorer";
/// The field manager of edits made behind the operator's back.
pub const FOREIGN: &str = "explorer-foreign";

/// A user-written step: given an admin client and the run's namespace.
pub type CustomStep =
    Arc<dyn Fn(Client, String) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// One operation of a workload.
#[derive(Clone)]
pub enum Op {
    /// Create the object (the sample) in the run's namespace.
    Create,
    /// Set the field at a JSON pointer (`/spec/size`) to a value.
    Set(String, Value),
    /// Remove the field at a JSON pointer.
    Remove(String),
    /// Another field manager changes what the operator made: the first number of each child's
    /// `spec` moves up by one (a label when it has none or the change is refused).
    EditChildren,
    /// Another writer deletes everything the operator made.
    DeleteChildren,
    /// Delete the object.
    Delete,
    /// Delete the object and create it again at once, under the same name (a new uid).
    Recreate,
    /// A step of your own.
    Custom(CustomStep),
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Create => f.write_str("Create"),
            Op::Set(pointer, value) => write!(f, "Set({pointer} = {value})"),
            Op::Remove(pointer) => write!(f, "Remove({pointer})"),
            Op::EditChildren => f.write_str("EditChildren"),
            Op::DeleteChildren => f.write_str("DeleteChildren"),
            Op::Delete => f.write_str("Delete"),
            Op::Recreate => f.write_str("Recreate"),
            Op::Custom(_) => f.write_str("Custom"),
        }
    }
}

/// A step: what it does, to which object, as the reports name it.
#[derive(Clone, Debug)]
pub struct Step {
    /// `spec.size = 10`, `delete sample`.
    pub label: String,
    /// The kind the step works on.
    pub resource: ApiResource,
    /// The object's name and, before the run, its whole manifest (the sample).
    pub name: String,
    pub(crate) manifest: Value,
    /// What it does.
    pub op: Op,
}

/// The steps of a run, in order.
#[derive(Clone, Debug, Default)]
pub struct Workload {
    /// The steps, in the order they run.
    pub steps: Vec<Step>,
}

impl Workload {
    /// The default workload of a kind: its sample created; each spec field the schema bounds
    /// moved (integers to their bounds, enums to their other members, booleans flipped); each
    /// optional field of the sample removed; another writer editing, then deleting, what the
    /// operator made; the object deleted and created again; deleted and created again at once.
    ///
    /// # Errors
    ///
    /// When the sample is no YAML object of the CRD's kind, or the CRD has no schema.
    pub fn from_sample(crd: &CustomResourceDefinition, sample: &str) -> Result<Workload, String> {
        let manifest: Value =
            serde_yaml::from_str(sample).map_err(|e| format!("the sample is no YAML: {e}"))?;
        let resource = api_resource(crd, &manifest)?;
        let name = manifest
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .ok_or("the sample has no metadata.name")?
            .to_string();
        let schema = schema_of(crd, &resource.version)?;
        let step = |label: String, op: Op| Step {
            label,
            resource: resource.clone(),
            name: name.clone(),
            manifest: manifest.clone(),
            op,
        };
        let kind = resource.kind.clone();
        let mut steps = vec![step(
            format!("create {kind} {name} from the sample"),
            Op::Create,
        )];
        let spec = manifest.get("spec").cloned().unwrap_or(json!({}));
        let mut moves = Vec::new();
        let mut removals = Vec::new();
        if let Some(spec_schema) = schema.pointer("/properties/spec") {
            field_moves(spec_schema, &spec, "/spec", &mut moves, &mut removals);
        }
        for (pointer, value) in moves {
            let label = format!("{} = {value}", dotted(&pointer));
            steps.push(step(label, Op::Set(pointer, value)));
        }
        for pointer in removals {
            steps.push(step(
                format!("remove {}", dotted(&pointer)),
                Op::Remove(pointer),
            ));
        }
        steps.push(step(
            "another writer edits the children".into(),
            Op::EditChildren,
        ));
        steps.push(step(
            "another writer deletes the children".into(),
            Op::DeleteChildren,
        ));
        steps.push(step(format!("delete {kind} {name}"), Op::Delete));
        steps.push(step(format!("create {kind} {name} again"), Op::Create));
        steps.push(step(
            format!("delete and create {kind} {name} at once (a new uid)"),
            Op::Recreate,
        ));
        Ok(Workload { steps })
    }

    /// This workload, then `other`'s steps (another kind's, say).
    pub fn then(mut self, other: Workload) -> Workload {
        self.steps.extend(other.steps);
        self
    }

    /// Adds a step of your own after the others: `run` gets an admin client and the namespace
    /// of the run, and fails with a message.
    pub fn custom<F>(mut self, label: &str, run: F) -> Workload
    where
        F: Fn(Client, String) -> BoxFuture<'static, Result<(), String>> + Send + Sync + 'static,
    {
        let template = self.steps.first().cloned();
        let (resource, name, manifest) = match template {
            Some(step) => (step.resource, step.name, step.manifest),
            None => (
                ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap")),
                String::new(),
                Value::Null,
            ),
        };
        self.steps.push(Step {
            label: label.to_string(),
            resource,
            name,
            manifest,
            op: Op::Custom(Arc::new(run)),
        });
        self
    }

    /// The resources (plurals) the steps work on.
    pub(crate) fn resources(&self) -> Vec<String> {
        let mut plurals: Vec<String> = self
            .steps
            .iter()
            .map(|s| s.resource.plural.clone())
            .collect();
        plurals.dedup();
        plurals
    }
}

/// `/spec/a/b` as `spec.a.b`.
fn dotted(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

/// The kind as the API server serves it, checked against the sample.
fn api_resource(crd: &CustomResourceDefinition, sample: &Value) -> Result<ApiResource, String> {
    let group = &crd.spec.group;
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .or_else(|| crd.spec.versions.first())
        .ok_or("the CRD has no version")?;
    let api_version = sample
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let version_name = api_version.rsplit('/').next().unwrap_or(&version.name);
    let kind = &crd.spec.names.kind;
    if sample.get("kind").and_then(Value::as_str) != Some(kind.as_str()) {
        return Err(format!("the sample is no {kind}"));
    }
    let gvk = GroupVersionKind::gvk(group, version_name, kind);
    Ok(ApiResource::from_gvk_with_plural(
        &gvk,
        &crd.spec.names.plural,
    ))
}

/// The OpenAPI schema of one version, as JSON.
fn schema_of(crd: &CustomResourceDefinition, version: &str) -> Result<Value, String> {
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .ok_or_else(|| format!("the CRD has no version {version}"))?;
    let schema = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .ok_or("the CRD has no schema")?;
    serde_json::to_value(schema).map_err(|e| e.to_string())
}

/// How deep under `spec` fields are moved: the kind's own fields and theirs. Deeper lie the
/// Kubernetes types a kind embeds (a Job template's Pod spec), whose rules are the API server's and
/// the other controllers', not the operator's, and which would multiply the steps.
const MOVED_DEPTH: usize = 2;

/// The moves of each field under `schema` (an object's), from the values of `current`: other
/// valid values of the leaves, and the optional fields present to remove, down to
/// [`MOVED_DEPTH`] levels under `spec`. Arrays and maps are left alone.
fn field_moves(
    schema: &Value,
    current: &Value,
    pointer: &str,
    moves: &mut Vec<(String, Value)>,
    removals: &mut Vec<String>,
) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let depth = pointer.matches('/').count();
    if depth > MOVED_DEPTH {
        return;
    }
    for (field, field_schema) in properties {
        let pointer = format!("{pointer}/{field}");
        let value = current.get(field);
        match field_schema.get("type").and_then(Value::as_str) {
            Some("object") => {
                let nested = value.cloned().unwrap_or(json!({}));
                field_moves(field_schema, &nested, &pointer, moves, removals);
            }
            Some(_) => {
                for other in other_values(field_schema, value) {
                    moves.push((pointer.clone(), other));
                }
            }
            None => {}
        }
        if value.is_some() && !required.contains(&field.as_str()) {
            removals.push(pointer);
        }
    }
}

/// Other valid values of a leaf: an integer's bounds (or one more), an enum's other members, a
/// boolean's other value. At most two; none for strings without an enum (their rules are free).
fn other_values(schema: &Value, current: Option<&Value>) -> Vec<Value> {
    let mut values = Vec::new();
    if let Some(members) = schema.get("enum").and_then(Value::as_array) {
        values.extend(members.iter().filter(|m| Some(*m) != current).cloned());
    } else {
        match schema.get("type").and_then(Value::as_str) {
            Some("integer") => {
                let bound = |key: &str, exclusive: &str, step: i64| {
                    // Bounds may be written as floats (`10.0`).
                    let value = schema.get(key)?.as_f64()? as i64;
                    let exclusive = schema.get(exclusive).and_then(Value::as_bool) == Some(true);
                    Some(if exclusive { value - step } else { value })
                };
                let max = bound("maximum", "exclusiveMaximum", 1);
                let min = bound("minimum", "exclusiveMinimum", -1);
                let now = current.and_then(Value::as_i64);
                let up = now.or(min).map(|v| v + 1);
                for candidate in [max, min, up].into_iter().flatten() {
                    let in_bounds =
                        max.is_none_or(|m| candidate <= m) && min.is_none_or(|m| candidate >= m);
                    if in_bounds && Some(candidate) != now && !values.contains(&json!(candidate)) {
                        values.push(json!(candidate));
                    }
                }
            }
            Some("boolean") => {
                let now = current.and_then(Value::as_bool).unwrap_or(false);
                values.push(json!(!now));
            }
            _ => {}
        }
    }
    values.truncate(2);
    values
}

/// Runs one step in `namespace` with the admin `client`; `children` are the objects the operator
/// made so far (their API paths).
/// What a step left of its object's `spec`: the user's, which the operator must keep.
pub(crate) enum Left {
    /// The spec as the API server stored it after the step's write (its defaults included).
    Spec(Value),
    /// The object was deleted.
    Deleted,
    /// The step wrote no spec.
    Untouched,
}

/// The spec of an object as written.
fn spec_of(object: &DynamicObject) -> Left {
    Left::Spec(object.data.get("spec").cloned().unwrap_or(Value::Null))
}

pub(crate) async fn perform(
    step: &Step,
    client: &Client,
    namespace: &str,
    children: &[String],
) -> Result<Left, String> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &step.resource);
    let name = step.name.as_str();
    let fail = |what: &str, e: kube::Error| format!("{}: {what}: {e}", step.label);
    match &step.op {
        Op::Create => create(&api, step).await.map_err(|e| fail("create", e)),
        Op::Set(pointer, value) => {
            let patch = merge_patch_at(pointer, value.clone());
            let params = PatchParams::default();
            api.patch(name, &params, &Patch::Merge(patch))
                .await
                .map(|o| spec_of(&o))
                .map_err(|e| fail("patch", e))
        }
        Op::Remove(pointer) => {
            let patch = merge_patch_at(pointer, Value::Null);
            let params = PatchParams::default();
            api.patch(name, &params, &Patch::Merge(patch))
                .await
                .map(|o| spec_of(&o))
                .map_err(|e| fail("patch", e))
        }
        Op::Delete => api
            .delete(name, &DeleteParams::background())
            .await
            .map(|_| Left::Deleted)
            .map_err(|e| fail("delete", e)),
        Op::Recreate => {
            api.delete(name, &DeleteParams::background())
                .await
                .map_err(|e| fail("delete", e))?;
            // A finalizer keeps the object until the operator has cleaned up.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while api
                .get_opt(name)
                .await
                .map_err(|e| fail("read", e))?
                .is_some()
            {
                if std::time::Instant::now() > deadline {
                    return Err(format!(
                        "{}: still there 30 s after its delete (a finalizer never removed?)",
                        step.label
                    ));
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            create(&api, step)
                .await
                .map_err(|e| fail("create again", e))
        }
        Op::EditChildren => {
            for child in children {
                edit_foreign(client, child)
                    .await
                    .map_err(|e| fail(child, e))?;
            }
            Ok(Left::Untouched)
        }
        Op::DeleteChildren => {
            for child in children {
                match client.request_text(delete_in_background(child)).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(e) => return Err(fail(child, e)),
                }
            }
            Ok(Left::Untouched)
        }
        Op::Custom(run) => run(client.clone(), namespace.to_string())
            .await
            .map(|()| Left::Untouched),
    }
}

async fn create(api: &Api<DynamicObject>, step: &Step) -> kube::Result<Left> {
    let mut object: DynamicObject =
        serde_json::from_value(step.manifest.clone()).map_err(kube::Error::SerdeError)?;
    object.metadata.namespace = None;
    api.create(&PostParams::default(), &object)
        .await
        .map(|o| spec_of(&o))
}

/// A delete of the object at `path` whose dependents go after it, as `kubectl delete` does (a Job
/// left to its default would wait, with the `orphan` finalizer, for a garbage collector).
pub(crate) fn delete_in_background(path: &str) -> http::Request<Vec<u8>> {
    let options = json!({ "propagationPolicy": "Background" });
    http::Request::delete(path)
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&options).expect("JSON"))
        .expect("a request")
}

/// A JSON merge patch that sets `value` at `pointer` (`null` removes it).
fn merge_patch_at(pointer: &str, value: Value) -> Value {
    pointer
        .trim_start_matches('/')
        .rsplit('/')
        .fold(value, |inner, key| json!({ key: inner }))
}

/// Changes a child behind the operator's back: its first number in `spec` up by one, else a label.
async fn edit_foreign(client: &Client, path: &str) -> kube::Result<()> {
    let get = http::Request::get(path)
        .body(Vec::new())
        .expect("a request");
    let current: Value = match client.request(get).await {
        Ok(current) => current,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(e) => return Err(e),
    };
    let label = json!({ "metadata": { "labels": { "explore.rustbuilder.io/edited": "true" } } });
    let number = current
        .get("spec")
        .and_then(|spec| first_number(spec, "/spec"));
    let patches = number.map(|(pointer, n)| merge_patch_at(&pointer, json!(n + 1)));
    for patch in patches.into_iter().chain([label]) {
        let uri = format!("{path}?fieldManager={FOREIGN}");
        let request = http::Request::patch(uri)
            .header("Content-Type", "application/merge-patch+json")
            .body(serde_json::to_vec(&patch).expect("JSON"))
            .expect("a request");
        match client.request_text(request).await {
            Ok(_) => return Ok(()),
            // Immutable or invalid: the next, milder edit.
            Err(kube::Error::Api(status)) if status.code == 422 => continue,
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The first integer under `value`, depth first in key order, with its pointer.
fn first_number(value: &Value, pointer: &str) -> Option<(String, i64)> {
    match value {
        Value::Number(n) => n.as_i64().map(|n| (pointer.to_string(), n)),
        Value::Object(map) => map
            .iter()
            .find_map(|(key, v)| first_number(v, &format!("{pointer}/{key}"))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_move_to_their_bounds_and_enums_to_their_other_members() {
        let schema = json!({ "type": "integer", "minimum": 1, "maximum": 10.0 });
        assert_eq!(
            other_values(&schema, Some(&json!(1))),
            [json!(10), json!(2)]
        );
        assert_eq!(other_values(&schema, Some(&json!(10))), [json!(1)]);
        let open = json!({ "type": "integer", "minimum": 0 });
        assert_eq!(other_values(&open, Some(&json!(3))), [json!(0), json!(4)]);
        let policy = json!({ "type": "string", "enum": ["Allow", "Forbid", "Replace"] });
        assert_eq!(
            other_values(&policy, Some(&json!("Allow"))),
            [json!("Forbid"), json!("Replace")]
        );
        let flag = json!({ "type": "boolean" });
        assert_eq!(other_values(&flag, None), [json!(true)]);
        assert!(other_values(&json!({ "type": "string" }), Some(&json!("x"))).is_empty());
    }

    #[test]
    fn nested_fields_move_and_optional_ones_are_removed() {
        let schema = json!({
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": { "type": "integer", "minimum": 1, "maximum": 3 },
                "suspend": { "type": "boolean" },
                "limits": { "type": "object", "properties": {
                    "max": { "type": "integer", "maximum": 5 },
                    "pod": { "type": "object", "properties": { "deep": { "type": "boolean" } } },
                } },
                "tags": { "type": "array", "items": { "type": "string" } },
            },
        });
        let current = json!({
            "size": 2, "suspend": false, "limits": { "max": 5, "pod": { "deep": true } }, "tags": ["a"],
        });
        let (mut moves, mut removals) = (Vec::new(), Vec::new());
        field_moves(&schema, &current, "/spec", &mut moves, &mut removals);
        let pointers: Vec<_> = moves.iter().map(|(p, v)| format!("{p}={v}")).collect();
        assert_eq!(
            pointers,
            ["/spec/size=3", "/spec/size=1", "/spec/suspend=true"].map(String::from)
        );
        // `limits.pod.deep` lies deeper than fields are moved; `limits.pod` itself may go.
        let removed = [
            "/spec/limits/max",
            "/spec/limits/pod",
            "/spec/limits",
            "/spec/suspend",
            "/spec/tags",
        ];
        assert_eq!(removals, removed.map(String::from));
    }

    #[test]
    fn a_merge_patch_reaches_its_pointer() {
        assert_eq!(
            merge_patch_at("/spec/a/b", json!(3)),
            json!({ "spec": { "a": { "b": 3 } } })
        );
        assert_eq!(
            merge_patch_at("/spec/x", Value::Null),
            json!({ "spec": { "x": null } })
        );
    }

    #[test]
    fn the_first_number_of_a_spec_is_found_depth_first() {
        let spec = json!({ "a": { "b": "x" }, "replicas": 2, "z": 9 });
        assert_eq!(
            first_number(&spec, "/spec"),
            Some(("/spec/replicas".into(), 2))
        );
        assert_eq!(first_number(&json!({ "a": "b" }), "/spec"), None);
    }
}
