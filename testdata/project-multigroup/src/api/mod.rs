// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! The project's Kubernetes APIs, one module per API group.

pub mod cache;
pub mod harbor;
pub mod ship;
// +rustbuilder:scaffold:groups
