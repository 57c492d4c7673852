// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! Webhooks of the batch.tutorial.kubebuilder.io/v1 APIs, one module per kind.

pub mod cron_job;
// +rustbuilder:scaffold:kinds
