// Copyright The project Authors
// SPDX-License-Identifier: Apache-2.0

//! The `Memcached` controller: runs the image of each `Memcached` as a Deployment.
//!
//! For every `Memcached` it server-side applies a Deployment of the same name (owned by the
//! `Memcached`, so it is garbage-collected with it), writes conditions to the status and
//! publishes events. Edit [`build_deployment`] to change what runs and [`desired_status`] to
//! change what is reported; the RBAC markers below must list every API call the code makes
//! (`make manifests` turns them into `config/rbac/role.yaml`).

use std::{collections::BTreeMap, sync::Arc};

use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::{Deployment, DeploymentCondition, DeploymentSpec},
    core::v1::{
        Capabilities, Container, ContainerPort, PodSecurityContext, PodSpec, PodTemplateSpec,
        SeccompProfile, SecurityContext,
    },
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ObjectMeta, Patch, PatchParams},
    runtime::{
        WatchStreamExt,
        controller::{self, Action, Controller},
        events::{Event, EventType, Recorder},
        finalizer::{Event as FinalizerEvent, finalizer},
        reflector::{self, ObjectRef, Store},
        watcher::{self, watcher},
    },
};
use serde_json::Value;
use tracing::{debug, info, warn};

use crate::api::v1alpha1::{Memcached, MemcachedStatus};
use crate::conditions::{condition, find_condition, now, set_condition};
use crate::controller::{ErrorBackoff, MANAGER_NAME, Manager, reporter};
use crate::{Error, Result};

// RBAC: exactly the calls made below (`make manifests` turns these lines into config/rbac/role.yaml).
// - memcacheds: list+watch (Controller), patch (finalizer add/remove).
// - memcacheds/status: patch (server-side apply of the status).
// - memcacheds/finalizers: update, needed where OwnerReferencesPermissionEnforcement is on,
//   because our Deployments carry `blockOwnerDeletion: true`.
// - deployments: list+watch (the controller's cache), get (read before creating one the cache
//   does not know yet), create+patch (server-side apply; when it creates the object the apiserver
//   also checks `create`).
// - events: create, then patch to count repeats (kube's event Recorder).
// +rustbuilder:rbac:groups=cache.example.com,resources=memcacheds,verbs=list;watch;patch
// +rustbuilder:rbac:groups=cache.example.com,resources=memcacheds/status,verbs=patch
// +rustbuilder:rbac:groups=cache.example.com,resources=memcacheds/finalizers,verbs=update
// +rustbuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch
// +rustbuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

/// Finalizer that lets the controller act before a `Memcached` disappears.
pub const FINALIZER: &str = "cache.example.com/finalizer";

/// Environment variable naming the image to run (set in `config/manager/manager.yaml`).
pub const IMAGE_ENV: &str = "MEMCACHED_IMAGE";

/// Image used when [`IMAGE_ENV`] is not set.
pub const DEFAULT_IMAGE: &str = "memcached:1.6.26-alpine3.19";

/// Condition types written to `status.conditions`.
pub const AVAILABLE: &str = "Available";
/// The Deployment is rolling out or scaling.
pub const PROGRESSING: &str = "Progressing";
/// Something needs a human: a failure, a stuck rollout, or deletion in progress.
pub const DEGRADED: &str = "Degraded";

/// Everything a reconciliation needs, shared by all of them.
pub struct Context {
    /// Client for the Kubernetes API.
    pub client: Client,
    /// Publishes events on `Memcached` objects (visible in `kubectl describe`).
    pub recorder: Recorder,
    /// Image of the container the Deployments run.
    pub image: String,
    /// Retry delays of objects whose reconciliation failed.
    pub backoff: ErrorBackoff,
    /// Every Deployment as the controller's watch last saw it: reading one costs no API call.
    pub deployments: Store<Deployment>,
}

/// The image named by `MEMCACHED_IMAGE`, or [`DEFAULT_IMAGE`].
pub fn image_from_env() -> String {
    std::env::var(IMAGE_ENV)
        .ok()
        .filter(|image| !image.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_IMAGE.to_owned())
}

/// Names this controller in metrics (`controller="memcached"`) and logs.
const NAME: &str = "memcached";

/// How many objects may be reconciled at the same time (one object is never reconciled twice at
/// once). A reconcile spends its time waiting for the API server, so workers are cheap: with 2, a
/// thousand new objects waited in line for their Deployments three times longer than with 16.
const MAX_CONCURRENT_RECONCILES: u16 = 16;

/// Runs the controller until shutdown is requested, then lets in-flight reconciles finish.
pub async fn run(manager: Manager) {
    run_with(manager, image_from_env()).await;
}

/// [`run`] with a given image (tests use it).
pub async fn run_with(manager: Manager, image: String) {
    info!(controller = NAME, %image, "starting");
    let client = manager.client();
    let (deployments, cache) = reflector::store();
    // One watch on Deployments does two jobs: it keeps `deployments` current, and a change to a
    // Deployment (status update, someone editing or deleting it) reconciles the object owning it.
    // Managed fields are dropped from the cache: they are large and never read here.
    let deployment_changes = watcher(Api::<Deployment>::all(client.clone()), Default::default())
        .modify(|deployment| deployment.managed_fields_mut().clear())
        .reflect(cache)
        .touched_objects();
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter()),
        client: client.clone(),
        image,
        backoff: ErrorBackoff::default(),
        deployments,
    });
    let api = Api::<Memcached>::all(client);
    let config = controller::Config::default().concurrency(MAX_CONCURRENT_RECONCILES);
    let controller = Controller::new(api, watcher::Config::default())
        .owns_stream(deployment_changes)
        .with_config(config)
        .graceful_shutdown_on(manager.shutdown_signal());
    manager.ready_when_synced(controller.store());
    let metrics = manager
        .metrics()
        .controller(NAME, MAX_CONCURRENT_RECONCILES);
    controller
        .run(metrics.instrument(reconcile), error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => info!(controller = NAME, %object, "reconciled"),
                Err(controller::Error::ReconcilerFailed(error, object)) => {
                    warn!(controller = NAME, %object, %error, "reconcile failed")
                }
                // E.g. the watch failed (CRD not installed, no permission); it is retried.
                Err(error) => warn!(controller = NAME, %error, "controller error"),
            }
        })
        .await;
}

/// Brings the world in line with one `Memcached`. Called whenever it or its Deployment changes.
///
/// The finalizer helper adds our finalizer first, then calls [`apply`] while the object lives
/// and [`cleanup`] once it is being deleted (and removes the finalizer when that succeeds).
pub async fn reconcile(object: Arc<Memcached>, ctx: Arc<Context>) -> Result<Action> {
    let namespace = object
        .namespace()
        .ok_or_else(|| Error::InvalidObject("the object has no namespace".into()))?;
    let api = Api::<Memcached>::namespaced(ctx.client.clone(), &namespace);
    let action = finalizer(&api, FINALIZER, object.clone(), |event| async {
        match event {
            FinalizerEvent::Apply(object) => apply(&object, &ctx).await,
            FinalizerEvent::Cleanup(object) => cleanup(&object, &ctx).await,
        }
    })
    .await
    .map_err(|error| Error::Finalizer(Box::new(error)))?;
    ctx.backoff.reset(&object_key(&object));
    Ok(action)
}

/// Decides when to retry a failed reconciliation: exponential backoff per object.
pub fn error_policy(object: Arc<Memcached>, error: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx.backoff.next_delay(&object_key(&object));
    warn!(
        object = %object_key(&object),
        error = %error,
        kind = error.metric_label(),
        retry_in = ?delay,
        "reconciliation failed"
    );
    Action::requeue(delay)
}

/// `namespace/name`, to key the backoff and label log lines.
fn object_key(object: &Memcached) -> String {
    format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

/// Reconciles a live `Memcached`; on failure reports it (event and Degraded condition).
async fn apply(object: &Memcached, ctx: &Context) -> Result<Action> {
    let result = apply_deployment(object, ctx).await;
    if let Err(error) = &result {
        let message = format!("Reconciliation failed: {}", short_message(error));
        publish(
            ctx,
            object,
            EventType::Warning,
            "ReconcileFailed",
            "Reconcile",
            &message,
        )
        .await;
        let status = degraded_status(object, "ReconcileFailed", &message, &now());
        if let Err(error) = patch_status(object, ctx, status).await {
            warn!(%error, "could not report the failure in the status");
        }
    }
    result
}

/// An error for humans (events, conditions): the apiserver's own message when there is one.
fn short_message(error: &Error) -> String {
    match error {
        Error::Kube(kube::Error::Api(status)) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Makes the Deployment match the `Memcached`, then reports its state in the status.
///
/// Reads first and writes only what differs, so a converged object costs no write at all.
async fn apply_deployment(object: &Memcached, ctx: &Context) -> Result<Action> {
    let name = object.name_any();
    let namespace = object.namespace().unwrap_or_default();
    let deployments = Api::<Deployment>::namespaced(ctx.client.clone(), &namespace);
    let desired = build_deployment(object, &ctx.image)?;

    // The cache misses a Deployment we have not made yet, or one made an instant ago, or all of
    // them while it fills after a start: ask the API server before creating.
    let key = ObjectRef::new(&name).within(&namespace);
    let current = match ctx.deployments.get(&key) {
        Some(cached) => Some(cached),
        None => deployments.get_opt(&name).await?.map(Arc::new),
    };
    if let Some(current) = &current {
        ensure_controlled_by(current, object)?;
    }
    let change = deployment_change(current.as_deref(), &desired)?;
    let deployment = match current {
        Some(current) if change == DeploymentChange::None => current,
        _ => {
            let version = current.as_ref().and_then(|d| d.resource_version());
            // Server-side apply with `force`: we take back every field we set (replicas, the
            // pod template, labels) from whoever changed it, and leave other fields alone.
            let params = PatchParams::apply(MANAGER_NAME).force();
            let applied = deployments
                .patch(&name, &params, &Patch::Apply(&desired))
                .await?;
            if applied.resource_version() != version {
                let (reason, action, note) = describe_change(&change, object);
                info!(object = %object_key(object), "{note}");
                publish(ctx, object, EventType::Normal, reason, action, &note).await;
                // The change comes back as a watch event on the Deployment, which reconciles
                // again: the status is written then, from what the Deployment controller did.
                return Ok(Action::await_change());
            }
            // Same version: the Deployment was right already, only our cache was behind.
            Arc::new(applied)
        }
    };
    if !observed(&deployment) {
        // The Deployment controller has not acted on the latest spec yet: nothing new to
        // report. Its status update is a watch event that brings us back here.
        return Ok(Action::await_change());
    }

    patch_status(object, ctx, desired_status(object, &deployment, &now())).await?;
    // Nothing to poll: the Deployment's status changes trigger the next reconciliation.
    Ok(Action::await_change())
}

/// Runs before a `Memcached` goes away. The Deployment needs no work: the garbage collector
/// deletes it through its owner reference. Add cleanup of anything outside the cluster here.
async fn cleanup(object: &Memcached, ctx: &Context) -> Result<Action> {
    let message = format!(
        "Memcached {} is being deleted; its Deployment will be garbage-collected",
        object.name_any()
    );
    patch_status(
        object,
        ctx,
        degraded_status(object, "Finalizing", &message, &now()),
    )
    .await?;
    publish(
        ctx,
        object,
        EventType::Warning,
        "Finalizing",
        "Delete",
        &message,
    )
    .await;
    ctx.backoff.reset(&object_key(object));
    Ok(Action::await_change())
}

/// Writes `status` with server-side apply, unless the object already reports it.
async fn patch_status(object: &Memcached, ctx: &Context, status: MemcachedStatus) -> Result<()> {
    if status_is_current(object.status.as_ref(), &status) {
        return Ok(());
    }
    let namespace = object.namespace().unwrap_or_default();
    let api = Api::<Memcached>::namespaced(ctx.client.clone(), &namespace);
    debug!(object = %object_key(object), ?status, "updating the status");
    // An apply body must name its apiVersion and kind.
    let body = serde_json::json!({
        "apiVersion": Memcached::api_version(&()),
        "kind": Memcached::kind(&()),
        "status": status,
    });
    let params = PatchParams::apply(MANAGER_NAME).force();
    match api
        .patch_status(&object.name_any(), &params, &Patch::Apply(&body))
        .await
    {
        Ok(_) => Ok(()),
        // The object is gone: nothing left to report on.
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Publishes an event on the `Memcached`. Events are informative: failing to publish one is
/// logged and does not fail the reconciliation.
async fn publish(
    ctx: &Context,
    object: &Memcached,
    type_: EventType,
    reason: &str,
    action: &str,
    note: &str,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(truncate(note, 1024)), // the API's limit, in bytes
        action: action.into(),
        secondary: None,
    };
    let reference = object.object_ref(&());
    if let Err(error) = ctx.recorder.publish(&event, &reference).await {
        warn!(%error, reason, "could not publish an event");
    }
}

/// The longest prefix of `text` that fits in `max_bytes`, cut at a character boundary.
fn truncate(text: &str, max_bytes: usize) -> String {
    let mut end = text.len().min(max_bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Refuses to take over a Deployment that another object controls.
fn ensure_controlled_by(deployment: &Deployment, object: &Memcached) -> Result<()> {
    let uid = object.metadata.uid.as_deref();
    match deployment
        .owner_references()
        .iter()
        .find(|owner| owner.controller == Some(true))
    {
        Some(owner) if Some(owner.uid.as_str()) != uid => Err(Error::Conflict(format!(
            "Deployment {} already exists and is controlled by {} {}",
            deployment.name_any(),
            owner.kind,
            owner.name
        ))),
        _ => Ok(()),
    }
}

/// Labels of everything made for a `Memcached`; the selector uses only the stable ones.
pub fn labels(name: &str, image: &str) -> BTreeMap<String, String> {
    let mut labels = selector_labels(name);
    if let Some(version) = image_version(image) {
        labels.insert("app.kubernetes.io/version".into(), version);
    }
    labels.insert("app.kubernetes.io/managed-by".into(), MANAGER_NAME.into());
    labels
}

/// Labels selecting the Pods of the `Memcached` called `name`. A Deployment's selector is
/// immutable, so it must not contain anything that changes, such as the version.
pub fn selector_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "memcached".into()),
        ("app.kubernetes.io/instance".into(), name.into()),
    ])
}

/// The tag of an image reference as a label value (`app:1.6` → `1.6`, no tag → `latest`,
/// digest only → `None`), trimmed to the 63 characters a label value may have.
pub fn image_version(image: &str) -> Option<String> {
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    let last_segment = name.rsplit('/').next().unwrap_or(name);
    let tag = match last_segment.split_once(':') {
        Some((_, tag)) => tag,
        None if digest.is_some() => return None,
        None => "latest",
    };
    let tag: String = tag.chars().take(63).collect();
    let tag = tag.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    (!tag.is_empty()).then(|| tag.to_owned())
}

/// The Deployment a `Memcached` should have: a pure function of the object and the image.
pub fn build_deployment(object: &Memcached, image: &str) -> Result<Deployment> {
    let name = object
        .metadata
        .name
        .clone()
        .ok_or_else(|| Error::InvalidObject("the object has no name".into()))?;
    // The owner reference (controller: true) makes the garbage collector delete the
    // Deployment with its Memcached, and routes Deployment changes to our reconciler.
    let owner = object.controller_owner_ref(&()).ok_or_else(|| {
        Error::InvalidObject(format!(
            "Memcached {name} has no uid (not read from the API?)"
        ))
    })?;
    let labels = labels(&name, image);

    let container = Container {
        name: "memcached".into(),
        image: Some(image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![
            "memcached".into(),
            "--memory-limit=64".into(),
            "-o".into(),
            "modern".into(),
            "-v".into(),
        ]),
        ports: Some(vec![ContainerPort {
            container_port: 11211,
            name: Some("memcached".into()),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        // Meets the "restricted" Pod Security Standard. The image must be able to run as
        // user 1001.
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(1001),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };

    Ok(Deployment {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: object.metadata.namespace.clone(),
            labels: Some(labels.clone()),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(object.spec.size),
            selector: LabelSelector {
                match_labels: Some(selector_labels(&name)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    containers: vec![container],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// What applying the desired Deployment would change on the current one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeploymentChange {
    /// Everything we set is already there: no write needed.
    None,
    /// There is no Deployment yet (or it was deleted).
    Create,
    /// Only the replica count differs.
    Scale { from: i32, to: i32 },
    /// Something else we set differs (pod template, labels, owner): it drifted or the desired
    /// state changed (for example a new image).
    Update,
}

/// Compares the desired Deployment with the current one, the way server-side apply would:
/// only the fields we set count, fields others added or the apiserver defaulted are ignored.
pub fn deployment_change(
    current: Option<&Deployment>,
    desired: &Deployment,
) -> Result<DeploymentChange> {
    let Some(current) = current else {
        return Ok(DeploymentChange::Create);
    };
    let current_json = serde_json::to_value(current)?;
    if json_contains(&current_json, &serde_json::to_value(desired)?) {
        return Ok(DeploymentChange::None);
    }
    let replicas = |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let (from, to) = (replicas(current), replicas(desired));
    let mut rescaled = desired.clone();
    if let Some(spec) = rescaled.spec.as_mut() {
        spec.replicas = Some(from);
    }
    if from != to && json_contains(&current_json, &serde_json::to_value(&rescaled)?) {
        Ok(DeploymentChange::Scale { from, to })
    } else {
        Ok(DeploymentChange::Update)
    }
}

/// Whether `actual` holds everything in `wanted`: objects field by field, arrays of objects
/// element by element in any order (they are keyed lists in Kubernetes), other values exactly.
pub fn json_contains(actual: &Value, wanted: &Value) -> bool {
    match (actual, wanted) {
        (Value::Object(actual), Value::Object(wanted)) => wanted
            .iter()
            .all(|(key, w)| actual.get(key).is_some_and(|a| json_contains(a, w))),
        (Value::Array(actual), Value::Array(wanted)) if wanted.iter().all(Value::is_object) => {
            wanted
                .iter()
                .all(|w| actual.iter().any(|a| json_contains(a, w)))
        }
        _ => actual == wanted,
    }
}

/// Reason, action and note of the event announcing a Deployment change.
fn describe_change(
    change: &DeploymentChange,
    object: &Memcached,
) -> (&'static str, &'static str, String) {
    let name = object.name_any();
    let size = object.spec.size;
    match change {
        // An object that already has a status had a Deployment before.
        DeploymentChange::Create if object.status.is_some() => (
            "DeploymentRecreated",
            "Create",
            format!("Deployment {name} was missing; recreated it with {size} replicas"),
        ),
        DeploymentChange::Create => (
            "DeploymentCreated",
            "Create",
            format!("Created Deployment {name} with {size} replicas"),
        ),
        DeploymentChange::Scale { from, to } => (
            "DeploymentScaled",
            "Scale",
            format!("Scaled Deployment {name} from {from} to {to} replicas"),
        ),
        DeploymentChange::Update | DeploymentChange::None => (
            "DeploymentUpdated",
            "Update",
            format!("Updated Deployment {name}: it differed from the desired spec"),
        ),
    }
}

/// Our conditions as currently reported, ignoring any other writer's condition types.
fn own_conditions(object: &Memcached) -> Vec<Condition> {
    object
        .status
        .iter()
        .flat_map(|status| &status.conditions)
        .filter(|c| [AVAILABLE, PROGRESSING, DEGRADED].contains(&c.type_.as_str()))
        .cloned()
        .collect()
}

/// The status a `Memcached` should report, given its Deployment: a pure function.
///
/// - Available follows the Deployment's own Available condition: minimum availability as its
///   rollout strategy defines it. A `Memcached` being scaled keeps serving, so it stays
///   Available.
/// - Progressing is True until the Deployment controller has seen the latest spec and `size`
///   replicas are updated and available.
/// - Degraded is True when the Deployment cannot create Pods or its rollout is stuck.
///
/// Messages name no changing counts (those are in `replicas` and `readyReplicas`), so a
/// rollout rewrites the status only when a count or a condition changes. `now` is only used
/// for conditions whose status changes.
pub fn desired_status(object: &Memcached, deployment: &Deployment, now: &Time) -> MemcachedStatus {
    let generation = object.metadata.generation;
    let size = object.spec.size;
    let name = deployment.name_any();
    let status = deployment.status.clone().unwrap_or_default();
    let observed = observed(deployment);
    let available = status.available_replicas.unwrap_or(0);
    let updated = status.updated_replicas.unwrap_or(0);
    let replicas = status.replicas.unwrap_or(0);
    let ready = status.ready_replicas.unwrap_or(0);
    // The Deployment controller's own verdicts: it could not create Pods (quota, Pod
    // Security admission, ...), or the rollout exceeded its progress deadline.
    let find = |type_: &str, status: &str| {
        status_conditions(deployment)
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
    };
    let message = |c: &DeploymentCondition| c.message.clone().unwrap_or_default();
    let serving = find("Available", "True").is_some();
    let replica_failure = find("ReplicaFailure", "True").map(message);
    let stuck = find("Progressing", "False")
        .filter(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded"))
        .map(message);
    let rolled_out = observed && updated == size && replicas == size && available == size;

    let mut conditions = own_conditions(object);
    let mut set = |type_: &str, status: &str, reason: &str, message: String| {
        set_condition(
            &mut conditions,
            condition(type_, status, reason, message, generation, now),
        );
    };

    if serving {
        set(
            AVAILABLE,
            "True",
            "MinimumReplicasAvailable",
            format!("Deployment {name} has minimum availability"),
        );
    } else {
        set(
            AVAILABLE,
            "False",
            "MinimumReplicasUnavailable",
            format!("Deployment {name} does not have minimum availability"),
        );
    }

    if let Some(message) = &stuck {
        set(
            PROGRESSING,
            "False",
            "ProgressDeadlineExceeded",
            message.clone(),
        );
    } else if rolled_out {
        set(
            PROGRESSING,
            "False",
            "RolloutComplete",
            format!("Deployment {name} has {size} updated, available replicas"),
        );
    } else {
        set(
            PROGRESSING,
            "True",
            "RollingOut",
            format!("Waiting for Deployment {name} to have {size} updated, available replicas"),
        );
    }

    if let Some(message) = replica_failure {
        set(DEGRADED, "True", "ReplicaFailure", message);
    } else if let Some(message) = stuck {
        set(DEGRADED, "True", "ProgressDeadlineExceeded", message);
    } else {
        set(DEGRADED, "False", "AsExpected", String::new());
    }

    MemcachedStatus {
        conditions,
        observed_generation: generation,
        replicas: Some(replicas),
        ready_replicas: Some(ready),
        selector: Some(
            selector_labels(&object.name_any())
                .iter()
                .map(|(key, value)| format!("{key}={value}"))
                .collect::<Vec<_>>()
                .join(","),
        ),
    }
}

/// Whether the Deployment controller has seen the Deployment's latest spec.
fn observed(deployment: &Deployment) -> bool {
    let seen = deployment.status.as_ref().map(|s| s.observed_generation);
    match (seen.flatten(), deployment.metadata.generation) {
        (Some(seen), Some(latest)) => seen >= latest,
        _ => false,
    }
}

/// The conditions the Deployment controller reports on a Deployment.
fn status_conditions(deployment: &Deployment) -> &[DeploymentCondition] {
    deployment
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

/// The current status with Degraded=True: used on failures and during deletion.
pub fn degraded_status(
    object: &Memcached,
    reason: &str,
    message: &str,
    now: &Time,
) -> MemcachedStatus {
    let mut status = object.status.clone().unwrap_or_default();
    status.conditions = own_conditions(object);
    let generation = object.metadata.generation;
    let degraded = condition(DEGRADED, "True", reason, message, generation, now);
    set_condition(&mut status.conditions, degraded);
    status
}

/// Whether `current` already reports everything in `desired` (so no write is needed).
/// Conditions of types we do not write are ignored.
pub fn status_is_current(current: Option<&MemcachedStatus>, desired: &MemcachedStatus) -> bool {
    let Some(current) = current else {
        return false;
    };
    current.observed_generation == desired.observed_generation
        && current.replicas == desired.replicas
        && current.ready_replicas == desired.ready_replicas
        && current.selector == desired.selector
        && desired
            .conditions
            .iter()
            .all(|c| find_condition(&current.conditions, &c.type_) == Some(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::{api::apps::v1::DeploymentStatus, jiff::Timestamp};

    const IMAGE: &str = DEFAULT_IMAGE;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap())
    }

    /// A `Memcached` as read from the API: named, namespaced, with a uid and a generation.
    fn sample(size: i32) -> Memcached {
        let mut object = Memcached::new("sample", Default::default());
        object.spec.size = size;
        object.metadata.namespace = Some("team".into());
        object.metadata.uid = Some("1234".into());
        object.metadata.generation = Some(2);
        object
    }

    /// A Deployment as the apiserver would return it: defaulted fields and a status.
    fn deployed(object: &Memcached, status: DeploymentStatus) -> Deployment {
        let mut deployment = build_deployment(object, IMAGE).unwrap();
        deployment.metadata.generation = Some(1);
        deployment.metadata.resource_version = Some("42".into());
        let spec = deployment.spec.as_mut().unwrap();
        spec.revision_history_limit = Some(10);
        let pod = spec.template.spec.as_mut().unwrap();
        pod.restart_policy = Some("Always".into());
        pod.containers[0].termination_message_path = Some("/dev/termination-log".into());
        deployment.status = Some(status);
        deployment
    }

    /// What the Deployment controller reports once `replicas` Pods run the latest spec.
    fn rolled_out(replicas: i32) -> DeploymentStatus {
        let serving = if replicas > 0 { "True" } else { "False" };
        DeploymentStatus {
            observed_generation: Some(1),
            replicas: Some(replicas),
            updated_replicas: Some(replicas),
            ready_replicas: Some(replicas),
            available_replicas: Some(replicas),
            conditions: Some(vec![DeploymentCondition {
                type_: "Available".into(),
                status: serving.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    fn get<'a>(status: &'a MemcachedStatus, type_: &str) -> &'a Condition {
        find_condition(&status.conditions, type_).unwrap()
    }

    #[test]
    fn the_deployment_runs_the_image_under_the_restricted_standard() {
        let deployment = build_deployment(&sample(3), IMAGE).unwrap();
        assert_eq!(deployment.metadata.name.as_deref(), Some("sample"));
        assert_eq!(deployment.metadata.namespace.as_deref(), Some("team"));
        let owner = &deployment.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Memcached", "1234")
        );
        assert_eq!(owner.controller, Some(true));

        let spec = deployment.spec.unwrap();
        assert_eq!(spec.replicas, Some(3));
        let pod = spec.template.spec.unwrap();
        let pod_security = pod.security_context.unwrap();
        assert_eq!(pod_security.run_as_non_root, Some(true));
        assert_eq!(
            pod_security.seccomp_profile.unwrap().type_,
            "RuntimeDefault"
        );

        let container = &pod.containers[0];
        assert_eq!(container.name, "memcached");
        assert_eq!(container.image.as_deref(), Some(IMAGE));
        let command = container.command.as_ref().unwrap().join(",");
        assert_eq!(command, "memcached,--memory-limit=64,-o,modern,-v");
        let port = &container.ports.as_ref().unwrap()[0];
        assert_eq!(
            (port.container_port, port.name.as_deref()),
            (11211, Some("memcached"))
        );
        let security = container.security_context.as_ref().unwrap();
        assert_eq!(security.run_as_user, Some(1001));
        assert_eq!(security.run_as_non_root, Some(true));
        assert_eq!(security.allow_privilege_escalation, Some(false));
        assert_eq!(
            security.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_owned()][..])
        );
    }

    #[test]
    fn selector_is_stable_and_pods_carry_all_labels() {
        let deployment = build_deployment(&sample(1), IMAGE).unwrap();
        let spec = deployment.spec.unwrap();
        let selector = spec.selector.match_labels.unwrap();
        assert_eq!(selector, selector_labels("sample"));
        assert!(!selector.contains_key("app.kubernetes.io/version"));

        let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
        assert_eq!(pod_labels["app.kubernetes.io/name"], "memcached");
        assert_eq!(pod_labels["app.kubernetes.io/instance"], "sample");
        assert_eq!(
            pod_labels.get("app.kubernetes.io/version"),
            image_version(IMAGE).as_ref()
        );
        assert_eq!(pod_labels["app.kubernetes.io/managed-by"], MANAGER_NAME);
        assert_eq!(deployment.metadata.labels.unwrap(), pod_labels);
    }

    #[test]
    fn an_object_without_uid_is_refused() {
        let mut object = sample(1);
        object.metadata.uid = None;
        assert!(matches!(
            build_deployment(&object, IMAGE),
            Err(Error::InvalidObject(_))
        ));
    }

    #[test]
    fn image_versions() {
        assert_eq!(
            image_version("app:1.6.26-alpine").as_deref(),
            Some("1.6.26-alpine")
        );
        assert_eq!(image_version("app").as_deref(), Some("latest"));
        assert_eq!(
            image_version("registry:5000/team/app").as_deref(),
            Some("latest")
        );
        assert_eq!(
            image_version("registry:5000/app:1.6@sha256:abc").as_deref(),
            Some("1.6")
        );
        assert_eq!(image_version("app@sha256:abc"), None);
        let long = format!("app:{}-", "a".repeat(80));
        assert_eq!(image_version(&long).unwrap().len(), 63);
        assert_eq!(image_version("app:_x_.").as_deref(), Some("x"));
    }

    #[test]
    fn no_change_when_the_deployment_holds_everything_we_set() {
        let object = sample(3);
        let desired = build_deployment(&object, IMAGE).unwrap();
        let mut current = deployed(&object, rolled_out(3));
        // Someone else's label and annotation are not ours to remove.
        current
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("team".into(), "cache".into());
        assert_eq!(
            deployment_change(Some(&current), &desired).unwrap(),
            DeploymentChange::None
        );
    }

    #[test]
    fn changes_are_classified() {
        let object = sample(3);
        let desired = build_deployment(&object, IMAGE).unwrap();
        assert_eq!(
            deployment_change(None, &desired).unwrap(),
            DeploymentChange::Create
        );

        let mut scaled = deployed(&object, rolled_out(3));
        scaled.spec.as_mut().unwrap().replicas = Some(5);
        assert_eq!(
            deployment_change(Some(&scaled), &desired).unwrap(),
            DeploymentChange::Scale { from: 5, to: 3 }
        );

        let mut edited = deployed(&object, rolled_out(3));
        let pod = edited
            .spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap();
        pod.containers[0].image = Some("example.com/tampered:1".into());
        assert_eq!(
            deployment_change(Some(&edited), &desired).unwrap(),
            DeploymentChange::Update
        );

        let mut command = deployed(&object, rolled_out(3));
        let pod = command
            .spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap();
        pod.containers[0]
            .command
            .as_mut()
            .unwrap()
            .push("--tampered".into());
        assert_eq!(
            deployment_change(Some(&command), &desired).unwrap(),
            DeploymentChange::Update
        );

        let mut unsafe_pod = deployed(&object, rolled_out(3));
        let pod = unsafe_pod
            .spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap();
        pod.containers[0].security_context = None;
        assert_eq!(
            deployment_change(Some(&unsafe_pod), &desired).unwrap(),
            DeploymentChange::Update
        );
    }

    #[test]
    fn json_contains_treats_object_lists_as_keyed() {
        let actual = serde_json::json!({"a": [{"k": 1, "x": 0}, {"k": 2}], "s": ["x", "y"]});
        assert!(json_contains(
            &actual,
            &serde_json::json!({"a": [{"k": 2}, {"k": 1}]})
        ));
        assert!(!json_contains(
            &actual,
            &serde_json::json!({"a": [{"k": 3}]})
        ));
        assert!(json_contains(
            &actual,
            &serde_json::json!({"s": ["x", "y"]})
        ));
        assert!(!json_contains(&actual, &serde_json::json!({"s": ["x"]})));
        assert!(!json_contains(&actual, &serde_json::json!({"missing": 1})));
    }

    #[test]
    fn a_deployment_controlled_by_someone_else_is_not_adopted() {
        let object = sample(1);
        let mut deployment = build_deployment(&object, IMAGE).unwrap();
        assert!(ensure_controlled_by(&deployment, &object).is_ok());
        deployment.metadata.owner_references.as_mut().unwrap()[0].uid = "other".into();
        assert!(matches!(
            ensure_controlled_by(&deployment, &object),
            Err(Error::Conflict(_))
        ));
        deployment.metadata.owner_references = None;
        assert!(ensure_controlled_by(&deployment, &object).is_ok());
    }

    #[test]
    fn available_when_all_replicas_are_available() {
        let object = sample(3);
        let status = desired_status(&object, &deployed(&object, rolled_out(3)), &at(10));
        assert_eq!(get(&status, AVAILABLE).status, "True");
        assert_eq!(
            get(&status, AVAILABLE).message,
            "Deployment sample has minimum availability"
        );
        assert_eq!(get(&status, PROGRESSING).status, "False");
        assert_eq!(get(&status, PROGRESSING).reason, "RolloutComplete");
        assert_eq!(get(&status, DEGRADED).status, "False");
        assert_eq!(status.observed_generation, Some(2));
        assert_eq!((status.replicas, status.ready_replicas), (Some(3), Some(3)));
        assert_eq!(
            status.selector.as_deref(),
            Some("app.kubernetes.io/instance=sample,app.kubernetes.io/name=memcached")
        );
        assert!(
            status
                .conditions
                .iter()
                .all(|c| c.observed_generation == Some(2))
        );
    }

    #[test]
    fn stays_available_while_scaling_up() {
        let mut object = sample(3);
        let mut scaling = rolled_out(1);
        scaling.replicas = Some(3);
        scaling.updated_replicas = Some(3);
        let status = desired_status(&object, &deployed(&object, scaling.clone()), &at(10));
        assert_eq!(get(&status, AVAILABLE).status, "True");
        assert_eq!(get(&status, PROGRESSING).status, "True");
        assert_eq!(get(&status, DEGRADED).status, "False");
        assert_eq!(status.ready_replicas, Some(1));

        // One more Pod ready: only the count changes, the conditions stay as they were.
        object.status = Some(status.clone());
        scaling.ready_replicas = Some(2);
        scaling.available_replicas = Some(2);
        let next = desired_status(&object, &deployed(&object, scaling), &at(20));
        assert_eq!(next.conditions, status.conditions);
        assert_eq!(next.ready_replicas, Some(2));
    }

    #[test]
    fn not_available_until_the_deployment_reports_minimum_availability() {
        let object = sample(3);
        let fresh = deployed(&object, DeploymentStatus::default());
        let status = desired_status(&object, &fresh, &at(10));
        assert_eq!(get(&status, AVAILABLE).status, "False");
        assert_eq!(get(&status, PROGRESSING).status, "True");
        assert_eq!(status.replicas, Some(0));
    }

    #[test]
    fn progressing_until_the_deployment_controller_caught_up() {
        let object = sample(3);
        let mut deployment = deployed(&object, rolled_out(3));
        deployment.metadata.generation = Some(2);
        let status = desired_status(&object, &deployment, &at(10));
        assert_eq!(get(&status, AVAILABLE).status, "True");
        assert_eq!(get(&status, PROGRESSING).status, "True");
    }

    #[test]
    fn degraded_when_pods_cannot_be_created_or_the_rollout_is_stuck() {
        let object = sample(1);
        let mut failing = rolled_out(0);
        failing.conditions = Some(vec![DeploymentCondition {
            type_: "ReplicaFailure".into(),
            status: "True".into(),
            reason: Some("FailedCreate".into()),
            message: Some("pods \"sample-x\" is forbidden".into()),
            ..Default::default()
        }]);
        let status = desired_status(&object, &deployed(&object, failing), &at(10));
        assert_eq!(get(&status, DEGRADED).status, "True");
        assert_eq!(get(&status, DEGRADED).reason, "ReplicaFailure");
        assert_eq!(
            get(&status, DEGRADED).message,
            "pods \"sample-x\" is forbidden"
        );
        assert_eq!(get(&status, AVAILABLE).status, "False");

        let mut stuck = rolled_out(0);
        stuck.conditions = Some(vec![DeploymentCondition {
            type_: "Progressing".into(),
            status: "False".into(),
            reason: Some("ProgressDeadlineExceeded".into()),
            message: Some("took too long".into()),
            ..Default::default()
        }]);
        let status = desired_status(&object, &deployed(&object, stuck), &at(10));
        assert_eq!(get(&status, PROGRESSING).status, "False");
        assert_eq!(get(&status, PROGRESSING).reason, "ProgressDeadlineExceeded");
        assert_eq!(get(&status, DEGRADED).reason, "ProgressDeadlineExceeded");
    }

    #[test]
    fn a_converged_status_is_stable() {
        let mut object = sample(3);
        let deployment = deployed(&object, rolled_out(3));
        let first = desired_status(&object, &deployment, &at(10));
        object.status = Some(first.clone());
        // Later reconciliations compute the same status (same timestamps): no write.
        let again = desired_status(&object, &deployment, &at(99));
        assert_eq!(again, first);
        assert!(status_is_current(object.status.as_ref(), &again));
    }

    #[test]
    fn transition_times_move_only_with_the_status() {
        let mut object = sample(3);
        let fresh = deployed(&object, DeploymentStatus::default());
        let first = desired_status(&object, &fresh, &at(10));
        object.status = Some(first);
        let second = desired_status(&object, &deployed(&object, rolled_out(3)), &at(20));
        assert_eq!(get(&second, AVAILABLE).last_transition_time, at(20));
        assert_eq!(get(&second, PROGRESSING).last_transition_time, at(20));
        assert_eq!(get(&second, DEGRADED).last_transition_time, at(10));
    }

    #[test]
    fn status_comparison_ignores_foreign_conditions() {
        let mut object = sample(3);
        let deployment = deployed(&object, rolled_out(3));
        let mut current = desired_status(&object, &deployment, &at(10));
        current
            .conditions
            .push(condition("Backup", "True", "Done", "", Some(2), &at(5)));
        object.status = Some(current.clone());
        let desired = desired_status(&object, &deployment, &at(20));
        assert_eq!(desired.conditions.len(), 3, "we only write our own types");
        assert!(status_is_current(Some(&current), &desired));
        assert!(!status_is_current(None, &desired));

        let mut fewer = desired.clone();
        fewer.ready_replicas = Some(2);
        assert!(!status_is_current(Some(&current), &fewer));
    }

    #[test]
    fn degraded_status_keeps_the_rest() {
        let mut object = sample(3);
        let deployment = deployed(&object, rolled_out(3));
        object.status = Some(desired_status(&object, &deployment, &at(10)));
        let status = degraded_status(&object, "Finalizing", "bye", &at(20));
        assert_eq!(get(&status, DEGRADED).status, "True");
        assert_eq!(get(&status, DEGRADED).reason, "Finalizing");
        assert_eq!(get(&status, DEGRADED).last_transition_time, at(20));
        assert_eq!(get(&status, AVAILABLE).status, "True");
        assert_eq!(status.replicas, Some(3));
    }

    #[test]
    fn event_notes_fit_the_api_limit() {
        assert_eq!(truncate("short", 1024), "short");
        let long = "é".repeat(600); // 1200 bytes
        let cut = truncate(&long, 1024);
        assert_eq!(cut.len(), 1024);
        assert_eq!(truncate("aé", 2), "a");
    }

    #[test]
    fn events_say_what_changed() {
        let mut object = sample(3);
        assert_eq!(
            describe_change(&DeploymentChange::Create, &object).0,
            "DeploymentCreated"
        );
        object.status = Some(Default::default());
        assert_eq!(
            describe_change(&DeploymentChange::Create, &object).0,
            "DeploymentRecreated"
        );
        let (reason, _, note) =
            describe_change(&DeploymentChange::Scale { from: 1, to: 3 }, &object);
        assert_eq!(reason, "DeploymentScaled");
        assert_eq!(note, "Scaled Deployment sample from 1 to 3 replicas");
    }
}
