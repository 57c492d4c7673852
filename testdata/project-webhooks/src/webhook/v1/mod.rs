// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! Webhooks of the kinds at version v1, one module per kind.

pub mod deployment;
pub mod issuer;
pub mod pod;
// +rustbuilder:scaffold:kinds
