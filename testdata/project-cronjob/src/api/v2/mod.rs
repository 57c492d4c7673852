// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! API version v2 of the batch.tutorial.kubebuilder.io group.

mod cron_job;
pub use cron_job::*;
mod cron_job_conversion;
// +rustbuilder:scaffold:kinds
