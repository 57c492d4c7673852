//! The webhook calls themselves, without HTTP: an `AdmissionReview` or `ConversionReview` body in, the
//! review with its response out.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::Resource;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use kube::core::{DynamicObject, Status};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::{debug, warn};

use super::{Defaulter, Denied, Validator};

/// One admission route: a request in, its response out, once the webhook has answered.
pub(super) type AdmissionHandler = Arc<
    dyn Fn(AdmissionRequest<DynamicObject>) -> BoxFuture<'static, AdmissionResponse> + Send + Sync,
>;

/// Answers an `AdmissionReview` body with `handler`.
pub(super) async fn admit(handler: &AdmissionHandler, body: &[u8]) -> Vec<u8> {
    let response = match serde_json::from_slice::<AdmissionReview<DynamicObject>>(body) {
        Ok(review) => match TryInto::<AdmissionRequest<DynamicObject>>::try_into(review) {
            Ok(request) => handler(request).await,
            Err(error) => bad_request(AdmissionResponse::invalid(""), &error.to_string()),
        },
        Err(error) => {
            let message = format!("cannot read the AdmissionReview: {error}");
            bad_request(AdmissionResponse::invalid(""), &message)
        }
    };
    to_json(&response.into_review())
}

/// The handler of a [`Defaulter`]: defaults the object of a create or update and answers with the
/// change as a JSON patch; lets anything else through.
pub(super) fn defaulting_handler<D: Defaulter>(defaulter: D) -> AdmissionHandler {
    let defaulter = Arc::new(defaulter);
    Arc::new(move |request| {
        let defaulter = defaulter.clone();
        async move { set_defaults(&*defaulter, request).await }.boxed()
    })
}

async fn set_defaults<D: Defaulter>(
    defaulter: &D,
    request: AdmissionRequest<DynamicObject>,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(&request);
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return response;
    }
    let Some(object) = &request.object else {
        return response; // nothing to default
    };
    // The patch goes from the object as received, fields unknown to the type included.
    let original = match serde_json::to_value(object) {
        Ok(original) => original,
        Err(error) => return bad_request(response, &error.to_string()),
    };
    let request: AdmissionRequest<D::Object> = match typed_request(request) {
        Ok(request) => request,
        Err(message) => return bad_request(response, &message),
    };
    let Some(mut object) = request.object.clone() else {
        return response; // read above
    };
    if let Err(denied) = defaulter.set_defaults(&mut object, &request).await {
        return deny(response, &denied);
    }
    let defaulted = match serde_json::to_value(&object) {
        Ok(defaulted) => defaulted,
        Err(error) => return bad_request(response, &error.to_string()),
    };
    let patch = patch_between(&original, &defaulted);
    if patch.0.is_empty() {
        return response;
    }
    debug!(operations = patch.0.len(), "defaulted");
    match response.clone().with_patch(patch) {
        Ok(patched) => patched,
        Err(error) => bad_request(response, &error.to_string()),
    }
}

/// The handler of a [`Validator`]: the create, update or delete check for the operation.
pub(super) fn validating_handler<V: Validator>(validator: V) -> AdmissionHandler {
    let validator = Arc::new(validator);
    Arc::new(move |request| {
        let validator = validator.clone();
        async move { validate(&*validator, request).await }.boxed()
    })
}

async fn validate<V: Validator>(
    validator: &V,
    request: AdmissionRequest<DynamicObject>,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(&request);
    if request.operation == Operation::Connect {
        return response;
    }
    let request: AdmissionRequest<V::Object> = match typed_request(request) {
        Ok(request) => request,
        Err(message) => return bad_request(response, &message),
    };
    let (object, old) = (request.object.as_ref(), request.old_object.as_ref());
    let validation = match (&request.operation, old, object) {
        (Operation::Create, _, Some(new)) => validator.validate_create(new, &request).await,
        (Operation::Update, Some(old), Some(new)) => {
            validator.validate_update(old, new, &request).await
        }
        (Operation::Delete, Some(old), _) => validator.validate_delete(old, &request).await,
        (Operation::Update | Operation::Delete, None, _) => {
            return bad_request(response, "the request has no oldObject");
        }
        _ => return bad_request(response, "the request has no object"),
    };
    match validation {
        Ok(warnings) => with_warnings(response, warnings),
        Err(denied) => deny(response, &denied),
    }
}

/// The request with its objects read as `K`.
fn typed_request<K>(request: AdmissionRequest<DynamicObject>) -> Result<AdmissionRequest<K>, String>
where
    K: Resource + DeserializeOwned,
{
    let object = |object: Option<DynamicObject>, what: &str| -> Result<Option<K>, String> {
        let Some(object) = object else {
            return Ok(None);
        };
        let value = serde_json::to_value(object).map_err(|e| e.to_string())?;
        serde_json::from_value(value)
            .map(Some)
            .map_err(|error| format!("cannot read the {what}: {error}"))
    };
    Ok(AdmissionRequest {
        object: object(request.object, "object")?,
        old_object: object(request.old_object, "oldObject")?,
        types: request.types,
        uid: request.uid,
        kind: request.kind,
        resource: request.resource,
        sub_resource: request.sub_resource,
        request_kind: request.request_kind,
        request_resource: request.request_resource,
        request_sub_resource: request.request_sub_resource,
        name: request.name,
        namespace: request.namespace,
        operation: request.operation,
        user_info: request.user_info,
        dry_run: request.dry_run,
        options: request.options,
    })
}

fn typed<K: DeserializeOwned>(object: Value) -> Result<K, String> {
    serde_json::from_value(object).map_err(|error| format!("cannot read the object: {error}"))
}

fn with_warnings(mut response: AdmissionResponse, warnings: Vec<String>) -> AdmissionResponse {
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

/// A refusal: the user's message with code 403 (Forbidden), or, for field errors, 422 (Invalid)
/// with a cause per field, as controller-runtime sends each.
fn deny(response: AdmissionResponse, denied: &Denied) -> AdmissionResponse {
    let mut response = response.deny(denied.message());
    response.result = denied.status();
    response
}

/// A refusal of a request that cannot be read, code 400.
fn bad_request(response: AdmissionResponse, message: &str) -> AdmissionResponse {
    warn!(%message, "webhook request refused as malformed");
    let mut response = response.deny(message);
    response.result.code = 400;
    response.result.reason = "BadRequest".into();
    response
}

/// The JSON patch that turns `original` into `defaulted`. Null members are left out of both sides
/// first: an absent field and a `null` one mean the same to the API server, and a type that writes
/// `None` as `null` must not add a patch operation per optional field.
pub(crate) fn patch_between(original: &Value, defaulted: &Value) -> json_patch::Patch {
    json_patch::diff(&without_nulls(original), &without_nulls(defaulted))
}

fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(members) => Value::Object(
            members
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Converts a whole object from one version (a spoke or the hub) to another, as JSON.
type Convert = fn(Value) -> Result<Value, String>;

/// How one spoke converts into the hub and back.
pub(super) struct Converter {
    to_hub: Convert,
    from_hub: Convert,
}

impl Converter {
    pub(super) fn new<Spoke, Hub>() -> Self
    where
        Spoke: Resource<DynamicType = ()> + DeserializeOwned + Serialize + From<Hub>,
        Hub: Resource<DynamicType = ()> + DeserializeOwned + Serialize + From<Spoke>,
    {
        Converter {
            to_hub: convert_object::<Spoke, Hub>,
            from_hub: convert_object::<Hub, Spoke>,
        }
    }
}

fn convert_object<From, To>(object: Value) -> Result<Value, String>
where
    From: DeserializeOwned,
    To: Resource<DynamicType = ()> + Serialize + std::convert::From<From>,
{
    let from: From = typed(object)?;
    let mut converted = serde_json::to_value(To::from(from)).map_err(|e| e.to_string())?;
    // The API version and kind are the target's, whatever the type writes.
    converted["apiVersion"] = To::api_version(&()).into_owned().into();
    converted["kind"] = To::kind(&()).into_owned().into();
    Ok(converted)
}

/// The versions of one kind: the hub and a converter per spoke.
pub(super) struct KindConversions {
    pub(super) hub: String,
    pub(super) spokes: BTreeMap<String, Converter>,
}

impl KindConversions {
    pub(super) fn new(hub: String) -> Self {
        KindConversions {
            hub,
            spokes: BTreeMap::new(),
        }
    }

    /// Converts `object` (at version `from`) to version `to`, through the hub.
    fn convert(&self, object: Value, from: &str, to: &str) -> Result<Value, String> {
        if from == to {
            return Ok(object);
        }
        let spoke = |version: &str| {
            self.spokes.get(version).ok_or_else(|| {
                let mut known: Vec<&str> = self.spokes.keys().map(String::as_str).collect();
                known.push(&self.hub);
                known.sort();
                format!(
                    "no conversion for version {version} (known: {})",
                    known.join(", ")
                )
            })
        };
        let hub = if from == self.hub {
            object
        } else {
            (spoke(from)?.to_hub)(object)?
        };
        if to == self.hub {
            Ok(hub)
        } else {
            (spoke(to)?.from_hub)(hub)
        }
    }
}

/// Answers a `ConversionReview` body: every object converted to the desired version, or a failure
/// naming the first object that could not be.
pub(super) fn convert(
    conversions: &BTreeMap<(String, String), KindConversions>,
    body: &[u8],
) -> Vec<u8> {
    let request = serde_json::from_slice::<ConversionReview>(body)
        .map_err(|e| format!("cannot read the ConversionReview: {e}"))
        .and_then(|review| ConversionRequest::try_from(review).map_err(|e| e.to_string()));
    let request = match request {
        Ok(request) => request,
        Err(message) => {
            warn!(%message, "conversion request refused as malformed");
            let status = Status::failure(&message, "BadRequest").with_code(400);
            return to_json(&ConversionResponse::invalid(status).into_review());
        }
    };
    let desired = request.desired_api_version.clone();
    let (desired_group, desired_version) = split_api_version(&desired);
    let mut converted = Vec::with_capacity(request.objects.len());
    let mut failure = None;
    for object in &request.objects {
        match convert_one(conversions, object.clone(), desired_group, desired_version) {
            Ok(object) => converted.push(object),
            Err(message) => {
                failure = Some(message);
                break;
            }
        }
    }
    let response = ConversionResponse::for_request(request);
    let response = match failure {
        None => response.success(converted),
        Some(message) => {
            warn!(%message, "conversion failed");
            response.failure(Status::failure(&message, "ConversionFailed"))
        }
    };
    to_json(&response.into_review())
}

fn convert_one(
    conversions: &BTreeMap<(String, String), KindConversions>,
    object: Value,
    group: &str,
    version: &str,
) -> Result<Value, String> {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let (api_version, kind) = (text(&object["apiVersion"]), text(&object["kind"]));
    let name = text(&object["metadata"]["name"]);
    let (from_group, from_version) = split_api_version(&api_version);
    let context = |message: String| format!("{kind} {name:?} from {api_version}: {message}");
    if from_group != group {
        return Err(context(format!("cannot convert into group {group}")));
    }
    let kinds = conversions.get(&(group.to_string(), kind.clone()));
    let kinds = kinds.ok_or_else(|| context(format!("no conversion registered for {kind}")))?;
    let from_version = from_version.to_string();
    kinds
        .convert(object, &from_version, version)
        .map_err(context)
}

/// `cache.example.com/v1` → (`cache.example.com`, `v1`); `v1` → (``, `v1`).
fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

fn to_json(review: &impl Serialize) -> Vec<u8> {
    // Reviews are plain data: serializing them cannot fail.
    serde_json::to_vec(review).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::webhook::{CONVERT_PATH, FieldError, Validation, Webhooks};

    mod v1alpha1 {
        #[derive(
            kube::CustomResource,
            Clone,
            Debug,
            PartialEq,
            serde::Deserialize,
            serde::Serialize,
            schemars::JsonSchema,
        )]
        #[kube(group = "cache.example.com", version = "v1alpha1", kind = "Memcached")]
        #[kube(derive = "PartialEq")]
        pub struct MemcachedSpec {
            pub size: Option<i32>,
            pub note: Option<String>,
        }
    }

    mod v1 {
        #[derive(
            kube::CustomResource,
            Clone,
            Debug,
            PartialEq,
            serde::Deserialize,
            serde::Serialize,
            schemars::JsonSchema,
        )]
        #[kube(group = "cache.example.com", version = "v1", kind = "Memcached")]
        pub struct MemcachedSpec {
            pub replicas: Option<i32>,
            pub note: Option<String>,
        }
    }

    mod v2 {
        #[derive(
            kube::CustomResource,
            Clone,
            Debug,
            PartialEq,
            serde::Deserialize,
            serde::Serialize,
            schemars::JsonSchema,
        )]
        #[kube(group = "cache.example.com", version = "v2", kind = "Memcached")]
        pub struct MemcachedSpec {
            pub count: i32,
        }
    }

    impl From<v1alpha1::Memcached> for v1::Memcached {
        fn from(old: v1alpha1::Memcached) -> Self {
            let spec = v1::MemcachedSpec {
                replicas: old.spec.size,
                note: old.spec.note,
            };
            v1::Memcached {
                metadata: old.metadata,
                spec,
            }
        }
    }

    impl From<v1::Memcached> for v1alpha1::Memcached {
        fn from(hub: v1::Memcached) -> Self {
            let spec = v1alpha1::MemcachedSpec {
                size: hub.spec.replicas,
                note: hub.spec.note,
            };
            v1alpha1::Memcached {
                metadata: hub.metadata,
                spec,
            }
        }
    }

    impl From<v2::Memcached> for v1::Memcached {
        fn from(old: v2::Memcached) -> Self {
            let spec = v1::MemcachedSpec {
                replicas: Some(old.spec.count),
                note: None,
            };
            v1::Memcached {
                metadata: old.metadata,
                spec,
            }
        }
    }

    impl From<v1::Memcached> for v2::Memcached {
        fn from(hub: v1::Memcached) -> Self {
            let spec = v2::MemcachedSpec {
                count: hub.spec.replicas.unwrap_or_default(),
            };
            v2::Memcached {
                metadata: hub.metadata,
                spec,
            }
        }
    }

    /// Defaults and validates sizes; records what each call saw of its request.
    #[derive(Clone, Default)]
    struct Sizes {
        seen: Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl Sizes {
        /// Records `operation name by user (dry run)` of a request.
        fn record(&self, what: &str, request: &AdmissionRequest<v1alpha1::Memcached>) {
            let user = request.user_info.username.as_deref().unwrap_or("nobody");
            let dry_run = if request.dry_run { " (dry run)" } else { "" };
            let line = format!(
                "{what} {:?} {} by {user}{dry_run}",
                request.operation, request.name
            );
            self.seen.lock().unwrap().push(line);
        }

        fn seen(&self) -> Vec<String> {
            self.seen.lock().unwrap().clone()
        }
    }

    fn check_size(memcached: &v1alpha1::Memcached) -> Validation {
        match memcached.spec.size {
            Some(size) if size > 5 => Err(Denied::new(format!("size {size} is above 5"))),
            Some(4) => Ok(vec!["size 4 is unusual".into()]),
            _ => Ok(vec![]),
        }
    }

    impl Defaulter for Sizes {
        type Object = v1alpha1::Memcached;

        async fn set_defaults(
            &self,
            memcached: &mut v1alpha1::Memcached,
            request: &AdmissionRequest<v1alpha1::Memcached>,
        ) -> Result<(), Denied> {
            self.record("default", request);
            // The request carries the object as received, whatever this method changes.
            assert_eq!(request.object.as_ref(), Some(&*memcached));
            if memcached.spec.note.as_deref() == Some("refuse") {
                return Err(Denied::new("no defaults for you"));
            }
            tokio::task::yield_now().await;
            memcached.spec.size.get_or_insert(3);
            Ok(())
        }
    }

    impl Validator for Sizes {
        type Object = v1alpha1::Memcached;

        async fn validate_create(
            &self,
            memcached: &v1alpha1::Memcached,
            request: &AdmissionRequest<v1alpha1::Memcached>,
        ) -> Validation {
            self.record("validate", request);
            tokio::task::yield_now().await;
            check_size(memcached)
        }

        async fn validate_update(
            &self,
            old: &v1alpha1::Memcached,
            new: &v1alpha1::Memcached,
            request: &AdmissionRequest<v1alpha1::Memcached>,
        ) -> Validation {
            self.record("validate", request);
            assert_eq!(request.old_object.as_ref(), Some(old));
            if old.spec.note != new.spec.note {
                let name = new.metadata.name.as_deref().unwrap_or_default();
                let immutable = FieldError::forbidden("spec.note", "may not change");
                return Err(Denied::invalid::<v1alpha1::Memcached>(
                    name,
                    vec![immutable],
                ));
            }
            check_size(new)
        }

        async fn validate_delete(
            &self,
            old: &v1alpha1::Memcached,
            request: &AdmissionRequest<v1alpha1::Memcached>,
        ) -> Validation {
            self.record("validate", request);
            match old.spec.note.as_deref() {
                Some("keep") => Err("kept".into()),
                _ => Ok(vec![]),
            }
        }
    }

    fn object(spec: Value) -> Value {
        json!({
            "apiVersion": "cache.example.com/v1alpha1",
            "kind": "Memcached",
            "metadata": { "name": "m", "namespace": "default", "creationTimestamp": null },
            "spec": spec,
        })
    }

    fn admission(operation: &str, object: Option<Value>, old: Option<Value>) -> Vec<u8> {
        let review = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4",
                "kind": { "group": "cache.example.com", "version": "v1alpha1", "kind": "Memcached" },
                "resource": { "group": "cache.example.com", "version": "v1alpha1", "resource": "memcacheds" },
                "name": "m",
                "namespace": "default",
                "operation": operation,
                "userInfo": { "username": "admin" },
                "object": object,
                "oldObject": old,
            }
        });
        serde_json::to_vec(&review).unwrap()
    }

    async fn call(webhooks: &Webhooks, path: &str, body: &[u8]) -> Value {
        let answer = webhooks
            .handle(path, body)
            .await
            .expect("a registered path");
        serde_json::from_slice(&answer).unwrap()
    }

    fn registry() -> Webhooks {
        registered(Sizes::default())
    }

    fn registered(sizes: Sizes) -> Webhooks {
        let webhooks = Webhooks::new();
        webhooks.defaulter(sizes.clone());
        webhooks.validator(sizes);
        webhooks
    }

    const MUTATE: &str = "/mutate-cache-example-com-v1alpha1-memcached";
    const VALIDATE: &str = "/validate-cache-example-com-v1alpha1-memcached";

    /// The patch of a response: kube writes the bytes as a JSON array of numbers, which the API
    /// server (Go's `[]byte`) reads as well as base64.
    fn patch_of(review: &Value) -> Value {
        let bytes: Vec<u8> = serde_json::from_value(review["response"]["patch"].clone()).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn defaulting_answers_with_a_json_patch_of_the_change_only() {
        let webhooks = registry();
        let review = call(
            &webhooks,
            MUTATE,
            &admission("CREATE", Some(object(json!({}))), None),
        )
        .await;
        let response = &review["response"];
        assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(review["kind"], "AdmissionReview");
        assert_eq!(response["uid"], "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4");
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
        assert_eq!(
            patch_of(&review),
            json!([{ "op": "add", "path": "/spec/size", "value": 3 }])
        );

        // Already set: no patch at all, though the type writes `note: null`.
        let set = admission(
            "UPDATE",
            Some(object(json!({ "size": 2 }))),
            Some(object(json!({}))),
        );
        let review = call(&webhooks, MUTATE, &set).await;
        assert_eq!(review["response"]["allowed"], true);
        assert!(review["response"].get("patch").is_none(), "{review}");
    }

    #[tokio::test]
    async fn a_defaulter_may_refuse() {
        let webhooks = registry();
        let body = admission("CREATE", Some(object(json!({ "note": "refuse" }))), None);
        let response = call(&webhooks, MUTATE, &body).await["response"].clone();
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["message"], "no defaults for you");
        assert_eq!(response["status"]["code"], 403);
    }

    #[tokio::test]
    async fn validation_admits_with_warnings_or_refuses_with_the_message() {
        let webhooks = registry();
        let create = |spec| admission("CREATE", Some(object(spec)), None);
        let response =
            call(&webhooks, VALIDATE, &create(json!({ "size": 2 }))).await["response"].clone();
        assert_eq!(response["allowed"], true);
        assert!(response.get("warnings").is_none());

        let response =
            call(&webhooks, VALIDATE, &create(json!({ "size": 4 }))).await["response"].clone();
        assert_eq!(response["allowed"], true);
        assert_eq!(response["warnings"], json!(["size 4 is unusual"]));

        let response =
            call(&webhooks, VALIDATE, &create(json!({ "size": 9 }))).await["response"].clone();
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["message"], "size 9 is above 5");
        assert_eq!(response["status"]["code"], 403);
        assert_eq!(response["status"]["reason"], "Forbidden");

        let update = admission(
            "UPDATE",
            Some(object(json!({ "note": "b" }))),
            Some(object(json!({ "note": "a" }))),
        );
        let response = call(&webhooks, VALIDATE, &update).await["response"].clone();
        // Field errors: 422 with a cause per field, as the API server's own validation.
        let status = &response["status"];
        let message = status["message"].as_str().unwrap();
        assert!(
            message.ends_with(r#"is invalid: spec.note: Forbidden: may not change"#),
            "{message}"
        );
        assert_eq!(
            (&status["code"], &status["reason"]),
            (&json!(422), &json!("Invalid"))
        );
        let cause = json!({ "reason": "FieldValueForbidden", "message": "Forbidden: may not change", "field": "spec.note" });
        assert_eq!(status["details"]["causes"], json!([cause]));
        assert_eq!(status["details"]["kind"], "Memcached");

        let delete = admission("DELETE", None, Some(object(json!({ "note": "keep" }))));
        let response = call(&webhooks, VALIDATE, &delete).await["response"].clone();
        assert_eq!(
            (&response["allowed"], &response["status"]["message"]),
            (&json!(false), &json!("kept"))
        );
        let delete = admission("DELETE", None, Some(object(json!({}))));
        assert_eq!(
            call(&webhooks, VALIDATE, &delete).await["response"]["allowed"],
            true
        );
    }

    #[tokio::test]
    async fn webhooks_get_the_request_as_the_api_server_sent_it() {
        let sizes = Sizes::default();
        let webhooks = registered(sizes.clone());
        let mut dry_run: Value = serde_json::from_slice(&admission(
            "CREATE",
            Some(object(json!({ "size": 2 }))),
            None,
        ))
        .unwrap();
        dry_run["request"]["dryRun"] = true.into();
        let dry_run = serde_json::to_vec(&dry_run).unwrap();
        call(&webhooks, MUTATE, &dry_run).await;
        call(&webhooks, VALIDATE, &dry_run).await;
        // The validators compare the old object in the request with the one they get.
        let update = admission(
            "UPDATE",
            Some(object(json!({ "size": 2 }))),
            Some(object(json!({ "size": 1 }))),
        );
        call(&webhooks, MUTATE, &update).await;
        let response = call(&webhooks, VALIDATE, &update).await["response"].clone();
        assert_eq!(response["allowed"], true, "{response}");
        let delete = admission("DELETE", None, Some(object(json!({}))));
        call(&webhooks, VALIDATE, &delete).await;
        assert_eq!(
            sizes.seen(),
            [
                "default Create m by admin (dry run)",
                "validate Create m by admin (dry run)",
                "default Update m by admin",
                "validate Update m by admin",
                "validate Delete m by admin",
            ]
        );
    }

    #[tokio::test]
    async fn requests_for_unit_tests_are_what_the_api_server_sends() {
        use crate::webhook::{create_request, delete_request, update_request};

        let sizes = Sizes::default();
        let old = serde_json::from_value::<v1alpha1::Memcached>(object(json!({}))).unwrap();
        let mut new = old.clone();
        new.spec.size = Some(9);
        let mut request = create_request(&new);
        request.user_info.username = Some("alice".into());
        let mut defaulted = old.clone();
        let mut create = create_request(&old);
        create.dry_run = true;
        sizes.set_defaults(&mut defaulted, &create).await.unwrap();
        assert_eq!(defaulted.spec.size, Some(3));
        let denied = sizes.validate_create(&new, &request).await.unwrap_err();
        assert_eq!(denied.message(), "size 9 is above 5");
        let update = update_request(&old, &new);
        assert_eq!(update.old_object.as_ref(), Some(&old));
        assert!(sizes.validate_update(&old, &new, &update).await.is_err());
        let delete = delete_request(&old);
        assert_eq!(delete.object, None);
        assert_eq!(sizes.validate_delete(&old, &delete).await, Ok(vec![]));
        assert_eq!(
            sizes.seen(),
            [
                "default Create m by nobody (dry run)",
                "validate Create m by alice",
                "validate Update m by nobody",
                "validate Delete m by nobody",
            ]
        );
        // The same fields as a request read from the API server's JSON.
        let sent = admission("UPDATE", Some(object(json!({}))), Some(object(json!({}))));
        let sent: AdmissionReview<v1alpha1::Memcached> = serde_json::from_slice(&sent).unwrap();
        let sent: AdmissionRequest<v1alpha1::Memcached> = sent.try_into().unwrap();
        let made = update_request(&old, &old);
        assert_eq!(made.kind, sent.kind);
        let resource = |r: &kube::core::GroupVersionResource| {
            (r.group.clone(), r.version.clone(), r.resource.clone())
        };
        assert_eq!(resource(&made.resource), resource(&sent.resource));
        assert_eq!((&made.name, &made.namespace), (&sent.name, &sent.namespace));
        assert_eq!(made.types, sent.types);
    }

    #[tokio::test]
    async fn malformed_requests_are_refused_not_panicked_on() {
        let webhooks = registry();
        for body in [&b"not json"[..], b"{}", b"{\"request\": 3}"] {
            let response = call(&webhooks, VALIDATE, body).await["response"].clone();
            assert_eq!(response["allowed"], false, "{response}");
            assert_eq!(response["status"]["code"], 400);
        }
        // An object that does not fit the type: refused with the uid kept.
        let body = admission("CREATE", Some(object(json!({ "size": "three" }))), None);
        let response = call(&webhooks, VALIDATE, &body).await["response"].clone();
        assert_eq!(response["allowed"], false);
        assert_eq!(response["uid"], "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4");
        assert_eq!(response["status"]["code"], 400);
        // An update without its old object.
        let body = admission("UPDATE", Some(object(json!({}))), None);
        let message =
            call(&webhooks, VALIDATE, &body).await["response"]["status"]["message"].clone();
        assert_eq!(message, "the request has no oldObject");

        assert!(webhooks.handle("/validate-other", b"{}").await.is_none());
        assert!(
            webhooks.handle("/convert", b"{}").await.is_none(),
            "no conversion registered"
        );
    }

    #[tokio::test]
    async fn custom_paths_serve_the_webhooks_there_only() {
        let webhooks = Webhooks::new();
        webhooks.defaulter_at("/custom-mutate-sizes", Sizes::default());
        webhooks.validator_at("/custom-validate-sizes", Sizes::default());
        assert_eq!(
            webhooks.paths(),
            ["/custom-mutate-sizes", "/custom-validate-sizes"]
        );
        let body = admission("CREATE", Some(object(json!({}))), None);
        let response = call(&webhooks, "/custom-mutate-sizes", &body).await["response"].clone();
        assert_eq!(response["allowed"], true, "{response}");
        assert_eq!(response["patchType"], "JSONPatch", "{response}");
        let response = call(&webhooks, "/custom-validate-sizes", &body).await["response"].clone();
        assert_eq!(response["allowed"], true, "{response}");
        // The default routes are not served.
        assert!(webhooks.handle(MUTATE, &body).await.is_none());
        assert!(webhooks.handle(VALIDATE, &body).await.is_none());
    }

    #[test]
    #[should_panic(expected = "does not start with /")]
    fn a_custom_path_is_absolute() {
        Webhooks::new().defaulter_at("custom-mutate", Sizes::default());
    }

    #[test]
    fn patches_ignore_nulls_but_keep_real_changes() {
        let original = json!({ "spec": { "a": 1, "b": null, "list": [1, 2] } });
        let defaulted =
            json!({ "spec": { "a": 1, "c": null, "d": { "e": 2 }, "list": [1, 2, 3] } });
        let patch = serde_json::to_value(patch_between(&original, &defaulted)).unwrap();
        assert_eq!(
            patch,
            json!([
                { "op": "add", "path": "/spec/d", "value": { "e": 2 } },
                { "op": "add", "path": "/spec/list/2", "value": 3 },
            ])
        );
        assert!(patch_between(&original, &original).0.is_empty());
    }

    fn conversion_review(desired: &str, objects: Vec<Value>) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": { "uid": "u-1", "desiredAPIVersion": desired, "objects": objects }
        }))
        .unwrap()
    }

    fn converting() -> Webhooks {
        let webhooks = Webhooks::new();
        webhooks.conversion::<v1alpha1::Memcached, v1::Memcached>();
        webhooks.conversion::<v2::Memcached, v1::Memcached>();
        webhooks
    }

    #[tokio::test]
    async fn conversion_goes_through_the_hub_and_keeps_the_order() {
        let webhooks = converting();
        assert_eq!(webhooks.paths(), ["/convert"]);
        let alpha = object(json!({ "size": 2, "note": "n" }));
        let hub = json!({
            "apiVersion": "cache.example.com/v1", "kind": "Memcached",
            "metadata": { "name": "h", "labels": { "a": "b" } }, "spec": { "replicas": 7 }
        });
        let body = conversion_review("cache.example.com/v2", vec![alpha, hub]);
        let review = call(&webhooks, CONVERT_PATH, &body).await;
        let response = &review["response"];
        assert_eq!(review["kind"], "ConversionReview");
        assert_eq!(response["uid"], "u-1");
        assert_eq!(response["result"]["status"], "Success");
        let objects = response["convertedObjects"].as_array().unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0]["apiVersion"], "cache.example.com/v2");
        assert_eq!(objects[0]["spec"], json!({ "count": 2 }));
        assert_eq!(objects[0]["metadata"]["namespace"], "default");
        assert_eq!(objects[1]["spec"], json!({ "count": 7 }));
        assert_eq!(objects[1]["metadata"]["labels"], json!({ "a": "b" }));
    }

    #[tokio::test]
    async fn conversion_round_trips() {
        let webhooks = converting();
        let alpha = object(json!({ "size": 2, "note": "n" }));
        let there = conversion_review("cache.example.com/v1", vec![alpha.clone()]);
        let hub =
            call(&webhooks, CONVERT_PATH, &there).await["response"]["convertedObjects"][0].clone();
        assert_eq!(hub["spec"], json!({ "replicas": 2, "note": "n" }));
        let back = conversion_review("cache.example.com/v1alpha1", vec![hub]);
        let back =
            call(&webhooks, CONVERT_PATH, &back).await["response"]["convertedObjects"][0].clone();
        let parsed: v1alpha1::Memcached = serde_json::from_value(back).unwrap();
        let expected: v1alpha1::Memcached = serde_json::from_value(alpha).unwrap();
        assert_eq!(parsed, expected);
    }

    #[tokio::test]
    async fn conversion_failures_name_the_object() {
        let webhooks = converting();
        let body = conversion_review("cache.example.com/v9", vec![object(json!({}))]);
        let response = call(&webhooks, CONVERT_PATH, &body).await["response"].clone();
        assert_eq!(response["result"]["status"], "Failure");
        let message = response["result"]["message"].as_str().unwrap();
        assert!(message.starts_with("Memcached \"m\" from cache.example.com/v1alpha1: no conversion for version v9 (known: v1, v1alpha1, v2)"), "{message}");
        assert_eq!(response["convertedObjects"], json!([]));

        let response = call(&webhooks, CONVERT_PATH, b"[]").await["response"].clone();
        assert_eq!(response["result"]["code"], 400);
    }

    #[test]
    #[should_panic(expected = "has hub v1 already, not v1alpha1")]
    fn one_hub_per_kind() {
        let webhooks = converting();
        webhooks.conversion::<v2::Memcached, v1alpha1::Memcached>();
    }

    impl From<v1alpha1::Memcached> for v2::Memcached {
        fn from(old: v1alpha1::Memcached) -> Self {
            v2::Memcached {
                metadata: old.metadata,
                spec: v2::MemcachedSpec {
                    count: old.spec.size.unwrap_or_default(),
                },
            }
        }
    }

    impl From<v2::Memcached> for v1alpha1::Memcached {
        fn from(old: v2::Memcached) -> Self {
            v1alpha1::Memcached {
                metadata: old.metadata,
                spec: v1alpha1::MemcachedSpec {
                    size: Some(old.spec.count),
                    note: None,
                },
            }
        }
    }
}
