// Copyright The project Authors
// SPDX-License-Identifier: Apache-2.0

//! The project's Kubernetes APIs, one module per version.

pub mod v1alpha1;
// +rustbuilder:scaffold:versions
