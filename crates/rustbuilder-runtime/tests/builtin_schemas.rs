//! The schemas of Kubernetes' own types in CRDs (`manifests::crd`), on a real API server: the table
//! of list and map types, required fields and defaults is what this API server publishes (the test
//! writes it again with `RUSTBUILDER_BLESS=1`), and with it two field managers apply different
//! containers of one object side by side, where the CRD `K::crd()` writes makes them conflict.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use kube::api::{Api, Patch, PatchParams};
use kube::{CustomResource, CustomResourceExt};
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::manifests::crd;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

const TABLE: &str = "src/manifests/builtin_schemas.json";

/// The same kind twice, in two groups: `Plain` installed from `K::crd()`, `Annotated` from
/// `manifests::crd::<K>()`.
mod plain {
    use super::*;

    #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "plain.example.com",
        version = "v1",
        kind = "CronJob",
        namespaced
    )]
    #[serde(rename_all = "camelCase")]
    pub struct CronJobSpec {
        pub job_template: JobTemplateSpec,
    }
}

mod annotated {
    use super::*;

    #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "annotated.example.com",
        version = "v1",
        kind = "CronJob",
        namespaced
    )]
    #[serde(rename_all = "camelCase")]
    pub struct CronJobSpec {
        pub job_template: JobTemplateSpec,
    }
}

#[tokio::test]
async fn built_in_types_in_crds_are_what_the_api_server_publishes() {
    let env = TestEnv::builder()
        .crd(plain::CronJob::crd())
        .crd(crd::<annotated::CronJob>())
        .start()
        .await;
    let client = env.client();

    // The table is this API server's, the version the runtime pins.
    let table = table(&definitions(&client).await);
    let text = render(&table);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(TABLE);
    if std::env::var_os("RUSTBUILDER_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap();
    assert!(
        committed == text,
        "{TABLE} is not what this API server publishes: write it again with \
         `RUSTBUILDER_BLESS=1 cargo test --features manifests --test builtin_schemas`"
    );

    // Two field managers, one container each.
    let container = |name: &str| {
        json!({ "spec": { "jobTemplate": { "spec": { "template": { "spec": {
            "restartPolicy": "Never",
            "containers": [{ "name": name, "image": "busybox:1.37.0" }],
        } } } } } })
    };
    let apply = |api: Api<kube::api::DynamicObject>, manager: &'static str, name: &'static str| async move {
        let mut object = container(name);
        object["apiVersion"] = api_version(&api).into();
        object["kind"] = "CronJob".into();
        object["metadata"] = json!({ "name": "nightly" });
        api.patch(
            "nightly",
            &PatchParams::apply(manager),
            &Patch::Apply(object),
        )
        .await
    };
    let annotated = dynamic(&client, "annotated.example.com");
    apply(annotated.clone(), "builder", "build").await.unwrap();
    apply(annotated.clone(), "scanner", "scan").await.unwrap();
    let object = annotated.get("nightly").await.unwrap();
    let names: Vec<&str> =
        object.data["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
    assert_eq!(names, ["build", "scan"]);

    // What the CRD without the table does: `containers` is one atomic list, owned by the first.
    let plain = dynamic(&client, "plain.example.com");
    apply(plain.clone(), "builder", "build").await.unwrap();
    let conflict = apply(plain, "scanner", "scan").await.unwrap_err();
    assert!(
        matches!(&conflict, kube::Error::Api(status) if status.code == 409),
        "{conflict}"
    );
}

fn dynamic(client: &kube::Client, group: &str) -> Api<kube::api::DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk(group, "v1", "CronJob");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "cronjobs");
    Api::namespaced_with(client.clone(), "default", &resource)
}

fn api_version(api: &Api<kube::api::DynamicObject>) -> String {
    let path = api.resource_url();
    // /apis/<group>/v1/namespaces/default/cronjobs
    let mut parts = path.trim_start_matches("/apis/").split('/');
    format!("{}/{}", parts.next().unwrap(), parts.next().unwrap())
}

/// Every definition of every group-version the API server publishes (OpenAPI v3).
async fn definitions(client: &kube::Client) -> BTreeMap<String, Value> {
    let get = |path: String| async move {
        let request = http::Request::get(path).body(Vec::new()).unwrap();
        client.request::<Value>(request).await.unwrap()
    };
    let index = get("/openapi/v3".into()).await;
    let mut definitions = BTreeMap::new();
    for document in index["paths"].as_object().unwrap().values() {
        let url = document["serverRelativeURL"].as_str().unwrap().to_string();
        let document = get(url).await;
        if let Some(schemas) = document
            .pointer("/components/schemas")
            .and_then(Value::as_object)
        {
            for (name, schema) in schemas {
                definitions.insert(name.clone(), schema.clone());
            }
        }
    }
    assert!(
        definitions.contains_key("io.k8s.api.core.v1.Container"),
        "the API server published no core/v1 definitions"
    );
    definitions
}

/// The keywords of a field the table keeps: how server-side apply merges it.
const MERGE_KEYWORDS: [&str; 3] = [
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
];

/// One entry per Kubernetes type: its required fields, its map type, and per field the merge
/// keywords and the default Kubernetes declares for it.
///
/// openapi-gen also writes the zero value of a required field as its default (`containerPort: 0`),
/// and `{}` for structs: not declared defaults, and controller-gen leaves them out too. The types
/// that embed a `LocalObjectReference` (`SecretEnvSource`, ...) take its atomic map type, as
/// controller-gen gives it them.
fn table(definitions: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    let local_name = &definitions["io.k8s.api.core.v1.LocalObjectReference"]["properties"]["name"];
    let mut table = BTreeMap::new();
    for (name, definition) in definitions.iter().filter(|(n, _)| n.starts_with("io.k8s.")) {
        let mut entry = Map::new();
        let mut required: Vec<&str> = definition["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !required.is_empty() {
            required.sort_unstable();
            entry.insert("required".into(), json!(required));
        }
        let embeds_local_reference = &definition["properties"]["name"] == local_name;
        let map_type = match definition.get("x-kubernetes-map-type") {
            Some(map_type) => Some(map_type.clone()),
            None => embeds_local_reference.then(|| json!("atomic")),
        };
        if let Some(map_type) = map_type {
            entry.insert(
                "schema".into(),
                json!({ "x-kubernetes-map-type": map_type }),
            );
        }
        let mut fields = Map::new();
        for (field, schema) in definition["properties"].as_object().into_iter().flatten() {
            let mut keywords: Map<String, Value> = MERGE_KEYWORDS
                .iter()
                .filter_map(|k| Some((k.to_string(), schema.get(*k)?.clone())))
                .collect();
            if let Some(default) = schema.get("default") {
                let zero = [json!(""), json!(0), json!(false)].contains(default);
                let declared = !default.is_object()
                    && !default.is_array()
                    && (!zero || !required.contains(&field.as_str()));
                if declared {
                    keywords.insert("default".into(), default.clone());
                }
            }
            if !keywords.is_empty() {
                fields.insert(field.clone(), keywords.into());
            }
        }
        if !fields.is_empty() {
            entry.insert("properties".into(), fields.into());
        }
        table.insert(name.clone(), Value::Object(entry));
    }
    for (name, addition) in controller_gen_markers() {
        let entry = table.entry(name.to_string()).or_insert_with(|| json!({}));
        merge(entry, addition);
    }
    table
}

/// What controller-gen writes for Kubernetes types from their Go markers, which the OpenAPI does
/// not carry: quantities and int-or-string ports as an integer or a string (a quantity's pattern is
/// its grammar), and the bounds of a `Condition`.
fn controller_gen_markers() -> [(&'static str, Value); 3] {
    let integer_or_string = json!([{ "type": "integer" }, { "type": "string" }]);
    let quantity = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
    [
        (
            "io.k8s.apimachinery.pkg.api.resource.Quantity",
            json!({ "schema": {
                "anyOf": integer_or_string,
                "pattern": quantity,
                "x-kubernetes-int-or-string": true,
            } }),
        ),
        (
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
            json!({ "schema": { "anyOf": integer_or_string, "x-kubernetes-int-or-string": true } }),
        ),
        (
            "io.k8s.apimachinery.pkg.apis.meta.v1.Condition",
            json!({ "properties": {
                "message": { "maxLength": 32768 },
                "observedGeneration": { "minimum": 0 },
                "reason": {
                    "maxLength": 1024,
                    "minLength": 1,
                    "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                },
                "status": { "enum": ["True", "False", "Unknown"] },
                "type": {
                    "maxLength": 316,
                    "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
                },
            } }),
        ),
    ]
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                merge(into.entry(key).or_insert(Value::Null), value);
            }
        }
        (into, from) => *into = from,
    }
}

/// One definition per line, so a new Kubernetes version shows as a readable diff.
fn render(table: &BTreeMap<String, Value>) -> String {
    let mut text = String::from("{\n");
    let last = table.len().saturating_sub(1);
    for (i, (name, entry)) in table.iter().enumerate() {
        let comma = if i == last { "" } else { "," };
        text += &format!("{}: {}{comma}\n", json!(name), entry);
    }
    text + "}\n"
}
