//! A trimmed copy of the golden CronJob controller: a run every `periodSeconds` instead of a cron
//! schedule, on a stopped clock, with its three concurrency policies and the Job of each run named
//! after its scheduled time. Nothing finishes a Job on a test control plane: each stays active.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::{CustomResource, CustomResourceExt, KubeSchema, Resource, ResourceExt};
use rustbuilder_runtime::Manager;
use rustbuilder_runtime::clock::{Clock, FakeClock};
use rustbuilder_runtime::owned::Owned;
use rustbuilder_runtime::testing::explore::{Explorer, Snapshot};
use rustbuilder_runtime::{apply, children};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Case, settings};

const MANAGER: &str = "cronjob-explored";
const SAMPLE: &str = "\
apiVersion: explore.example.com/v1
kind: CronJob
metadata:
  name: nightly
spec:
  periodSeconds: 120
  concurrencyPolicy: Forbid
  image: busybox:1.36
";
/// The annotation that records which scheduled run a Job is.
const SCHEDULED_AT: &str = "explore.example.com/scheduled-at";

#[derive(CustomResource, KubeSchema, Clone, Debug, Deserialize, Serialize)]
#[kube(
    group = "explore.example.com",
    version = "v1",
    kind = "CronJob",
    namespaced
)]
#[kube(status = "CronJobStatus")]
#[serde(rename_all = "camelCase")]
pub struct CronJobSpec {
    /// Seconds from one scheduled run to the next, 60 to 600.
    #[schemars(range(min = 60, max = 600))]
    period_seconds: i64,
    /// What a due run does while an earlier one is active.
    #[serde(default)]
    concurrency_policy: ConcurrencyPolicy,
    /// Holds runs back while true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    suspend: Option<bool>,
    /// The image each run's Job runs.
    image: String,
}

#[derive(JsonSchema, Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
enum ConcurrencyPolicy {
    #[default]
    Allow,
    Forbid,
    Replace,
}

#[derive(KubeSchema, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CronJobStatus {
    /// The Jobs still running, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    active: Vec<String>,
    /// When the latest run was scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_schedule_time: Option<Time>,
}

pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    CronJob::crd()
}

/// A classic bug of CronJob controllers, seeded into the copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    None,
    /// Takes `status.lastScheduleTime` for proof that the due run was started, and writes it
    /// before creating the Job: a crash in between skips the run for good.
    RunMarkedBeforeJob,
    /// Decides from the cache which Jobs still run before starting the next (the golden's logic
    /// before the explorer found this): a cache that lags leaves one running under `Replace`, or
    /// starts a second under `Forbid`.
    DecidedOnLaggingCache,
}

struct Context {
    client: kube::Client,
    jobs: Owned<Job>,
    clock: FakeClock,
    bug: Bug,
}

async fn run(manager: Manager, clock: FakeClock, bug: Bug) {
    let jobs = manager.owned::<Job>();
    let ctx = Arc::new(Context {
        client: manager.client(),
        jobs: jobs.clone(),
        clock,
        bug,
    });
    manager
        .controller(manager.api::<CronJob>(), "cronjob")
        .owns(&jobs)
        .run(reconcile, ctx)
        .await;
}

async fn reconcile(cron_job: Arc<CronJob>, ctx: Arc<Context>) -> Result<Action, kube::Error> {
    let cron_job = cron_job.as_ref();
    let namespace = cron_job.namespace().unwrap_or_default();
    let cron_jobs: Api<CronJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let children = ctx.jobs.children_of(cron_job);
    let mut active: Vec<String> = children.iter().map(|job| job.name_any()).collect();
    let mut last = children.iter().filter_map(|job| scheduled_at(job)).max();

    let due = due_run(cron_job, ctx.clock.now());
    let started = match ctx.bug {
        Bug::RunMarkedBeforeJob => {
            let status = cron_job.status.as_ref();
            let marked = status
                .and_then(|s| s.last_schedule_time.as_ref())
                .map(|t| t.0);
            last = last.max(marked);
            marked >= due
        }
        _ => due.is_some_and(|due| children.iter().any(|job| scheduled_at(job) == Some(due))),
    };
    let suspended = cron_job.spec.suspend == Some(true);
    if let Some(due) = due.filter(|_| !started && !suspended) {
        // A run looks due from the cache, which can lag: what cannot be undone (a Job started, or
        // deleted under Replace) is decided from the Jobs the API server has now.
        if !matches!(
            ctx.bug,
            Bug::DecidedOnLaggingCache | Bug::RunMarkedBeforeJob
        ) {
            let now: Vec<Arc<Job>> = children::list_now(&ctx.client, cron_job).await?;
            active = now.iter().map(|job| job.name_any()).collect();
            last = now.iter().filter_map(|job| scheduled_at(job)).max();
            if now.iter().any(|job| scheduled_at(job) == Some(due)) {
                return report(&cron_jobs, cron_job, active, last).await;
            }
        }
        let policy = cron_job.spec.concurrency_policy;
        if policy == ConcurrencyPolicy::Forbid && !active.is_empty() {
            return report(&cron_jobs, cron_job, active, last).await;
        }
        if policy == ConcurrencyPolicy::Replace {
            for name in active.drain(..) {
                match jobs.delete(&name, &DeleteParams::background()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(error) => return Err(error),
                }
            }
        }
        if ctx.bug == Bug::RunMarkedBeforeJob {
            report(&cron_jobs, cron_job, active.clone(), Some(due)).await?;
        }
        let job = job_for(cron_job, due);
        match jobs.create(&PostParams::default(), &job).await {
            Ok(job) => active.push(job.name_any()),
            // Started already, by an earlier reconcile this cache has not caught up with.
            Err(kube::Error::Api(status)) if status.code == 409 => active.push(job.name_any()),
            Err(error) => return Err(error),
        }
        last = Some(due);
    }
    report(&cron_jobs, cron_job, active, last).await
}

async fn report(
    api: &Api<CronJob>,
    cron_job: &CronJob,
    mut active: Vec<String>,
    last_schedule_time: Option<Timestamp>,
) -> Result<Action, kube::Error> {
    active.sort();
    let status = CronJobStatus {
        active,
        last_schedule_time: last_schedule_time.map(Time),
    };
    apply::status(api, cron_job, &status, MANAGER).await?;
    Ok(Action::await_change())
}

/// The latest scheduled run at `now` (runs fall on multiples of the period since the epoch), if
/// it is not older than the CronJob.
fn due_run(cron_job: &CronJob, now: Timestamp) -> Option<Timestamp> {
    let period = cron_job.spec.period_seconds.max(1);
    let due = Timestamp::from_second(now.as_second() / period * period).ok()?;
    let created = cron_job.metadata.creation_timestamp.as_ref()?.0;
    (due >= created).then_some(due)
}

fn scheduled_at(job: &Job) -> Option<Timestamp> {
    job.annotations().get(SCHEDULED_AT)?.parse().ok()
}

fn job_for(cron_job: &CronJob, due: Timestamp) -> Job {
    let name = format!("{}-{}", cron_job.name_any(), due.as_second() / 60);
    Job {
        metadata: ObjectMeta {
            name: Some(name),
            annotations: Some([(SCHEDULED_AT.to_string(), due.to_string())].into()),
            owner_references: cron_job.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            template: PodTemplateSpec {
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "run".into(),
                        image: Some(cron_job.spec.image.clone()),
                        ..Default::default()
                    }],
                    restart_policy: Some("Never".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The user's own invariant: under `Forbid` or `Replace`, at most one Job runs (none finishes
/// here, and the workload changes the policy before the period, so none is left from `Allow`).
fn one_job_at_a_time(snapshot: &Snapshot) -> Result<(), String> {
    for cron_job in snapshot.of("explore.example.com/v1/cronjobs") {
        let policy = cron_job.pointer("/spec/concurrencyPolicy");
        if !matches!(policy.and_then(|p| p.as_str()), Some("Forbid" | "Replace")) {
            continue;
        }
        let uid = cron_job.pointer("/metadata/uid");
        let running = snapshot.of("batch/v1/jobs").filter(|job| {
            let owners = job
                .pointer("/metadata/ownerReferences")
                .and_then(|o| o.as_array());
            let owned = owners.is_some_and(|owners| owners.iter().any(|o| o.get("uid") == uid));
            owned && job.pointer("/metadata/deletionTimestamp").is_none()
        });
        let names: Vec<_> = running
            .filter_map(|job| job.pointer("/metadata/name"))
            .collect();
        if names.len() > 1 {
            return Err(format!("Jobs {names:?} run at once"));
        }
    }
    Ok(())
}

/// The corpus of this copy: the unseeded copy under every perturbation that catches a seeded bug,
/// and each seeded copy under its own.
pub fn cases(client: &kube::Client) -> Vec<Case> {
    let seeded = [
        (
            Bug::RunMarkedBeforeJob,
            "crash:write=1",
            "batch/v1/jobs/nightly-",
        ),
        (
            Bug::DecidedOnLaggingCache,
            "stale:step=5:resource=jobs",
            "one Job at a time under Forbid and Replace",
        ),
    ];
    let explorer = |bug: Bug, replay: Vec<&str>| {
        // Stopped ahead, where the runs of 60, 120 and 600 s periods fall at three other times: a
        // run is due at once, and stays the same run for the whole test.
        let hour = Timestamp::now().as_second() / 3600 * 3600;
        let clock = FakeClock::new(Timestamp::from_second(hour + 2 * 3600 + 590).unwrap());
        Explorer::new(client.clone(), MANAGER)
            .controller(move |manager| run(manager, clock.clone(), bug))
            .sample::<CronJob>(SAMPLE)
            .invariant(
                "one Job at a time under Forbid and Replace",
                one_job_at_a_time,
            )
            .plan(super::replay(&replay))
            .settings(settings())
            .replay_command("cargo test -p rustbuilder-runtime --test explore")
    };
    let mut cases = vec![Case::unseeded(
        "CronJob",
        explorer(Bug::None, seeded.iter().map(|(_, p, _)| *p).collect()),
    )];
    for (bug, perturbation, expected) in seeded {
        let name = format!("CronJob {bug:?}");
        cases.push(Case::seeded(
            name,
            expected,
            explorer(bug, vec![perturbation]),
        ));
    }
    cases
}
