// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! Controllers of the apps API group, one module per controller.

pub mod deployment;
// +rustbuilder:scaffold:controllers
