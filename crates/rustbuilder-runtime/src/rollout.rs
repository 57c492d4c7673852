//! What the Deployment controller made of a Deployment, read from its status the way
//! `kubectl rollout status` reads it: has it seen the latest spec, do the Pods serve, is the rollout
//! complete, stuck, or failing to create Pods.
//!
//! A controller that runs its workload as a Deployment turns a [`Rollout`] into its own status
//! conditions, e.g. `Available` from [`Rollout::available`] and `Degraded` from [`Rollout::failure`].
//!
//! ```
//! use k8s_openapi::api::apps::v1::Deployment;
//! use rustbuilder_runtime::rollout::Rollout;
//!
//! // A Deployment its controller has not looked at yet.
//! let rollout = Rollout::of(&Deployment::default());
//! assert!(!rollout.complete);
//! ```

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition};

/// The state of a Deployment's rollout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rollout {
    /// The Deployment controller has seen the latest spec (`status.observedGeneration` is current):
    /// until then the rest describes an older spec.
    pub observed: bool,
    /// The Deployment has minimum availability (its `Available` condition is True), as its rollout
    /// strategy defines it: a Deployment being scaled keeps serving.
    pub available: bool,
    /// Every wanted replica runs the latest spec and is available, and no other replica is left.
    pub complete: bool,
    /// The Deployment is replacing its Pods with Pods of the latest template (its own `Progressing`
    /// condition is True for a new or updated ReplicaSet). Scaling alone is not a rollout.
    pub rolling_out: bool,
    /// The rollout exceeded its progress deadline (`Progressing=False`, reason
    /// `ProgressDeadlineExceeded`): the Deployment controller's message.
    pub stuck: Option<String>,
    /// The Deployment controller cannot create Pods (`ReplicaFailure=True`, e.g. quota or Pod
    /// Security admission): its message.
    pub failure: Option<String>,
    /// Pods of the Deployment, ready or not.
    pub replicas: i32,
    /// Pods of the Deployment that are ready.
    pub ready_replicas: i32,
    /// Pods of the Deployment that are available: ready for at least `minReadySeconds`.
    pub available_replicas: i32,
}

impl Rollout {
    /// Reads the rollout state of `deployment` from its status.
    pub fn of(deployment: &Deployment) -> Rollout {
        let Some(status) = deployment.status.as_ref() else {
            return Rollout::default();
        };
        let wanted = deployment
            .spec
            .as_ref()
            .and_then(|spec| spec.replicas)
            .unwrap_or(1);
        let conditions = status.conditions.as_deref().unwrap_or_default();
        let observed = matches!(
            (status.observed_generation, deployment.metadata.generation),
            (Some(seen), Some(latest)) if seen >= latest
        );
        let replicas = status.replicas.unwrap_or(0);
        let complete = observed
            && status.updated_replicas.unwrap_or(0) == wanted
            && status.available_replicas.unwrap_or(0) == wanted
            && replicas == wanted;
        Rollout {
            observed,
            available: find(conditions, "Available", "True").is_some(),
            complete,
            rolling_out: find(conditions, "Progressing", "True")
                .is_some_and(|c| c.reason.as_deref() != Some("NewReplicaSetAvailable")),
            stuck: find(conditions, "Progressing", "False")
                .filter(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded"))
                .map(message),
            failure: find(conditions, "ReplicaFailure", "True").map(message),
            replicas,
            ready_replicas: status.ready_replicas.unwrap_or(0),
            available_replicas: status.available_replicas.unwrap_or(0),
        }
    }
}

fn find<'a>(
    conditions: &'a [DeploymentCondition],
    type_: &str,
    status: &str,
) -> Option<&'a DeploymentCondition> {
    conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
}

fn message(condition: &DeploymentCondition) -> String {
    condition.message.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStatus};

    fn deployment(wanted: i32, generation: i64, status: DeploymentStatus) -> Deployment {
        let mut deployment = Deployment {
            spec: Some(DeploymentSpec {
                replicas: Some(wanted),
                ..Default::default()
            }),
            status: Some(status),
            ..Default::default()
        };
        deployment.metadata.generation = Some(generation);
        deployment
    }

    fn condition(type_: &str, status: &str, reason: &str) -> DeploymentCondition {
        DeploymentCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(format!("{type_}: {reason}")),
            ..Default::default()
        }
    }

    fn counts(observed: i64, replicas: i32, updated: i32, available: i32) -> DeploymentStatus {
        DeploymentStatus {
            observed_generation: Some(observed),
            replicas: Some(replicas),
            updated_replicas: Some(updated),
            available_replicas: Some(available),
            ready_replicas: Some(available),
            ..Default::default()
        }
    }

    #[test]
    fn a_deployment_without_status_has_not_been_observed() {
        let rollout = Rollout::of(&Deployment::default());
        assert_eq!(rollout, Rollout::default());
        assert!(!rollout.observed);
    }

    #[test]
    fn complete_only_when_every_replica_is_updated_and_available() {
        let mut status = counts(2, 3, 3, 3);
        status.conditions = Some(vec![condition(
            "Available",
            "True",
            "MinimumReplicasAvailable",
        )]);
        let done = Rollout::of(&deployment(3, 2, status.clone()));
        assert!(done.observed && done.available && done.complete, "{done:?}");
        assert_eq!(
            (done.replicas, done.ready_replicas, done.available_replicas),
            (3, 3, 3)
        );

        // Scaling to 5: still serving, not complete.
        let scaling = Rollout::of(&deployment(5, 3, counts(3, 3, 3, 3)));
        assert!(scaling.observed && !scaling.complete);
        // A newer spec the Deployment controller has not seen yet.
        let unseen = Rollout::of(&deployment(3, 3, status));
        assert!(!unseen.observed && !unseen.complete && unseen.available);
        // An old replica still around during a rolling update.
        assert!(!Rollout::of(&deployment(3, 2, counts(2, 4, 3, 3))).complete);
    }

    #[test]
    fn a_new_template_rolls_out_and_scaling_does_not() {
        let progressing = |reason| {
            let mut status = counts(2, 3, 3, 3);
            status.conditions = Some(vec![condition("Progressing", "True", reason)]);
            Rollout::of(&deployment(3, 2, status)).rolling_out
        };
        assert!(progressing("NewReplicaSetCreated"));
        assert!(progressing("ReplicaSetUpdated"));
        // What a Deployment keeps reporting once rolled out, also while it scales.
        assert!(!progressing("NewReplicaSetAvailable"));
        assert!(!Rollout::of(&deployment(3, 2, counts(2, 3, 3, 3))).rolling_out);
    }

    #[test]
    fn stuck_and_failing_rollouts_carry_the_controllers_message() {
        let mut status = counts(1, 1, 0, 0);
        status.conditions = Some(vec![
            condition("Progressing", "False", "ProgressDeadlineExceeded"),
            condition("ReplicaFailure", "True", "FailedCreate"),
        ]);
        let rollout = Rollout::of(&deployment(1, 1, status));
        assert_eq!(
            rollout.stuck.as_deref(),
            Some("Progressing: ProgressDeadlineExceeded")
        );
        assert_eq!(
            rollout.failure.as_deref(),
            Some("ReplicaFailure: FailedCreate")
        );
        assert!(!rollout.available);

        // Progressing=False for another reason is not "stuck".
        let mut paused = counts(1, 1, 1, 1);
        paused.conditions = Some(vec![condition("Progressing", "False", "DeploymentPaused")]);
        assert_eq!(Rollout::of(&deployment(1, 1, paused)).stuck, None);
    }
}
