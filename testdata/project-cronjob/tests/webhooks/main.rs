// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! The webhooks' tests: a real API server, started by rustbuilder-envtest for each test, calls the
//! webhook server the test starts.
//!
//! One test crate holds them all, a module per kind and version (and one per converted kind), so they
//! compile and link once however many webhooks the project has: `create webhook` adds each module at
//! the marker below.

mod cron_job_conversion;
mod cron_job_v1;
// +rustbuilder:scaffold:modules
