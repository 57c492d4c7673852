// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! Controllers of the harbor.example.com API group, one module per controller.

pub mod frigate;
// +rustbuilder:scaffold:controllers
