// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! The cert-manager.io API group, which another operator owns; one module per version.

pub mod v1;
// +rustbuilder:scaffold:versions
