// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! Version v1 of the cert-manager.io API group, which another operator owns.

mod issuer;
pub use issuer::*;
// +rustbuilder:scaffold:kinds
