// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! The controllers' tests on a real API server: one crate, a module per controller (`create api` adds
//! it below), so they link once however many kinds the project has. Shared helpers: `mod support;`.

mod cron_job;
mod explore;
// +rustbuilder:scaffold:modules
