// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! The `CronJob` controller against a real API server with the controller-manager (its Job controller
//! and garbage collector), a scheduler and fake nodes whose Job pods complete at once: the simulated
//! cluster of rustbuilder-envtest.
//!
//! One cluster and one manager serve every check, one after the other, each with its own CronJob; the
//! manager's clock is a `FakeClock` the test moves to just after each scheduled time, so no check
//! waits for a real minute to pass.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::Manager;
use rustbuilder_runtime::clock::{Clock, FakeClock};
use rustbuilder_runtime::conditions;
use rustbuilder_runtime::manifests::crd;
use rustbuilder_runtime::testing::{self, eventually};

use project_cronjob::api::v1::{ConcurrencyPolicy, CronJob, CronJobSpec};
use project_cronjob::controller::cron_job::{AVAILABLE, DEGRADED, SCHEDULED_TIME, parse_schedule};
use project_cronjob::controller::{MANAGER_NAME, cron_job};

const NAMESPACE: &str = "default";
/// How long a check that something does not happen watches for it.
const QUIET: Duration = Duration::from_secs(2);
const TIMEOUT: Duration = Duration::from_secs(30);
/// How late the restarted manager's lists of Jobs are answered.
const SLOW_LIST: Duration = Duration::from_secs(4);

struct Harness {
    clock: FakeClock,
    cron_jobs: Api<CronJob>,
    jobs: Api<Job>,
}

impl Harness {
    /// Creates a CronJob with the clock back at the real time first: the clock an earlier check moved
    /// ahead could be past the new CronJob's first run already (when a minute began during that check).
    async fn create(&self, name: &str, spec: CronJobSpec) -> CronJob {
        self.clock.set(Timestamp::now());
        let object = CronJob::new(name, spec);
        let created = self.cron_jobs.create(&PostParams::default(), &object).await;
        created.expect("the API server accepts the CronJob")
    }

    /// Sets the clock `after` past `at` and has the controller look again (it would otherwise sleep
    /// until the real time of its next run).
    async fn set_clock(&self, cron_job: &CronJob, at: Timestamp, after: i64) {
        self.clock.set(at + SignedDuration::from_secs(after));
        let poke = serde_json::json!({ "metadata": { "annotations": { "test/clock": self.clock.now().to_string() } } });
        let params = PatchParams::default();
        let name = cron_job.name_any();
        self.cron_jobs
            .patch(&name, &params, &Patch::Merge(&poke))
            .await
            .expect("the CronJob is patched");
    }

    /// The names of `cron_job`'s Jobs, by scheduled time.
    async fn job_times(&self, cron_job: &CronJob) -> Vec<Timestamp> {
        let list = self
            .jobs
            .list(&ListParams::default())
            .await
            .expect("Jobs listed");
        let mut times: Vec<Timestamp> = list
            .items
            .iter()
            .filter(|job| {
                job.owner_references()
                    .iter()
                    .any(|o| Some(&o.uid) == cron_job.metadata.uid.as_ref())
            })
            .filter(|job| job.metadata.deletion_timestamp.is_none())
            .map(|job| job.annotations()[SCHEDULED_TIME].parse().expect("a time"))
            .collect();
        times.sort();
        times
    }

    async fn eventually_jobs(&self, cron_job: &CronJob, want: &[Timestamp], what: &str) {
        eventually(what, TIMEOUT, async || {
            (self.job_times(cron_job).await == want).then_some(())
        })
        .await;
    }

    async fn still_jobs(&self, cron_job: &CronJob, want: &[Timestamp], what: &str) {
        let deadline = tokio::time::Instant::now() + QUIET;
        while tokio::time::Instant::now() < deadline {
            assert_eq!(self.job_times(cron_job).await, want, "{what}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn current(&self, cron_job: &CronJob) -> CronJob {
        self.cron_jobs
            .get(&cron_job.name_any())
            .await
            .expect("the CronJob exists")
    }

    async fn delete(&self, cron_job: &CronJob) {
        let params = DeleteParams::default();
        self.cron_jobs
            .delete(&cron_job.name_any(), &params)
            .await
            .expect("deleted");
    }
}

/// Every minute, a Job whose pod completes at once (or never starts, when `runs_forever`: its pod
/// asks for a node that does not exist).
fn spec(runs_forever: bool) -> CronJobSpec {
    let node_selector =
        runs_forever.then(|| BTreeMap::from([("no-such-node".into(), "true".into())]));
    CronJobSpec {
        schedule: "* * * * *".into(),
        job_template: JobTemplateSpec {
            metadata: None,
            spec: Some(JobSpec {
                template: PodTemplateSpec {
                    metadata: None,
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "hello".into(),
                            image: Some("busybox:1.36".into()),
                            command: Some(vec!["date".into()]),
                            ..Default::default()
                        }],
                        restart_policy: Some("Never".into()),
                        node_selector,
                        ..Default::default()
                    }),
                },
                ..Default::default()
            }),
        },
        ..Default::default()
    }
}

/// The first two scheduled times after the CronJob was created.
fn first_runs(cron_job: &CronJob) -> (Timestamp, Timestamp) {
    let created = cron_job
        .metadata
        .creation_timestamp
        .as_ref()
        .expect("created")
        .0;
    let schedule = parse_schedule(&cron_job.spec.schedule).expect("a schedule");
    let mut times = schedule
        .iter_after(created.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC))
        .map(|t| t.timestamp());
    (times.next().unwrap(), times.next().unwrap())
}

#[tokio::test]
async fn cron_jobs_run_on_schedule_as_their_policies_say() {
    let env = TestEnv::builder()
        .crd(crd::<CronJob>())
        .cluster(true)
        .start()
        .await;
    let clock = FakeClock::new(Timestamp::now());
    let manager = Manager::new(MANAGER_NAME, env.client());
    let controller = tokio::spawn(cron_job::run_with_clock(
        manager.clone(),
        Arc::new(clock.clone()),
    ));
    let t = Harness {
        clock,
        cron_jobs: Api::namespaced(env.client(), NAMESPACE),
        jobs: Api::namespaced(env.client(), NAMESPACE),
    };

    // A Job at each scheduled time and not before; the status names the last run, and the CronJob
    // is Available (`kubectl wait --for=condition=Available`); the history keeps one succeeded
    // Job; deleting the CronJob deletes its Jobs.
    let mut spec_one = spec(false);
    spec_one.successful_jobs_history_limit = Some(1);
    let on_time = t.create("on-time", spec_one).await;
    let (first, second) = first_runs(&on_time);
    t.set_clock(&on_time, first, -1).await;
    t.still_jobs(&on_time, &[], "no Job before the first scheduled time")
        .await;
    t.set_clock(&on_time, first, 1).await;
    t.eventually_jobs(&on_time, &[first], "the Job of the first run")
        .await;
    eventually("status.lastScheduleTime", TIMEOUT, async || {
        let status = t.current(&on_time).await.status?;
        let last = status.last_schedule_time.as_ref().map(|t| t.0);
        let available = conditions::is_true(status.conditions.as_deref()?, AVAILABLE);
        (last == Some(first) && status.active.is_none() && available).then_some(())
    })
    .await;
    t.set_clock(&on_time, second, 1).await;
    t.eventually_jobs(
        &on_time,
        &[second],
        "the second run's Job, the first deleted (history 1)",
    )
    .await;
    t.delete(&on_time).await;
    t.eventually_jobs(&on_time, &[], "the Jobs deleted with their CronJob")
        .await;

    // No history (a limit of 0): the run's Job goes once it succeeded, and the status keeps the time,
    // so the same run does not start again.
    let mut no_history_spec = spec(false);
    no_history_spec.successful_jobs_history_limit = Some(0);
    let no_history = t.create("no-history", no_history_spec).await;
    let (first, _) = first_runs(&no_history);
    t.set_clock(&no_history, first, 1).await;
    eventually("the run's Job, finished and deleted", TIMEOUT, async || {
        let status = t.current(&no_history).await.status?;
        let ran = status.last_schedule_time.map(|t| t.0) == Some(first);
        (ran && t.job_times(&no_history).await.is_empty()).then_some(())
    })
    .await;
    t.set_clock(&no_history, first, 2).await;
    t.still_jobs(&no_history, &[], "the same run started again")
        .await;
    t.delete(&no_history).await;

    // A run missed by more than startingDeadlineSeconds is skipped.
    let mut late_spec = spec(false);
    late_spec.starting_deadline_seconds = Some(10);
    let late = t.create("late", late_spec).await;
    let (first, second) = first_runs(&late);
    t.set_clock(&late, first, 30).await;
    t.still_jobs(&late, &[], "no Job 30 s after a run with a 10 s deadline")
        .await;
    t.set_clock(&late, second, 5).await;
    t.eventually_jobs(&late, &[second], "the next run, within its deadline")
        .await;
    t.delete(&late).await;

    // Suspended: no run.
    let mut suspended_spec = spec(false);
    suspended_spec.suspend = Some(true);
    let suspended = t.create("suspended", suspended_spec).await;
    let (first, _) = first_runs(&suspended);
    t.set_clock(&suspended, first, 1).await;
    t.still_jobs(&suspended, &[], "no Job while suspended")
        .await;
    t.delete(&suspended).await;

    // A schedule that cannot run (the validating webhook refuses it; none runs here): reported as
    // Degraded, and not retried until the spec changes.
    let mut invalid_spec = spec(false);
    invalid_spec.schedule = "61 * * * *".into();
    let invalid = t.create("invalid", invalid_spec).await;
    eventually(
        "Degraded with reason InvalidSchedule",
        TIMEOUT,
        async || {
            let conditions = t.current(&invalid).await.status?.conditions?;
            let degraded = conditions::find(&conditions, DEGRADED)?;
            (degraded.status == "True" && degraded.reason == "InvalidSchedule").then_some(())
        },
    )
    .await;
    let failures = testing::reconciles(&manager, "cronjob", "error");
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        testing::reconciles(&manager, "cronjob", "error"),
        failures,
        "an invalid schedule is retried"
    );
    t.delete(&invalid).await;

    // Forbid: the second run waits for the first, which never ends; status.active names it.
    let mut forbid_spec = spec(true);
    forbid_spec.concurrency_policy = ConcurrencyPolicy::Forbid;
    let forbid = t.create("forbid", forbid_spec).await;
    let (first, second) = first_runs(&forbid);
    t.set_clock(&forbid, first, 1).await;
    t.eventually_jobs(&forbid, &[first], "Forbid's first Job")
        .await;
    eventually(
        "status.active naming the running Job",
        TIMEOUT,
        async || {
            let active = t.current(&forbid).await.status?.active?;
            let names: Vec<_> = active.iter().filter_map(|r| r.name.clone()).collect();
            (names == [format!("forbid-{}", first.as_second())]).then_some(())
        },
    )
    .await;
    t.set_clock(&forbid, second, 1).await;
    t.still_jobs(
        &forbid,
        &[first],
        "Forbid: no second Job while the first runs",
    )
    .await;

    // Restarted while the Jobs take long to list (as many thousand do): no reconcile reads the
    // Jobs before they are listed, so Forbid still sees the running one at the next run.
    manager.shutdown();
    controller.await.expect("the controller stops cleanly");
    let slow = testing::with_slow_lists(env.client(), "jobs", SLOW_LIST);
    let manager = Manager::new(MANAGER_NAME, slow);
    let controller = tokio::spawn(cron_job::run_with_clock(
        manager.clone(),
        Arc::new(t.clock.clone()),
    ));
    let third = second + SignedDuration::from_secs(60);
    t.set_clock(&forbid, third, 1).await;
    t.still_jobs(
        &forbid,
        &[first],
        "Forbid: restarted, the Jobs still listing",
    )
    .await;
    tokio::time::sleep(SLOW_LIST).await;
    t.still_jobs(&forbid, &[first], "Forbid: restarted, the Jobs listed")
        .await;
    eventually("status.active still naming it", TIMEOUT, async || {
        let active = t.current(&forbid).await.status?.active?;
        (active.len() == 1).then_some(())
    })
    .await;
    t.delete(&forbid).await;

    // A Job the CronJob owns that this operator did not make (by hand, as the book's test does, or
    // by an earlier operator: no label of ours) counts all the same: Forbid waits for it.
    let mut by_hand_spec = spec(true);
    by_hand_spec.concurrency_policy = ConcurrencyPolicy::Forbid;
    let by_hand = t.create("by-hand", by_hand_spec).await;
    let (first, _) = first_runs(&by_hand);
    let earlier = first - SignedDuration::from_secs(60);
    let mut job = cron_job::build_job(&by_hand, earlier).expect("a Job of the CronJob");
    job.metadata.labels = None;
    t.jobs
        .create(&PostParams::default(), &job)
        .await
        .expect("the Job made by hand");
    // The cache sees the Job a moment after the API server does (as any informer would): the
    // status naming it says the controller has seen it, and only then is the run due.
    eventually("status.active naming it", TIMEOUT, async || {
        let active = t.current(&by_hand).await.status?.active?;
        let names: Vec<_> = active.iter().filter_map(|r| r.name.clone()).collect();
        (names == [job.name_any()]).then_some(())
    })
    .await;
    t.set_clock(&by_hand, first, 1).await;
    t.still_jobs(
        &by_hand,
        &[earlier],
        "Forbid: no run beside a Job made by hand",
    )
    .await;
    t.delete(&by_hand).await;

    // Replace: the second run replaces the first.
    let mut replace_spec = spec(true);
    replace_spec.concurrency_policy = ConcurrencyPolicy::Replace;
    let replace = t.create("replace", replace_spec).await;
    let (first, second) = first_runs(&replace);
    t.set_clock(&replace, first, 1).await;
    t.eventually_jobs(&replace, &[first], "Replace's first Job")
        .await;
    t.set_clock(&replace, second, 1).await;
    t.eventually_jobs(
        &replace,
        &[second],
        "Replace: the second Job instead of the first",
    )
    .await;
    t.delete(&replace).await;

    // Allow: both run.
    let allow = t.create("allow", spec(true)).await;
    let (first, second) = first_runs(&allow);
    t.set_clock(&allow, first, 1).await;
    t.eventually_jobs(&allow, &[first], "Allow's first Job")
        .await;
    t.set_clock(&allow, second, 1).await;
    t.eventually_jobs(&allow, &[first, second], "Allow: both Jobs")
        .await;
    t.delete(&allow).await;

    manager.shutdown();
    controller.await.expect("the controller stops cleanly");
}
