// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! The `Memcached` controller: runs memcached as a Deployment for each `Memcached`.
//!
//! [`reconcile`] reads top to bottom: find the Deployment, apply the one that should exist, report
//! the outcome in the status. Edit [`build_deployment`] (what runs) and [`desired_status`] (what is
//! reported); keep the RBAC markers in line with the API calls.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, PodSecurityContext, PodSpec, PodTemplateSpec,
    SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta};
use kube::runtime::controller::Action;
use kube::{Api, Client, Resource, ResourceExt};
use rustbuilder_runtime::apply::{self, Applied};
use rustbuilder_runtime::events::Events;
use rustbuilder_runtime::owned::{self, Owned};
use rustbuilder_runtime::rollout::Rollout;
use rustbuilder_runtime::{Manager, conditions};

use crate::api::cache::v1alpha1::{Memcached, MemcachedStatus};
use crate::controller::MANAGER_NAME;
use crate::{Error, Result};

// RBAC: exactly the calls made below. `/finalizers`: our Deployments block their owner's deletion;
// deployments `get`: one someone else made; `/scale`: a change of size alone.
// +rustbuilder:rbac:groups=cache.example.com,resources=memcacheds,verbs=list;watch
// +rustbuilder:rbac:groups=cache.example.com,resources=memcacheds/status,verbs=patch
// +rustbuilder:rbac:groups=cache.example.com,resources=memcacheds/finalizers,verbs=update
// +rustbuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch
// +rustbuilder:rbac:groups=apps,resources=deployments/scale,verbs=patch
// +rustbuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

/// Environment variable naming the image to run (set in `config/manager/manager.yaml`).
pub const IMAGE_ENV: &str = "MEMCACHED_IMAGE";
/// Image used when [`IMAGE_ENV`] is not set.
pub const DEFAULT_IMAGE: &str = "memcached:1.6.26-alpine3.19";

/// The Pods serve: at least one is available.
pub const AVAILABLE: &str = "Available";
/// The Deployment is rolling out a new Pod template.
pub const PROGRESSING: &str = "Progressing";
/// Something needs a human: a failure, a stuck rollout, a Deployment that is not ours.
pub const DEGRADED: &str = "Degraded";

/// Reconciles at once (never two of one object). They mostly wait for the API server.
const MAX_CONCURRENT_RECONCILES: u16 = 16;

/// Everything a reconcile needs, shared by all of them.
pub struct Context {
    /// Client for the Kubernetes API.
    pub client: Client,
    /// Publishes events on `Memcached` objects (visible in `kubectl describe`).
    pub events: Events,
    /// The Deployments, as their watch last saw them; those a `Memcached` owns are its children.
    pub deployments: Owned<Deployment>,
    /// Image of the container the Deployments run.
    pub image: String,
}

/// Runs the controller until shutdown is requested, then lets in-flight reconciles finish.
pub async fn run(manager: Manager) {
    // Every Deployment, cached: one a `Memcached` owns is its child even if this operator did not
    // make it (by hand, or an earlier version that did not label it), and a change to it reconciles
    // the owner. Finding one costs no API call. Where most Deployments are not this operator's,
    // `manager.owned_labelled` keeps less: only those with our `managed-by` label.
    let deployments = manager.owned::<Deployment>();
    let ctx = Arc::new(Context {
        client: manager.client(),
        events: manager.events(),
        deployments: deployments.clone(),
        image: std::env::var(IMAGE_ENV).unwrap_or_else(|_| DEFAULT_IMAGE.into()),
    });
    manager
        .controller(manager.api::<Memcached>(), "cache-memcached")
        .owns(&deployments)
        .concurrency(MAX_CONCURRENT_RECONCILES)
        .run(reconcile, ctx)
        .await;
}

/// Brings the cluster in line with one `Memcached`; runs whenever it or its Deployment changes.
/// An error is retried with backoff, and reported as a `ReconcileFailed` event on the object.
pub async fn reconcile(object: Arc<Memcached>, ctx: Arc<Context>) -> Result<Action> {
    let object = object.as_ref();
    let (name, generation) = (object.name_any(), object.metadata.generation);
    let namespace = object
        .namespace()
        .ok_or_else(|| Error::InvalidObject("the object has no namespace".into()))?;
    let objects = Api::<Memcached>::namespaced(ctx.client.clone(), &namespace);
    let deployments = Api::<Deployment>::namespaced(ctx.client.clone(), &namespace);

    let current = ctx.deployments.find(&namespace, &name).await?;
    if let Some(current) = &current
        && !owned::controlled_by(current.as_ref(), object)
    {
        // Never adopt a Deployment someone else made: say so, and wait for them to move it.
        let message = format!("Deployment {name} exists and is not controlled by this Memcached");
        ctx.events
            .warning(object, "DeploymentNotOwned", "Reconcile", &message);
        let mut status = object.status.clone().unwrap_or_default();
        status.conditions = own_conditions(object);
        let degraded = conditions::new(DEGRADED, true, "DeploymentNotOwned", &message, generation);
        conditions::set(&mut status.conditions, degraded);
        apply::status(&objects, object, &status, MANAGER_NAME).await?;
        // A Deployment with no owner wakes no one when it goes: look again in a minute.
        return Ok(Action::requeue(Duration::from_secs(60)));
    }
    if let Some(status) = not_owned_withdrawn(object) {
        // The Deployment in the way is gone: take back the `Degraded` that named it, at once.
        apply::status(&objects, object, &status, MANAGER_NAME).await?;
    }

    // No write when nothing differs; any field someone else changed is taken back. A new size
    // alone goes through the `scale` subresource, the cheapest write for the API server.
    let desired = build_deployment(object, &ctx.image)?;
    let current = current.as_deref();
    let applied = apply::apply_scalable(&deployments, current, &desired, MANAGER_NAME).await?;
    let deployment = match applied {
        Applied::Unchanged(deployment) => deployment,
        // The Deployment controller acts next, and its status update brings us back here. A change
        // of our own spec shows in the status (`observedGeneration`); events tell the rest.
        Applied::Changed(_) => {
            let reported = object.status.as_ref().and_then(|s| s.observed_generation) == generation;
            let (reason, note) = match current {
                None => ("DeploymentCreated", format!("Created Deployment {name}")),
                Some(_) if reported => ("DeploymentUpdated", format!("Put Deployment {name} back")),
                Some(_) => return Ok(Action::await_change()),
            };
            ctx.events.normal(object, reason, "Apply", &note);
            return Ok(Action::await_change());
        }
    };

    // Reported once the Deployment controller has seen the latest spec; written only when it changes.
    if Rollout::of(&deployment).observed {
        let status = desired_status(object, &deployment);
        apply::status(&objects, object, &status, MANAGER_NAME).await?;
    }
    Ok(Action::await_change())
}

/// Labels of everything made for a `Memcached`. `app.kubernetes.io/managed-by` tells which
/// operator made it, and is what `manager.owned_labelled` selects by.
pub fn labels(name: &str, image: &str) -> BTreeMap<String, String> {
    let mut labels = selector_labels(name);
    if let Some(version) = image_version(image) {
        labels.insert("app.kubernetes.io/version".into(), version);
    }
    labels.insert("app.kubernetes.io/managed-by".into(), MANAGER_NAME.into());
    labels
}

/// Labels selecting the Pods of the `Memcached` called `name`. A Deployment's selector is
/// immutable: nothing that changes (the version) goes in.
pub fn selector_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "memcached".into()),
        ("app.kubernetes.io/instance".into(), name.into()),
    ])
}

/// The tag of an image (`app:1.6` → `1.6`) as a label value: at most 63 characters, starting and
/// ending with a letter or digit. `None` when the image has no tag.
pub fn image_version(image: &str) -> Option<String> {
    let name = image.split('@').next()?;
    let (_, tag) = name.rsplit('/').next()?.split_once(':')?;
    let tag: String = tag.chars().take(63).collect();
    let tag = tag.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    (!tag.is_empty()).then(|| tag.to_owned())
}

/// The Deployment a `Memcached` should have: a pure function of the object and the image.
pub fn build_deployment(object: &Memcached, image: &str) -> Result<Deployment> {
    let name = object.name_any();
    // The controller reference: the garbage collector deletes the Deployment with its Memcached.
    let mut owner = object
        .controller_owner_ref(&())
        .ok_or_else(|| Error::InvalidObject(format!("{name} has no uid: not read from the API")))?;
    owner.block_owner_deletion = Some(true);
    let labels = labels(&name, image);
    let command = ["memcached", "--memory-limit=64", "-o", "modern", "-v"].map(String::from);
    // The "restricted" Pod Security Standard: no root, no privilege escalation, no capabilities.
    let container = Container {
        name: "memcached".into(),
        image: Some(image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(command.into()),
        ports: Some(vec![ContainerPort {
            name: Some("memcached".into()),
            container_port: 11211,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
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
    let pod = PodSpec {
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
    };
    Ok(Deployment {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: object.namespace(),
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
                spec: Some(pod),
            },
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The status a `Memcached` should report, given its Deployment: a pure function.
///
/// - Available: at least one Pod serves, so scaling never makes it flap.
/// - Progressing: Pods of an older template are being replaced (scaling alone is no rollout).
/// - Degraded: the Deployment cannot create Pods, or its rollout is stuck.
///
/// Messages name no counts (`replicas` and `readyReplicas` do), so conditions change only with a verdict.
pub fn desired_status(object: &Memcached, deployment: &Deployment) -> MemcachedStatus {
    let rollout = Rollout::of(deployment);
    let available = match rollout.available_replicas > 0 {
        true => (true, "PodsAvailable", "At least one Pod serves".into()),
        false => (false, "NoPodAvailable", "No Pod serves".into()),
    };
    let progressing = match (&rollout.stuck, rollout.rolling_out) {
        (Some(message), _) => (false, "ProgressDeadlineExceeded", message.clone()),
        (None, true) => (true, "RollingOut", "New Pods replace the old ones".into()),
        (None, false) => (false, "RolledOut", "Pods run the latest template".into()),
    };
    let degraded = match (&rollout.failure, &rollout.stuck) {
        (Some(message), _) => (true, "ReplicaFailure", message.clone()),
        (None, Some(message)) => (true, "ProgressDeadlineExceeded", message.clone()),
        (None, None) => (false, "AsExpected", String::new()),
    };
    let mut conditions = own_conditions(object);
    let generation = object.metadata.generation;
    for (type_, (status, reason, message)) in [
        (AVAILABLE, available),
        (PROGRESSING, progressing),
        (DEGRADED, degraded),
    ] {
        let condition = conditions::new(type_, status, reason, message, generation);
        conditions::set(&mut conditions, condition);
    }
    let selector = selector_labels(&object.name_any())
        .into_iter()
        .map(|(key, value)| format!("{key}={value}"));
    MemcachedStatus {
        conditions,
        observed_generation: generation,
        replicas: Some(rollout.replicas),
        ready_replicas: Some(rollout.ready_replicas),
        selector: Some(selector.collect::<Vec<_>>().join(",")),
    }
}

/// The status without `Degraded=DeploymentNotOwned`, if it reports that.
fn not_owned_withdrawn(object: &Memcached) -> Option<MemcachedStatus> {
    let not_owned = |c: &Condition| c.type_ == DEGRADED && c.reason == "DeploymentNotOwned";
    let reported = object.status.as_ref()?.conditions.iter().any(not_owned);
    let mut status = object.status.clone().filter(|_| reported)?;
    status.conditions = own_conditions(object);
    status.conditions.retain(|c| !not_owned(c));
    Some(status)
}

/// Our conditions as currently reported, without any other writer's condition types.
fn own_conditions(object: &Memcached) -> Vec<Condition> {
    let all = object.status.iter().flat_map(|status| &status.conditions);
    let ours = all.filter(|c| [AVAILABLE, PROGRESSING, DEGRADED].contains(&c.type_.as_str()));
    ours.cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus};

    /// A `Memcached` as read from the API: named, namespaced, with a uid and a generation.
    fn sample(size: i32) -> Memcached {
        let mut object = Memcached::new("sample", Default::default());
        object.spec.size = size;
        object.metadata.namespace = Some("team".into());
        object.metadata.uid = Some("1234".into());
        object.metadata.generation = Some(2);
        object
    }

    /// Its Deployment, with what the Deployment controller reports: `replicas` Pods, `updated` of
    /// them on the latest spec, and the Deployment's conditions as (type, status, reason).
    fn deployed(
        object: &Memcached,
        replicas: i32,
        updated: i32,
        conditions: &[(&str, &str, &str)],
    ) -> Deployment {
        let mut deployment = build_deployment(object, DEFAULT_IMAGE).unwrap();
        deployment.metadata.generation = Some(1);
        let conditions = conditions
            .iter()
            .map(|(type_, status, reason)| DeploymentCondition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: Some(reason.to_string()),
                message: Some(format!("{type_} is {status}: {reason}")),
                ..Default::default()
            });
        deployment.status = Some(DeploymentStatus {
            observed_generation: Some(1),
            replicas: Some(replicas),
            updated_replicas: Some(updated),
            ready_replicas: Some(updated),
            available_replicas: Some(updated),
            conditions: Some(conditions.collect()),
            ..Default::default()
        });
        deployment
    }

    /// (status, reason) of each of our conditions, in the order Available, Progressing, Degraded.
    fn verdicts(status: &MemcachedStatus) -> Vec<(String, String)> {
        let find = |type_| conditions::find(&status.conditions, type_).unwrap();
        let verdict = |c: &Condition| (c.status.clone(), c.reason.clone());
        [AVAILABLE, PROGRESSING, DEGRADED]
            .map(|type_| verdict(find(type_)))
            .to_vec()
    }

    fn pairs(expected: [(&str, &str); 3]) -> Vec<(String, String)> {
        expected
            .map(|(status, reason)| (status.into(), reason.into()))
            .to_vec()
    }

    #[test]
    fn the_deployment_runs_the_image_under_the_restricted_standard() {
        let deployment = build_deployment(&sample(3), DEFAULT_IMAGE).unwrap();
        assert_eq!(deployment.metadata.namespace.as_deref(), Some("team"));
        let owner = &deployment.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Memcached", "1234")
        );
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );

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
        assert_eq!(container.image.as_deref(), Some(DEFAULT_IMAGE));
        let command = container.command.as_ref().unwrap().join(",");
        assert_eq!(command, "memcached,--memory-limit=64,-o,modern,-v");
        let port = &container.ports.as_ref().unwrap()[0];
        assert_eq!(
            (port.container_port, port.name.as_deref()),
            (11211, Some("memcached"))
        );
        let security = container.security_context.as_ref().unwrap();
        assert_eq!(security.run_as_user, Some(1001));
        assert_eq!(security.allow_privilege_escalation, Some(false));
        let dropped = security.capabilities.as_ref().unwrap().drop.clone();
        assert_eq!(dropped, Some(vec!["ALL".to_owned()]));
    }

    #[test]
    fn the_selector_is_stable_and_pods_carry_every_label() {
        let spec = build_deployment(&sample(1), DEFAULT_IMAGE)
            .unwrap()
            .spec
            .unwrap();
        let selector = spec.selector.match_labels.unwrap();
        assert_eq!(selector, selector_labels("sample"));
        let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
        assert_eq!(pod_labels["app.kubernetes.io/managed-by"], MANAGER_NAME);
        assert!(
            selector
                .iter()
                .all(|(key, value)| pod_labels[key] == *value)
        );
        assert!(pod_labels.len() > selector.len(), "{pod_labels:?}");
    }

    #[test]
    fn an_object_without_uid_is_refused() {
        let mut object = sample(1);
        object.metadata.uid = None;
        let refused = build_deployment(&object, DEFAULT_IMAGE);
        assert!(
            matches!(refused, Err(Error::InvalidObject(_))),
            "{refused:?}"
        );
    }

    #[test]
    fn image_versions_are_valid_label_values() {
        assert_eq!(
            image_version("app:1.6.26-alpine").as_deref(),
            Some("1.6.26-alpine")
        );
        assert_eq!(image_version("registry:5000/team/app"), None);
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
    fn available_while_a_pod_serves_and_scaling_is_no_rollout() {
        let object = sample(3);
        let rolled_out = deployed(
            &object,
            3,
            3,
            &[("Progressing", "True", "NewReplicaSetAvailable")],
        );
        let expected = [
            ("True", "PodsAvailable"),
            ("False", "RolledOut"),
            ("False", "AsExpected"),
        ];
        assert_eq!(
            verdicts(&desired_status(&object, &rolled_out)),
            pairs(expected)
        );

        // Scaling to 5: the Deployment lacks its minimum availability, but Pods serve and every one
        // runs the latest template. Only counts move; the conditions stay.
        let scaling = deployed(
            &sample(5),
            3,
            3,
            &[
                ("Available", "False", "MinimumReplicasUnavailable"),
                ("Progressing", "True", "NewReplicaSetAvailable"),
            ],
        );
        let mut scaled = sample(5);
        scaled.status = Some(desired_status(&object, &rolled_out));
        let status = desired_status(&scaled, &scaling);
        assert_eq!(verdicts(&status), pairs(expected));
        assert!(!conditions::changed(
            &own_conditions(&scaled),
            &status.conditions
        ));

        let updating = deployed(
            &object,
            3,
            1,
            &[("Progressing", "True", "ReplicaSetUpdated")],
        );
        let progressing = verdicts(&desired_status(&object, &updating))[1].clone();
        assert_eq!(progressing, ("True".into(), "RollingOut".into()));

        let starting = deployed(
            &object,
            3,
            0,
            &[("Progressing", "True", "NewReplicaSetCreated")],
        );
        let status = desired_status(&object, &starting);
        assert_eq!(
            verdicts(&status)[0],
            ("False".into(), "NoPodAvailable".into())
        );
        assert_eq!((status.replicas, status.ready_replicas), (Some(3), Some(0)));
    }

    #[test]
    fn degraded_when_pods_cannot_be_created_or_the_rollout_is_stuck() {
        let object = sample(2);
        let failing = deployed(&object, 0, 0, &[("ReplicaFailure", "True", "FailedCreate")]);
        let status = desired_status(&object, &failing);
        assert_eq!(
            verdicts(&status)[2],
            ("True".into(), "ReplicaFailure".into())
        );
        let degraded = conditions::find(&status.conditions, DEGRADED).unwrap();
        assert!(degraded.message.contains("FailedCreate"), "{degraded:?}");

        let stuck = deployed(
            &object,
            2,
            1,
            &[("Progressing", "False", "ProgressDeadlineExceeded")],
        );
        let verdicts = verdicts(&desired_status(&object, &stuck));
        assert_eq!(
            verdicts[1],
            ("False".into(), "ProgressDeadlineExceeded".into())
        );
        assert_eq!(
            verdicts[2],
            ("True".into(), "ProgressDeadlineExceeded".into())
        );
    }

    #[test]
    fn a_converged_status_is_stable_and_keeps_other_conditions_out() {
        let mut object = sample(3);
        let deployment = deployed(
            &object,
            3,
            3,
            &[("Available", "True", "MinimumReplicasAvailable")],
        );
        let mut status = desired_status(&object, &deployment);
        let foreign = conditions::new("Backup", true, "Done", "someone else's", Some(2));
        status.conditions.push(foreign);
        object.status = Some(status);
        // Recomputed later: the same conditions, transition times included, and no foreign one.
        let again = desired_status(&object, &deployment);
        let ours = &object.status.as_ref().unwrap().conditions[..3];
        assert_eq!(again.conditions, ours);
    }
}
