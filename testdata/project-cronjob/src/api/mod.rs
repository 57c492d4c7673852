// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! The project's Kubernetes APIs, one module per version.

pub mod v1;
pub mod v2;
// +rustbuilder:scaffold:versions
