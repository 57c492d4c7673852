// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! The `CronJob` API (batch.tutorial.kubebuilder.io/v1): run a Job on a cron schedule.
//!
//! `make manifests` writes the CRD from these types: doc comments become field descriptions, schemars
//! attributes become validation, `#[serde(default)]` makes a field optional.

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a CronJob asks for: when to run, what to run, and how runs may overlap.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "batch.tutorial.kubebuilder.io",
    version = "v1",
    kind = "CronJob",
    plural = "cronjobs",
    namespaced,
    status = "CronJobStatus",
    doc = "A CronJob runs a Job on a cron schedule."
)]
#[serde(rename_all = "camelCase")]
pub struct CronJobSpec {
    /// When to run, in cron's five-field syntax (minute hour day-of-month month day-of-week),
    /// e.g. `*/5 * * * *`.
    #[schemars(length(min = 0))]
    pub schedule: String,

    /// The time zone the schedule is read in, by its name in the IANA time-zone database
    /// (`Europe/Berlin`, `America/New_York`). No value: UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,

    /// How many seconds after its scheduled time a run may still start. A run missed by more (the
    /// controller was down, the CronJob was suspended) is skipped. No value: no deadline; at most
    /// 100 years, which already reaches back past any run a CronJob could have missed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // The bound keeps `now - deadline` within the times the controller can compute.
    #[schemars(range(min = 0, max = 3_153_600_000_i64))]
    pub starting_deadline_seconds: Option<i64>,

    /// What to do when a run is due while the previous one still runs.
    // Not an `Option`: a missing value reads as the default, `Allow`, which the CRD declares too.
    #[serde(default)]
    pub concurrency_policy: ConcurrencyPolicy,

    /// When true, no new run starts; runs already started go on. Defaults to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// The Job each run creates.
    pub job_template: JobTemplateSpec,

    /// How many finished successful Jobs to keep; older ones are deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub successful_jobs_history_limit: Option<i32>,

    /// How many finished failed Jobs to keep; older ones are deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub failed_jobs_history_limit: Option<i32>,
}

/// Whether a run may start while an earlier one is still running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConcurrencyPolicy {
    // Start the new run next to the running ones.
    #[default]
    Allow,
    // Skip the new run while one is running.
    Forbid,
    // Delete the running Jobs, then start the new one.
    Replace,
}

/// What the controller last saw of a CronJob's runs.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CronJobStatus {
    /// The Jobs of this CronJob that are running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10))]
    #[x_kube(merge_strategy = ListMerge::Atomic)]
    pub active: Option<Vec<ObjectReference>>,

    /// When a Job was last created for a scheduled time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,

    /// The latest observations of the CronJob's state, one per `type`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Option<Vec<Condition>>,
}
