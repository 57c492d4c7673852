// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! API version v1 of the batch.tutorial.kubebuilder.io group.

mod cron_job;
pub use cron_job::*;
// +rustbuilder:scaffold:kinds
