//! Admission webhooks (defaulting and validation) and conversion webhooks, served over HTTPS to the API
//! server.
//!
//! An operator implements [`Defaulter`] and/or [`Validator`] for a kind, registers them with the
//! manager's [`Webhooks`], and [`Controllers::run`](crate::manager::Controllers::run) serves them on
//! `--webhook-port` (9443) with the certificate in `--webhook-cert-path`. Both traits are async and
//! get the [`AdmissionRequest`] beside the object: who asks (`request.user_info`), for what
//! (`request.operation`), whether it is a dry run (`request.dry_run`), and on an update the stored
//! object (`request.old_object`).
//!
//! ```no_run
//! use rustbuilder_runtime::manager::{Manager, ManagerArgs};
//! use rustbuilder_runtime::webhook::{AdmissionRequest, Defaulter, Denied, Validation, Validator};
//! # #[derive(kube::CustomResource, Clone, Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
//! # #[kube(group = "cache.example.com", version = "v1alpha1", kind = "Memcached", namespaced)]
//! # struct MemcachedSpec { size: Option<i32> }
//!
//! struct MemcachedWebhook;
//!
//! impl Defaulter for MemcachedWebhook {
//!     type Object = Memcached;
//!
//!     async fn set_defaults(
//!         &self,
//!         memcached: &mut Memcached,
//!         _request: &AdmissionRequest<Memcached>,
//!     ) -> Result<(), Denied> {
//!         memcached.spec.size.get_or_insert(1);
//!         Ok(())
//!     }
//! }
//!
//! impl Validator for MemcachedWebhook {
//!     type Object = Memcached;
//!
//!     async fn validate_create(
//!         &self,
//!         memcached: &Memcached,
//!         _request: &AdmissionRequest<Memcached>,
//!     ) -> Validation {
//!         match memcached.spec.size {
//!             Some(size) if size > 5 => Err(Denied::new("spec.size must be at most 5")),
//!             _ => Ok(vec![]),
//!         }
//!     }
//!
//!     async fn validate_update(
//!         &self,
//!         old: &Memcached,
//!         new: &Memcached,
//!         request: &AdmissionRequest<Memcached>,
//!     ) -> Validation {
//!         if new.spec.size < old.spec.size && !request.dry_run {
//!             let user = request.user_info.username.as_deref().unwrap_or("someone");
//!             tracing::info!(user, "memcached scaled down");
//!         }
//!         self.validate_create(new, request).await
//!     }
//!
//!     async fn validate_delete(
//!         &self,
//!         _old: &Memcached,
//!         _request: &AdmissionRequest<Memcached>,
//!     ) -> Validation {
//!         Ok(vec![])
//!     }
//! }
//!
//! # async fn run(args: ManagerArgs) -> Result<(), rustbuilder_runtime::manager::Error> {
//! let manager = Manager::start("memcached-operator", "memcached-operator.example.com", args).await?;
//! manager.webhooks().defaulter(MemcachedWebhook);
//! manager.webhooks().validator(MemcachedWebhook);
//! manager.controllers().run().await
//! # }
//! ```
//!
//! # Reading the cluster from a webhook
//!
//! A webhook answers while the API server waits (10 seconds at most by default), so it reads what
//! it needs from the manager's shared caches rather than asking the API server: hold a
//! [`Cache`](crate::cache::Cache) from [`Manager::cache`](crate::Manager::cache) in the webhook's
//! struct. The cache is the one every controller of the manager reads, with no watch of its own.
//! Here a validator refuses a name that another namespace already uses:
//!
//! ```no_run
//! use kube::ResourceExt;
//! use rustbuilder_runtime::cache::Cache;
//! use rustbuilder_runtime::manager::{Manager, ManagerArgs};
//! use rustbuilder_runtime::webhook::{AdmissionRequest, Denied, Validation, Validator};
//! # #[derive(kube::CustomResource, Clone, Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
//! # #[kube(group = "cache.example.com", version = "v1alpha1", kind = "Memcached", namespaced)]
//! # struct MemcachedSpec { size: Option<i32> }
//!
//! struct UniqueNames {
//!     memcacheds: Cache<Memcached>,
//! }
//!
//! impl Validator for UniqueNames {
//!     type Object = Memcached;
//!
//!     async fn validate_create(
//!         &self,
//!         memcached: &Memcached,
//!         request: &AdmissionRequest<Memcached>,
//!     ) -> Validation {
//!         let name = memcached.name_any();
//!         let taken = self.memcacheds.list().into_iter().find(|other| {
//!             other.name_any() == name && other.namespace() != request.namespace
//!         });
//!         match taken {
//!             Some(other) => Err(Denied::new(format!(
//!                 "the name {name} is taken in namespace {}",
//!                 other.namespace().unwrap_or_default()
//!             ))),
//!             None => Ok(vec![]),
//!         }
//!     }
//!
//!     async fn validate_update(
//!         &self,
//!         _old: &Memcached,
//!         _new: &Memcached,
//!         _request: &AdmissionRequest<Memcached>,
//!     ) -> Validation {
//!         Ok(vec![])
//!     }
//!
//!     async fn validate_delete(
//!         &self,
//!         _old: &Memcached,
//!         _request: &AdmissionRequest<Memcached>,
//!     ) -> Validation {
//!         Ok(vec![])
//!     }
//! }
//!
//! # async fn run(args: ManagerArgs) -> Result<(), rustbuilder_runtime::manager::Error> {
//! let manager = Manager::start("memcached-operator", "memcached-operator.example.com", args).await?;
//! let memcacheds = manager.cache::<Memcached>();
//! manager.webhooks().validator(UniqueNames { memcacheds });
//! manager.controllers().run().await
//! # }
//! ```
//!
//! A cache lags the API server by the time a watch event takes to arrive (usually milliseconds), and
//! it is empty until its first list: a check that must hold under concurrent writes belongs in the
//! controller, or in the object's name. The manager is not ready (`/readyz`) before its caches are
//! synced, so the API server does not call a webhook in a starting pod through its Service.
//!
//! # Routes
//!
//! The routes are named as Kubebuilder names them, so the `// +rustbuilder:webhook:` markers (and the
//! `config/webhook/manifests.yaml` that `manifests` writes from them) point at them:
//! [`mutate_path`] (`/mutate-<group with - for .>-<version>-<kind>`), [`validate_path`]
//! (`/validate-…`) and [`CONVERT_PATH`] (`/convert`).
//!
//! Conversion follows Kubebuilder's hub and spoke model, with Rust's `From`: the hub is the storage
//! version, each other version (spoke) converts from and into it, and [`Webhooks::conversion`]
//! registers one spoke. Between two spokes the runtime goes through the hub. Conversion is plain
//! data transformation, so it stays synchronous.
//!
//! [`Server`] serves a [`Webhooks`] registry on its own, for tests that do not start a manager; unit
//! tests call a webhook's methods directly with a request from [`create_request`],
//! [`update_request`] or [`delete_request`].

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use kube::Resource;
use kube::core::admission::{META_API_VERSION_V1, META_KIND};
use kube::core::response::{StatusCause, StatusDetails};
use kube::core::{GroupVersionKind, GroupVersionResource, Status, TypeMeta};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::metrics::Metrics;

mod review;
mod server;

pub use kube::core::admission::{AdmissionRequest, Operation};
pub use server::Server;

/// Warnings returned to the client with an admitted object (kubectl prints them).
pub type Warnings = Vec<String>;

/// The outcome of a validation: admitted with warnings (often none), or refused.
pub type Validation = Result<Warnings, Denied>;

/// Why an object is refused: the message the user sees from kubectl, after the API server's
/// `admission webhook "<name>" denied the request: `.
///
/// [`Denied::new`] refuses with a message (HTTP 403, `Forbidden`, as controller-runtime sends an
/// error of its own). [`Denied::invalid`] refuses as the API server refuses a field it validates
/// itself: 422 `Invalid`, one cause per field, which clients read field by field (controller-runtime's
/// `apierrors.NewInvalid`):
///
/// ```
/// use rustbuilder_runtime::webhook::{Denied, FieldError};
/// # use k8s_openapi::api::core::v1::ConfigMap;
///
/// let denied = Denied::invalid::<ConfigMap>("settings", vec![
///     FieldError::invalid("data.mode", "fastest", "one of: fast, slow"),
///     FieldError::required("data.owner", "who to ask"),
/// ]);
/// assert_eq!(
///     denied.message(),
///     r#"ConfigMap "settings" is invalid: [data.mode: Invalid value: "fastest": one of: fast, slow, data.owner: Required value: who to ask]"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    message: String,
    invalid: Option<Invalid>,
}

/// The object and fields of a [`Denied::invalid`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct Invalid {
    group: String,
    kind: String,
    name: String,
    errors: Vec<FieldError>,
}

/// A field's problem, as the API server reports it: the field's path (`spec.schedule`,
/// `spec.ports[0].port`), what is wrong, and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    field: String,
    reason: FieldReason,
    value: Option<String>,
    detail: String,
}

/// The kinds of field errors, as Kubernetes names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldReason {
    Invalid,
    Required,
    Forbidden,
}

impl FieldError {
    /// `field` holds `value`, which is not allowed: `detail` says why.
    pub fn invalid(
        field: impl Into<String>,
        value: impl fmt::Debug,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            field: field.into(),
            reason: FieldReason::Invalid,
            value: Some(format!("{value:?}")),
            detail: detail.into(),
        }
    }

    /// `field` is missing and must be set.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            reason: FieldReason::Required,
            value: None,
            detail: detail.into(),
        }
    }

    /// `field` may not be set (or changed) here.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            reason: FieldReason::Forbidden,
            value: None,
            detail: detail.into(),
        }
    }

    /// The field's path.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong, without the field: `Invalid value: "x": detail`.
    fn body(&self) -> String {
        let kind = match self.reason {
            FieldReason::Invalid => "Invalid value",
            FieldReason::Required => "Required value",
            FieldReason::Forbidden => "Forbidden",
        };
        match &self.value {
            Some(value) => format!("{kind}: {value}: {}", self.detail),
            None => format!("{kind}: {}", self.detail),
        }
    }

    fn cause(&self) -> StatusCause {
        let reason = match self.reason {
            FieldReason::Invalid => "FieldValueInvalid",
            FieldReason::Required => "FieldValueRequired",
            FieldReason::Forbidden => "FieldValueForbidden",
        };
        StatusCause {
            reason: reason.into(),
            message: self.body(),
            field: self.field.clone(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

impl Denied {
    /// A refusal with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Denied {
            message: message.into(),
            invalid: None,
        }
    }

    /// A refusal of the object `name` of kind `K` for the fields of `errors` (at least one), as the
    /// API server refuses invalid fields: `<Kind>.<group> "<name>" is invalid: <field>: ...`.
    pub fn invalid<K: Resource<DynamicType = ()>>(name: &str, errors: Vec<FieldError>) -> Self {
        let (group, kind) = (K::group(&()).to_string(), K::kind(&()).to_string());
        let qualified = match group.as_str() {
            "" => kind.clone(),
            group => format!("{kind}.{group}"),
        };
        let listed: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let fields = match listed.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        Denied {
            message: format!("{qualified} {name:?} is invalid: {fields}"),
            invalid: Some(Invalid {
                group,
                kind,
                name: name.to_string(),
                errors,
            }),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The field errors of a refusal made by [`Denied::invalid`] (none for [`Denied::new`]).
    pub fn field_errors(&self) -> &[FieldError] {
        self.invalid.as_ref().map_or(&[], |i| &i.errors)
    }

    /// The refusal as the API server's status: 422 with its causes, or 403.
    pub(crate) fn status(&self) -> Status {
        let Some(invalid) = &self.invalid else {
            return Status::failure(&self.message, "Forbidden").with_code(403);
        };
        let mut status = Status::failure(&self.message, "Invalid").with_code(422);
        status.details = Some(StatusDetails {
            name: invalid.name.clone(),
            group: invalid.group.clone(),
            kind: invalid.kind.clone(),
            uid: String::new(),
            causes: invalid.errors.iter().map(FieldError::cause).collect(),
            retry_after_seconds: 0,
        });
        status
    }
}

impl From<String> for Denied {
    fn from(message: String) -> Self {
        Denied::new(message)
    }
}

impl From<&str> for Denied {
    fn from(message: &str) -> Self {
        Denied::new(message)
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Denied {}

/// Sets the fields a user left out, when an object of its kind is created or updated (a mutating
/// webhook). The runtime sends the API server the change as a JSON patch.
///
/// Implement it with `async fn set_defaults(...)`; the future must be `Send`, as the server runs it
/// on any of its threads.
pub trait Defaulter: Send + Sync + 'static {
    /// The kind this webhook defaults, e.g. `Memcached`.
    type Object: Resource<DynamicType = ()>
        + DeserializeOwned
        + Serialize
        + Clone
        + Send
        + Sync
        + 'static;

    /// Sets defaults on `object`, the object of a create or an update. `request` is the request as
    /// the API server sent it: its `object` is the object as received, before any default; on an
    /// update its `old_object` is the stored one. An error refuses the request with its message.
    ///
    /// The API server may call a mutating webhook more than once for one request, and always on a
    /// dry run (`request.dry_run`): setting defaults must have no effect beyond the object.
    fn set_defaults(
        &self,
        object: &mut Self::Object,
        request: &AdmissionRequest<Self::Object>,
    ) -> impl Future<Output = Result<(), Denied>> + Send;
}

/// Admits or refuses objects of its kind when they are created, updated or deleted (a validating
/// webhook). Runs after every defaulter, on the object as it will be stored.
///
/// Implement it with `async fn validate_create(...)` and so on; the futures must be `Send`. Each
/// method gets the [`AdmissionRequest`] too, for who asks (`request.user_info`) and whether the
/// request is a dry run (`request.dry_run`): a webhook with effects beyond its answer must skip them
/// then, and its marker says `sideEffects=NoneOnDryRun`.
pub trait Validator: Send + Sync + 'static {
    /// The kind this webhook validates, e.g. `Memcached`.
    type Object: Resource<DynamicType = ()>
        + DeserializeOwned
        + Serialize
        + Clone
        + Send
        + Sync
        + 'static;

    /// Checks a new object.
    fn validate_create(
        &self,
        object: &Self::Object,
        request: &AdmissionRequest<Self::Object>,
    ) -> impl Future<Output = Validation> + Send;

    /// Checks a change from `old`, the stored object, to `new`.
    fn validate_update(
        &self,
        old: &Self::Object,
        new: &Self::Object,
        request: &AdmissionRequest<Self::Object>,
    ) -> impl Future<Output = Validation> + Send;

    /// Checks that `old`, the stored object, may be deleted. The API server only asks when the
    /// webhook's configuration lists the `delete` verb.
    fn validate_delete(
        &self,
        old: &Self::Object,
        request: &AdmissionRequest<Self::Object>,
    ) -> impl Future<Output = Validation> + Send;
}

/// A request to create `object`, as the API server sends it to a webhook: for unit tests that call
/// a [`Defaulter`] or [`Validator`] directly. The user is left empty and `dry_run` false; set the
/// fields a test needs:
///
/// ```
/// # #[derive(kube::CustomResource, Clone, Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
/// # #[kube(group = "cache.example.com", version = "v1alpha1", kind = "Memcached", namespaced)]
/// # struct MemcachedSpec { size: Option<i32> }
/// use rustbuilder_runtime::webhook::{Operation, create_request};
///
/// let memcached = Memcached::new("sample", MemcachedSpec { size: None });
/// let mut request = create_request(&memcached);
/// request.user_info.username = Some("alice".into());
/// request.dry_run = true;
/// assert_eq!(request.operation, Operation::Create);
/// assert_eq!(request.name, "sample");
/// ```
pub fn create_request<K>(object: &K) -> AdmissionRequest<K>
where
    K: Resource<DynamicType = ()> + Clone,
{
    request(Operation::Create, Some(object), None)
}

/// A request to change `old` into `new`, as the API server sends it (see [`create_request`]).
pub fn update_request<K>(old: &K, new: &K) -> AdmissionRequest<K>
where
    K: Resource<DynamicType = ()> + Clone,
{
    request(Operation::Update, Some(new), Some(old))
}

/// A request to delete `old`, as the API server sends it (see [`create_request`]).
pub fn delete_request<K>(old: &K) -> AdmissionRequest<K>
where
    K: Resource<DynamicType = ()> + Clone,
{
    request(Operation::Delete, None, Some(old))
}

fn request<K>(operation: Operation, object: Option<&K>, old: Option<&K>) -> AdmissionRequest<K>
where
    K: Resource<DynamicType = ()> + Clone,
{
    let (group, version) = (K::group(&()), K::version(&()));
    let meta = object.or(old).map(|object| object.meta());
    AdmissionRequest {
        types: TypeMeta {
            api_version: META_API_VERSION_V1.to_string(),
            kind: META_KIND.to_string(),
        },
        uid: "00000000-0000-0000-0000-000000000000".to_string(),
        kind: GroupVersionKind::gvk(&group, &version, &K::kind(&())),
        resource: GroupVersionResource::gvr(&group, &version, &K::plural(&())),
        sub_resource: None,
        request_kind: None,
        request_resource: None,
        request_sub_resource: None,
        name: meta.and_then(|meta| meta.name.clone()).unwrap_or_default(),
        namespace: meta.and_then(|meta| meta.namespace.clone()),
        operation,
        user_info: Default::default(),
        object: object.cloned(),
        old_object: old.cloned(),
        dry_run: false,
        options: None,
    }
}

/// The route of the conversion webhook, which every converted kind shares.
pub const CONVERT_PATH: &str = "/convert";

/// The route of `K`'s defaulting webhook, as Kubebuilder names it:
/// `/mutate-cache-example-com-v1alpha1-memcached` for `cache.example.com/v1alpha1` `Memcached`.
pub fn mutate_path<K: Resource<DynamicType = ()>>() -> String {
    admission_path("mutate", &K::group(&()), &K::version(&()), &K::kind(&()))
}

/// The route of `K`'s validating webhook: `/validate-cache-example-com-v1alpha1-memcached`.
pub fn validate_path<K: Resource<DynamicType = ()>>() -> String {
    admission_path("validate", &K::group(&()), &K::version(&()), &K::kind(&()))
}

fn admission_path(prefix: &str, group: &str, version: &str, kind: &str) -> String {
    let group = group.replace('.', "-");
    let kind = kind.to_lowercase();
    format!("/{prefix}-{group}-{version}-{kind}")
}

/// An admission webhook's route is an absolute path, and not the conversion webhook's.
fn check_admission_path(path: &str) {
    assert!(
        path.starts_with('/'),
        "webhook path `{path}` does not start with /"
    );
    assert!(
        path != CONVERT_PATH,
        "webhook path `{path}` is the conversion webhook's"
    );
}

/// The webhooks of an operator, by route. Registration takes `&self` and may happen before or after
/// the server starts; clones share the same registry.
///
/// Registering a second defaulter (or validator) for the same kind and version replaces the first.
#[derive(Clone, Default)]
pub struct Webhooks {
    routes: Arc<Mutex<Routes>>,
    /// Where the server counts calls: the manager's metrics, if any.
    metrics: Option<Metrics>,
}

#[derive(Default)]
struct Routes {
    /// Admission handlers by path.
    admission: BTreeMap<String, review::AdmissionHandler>,
    /// Conversions by (group, kind).
    conversions: BTreeMap<(String, String), review::KindConversions>,
}

impl fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhooks")
            .field("paths", &self.paths())
            .finish()
    }
}

impl Webhooks {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty registry whose server counts its calls in `metrics`
    /// (`controller_runtime_webhook_requests_total{webhook,code}` and
    /// `controller_runtime_webhook_latency_seconds{webhook}`, as controller-runtime names them).
    pub fn with_metrics(metrics: Metrics) -> Self {
        Webhooks {
            metrics: Some(metrics),
            ..Self::default()
        }
    }

    pub(crate) fn metrics(&self) -> Option<&Metrics> {
        self.metrics.as_ref()
    }

    /// Serves `defaulter` on [`mutate_path`] of its kind.
    pub fn defaulter<D: Defaulter>(&self, defaulter: D) {
        self.defaulter_at(&mutate_path::<D::Object>(), defaulter);
    }

    /// Serves `defaulter` on `path`, e.g. `/custom-mutate-sailor`: the path of its
    /// `// +rustbuilder:webhook:` marker when that is not [`mutate_path`] (`create webhook
    /// --defaulting-path`).
    ///
    /// # Panics
    ///
    /// If `path` does not start with `/`, or is [`CONVERT_PATH`]: a mistake in the operator's `main`,
    /// seen at its first start.
    pub fn defaulter_at<D: Defaulter>(&self, path: &str, defaulter: D) {
        check_admission_path(path);
        let handler = review::defaulting_handler(defaulter);
        self.routes().admission.insert(path.to_string(), handler);
    }

    /// Serves `validator` on [`validate_path`] of its kind.
    pub fn validator<V: Validator>(&self, validator: V) {
        self.validator_at(&validate_path::<V::Object>(), validator);
    }

    /// Serves `validator` on `path`, e.g. `/custom-validate-admiral` (`create webhook
    /// --validation-path`).
    ///
    /// # Panics
    ///
    /// As [`Webhooks::defaulter_at`].
    pub fn validator_at<V: Validator>(&self, path: &str, validator: V) {
        check_admission_path(path);
        let handler = review::validating_handler(validator);
        self.routes().admission.insert(path.to_string(), handler);
    }

    /// Converts between `Spoke` and `Hub`, two versions of one kind, on [`CONVERT_PATH`]: one call per
    /// spoke, with the same hub (the storage version) each time. Objects go from one spoke to another
    /// through the hub.
    ///
    /// # Panics
    ///
    /// If the two types are not versions of the same group and kind, or if another hub was
    /// registered for the kind: both are mistakes in the operator's `main`, seen at its first start.
    pub fn conversion<Spoke, Hub>(&self)
    where
        Spoke: Resource<DynamicType = ()> + DeserializeOwned + Serialize + From<Hub> + 'static,
        Hub: Resource<DynamicType = ()> + DeserializeOwned + Serialize + From<Spoke> + 'static,
    {
        let (group, kind) = (Hub::group(&()).into_owned(), Hub::kind(&()).into_owned());
        let (spoke_group, spoke_kind) = (Spoke::group(&()), Spoke::kind(&()));
        assert!(
            spoke_group == group && spoke_kind == kind,
            "webhook conversion: {spoke_kind}.{spoke_group} and {kind}.{group} are not versions of one kind"
        );
        let hub = Hub::version(&()).into_owned();
        let spoke = Spoke::version(&()).into_owned();
        assert!(
            spoke != hub,
            "webhook conversion: {kind}.{group} {spoke} is the hub itself"
        );
        let mut routes = self.routes();
        let conversions = routes
            .conversions
            .entry((group.clone(), kind.clone()))
            .or_insert_with(|| review::KindConversions::new(hub.clone()));
        assert!(
            conversions.hub == hub,
            "webhook conversion: {kind}.{group} has hub {} already, not {hub}",
            conversions.hub
        );
        conversions
            .spokes
            .insert(spoke, review::Converter::new::<Spoke, Hub>());
    }

    /// Whether nothing is registered: then the manager opens no webhook port and needs no certificate.
    pub fn is_empty(&self) -> bool {
        let routes = self.routes();
        routes.admission.is_empty() && routes.conversions.is_empty()
    }

    /// The routes served, sorted: every admission path, and [`CONVERT_PATH`] when a conversion is
    /// registered.
    pub fn paths(&self) -> Vec<String> {
        let routes = self.routes();
        let mut paths: Vec<String> = routes.admission.keys().cloned().collect();
        if !routes.conversions.is_empty() {
            paths.push(CONVERT_PATH.to_string());
        }
        paths.sort();
        paths
    }

    /// Answers one webhook call: the JSON body of an `AdmissionReview` (or, on [`CONVERT_PATH`], a
    /// `ConversionReview`) in, the review with its response out. `None` when nothing is registered
    /// on `path`. A body that cannot be read gets a refusal, never a panic.
    pub async fn handle(&self, path: &str, body: &[u8]) -> Option<Vec<u8>> {
        if path == CONVERT_PATH {
            let routes = self.routes();
            if routes.conversions.is_empty() {
                return None;
            }
            return Some(review::convert(&routes.conversions, body));
        }
        // Not under the lock: a handler runs user code, which may take its time.
        let handler = self.routes().admission.get(path).cloned()?;
        Some(review::admit(&handler, body).await)
    }

    fn routes(&self) -> MutexGuard<'_, Routes> {
        // Registration cannot leave the maps half-updated: a poisoned lock is still usable.
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[derive(
        kube::CustomResource,
        Clone,
        Debug,
        serde::Deserialize,
        serde::Serialize,
        schemars::JsonSchema,
    )]
    #[kube(group = "cache.example.com", version = "v1alpha1", kind = "Memcached")]
    struct MemcachedSpec {
        size: i32,
    }

    #[test]
    fn paths_are_kubebuilders() {
        assert_eq!(
            mutate_path::<Memcached>(),
            "/mutate-cache-example-com-v1alpha1-memcached"
        );
        assert_eq!(
            validate_path::<Memcached>(),
            "/validate-cache-example-com-v1alpha1-memcached"
        );
        // The core group is empty, as in controller-runtime.
        assert_eq!(validate_path::<Pod>(), "/validate--v1-pod");
    }

    #[test]
    fn denied_from_strings() {
        let denied: Denied = "no".into();
        assert_eq!(denied, Denied::new(String::from("no")));
        assert_eq!(denied.to_string(), "no");
        assert_eq!(denied.message(), "no");
    }
}
