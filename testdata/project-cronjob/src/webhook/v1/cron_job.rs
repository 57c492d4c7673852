// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! The admission webhooks of `CronJob` (batch.tutorial.kubebuilder.io/v1). The API server calls them
//! on every create and update, before it stores the object: defaulting first, then validation.
//!
//! The schema already checks each field on its own (a history limit below 0 is refused with no
//! webhook); the webhooks do what it cannot: fill in defaults the controller and the user should see
//! in the stored object, parse the schedule, look its time zone up, and bound the name by what the
//! Jobs' names add to it.

use kube::ResourceExt;
use rustbuilder_runtime::webhook::{
    AdmissionRequest, Defaulter, Denied, FieldError, Validation, Validator,
};

use crate::api::v1::CronJob;
use crate::controller::cron_job::{
    DEFAULT_FAILED_JOBS_HISTORY_LIMIT, DEFAULT_SUCCESSFUL_JOBS_HISTORY_LIMIT, parse_schedule,
    time_zone,
};

/// The longest name a CronJob may have: its Jobs are named `<name>-<unix time>`, ten digits and a dash
/// more, and a Job's name, which becomes a label value of its Pods, holds at most 63 characters.
pub const MAX_NAME_LENGTH: usize = 63 - 11;

/// The webhooks of `CronJob`.
pub struct CronJobWebhook;

// +rustbuilder:webhook:path=/mutate-batch-tutorial-kubebuilder-io-v1-cronjob,mutating=true,failurePolicy=fail,sideEffects=None,groups=batch.tutorial.kubebuilder.io,resources=cronjobs,verbs=create;update,versions=v1,name=mcronjob-v1.kb.io,admissionReviewVersions=v1
impl Defaulter for CronJobWebhook {
    type Object = CronJob;

    /// Writes the defaults into the stored object, so `kubectl get -o yaml` shows what the controller
    /// does: not suspended, three succeeded and one failed Job kept. (`concurrencyPolicy` needs no
    /// webhook: its type defaults to `Allow`, and the CRD says so.)
    async fn set_defaults(
        &self,
        cron_job: &mut CronJob,
        _request: &AdmissionRequest<CronJob>,
    ) -> Result<(), Denied> {
        let spec = &mut cron_job.spec;
        spec.suspend.get_or_insert(false);
        spec.successful_jobs_history_limit
            .get_or_insert(DEFAULT_SUCCESSFUL_JOBS_HISTORY_LIMIT);
        spec.failed_jobs_history_limit
            .get_or_insert(DEFAULT_FAILED_JOBS_HISTORY_LIMIT);
        Ok(())
    }
}

// +rustbuilder:webhook:path=/validate-batch-tutorial-kubebuilder-io-v1-cronjob,mutating=false,failurePolicy=fail,sideEffects=None,groups=batch.tutorial.kubebuilder.io,resources=cronjobs,verbs=create;update,versions=v1,name=vcronjob-v1.kb.io,admissionReviewVersions=v1
impl Validator for CronJobWebhook {
    type Object = CronJob;

    async fn validate_create(
        &self,
        cron_job: &CronJob,
        _request: &AdmissionRequest<CronJob>,
    ) -> Validation {
        validate(cron_job)
    }

    async fn validate_update(
        &self,
        _old: &CronJob,
        new: &CronJob,
        _request: &AdmissionRequest<CronJob>,
    ) -> Validation {
        validate(new)
    }

    /// Deletes are not checked (the marker does not ask for them).
    async fn validate_delete(
        &self,
        _cron_job: &CronJob,
        _request: &AdmissionRequest<CronJob>,
    ) -> Validation {
        Ok(Vec::new())
    }
}
// +rustbuilder:scaffold:webhooks

/// Every problem of `cron_job` at once, each naming its field: refused as the API server refuses
/// an invalid field (422 `Invalid`, one cause per field), so `kubectl` and clients see each.
pub fn validate(cron_job: &CronJob) -> Validation {
    let mut problems = Vec::new();
    let name = cron_job.name_any();
    if name.len() > MAX_NAME_LENGTH {
        problems.push(FieldError::invalid(
            "metadata.name",
            &name,
            format!(
                "must be no more than {MAX_NAME_LENGTH} characters (the Jobs' names add 11 to it)"
            ),
        ));
    }
    let schedule = &cron_job.spec.schedule;
    if let Err(error) = parse_schedule(schedule) {
        problems.push(FieldError::invalid(
            "spec.schedule",
            schedule,
            format!(
                "not a cron schedule (five fields: minute hour day-of-month month day-of-week, e.g. \"*/5 * * * *\"): {error}"
            ),
        ));
    }
    if let Some(zone) = &cron_job.spec.time_zone
        && time_zone(Some(zone)).is_err()
    {
        problems.push(FieldError::invalid(
            "spec.timeZone",
            zone,
            "not a time zone of the IANA database (e.g. \"Europe/Berlin\")",
        ));
    }
    if problems.is_empty() {
        Ok(Vec::new())
    } else {
        Err(Denied::invalid::<CronJob>(&name, problems))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::v1::CronJobSpec;
    use rustbuilder_runtime::webhook;

    fn sample(name: &str, schedule: &str) -> CronJob {
        CronJob::new(
            name,
            CronJobSpec {
                schedule: schedule.into(),
                ..Default::default()
            },
        )
    }

    #[tokio::test]
    async fn defaults_fill_what_is_missing_and_keep_what_is_set() {
        let mut cron_job = sample("sample", "*/5 * * * *");
        cron_job.spec.failed_jobs_history_limit = Some(0);
        let request = webhook::create_request(&cron_job);
        let defaulted = CronJobWebhook.set_defaults(&mut cron_job, &request).await;
        assert_eq!(defaulted, Ok(()));
        assert_eq!(cron_job.spec.suspend, Some(false));
        assert_eq!(cron_job.spec.successful_jobs_history_limit, Some(3));
        assert_eq!(cron_job.spec.failed_jobs_history_limit, Some(0));
    }

    #[tokio::test]
    async fn a_good_cron_job_is_admitted() {
        let cron_job = sample(&"a".repeat(MAX_NAME_LENGTH), "0 3 * * 1-5");
        let request = webhook::create_request(&cron_job);
        let admitted = CronJobWebhook.validate_create(&cron_job, &request).await;
        assert_eq!(admitted, Ok(Vec::new()));
    }

    #[tokio::test]
    async fn a_time_zone_must_be_one_of_the_database() {
        let mut cron_job = sample("sample", "0 9 * * *");
        cron_job.spec.time_zone = Some("Europe/Berlin".into());
        let request = webhook::create_request(&cron_job);
        let admitted = CronJobWebhook.validate_create(&cron_job, &request).await;
        assert_eq!(admitted, Ok(Vec::new()));
        cron_job.spec.time_zone = Some("Mars/Olympus_Mons".into());
        let refused = CronJobWebhook.validate_create(&cron_job, &request).await;
        let denied = refused.unwrap_err();
        let fields: Vec<_> = denied
            .field_errors()
            .iter()
            .map(FieldError::field)
            .collect();
        assert_eq!(fields, ["spec.timeZone"]);
    }

    #[tokio::test]
    async fn a_bad_schedule_and_a_long_name_are_refused_together() {
        let old = sample("sample", "*/5 * * * *");
        let new = sample(&"a".repeat(MAX_NAME_LENGTH + 1), "every day");
        let request = webhook::update_request(&old, &new);
        let refused = CronJobWebhook.validate_update(&old, &new, &request).await;
        let denied = refused.unwrap_err();
        let fields: Vec<_> = denied
            .field_errors()
            .iter()
            .map(FieldError::field)
            .collect();
        assert_eq!(fields, ["metadata.name", "spec.schedule"]);
        let message = denied.message();
        assert!(message.contains("must be no more than 52"), "{message}");
        assert!(
            message.contains(r#"spec.schedule: Invalid value: "every day": not a cron schedule"#),
            "{message}"
        );
    }
}
