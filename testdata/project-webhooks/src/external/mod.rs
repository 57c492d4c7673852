// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! Types of APIs that other operators own: this project has controllers for them but does not define
//! them, so `make manifests` writes no CRD for them. Each is generated from the CRD the project keeps in
//! `config/crd/external/`, one module per API group.

pub mod cert_manager;
// +rustbuilder:scaffold:groups
