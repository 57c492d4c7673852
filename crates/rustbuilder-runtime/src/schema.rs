//! How the API server merges each field of a kind, from the schema it publishes (OpenAPI v3).
//!
//! Server-side apply merges by the schema, not by the field's name: a list is `atomic` (replaced
//! whole), a `set` of scalars, or a `map` of items keyed by some of their fields
//! (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`); a map or struct is merged key by key
//! unless it is `atomic` (`x-kubernetes-map-type`: a Pod's `nodeSelector`, every `LabelSelector`).
//! A custom resource's list is atomic unless its CRD says otherwise, whatever its name.
//! [`apply`](crate::apply) compares with the schema of [`for_kind`] to know what an apply would change.
//!
//! A [`Schema`] keeps only that: the merge type of every field reachable from the kind, the defaults
//! the schema declares, and which values are quantities. It is built from the group version's
//! document (`/openapi/v3/apis/<group>/<version>`, readable by every authenticated user), fetched
//! once per kind and process and kept ten minutes; the document itself is read without being held
//! as a tree. The schemas are the process's, not each cluster's: the clusters of a fleet that serve
//! one kind are compared by the schema of the first that was asked.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tracing::{debug, warn};

/// The merge types of one kind's fields.
#[derive(Debug)]
pub struct Schema {
    nodes: Vec<Node>,
    root: usize,
}

/// A value's merge type, as the [`Schema`] knows it.
#[derive(Clone, Copy, Debug)]
pub struct Shape<'s> {
    schema: &'s Schema,
    node: usize,
}

/// How an apply merges a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListType<'s> {
    /// Replaced whole.
    Atomic,
    /// Scalars, merged by value.
    Set,
    /// Items merged by these key fields.
    Map(&'s [Box<str>]),
}

#[derive(Debug)]
enum Node {
    /// Not described (preserved unknown fields, int-or-string, an empty schema): maps merged key by
    /// key, lists atomic, as the API server merges what it does not know.
    Any,
    Scalar {
        /// A quantity (`1000m`), which the API server writes back in its canonical form.
        quantity: bool,
    },
    Struct {
        /// Sorted by name.
        fields: Vec<Field>,
        atomic: bool,
    },
    Map {
        values: usize,
        atomic: bool,
    },
    List {
        items: usize,
        list: List,
    },
}

#[derive(Debug)]
struct Field {
    name: Box<str>,
    node: usize,
    /// The value the API server gives the field when it is left out, if the schema says.
    default: Option<Value>,
}

#[derive(Debug)]
enum List {
    Atomic,
    Set,
    Map(Vec<Box<str>>),
}

impl Schema {
    /// The schema of the kind `api_version`/`kind`, from the OpenAPI v3 document of its group version
    /// (`document`, as the API server serves it). `None` when the document does not describe it.
    pub fn from_document(document: &str, api_version: &str, kind: &str) -> Option<Schema> {
        let document: Document<'_> = serde_json::from_str(document).ok()?;
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let definitions = &document.components.schemas;
        let (name, _) = definitions.iter().find(|(_, definition)| {
            let kinds = serde_json::from_str::<Kinds>(definition.get());
            kinds.is_ok_and(|k| {
                k.kinds
                    .iter()
                    .any(|k| k.group == group && k.version == version && k.kind == kind)
            })
        })?;
        let mut builder = Builder {
            definitions,
            built: HashMap::new(),
            nodes: Vec::new(),
        };
        let root = builder.definition(name)?;
        Some(Schema {
            nodes: builder.nodes,
            root,
        })
    }

    /// The kind's own value: the whole object.
    pub fn root(&self) -> Shape<'_> {
        Shape {
            schema: self,
            node: self.root,
        }
    }
}

impl<'s> Shape<'s> {
    fn node(&self) -> &'s Node {
        &self.schema.nodes[self.node]
    }

    fn at(&self, node: usize) -> Shape<'s> {
        Shape {
            schema: self.schema,
            node,
        }
    }

    /// The shape of field `name` of a struct, or of any value of a map; `None` when the schema does
    /// not describe it.
    pub fn field(&self, name: &str) -> Option<Shape<'s>> {
        match self.node() {
            Node::Struct { fields, .. } => {
                let field = fields.binary_search_by(|f| (*f.name).cmp(name)).ok()?;
                Some(self.at(fields[field].node))
            }
            Node::Map { values, .. } => Some(self.at(*values)),
            Node::Any => Some(*self),
            _ => None,
        }
    }

    /// The default the schema declares for field `name` of a struct.
    pub fn default_of(&self, name: &str) -> Option<&'s Value> {
        let Node::Struct { fields, .. } = self.node() else {
            return None;
        };
        let field = fields.binary_search_by(|f| (*f.name).cmp(name)).ok()?;
        fields[field].default.as_ref()
    }

    /// The shape of a list's items.
    pub fn items(&self) -> Option<Shape<'s>> {
        match self.node() {
            Node::List { items, .. } => Some(self.at(*items)),
            Node::Any => Some(*self),
            _ => None,
        }
    }

    /// How an apply merges this list (atomic when it is not one).
    pub fn list_type(&self) -> ListType<'s> {
        match self.node() {
            Node::List {
                list: List::Set, ..
            } => ListType::Set,
            Node::List {
                list: List::Map(keys),
                ..
            } => ListType::Map(keys),
            _ => ListType::Atomic,
        }
    }

    /// Whether an apply replaces this map or struct whole (`x-kubernetes-map-type: atomic`).
    pub fn is_atomic(&self) -> bool {
        match self.node() {
            Node::Struct { atomic, .. } | Node::Map { atomic, .. } => *atomic,
            Node::List { list, .. } => matches!(list, List::Atomic),
            Node::Scalar { .. } | Node::Any => false,
        }
    }

    /// Whether the value is a quantity.
    pub fn is_quantity(&self) -> bool {
        matches!(self.node(), Node::Scalar { quantity: true })
    }
}

/// An OpenAPI v3 document, its definitions left as text until one is needed.
#[derive(Deserialize)]
struct Document<'a> {
    #[serde(borrow)]
    components: Components<'a>,
}

#[derive(Deserialize)]
struct Components<'a> {
    #[serde(borrow)]
    schemas: HashMap<Cow<'a, str>, &'a RawValue>,
}

/// The kinds a definition stands for.
#[derive(Deserialize)]
struct Kinds {
    #[serde(rename = "x-kubernetes-group-version-kind", default)]
    kinds: Vec<GroupVersionKind>,
}

#[derive(Deserialize)]
struct GroupVersionKind {
    #[serde(default)]
    group: String,
    version: String,
    kind: String,
}

/// The name of a definition's reference (`#/components/schemas/<name>`).
const REFERENCE: &str = "#/components/schemas/";

struct Builder<'d, 'a> {
    definitions: &'d HashMap<Cow<'a, str>, &'a RawValue>,
    /// The node of each definition built, so that recursive definitions end.
    built: HashMap<String, usize>,
    nodes: Vec<Node>,
}

impl Builder<'_, '_> {
    fn definition(&mut self, name: &str) -> Option<usize> {
        if let Some(&node) = self.built.get(name) {
            return Some(node);
        }
        let text = self.definitions.get(name)?;
        let schema: Value = serde_json::from_str(text.get()).ok()?;
        let node = self.push(Node::Any);
        self.built.insert(name.to_string(), node);
        self.nodes[node] = if name == "io.k8s.apimachinery.pkg.api.resource.Quantity" {
            Node::Scalar { quantity: true }
        } else {
            self.describe(&schema)
        };
        Some(node)
    }

    fn push(&mut self, node: Node) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn node(&mut self, schema: &Value) -> usize {
        // A reference, alone or as the only member of `allOf` (how OpenAPI v3 adds a description).
        let reference = schema.get("$ref").or_else(|| {
            let all = schema.get("allOf")?.as_array()?;
            (all.len() == 1).then(|| all[0].get("$ref"))?
        });
        if let Some(name) = reference.and_then(Value::as_str)
            && let Some(node) = name
                .strip_prefix(REFERENCE)
                .and_then(|name| self.definition(name))
        {
            return node;
        }
        let node = self.describe(schema);
        self.push(node)
    }

    fn describe(&mut self, schema: &Value) -> Node {
        let atomic = schema["x-kubernetes-map-type"] == "atomic";
        match schema["type"].as_str() {
            Some("object") => {
                if let Some(properties) = schema["properties"].as_object() {
                    let mut fields: Vec<Field> = properties
                        .iter()
                        .map(|(name, property)| Field {
                            name: name.as_str().into(),
                            node: self.node(property),
                            default: property.get("default").cloned(),
                        })
                        .collect();
                    fields.sort_by(|a, b| a.name.cmp(&b.name));
                    Node::Struct { fields, atomic }
                } else if let Some(values) =
                    schema.get("additionalProperties").filter(|v| v.is_object())
                {
                    let values = self.node(values);
                    Node::Map { values, atomic }
                } else {
                    Node::Any
                }
            }
            Some("array") => {
                let items = match schema.get("items") {
                    Some(items) => self.node(items),
                    None => self.push(Node::Any),
                };
                let list = match schema["x-kubernetes-list-type"].as_str() {
                    Some("set") => List::Set,
                    Some("map") => {
                        let keys = schema["x-kubernetes-list-map-keys"].as_array();
                        let keys = keys.into_iter().flatten().filter_map(Value::as_str);
                        List::Map(keys.map(Into::into).collect())
                    }
                    _ => List::Atomic,
                };
                Node::List { items, list }
            }
            Some(_) => Node::Scalar { quantity: false },
            None => Node::Any,
        }
    }
}

/// How long a kind the API server does not describe is not asked for again: until then, applies of
/// the kind compare list types by field name.
const RETRY_AFTER: Duration = Duration::from_secs(60);
/// How long a schema is kept before it is read again: a CRD upgraded meanwhile (a list that became
/// a map list, say) is compared by its new schema after at most this long.
const REFRESH_AFTER: Duration = Duration::from_secs(600);

enum Known {
    Schema(Arc<Schema>, Instant),
    /// The API server did not describe the kind at this time.
    Missing(Instant),
}

/// One entry per kind, each behind a lock of its own: the first caller fetches while the others
/// wait for its answer, so concurrent first reconciles fetch a kind once.
type Entry = Arc<tokio::sync::Mutex<Option<Known>>>;

static SCHEMAS: LazyLock<Mutex<HashMap<(String, String), Entry>>> = LazyLock::new(Mutex::default);

/// The schema of kind `api_version`/`kind` as `client`'s API server publishes it: fetched on first use
/// (once, however many ask at once) and kept for ten minutes. `None` when the server does not
/// describe it (Kubernetes before 1.27 has no OpenAPI v3 endpoint), asked again a minute later; an
/// error when the server could not be asked (the caller fails, and is tried again, rather than
/// compare by guesswork).
pub async fn for_kind(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
) -> kube::Result<Option<Arc<Schema>>> {
    let key = (api_version.to_string(), kind.to_string());
    let entry = SCHEMAS.lock().unwrap().entry(key).or_default().clone();
    let mut known = entry.lock().await;
    match &*known {
        Some(Known::Schema(schema, at)) if at.elapsed() < REFRESH_AFTER => {
            return Ok(Some(schema.clone()));
        }
        Some(Known::Missing(at)) if at.elapsed() < RETRY_AFTER => return Ok(None),
        _ => {}
    }
    let schema = fetch(client, api_version, kind).await?.map(Arc::new);
    *known = Some(match &schema {
        Some(schema) => Known::Schema(schema.clone(), Instant::now()),
        None => Known::Missing(Instant::now()),
    });
    Ok(schema)
}

async fn fetch(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
) -> kube::Result<Option<Schema>> {
    let path = match api_version.split_once('/') {
        Some(_) => format!("/openapi/v3/apis/{api_version}"),
        None => format!("/openapi/v3/api/{api_version}"),
    };
    let request = http::Request::get(&path)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    let document = match client.request_text(request).await {
        Ok(document) => document,
        // No OpenAPI v3 here, or not for this group and version.
        Err(kube::Error::Api(status)) if status.code == 404 => {
            warn!(%path, "no schema published: applies of {kind} compare list types by field name");
            return Ok(None);
        }
        Err(error) => {
            warn!(%path, %error, "cannot read the schema of {kind}");
            return Err(error);
        }
    };
    let schema = Schema::from_document(&document, api_version, kind);
    match &schema {
        Some(schema) => debug!(%path, kind, nodes = schema.nodes.len(), "schema read"),
        None => warn!(%path, "{kind} not described: its applies compare list types by field name"),
    }
    Ok(schema)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    fn document() -> String {
        example_document()
    }

    /// A document in the API server's form: a kind, a referenced struct that refers to itself, a
    /// quantity, and lists and maps of every merge type.
    pub(crate) fn example_document() -> String {
        let reference = |name: &str| json!({ "allOf": [{ "$ref": format!("{REFERENCE}{name}") }] });
        json!({
            "openapi": "3.0.0",
            "components": { "schemas": {
                "io.example.v1.Thing": {
                    "type": "object",
                    "x-kubernetes-group-version-kind": [{ "group": "example.io", "version": "v1", "kind": "Thing" }],
                    "properties": {
                        "spec": reference("io.example.v1.Spec"),
                    },
                },
                "io.example.v1.Spec": {
                    "type": "object",
                    "properties": {
                        "ports": {
                            "type": "array",
                            "items": reference("io.example.v1.Port"),
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["port", "protocol"],
                        },
                        "tags": { "type": "array", "items": { "type": "string" }, "x-kubernetes-list-type": "set" },
                        "args": { "type": "array", "items": { "type": "string" } },
                        "selector": { "type": "object", "additionalProperties": { "type": "string" }, "x-kubernetes-map-type": "atomic" },
                        "labels": { "type": "object", "additionalProperties": { "type": "string" } },
                        "limits": { "type": "object", "additionalProperties": { "$ref": format!("{REFERENCE}io.k8s.apimachinery.pkg.api.resource.Quantity") } },
                        "child": reference("io.example.v1.Spec"),
                        "anything": { "x-kubernetes-preserve-unknown-fields": true },
                    },
                },
                "io.example.v1.Port": {
                    "type": "object",
                    "properties": {
                        "port": { "type": "integer" },
                        "protocol": { "type": "string", "default": "TCP" },
                    },
                },
                "io.k8s.apimachinery.pkg.api.resource.Quantity": { "oneOf": [{ "type": "string" }, { "type": "number" }] },
            }},
        })
        .to_string()
    }

    #[test]
    fn fields_have_the_merge_types_the_schema_gives() {
        let schema = Schema::from_document(&document(), "example.io/v1", "Thing").unwrap();
        let spec = schema.root().field("spec").unwrap();
        let ports = spec.field("ports").unwrap();
        let keys: &[Box<str>] = &["port".into(), "protocol".into()];
        assert_eq!(ports.list_type(), ListType::Map(keys));
        let port = ports.items().unwrap();
        assert_eq!(port.default_of("protocol"), Some(&json!("TCP")));
        assert_eq!(port.default_of("port"), None);
        assert_eq!(spec.field("tags").unwrap().list_type(), ListType::Set);
        let args = spec.field("args").unwrap();
        assert_eq!(args.list_type(), ListType::Atomic);
        assert!(args.is_atomic());
        assert!(spec.field("selector").unwrap().is_atomic());
        assert!(!spec.field("labels").unwrap().is_atomic());
        assert!(!spec.is_atomic());
        let limits = spec.field("limits").unwrap();
        assert!(limits.field("cpu").unwrap().is_quantity());
        assert!(
            !spec
                .field("labels")
                .unwrap()
                .field("a")
                .unwrap()
                .is_quantity()
        );
        // A definition that refers to itself is one node.
        let child = spec.field("child").unwrap();
        assert_eq!(child.node, spec.node);
        // What the schema leaves open is open below too.
        let anything = spec.field("anything").unwrap();
        assert!(anything.field("x").unwrap().field("y").is_some());
        assert_eq!(anything.items().unwrap().list_type(), ListType::Atomic);
        assert!(spec.field("unknown").is_none());
    }

    #[test]
    fn a_kind_the_document_does_not_describe_has_no_schema() {
        assert!(Schema::from_document(&document(), "example.io/v1", "Other").is_none());
        assert!(Schema::from_document(&document(), "other.io/v1", "Thing").is_none());
        assert!(Schema::from_document("not json", "example.io/v1", "Thing").is_none());
    }
}
