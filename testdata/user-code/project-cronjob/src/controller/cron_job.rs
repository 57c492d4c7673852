// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! The `CronJob` controller: starts a Job at each time the schedule names, keeps the history of
//! finished Jobs within its limits, and reports the running Jobs, the last run and the conditions
//! `Available`, `Progressing` and `Degraded` in the status.
//!
//! Every reconcile goes through the same steps: list the CronJob's Jobs (from the shared cache, by
//! owner), sort them into running, succeeded and failed, work out where the schedule stands, apply
//! the status, delete the finished Jobs beyond the history limits, then decide whether a run is due
//! now. It asks to be reconciled again at the next scheduled time; the time comes from a [`Clock`],
//! which tests replace. A schedule that cannot run is reported, not retried: a change of the spec
//! wakes the controller.

use std::collections::BTreeMap;
use std::sync::Arc;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp, tz::TimeZone};
use kube::api::{PostParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::{Api, Client, Resource, ResourceExt};
use rustbuilder_runtime::clock::{Clock, SystemClock, requeue_at};
use rustbuilder_runtime::events::Events;
use rustbuilder_runtime::owned::Owned;
use rustbuilder_runtime::{Manager, apply, children, conditions};
use tracing::info;

use super::MANAGER_NAME;
use crate::api::v1::{ConcurrencyPolicy, CronJob, CronJobStatus};
use crate::{Error, Result};

// +rustbuilder:rbac:groups=batch.tutorial.kubebuilder.io,resources=cronjobs,verbs=get;list;watch
// +rustbuilder:rbac:groups=batch.tutorial.kubebuilder.io,resources=cronjobs/status,verbs=get;patch
// +rustbuilder:rbac:groups=batch.tutorial.kubebuilder.io,resources=cronjobs/finalizers,verbs=update
// +rustbuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +rustbuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

/// The annotation on each Job that says which scheduled time it runs for.
pub const SCHEDULED_TIME: &str = "batch.tutorial.kubebuilder.io/scheduled-at";

/// How many missed runs the controller looks back over before giving up on a schedule (a CronJob
/// created long ago, or a clock set far back, would otherwise make it walk through years of runs).
pub const MAX_MISSED_RUNS: usize = 100;

/// The conditions the status reports: whether the CronJob runs on its schedule, whether one of its
/// Jobs is running, and whether something needs a look (its last Job failed, or its schedule cannot
/// run).
pub const AVAILABLE: &str = "Available";
pub const PROGRESSING: &str = "Progressing";
pub const DEGRADED: &str = "Degraded";

/// The history limits when the spec names none (the defaulting webhook writes the same).
pub const DEFAULT_SUCCESSFUL_JOBS_HISTORY_LIMIT: i32 = 3;
pub const DEFAULT_FAILED_JOBS_HISTORY_LIMIT: i32 = 1;

/// What every reconcile shares.
pub struct Context {
    /// Client for the Kubernetes API.
    pub client: Client,
    /// Events about CronJobs (a skipped run, a Job created).
    pub events: Events,
    /// Every Job, as the manager's watch last saw them, indexed by owner; shared with anything else
    /// that watches Jobs.
    pub jobs: Owned<Job>,
    /// What time it is: the system's clock, or the one a test moves.
    pub clock: Arc<dyn Clock>,
}

/// Runs the controller with the system clock until shutdown is requested.
pub async fn run(manager: Manager) {
    run_with_clock(manager, Arc::new(SystemClock)).await;
}

/// Runs the controller with `clock` telling the time (tests pass a `FakeClock`).
pub async fn run_with_clock(manager: Manager, clock: Arc<dyn Clock>) {
    // Every Job, as the book's `Owns(&batchv1.Job{})` caches them: one the CronJob owns counts even
    // if this operator did not make it (by hand, or an earlier operator).
    let jobs = manager.owned::<Job>();
    let ctx = Arc::new(Context {
        client: manager.client(),
        events: manager.events(),
        jobs: jobs.clone(),
        clock,
    });
    manager
        .controller(manager.api::<CronJob>(), "cronjob")
        // A Job that starts, finishes or goes away reconciles its CronJob.
        .owns(&jobs)
        .run(reconcile, ctx)
        .await;
}

/// Brings the Jobs of one CronJob in line with its schedule and policies.
pub async fn reconcile(cron_job: Arc<CronJob>, ctx: Arc<Context>) -> Result<Action> {
    let cron_job = cron_job.as_ref();
    let namespace = cron_job
        .namespace()
        .ok_or_else(|| Error::InvalidObject("the CronJob has no namespace".into()))?;
    let now = ctx.clock.now();
    let api = Api::<CronJob>::namespaced(ctx.client.clone(), &namespace);

    // 1. The Jobs, sorted by how they ended, and where the schedule stands: the status reports both.
    let jobs = Jobs::sort(ctx.jobs.children_of(cron_job));
    let spec = &cron_job.spec;
    let since = last_run(cron_job, &jobs)
        .or_else(|| cron_job.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(now);
    let runs = parse_schedule(&spec.schedule)
        .map_err(|e| Unschedulable::invalid(format!("spec.schedule: {e}")))
        .and_then(|schedule| {
            let zone = time_zone(spec.time_zone.as_deref())?;
            runs(&schedule, &zone, since, now, spec.starting_deadline_seconds)
        });
    let status = status(cron_job, &jobs, runs.as_ref().err());
    apply::status(&api, cron_job, &status, MANAGER_NAME).await?;

    // 2. Finished Jobs beyond the history limits go, oldest first, their Pods with them.
    let keep_succeeded = spec
        .successful_jobs_history_limit
        .unwrap_or(DEFAULT_SUCCESSFUL_JOBS_HISTORY_LIMIT);
    let keep_failed = spec
        .failed_jobs_history_limit
        .unwrap_or(DEFAULT_FAILED_JOBS_HISTORY_LIMIT);
    let mut old = beyond_limit(&jobs.succeeded, keep_succeeded);
    old.extend(beyond_limit(&jobs.failed, keep_failed));
    if let Err(error) = children::delete(&ctx.client, &old, PropagationPolicy::Background).await {
        // The history is kept best effort: a Job that could not go is tried again at the next
        // reconcile, and a due run does not wait for it.
        let note = format!("Could not delete old Jobs: {error}");
        ctx.events.warning(cron_job, "PruneFailed", "Prune", &note);
    }

    // 3. A suspended CronJob starts nothing, nor one whose schedule cannot run (its status says
    // why, and retrying would not help): a change of the spec will wake it.
    if spec.suspend == Some(true) {
        return Ok(Action::await_change());
    }
    let runs = match runs {
        Ok(runs) => runs,
        Err(problem) => {
            let reason = problem.reason;
            ctx.events
                .warning(cron_job, reason, "Schedule", &problem.message);
            return Ok(Action::await_change());
        }
    };
    let next = requeue_at(runs.next, ctx.clock.as_ref());
    let Some(due) = runs.missed else {
        // Nothing due yet: come back at the next scheduled time.
        return Ok(next);
    };

    // 4. A run is due (`runs` left out those later than the starting deadline): held back by a
    // running Job, or started. The cache can lag (a Job created a moment ago, a standby that has
    // just taken over), and what is decided here cannot be undone: a second Job started under
    // Forbid, a running one left under Replace. So the Jobs are read from the API server now.
    let jobs = Jobs::sort(children::list_now(&ctx.client, cron_job).await?);
    if jobs.last_scheduled >= Some(due) {
        // Started by an earlier reconcile the cache had not seen yet.
        return Ok(next);
    }
    match spec.concurrency_policy {
        ConcurrencyPolicy::Forbid if !jobs.active.is_empty() => {
            let note = format!("Skipped the run of {due}: a Job still runs");
            info!(cronjob = %cron_job.name_any(), %due, "run skipped: a Job still runs");
            ctx.events.normal(cron_job, "RunSkipped", "Schedule", &note);
            return Ok(next);
        }
        ConcurrencyPolicy::Replace => {
            children::delete(&ctx.client, &jobs.active, PropagationPolicy::Background).await?;
        }
        _ => {}
    }
    let job = build_job(cron_job, due)?;
    let jobs_api = Api::<Job>::namespaced(ctx.client.clone(), &namespace);
    match jobs_api.create(&PostParams::default(), &job).await {
        Ok(job) => {
            let note = format!("Created Job {} for {due}", job.name_any());
            info!(cronjob = %cron_job.name_any(), job = %job.name_any(), %due, "Job created");
            ctx.events.normal(cron_job, "JobCreated", "Schedule", &note);
        }
        // The name is taken since the LIST, or by a Job of an earlier CronJob of this name that the
        // garbage collector has yet to delete: its deletion wakes this CronJob again.
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        // Reported, then retried with backoff.
        Err(error) => {
            let mut failed = status;
            let message = format!("cannot create Job {}: {error}", job.name_any());
            let generation = cron_job.metadata.generation;
            let degraded =
                conditions::new(DEGRADED, true, "JobCreationFailed", message, generation);
            conditions::set(failed.conditions.get_or_insert_default(), degraded);
            apply::status(&api, cron_job, &failed, MANAGER_NAME).await?;
            return Err(error.into());
        }
    }
    Ok(next)
}

/// The status of `cron_job` with `jobs`: the running Jobs, the last run, and the conditions, whose
/// transition times stay as they were while their status does not change. `unschedulable` says why
/// the schedule cannot run, if it cannot.
pub fn status(
    cron_job: &CronJob,
    jobs: &Jobs,
    unschedulable: Option<&Unschedulable>,
) -> CronJobStatus {
    let generation = cron_job.metadata.generation;
    let condition = |type_, status, reason: &str, message: String| {
        conditions::new(type_, status, reason, message, generation)
    };
    let running = jobs.active.len();
    let available = match unschedulable {
        Some(problem) => condition(AVAILABLE, false, problem.reason, problem.message.clone()),
        None if cron_job.spec.suspend == Some(true) => condition(
            AVAILABLE,
            false,
            "Suspended",
            "suspended: no run starts until spec.suspend is false".into(),
        ),
        None if running > 0 => condition(
            AVAILABLE,
            true,
            "JobsActive",
            format!("{running} Job(s) running"),
        ),
        None => condition(
            AVAILABLE,
            true,
            "AllJobsCompleted",
            "no Job running: the next starts on schedule".into(),
        ),
    };
    let progressing = if running > 0 {
        condition(
            PROGRESSING,
            true,
            "JobsActive",
            format!("{running} Job(s) running"),
        )
    } else {
        condition(PROGRESSING, false, "NoJobsActive", "no Job running".into())
    };
    // The last Job to finish tells the health: an old failure followed by successes is history.
    let last_finished = jobs.succeeded.last().into_iter().chain(jobs.failed.last());
    let last_finished = last_finished.max_by_key(|job| scheduled_time(job));
    let degraded = match (unschedulable, last_finished) {
        (Some(problem), _) => condition(DEGRADED, true, problem.reason, problem.message.clone()),
        (None, Some(job)) if finished(job) == Some(false) => condition(
            DEGRADED,
            true,
            "LastJobFailed",
            format!("Job {} failed", job.name_any()),
        ),
        (None, Some(job)) => condition(
            DEGRADED,
            false,
            "LastJobSucceeded",
            format!("Job {} succeeded", job.name_any()),
        ),
        (None, None) => condition(
            DEGRADED,
            false,
            "NoJobFinished",
            "no Job finished yet".into(),
        ),
    };
    let mut kept = cron_job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    for condition in [available, progressing, degraded] {
        conditions::set(&mut kept, condition);
    }
    CronJobStatus {
        active: (!jobs.active.is_empty())
            .then(|| jobs.active.iter().map(|job| reference(job)).collect()),
        last_schedule_time: last_run(cron_job, jobs).map(Time),
        conditions: Some(kept),
    }
}

/// When the last run was scheduled: by its Job, or by the status once its Job is gone (a history
/// limit of 0 deletes it at once; the same run must not start again).
fn last_run(cron_job: &CronJob, jobs: &Jobs) -> Option<Timestamp> {
    let recorded = cron_job
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref());
    jobs.last_scheduled.max(recorded.map(|t| t.0))
}

/// Why a CronJob cannot run on its schedule: the reason its conditions give, and what to do.
#[derive(Debug, PartialEq)]
pub struct Unschedulable {
    pub reason: &'static str,
    pub message: String,
}

impl Unschedulable {
    fn invalid(message: String) -> Self {
        Unschedulable {
            reason: "InvalidSchedule",
            message,
        }
    }
}

/// A CronJob's Jobs by state, and the latest scheduled time any of them ran for.
#[derive(Debug, Default)]
pub struct Jobs {
    pub active: Vec<Arc<Job>>,
    pub succeeded: Vec<Arc<Job>>,
    pub failed: Vec<Arc<Job>>,
    pub last_scheduled: Option<Timestamp>,
}

impl Jobs {
    /// Sorts `jobs` by state; each list is ordered by scheduled time, oldest first.
    pub fn sort(mut jobs: Vec<Arc<Job>>) -> Jobs {
        jobs.sort_by_key(|job| (scheduled_time(job), job.name_any()));
        let mut sorted = Jobs::default();
        for job in jobs {
            if let Some(at) = scheduled_time(&job) {
                sorted.last_scheduled = sorted.last_scheduled.max(Some(at));
            }
            match finished(&job) {
                None => sorted.active.push(job),
                Some(true) => sorted.succeeded.push(job),
                Some(false) => sorted.failed.push(job),
            }
        }
        sorted
    }
}

/// `Some(true)` for a Job that completed, `Some(false)` for one that failed, `None` while it runs.
pub fn finished(job: &Job) -> Option<bool> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .filter(|c| c.status == "True")
        .find_map(|c| match c.type_.as_str() {
            "Complete" => Some(true),
            "Failed" => Some(false),
            _ => None,
        })
}

/// The scheduled time a Job runs for, from its annotation.
pub fn scheduled_time(job: &Job) -> Option<Timestamp> {
    job.annotations().get(SCHEDULED_TIME)?.parse().ok()
}

/// The oldest of `jobs` (sorted oldest first) beyond the `keep` newest.
fn beyond_limit(jobs: &[Arc<Job>], keep: i32) -> Vec<Arc<Job>> {
    let keep = usize::try_from(keep).unwrap_or(0);
    jobs[..jobs.len().saturating_sub(keep)].to_vec()
}

fn reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        // No resourceVersion: the status would change with every change of a running Job.
        ..Default::default()
    }
}

/// Parses a schedule in Kubernetes' cron syntax: five fields (no seconds, no years), or a macro
/// such as `@hourly`. A day of the month and a day of the week both restricted match either one, as
/// in Vixie cron and Kubernetes.
///
/// The `croner` crate does the parsing and the arithmetic: it is maintained, reads the five-field
/// syntax with an option to refuse seconds and years, and works on `jiff` times, the time type of
/// k8s-openapi (the `cron` crate wants a seconds field and works on `chrono`).
pub fn parse_schedule(schedule: &str) -> Result<Cron, croner::errors::CronError> {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(schedule)
}

/// Where a CronJob stands against its schedule at some moment.
#[derive(Debug, PartialEq)]
pub struct Runs {
    /// The latest scheduled time that has come and has no Job yet, if any.
    pub missed: Option<Timestamp>,
    /// The first scheduled time after now.
    pub next: Timestamp,
}

/// The time zone of a CronJob's `spec.timeZone`: UTC when it names none. The time-zone database
/// comes with the binary (jiff's `tzdb-bundle-always`), as Go's comes with Kubernetes' own CronJob
/// controller: a minimal image has none of its own.
pub fn time_zone(name: Option<&str>) -> Result<TimeZone, Unschedulable> {
    let Some(name) = name else {
        return Ok(TimeZone::UTC);
    };
    TimeZone::get(name).map_err(|_| Unschedulable {
        reason: "InvalidTimeZone",
        message: format!("spec.timeZone: {name:?} is not a time zone of the IANA database"),
    })
}

/// The runs of `schedule`, read in `zone`, between `since` (the last run, or the CronJob's
/// creation) and `now`: the latest one missed and the next one. With a starting deadline, runs
/// older than the deadline are not looked at. More than [`MAX_MISSED_RUNS`] missed runs is an
/// error: the clock or the schedule is likely wrong, and starting one run would hide it.
pub fn runs(
    schedule: &Cron,
    zone: &TimeZone,
    since: Timestamp,
    now: Timestamp,
    starting_deadline_seconds: Option<i64>,
) -> Result<Runs, Unschedulable> {
    let mut earliest = since;
    // A deadline reaching back past the earliest time there is hides nothing (no overflow).
    if let Some(deadline) = starting_deadline_seconds
        && let Ok(oldest) = now.checked_sub(SignedDuration::from_secs(deadline))
    {
        earliest = earliest.max(oldest);
    }
    let mut missed = None;
    let mut count = 0;
    for at in schedule.iter_after(earliest.to_zoned(zone.clone())) {
        let at = at.timestamp();
        if at > now {
            return Ok(Runs { missed, next: at });
        }
        count += 1;
        if count > MAX_MISSED_RUNS {
            return Err(Unschedulable {
                reason: "TooManyMissedRuns",
                message: format!(
                    "more than {MAX_MISSED_RUNS} runs missed since {earliest}: check the clock, or set a startingDeadlineSeconds"
                ),
            });
        }
        missed = Some(at);
    }
    Err(Unschedulable::invalid(
        "spec.schedule names no time in the future".into(),
    ))
}

/// The Job of `cron_job`'s run at `scheduled`: the template's, named after the CronJob and the
/// time (the same run always gets the same name, so it cannot start twice), owned by the CronJob.
pub fn build_job(cron_job: &CronJob, scheduled: Timestamp) -> Result<Job> {
    let name = cron_job.name_any();
    let mut owner = cron_job
        .controller_owner_ref(&())
        .ok_or_else(|| Error::InvalidObject(format!("{name} has no uid: not read from the API")))?;
    // The garbage collector's foreground deletion of the CronJob waits for its Jobs.
    owner.block_owner_deletion = Some(true);
    let template = &cron_job.spec.job_template;
    let template_meta = template.metadata.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = template_meta.labels.unwrap_or_default();
    // Which operator made the Job: `kubectl get jobs -l app.kubernetes.io/managed-by=project-cronjob`.
    labels.insert("app.kubernetes.io/managed-by".into(), MANAGER_NAME.into());
    let mut annotations = template_meta.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED_TIME.into(), scheduled.to_string());
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{}", scheduled.as_second())),
            namespace: cron_job.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: template.spec.clone(),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn every_five_minutes() -> Cron {
        parse_schedule("*/5 * * * *").unwrap()
    }

    #[test]
    fn kubernetes_schedules_parse_and_others_do_not() {
        for good in ["*/5 * * * *", "0 3 * * 1-5", "@hourly", "30 2 1 * *"] {
            assert!(parse_schedule(good).is_ok(), "{good}");
        }
        for bad in ["", "* * * *", "0 */5 * * * *", "61 * * * *", "every minute"] {
            assert!(parse_schedule(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn nothing_is_due_before_the_first_scheduled_time() {
        let runs = runs(
            &every_five_minutes(),
            &TimeZone::UTC,
            at("2026-01-01T00:01:00Z"),
            at("2026-01-01T00:04:59Z"),
            None,
        );
        assert_eq!(
            runs,
            Ok(Runs {
                missed: None,
                next: at("2026-01-01T00:05:00Z")
            })
        );
    }

    #[test]
    fn the_latest_missed_run_is_due() {
        let runs = runs(
            &every_five_minutes(),
            &TimeZone::UTC,
            at("2026-01-01T00:01:00Z"),
            at("2026-01-01T00:12:00Z"),
            None,
        )
        .unwrap();
        assert_eq!(runs.missed, Some(at("2026-01-01T00:10:00Z")));
        assert_eq!(runs.next, at("2026-01-01T00:15:00Z"));
    }

    #[test]
    fn a_run_at_exactly_now_is_due() {
        let runs = runs(
            &every_five_minutes(),
            &TimeZone::UTC,
            at("2026-01-01T00:01:00Z"),
            at("2026-01-01T00:05:00Z"),
            None,
        )
        .unwrap();
        assert_eq!(runs.missed, Some(at("2026-01-01T00:05:00Z")));
    }

    #[test]
    fn a_schedule_is_read_in_its_time_zone() {
        let nine_daily = parse_schedule("0 9 * * *").unwrap();
        let berlin = time_zone(Some("Europe/Berlin")).unwrap();
        let (since, now) = (at("2026-01-01T00:00:00Z"), at("2026-01-01T07:00:00Z"));
        // 9:00 in Berlin is 8:00 UTC in winter, 7:00 UTC in summer.
        let winter = runs(&nine_daily, &berlin, since, now, None).unwrap();
        assert_eq!(winter.next, at("2026-01-01T08:00:00Z"));
        let (since, now) = (at("2026-07-01T00:00:00Z"), at("2026-07-01T06:00:00Z"));
        let summer = runs(&nine_daily, &berlin, since, now, None).unwrap();
        assert_eq!(summer.next, at("2026-07-01T07:00:00Z"));
        let utc = runs(&nine_daily, &time_zone(None).unwrap(), since, now, None).unwrap();
        assert_eq!(utc.next, at("2026-07-01T09:00:00Z"));
        let unknown = time_zone(Some("Mars/Olympus_Mons")).unwrap_err();
        assert_eq!(unknown.reason, "InvalidTimeZone");
    }

    #[test]
    fn the_starting_deadline_hides_runs_too_old() {
        let since = at("2026-01-01T00:01:00Z");
        let now = at("2026-01-01T00:12:00Z");
        // The 00:10 run is two minutes late: within 180 s, beyond 60 s.
        let within = runs(&every_five_minutes(), &TimeZone::UTC, since, now, Some(180)).unwrap();
        assert_eq!(within.missed, Some(at("2026-01-01T00:10:00Z")));
        let beyond = runs(&every_five_minutes(), &TimeZone::UTC, since, now, Some(60)).unwrap();
        assert_eq!(beyond.missed, None);
        assert_eq!(beyond.next, at("2026-01-01T00:15:00Z"));
    }

    #[test]
    fn a_deadline_longer_than_time_itself_hides_nothing() {
        let since = at("2026-01-01T00:01:00Z");
        let now = at("2026-01-01T00:12:00Z");
        let runs = runs(
            &every_five_minutes(),
            &TimeZone::UTC,
            since,
            now,
            Some(i64::MAX),
        )
        .unwrap();
        assert_eq!(runs.missed, Some(at("2026-01-01T00:10:00Z")));
    }

    #[test]
    fn too_many_missed_runs_is_an_error() {
        let every_minute = parse_schedule("* * * * *").unwrap();
        let since = at("2026-01-01T00:00:00Z");
        assert!(
            runs(
                &every_minute,
                &TimeZone::UTC,
                since,
                at("2026-01-01T01:40:00Z"),
                None
            )
            .is_ok()
        );
        let error = runs(
            &every_minute,
            &TimeZone::UTC,
            since,
            at("2026-01-01T01:41:00Z"),
            None,
        )
        .unwrap_err();
        assert_eq!(error.reason, "TooManyMissedRuns");
        assert!(
            error.message.contains("more than 100 runs missed"),
            "{error:?}"
        );
        // A deadline bounds how far back the controller looks.
        assert!(
            runs(
                &every_minute,
                &TimeZone::UTC,
                since,
                at("2026-01-02T00:00:00Z"),
                Some(600)
            )
            .is_ok()
        );
    }

    fn job(name: &str, scheduled: &str, condition: Option<&str>) -> Arc<Job> {
        let mut job = Job::default();
        job.metadata.name = Some(name.into());
        job.metadata.annotations =
            Some(BTreeMap::from([(SCHEDULED_TIME.into(), scheduled.into())]));
        job.status = condition.map(|type_| JobStatus {
            conditions: Some(vec![JobCondition {
                type_: type_.into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        Arc::new(job)
    }

    #[test]
    fn jobs_sort_by_state_and_time() {
        let jobs = Jobs::sort(vec![
            job("c", "2026-01-01T00:10:00Z", Some("Complete")),
            job("a", "2026-01-01T00:00:00Z", Some("Complete")),
            job("f", "2026-01-01T00:05:00Z", Some("Failed")),
            job("r", "2026-01-01T00:15:00Z", None),
        ]);
        let names = |jobs: &[Arc<Job>]| jobs.iter().map(|j| j.name_any()).collect::<Vec<_>>();
        assert_eq!(names(&jobs.succeeded), ["a", "c"]);
        assert_eq!(names(&jobs.failed), ["f"]);
        assert_eq!(names(&jobs.active), ["r"]);
        assert_eq!(jobs.last_scheduled, Some(at("2026-01-01T00:15:00Z")));
        // Keeping one succeeded Job deletes the oldest.
        assert_eq!(names(&beyond_limit(&jobs.succeeded, 1)), ["a"]);
        assert!(beyond_limit(&jobs.failed, 1).is_empty());
        assert_eq!(names(&beyond_limit(&jobs.failed, 0)), ["f"]);
    }

    #[test]
    fn conditions_follow_the_jobs_and_the_schedule() {
        let cron_job = CronJob::new("nightly", Default::default());
        let verdict = |status: &CronJobStatus| {
            let conditions = status.conditions.as_deref().unwrap_or_default();
            [AVAILABLE, PROGRESSING, DEGRADED].map(|type_| {
                let c = conditions::find(conditions, type_).expect(type_);
                format!("{}={} {}", c.type_, c.status, c.reason)
            })
        };
        let running = Jobs::sort(vec![
            job("f", "2026-01-01T00:00:00Z", Some("Failed")),
            job("c", "2026-01-01T00:05:00Z", Some("Complete")),
            job("r", "2026-01-01T00:10:00Z", None),
        ]);
        assert_eq!(
            verdict(&status(&cron_job, &running, None)),
            [
                "Available=True JobsActive",
                "Progressing=True JobsActive",
                "Degraded=False LastJobSucceeded"
            ]
        );
        let failed = Jobs::sort(vec![
            job("c", "2026-01-01T00:00:00Z", Some("Complete")),
            job("f", "2026-01-01T00:05:00Z", Some("Failed")),
        ]);
        assert_eq!(
            verdict(&status(&cron_job, &failed, None)),
            [
                "Available=True AllJobsCompleted",
                "Progressing=False NoJobsActive",
                "Degraded=True LastJobFailed"
            ]
        );
        let invalid = Unschedulable::invalid("spec.schedule: bad".into());
        let status = status(&cron_job, &Jobs::default(), Some(&invalid));
        assert_eq!(
            verdict(&status),
            [
                "Available=False InvalidSchedule",
                "Progressing=False NoJobsActive",
                "Degraded=True InvalidSchedule"
            ]
        );
    }

    #[test]
    fn a_run_gets_a_job_named_after_its_time() {
        let mut cron_job = CronJob::new("nightly", Default::default());
        cron_job.metadata.namespace = Some("default".into());
        cron_job.metadata.uid = Some("0000-1111".into());
        let job = build_job(&cron_job, at("2026-01-01T00:05:00Z")).unwrap();
        assert_eq!(job.name_any(), "nightly-1767225900");
        assert_eq!(scheduled_time(&job), Some(at("2026-01-01T00:05:00Z")));
        assert_eq!(job.labels()["app.kubernetes.io/managed-by"], MANAGER_NAME);
        assert_eq!(job.owner_references()[0].uid, "0000-1111");
        assert_eq!(job.owner_references()[0].block_owner_deletion, Some(true));
    }
}
