// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! The harbor.example.com API group, one module per version.

pub mod v1;
// +rustbuilder:scaffold:versions
