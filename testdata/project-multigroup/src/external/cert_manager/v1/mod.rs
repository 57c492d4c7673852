// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! Version v1 of the cert-manager.io API group, which another operator owns.

mod certificate;
pub use certificate::*;
// +rustbuilder:scaffold:kinds
