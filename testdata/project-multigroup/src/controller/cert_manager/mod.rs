// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! Controllers of the cert-manager.io API group, one module per controller.

pub mod certificate;
// +rustbuilder:scaffold:controllers
