// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! The admission webhooks of the project's APIs, one module per version. `rustbuilder create webhook`
//! adds them; `src/main.rs` registers them with the manager.

pub mod v1;
// +rustbuilder:scaffold:versions
