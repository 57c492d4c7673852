// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! The controllers' tests, against a real API server that rustbuilder-envtest starts for each test.
//!
//! One test crate holds them all, a module per controller, so they compile and link once however many
//! kinds the project has: `create api` adds each controller's module at the marker below. Helpers the
//! modules share go in a module of their own here (`mod support;`).

mod cron_job;
// +rustbuilder:scaffold:modules
