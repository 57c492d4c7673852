// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! The ship.example.com API group, one module per version.

pub mod v1beta1;
pub mod v2alpha1;
// +rustbuilder:scaffold:versions
