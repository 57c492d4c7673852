// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! Controllers, one module per kind.
//!
//! Each exposes `pub async fn run(manager: Manager)`, which `main` adds to the manager's controllers;
//! it returns once shutdown was requested and its reconciles in flight are done. `rustbuilder create
//! api` adds the modules at the marker below.

pub mod cron_job;
// +rustbuilder:scaffold:controllers

/// Who the operator is to the API server: the field manager of its server-side applies, the reporting
/// controller of its events, and the `app.kubernetes.io/managed-by` label of the objects it creates.
pub const MANAGER_NAME: &str = "project-cronjob";
