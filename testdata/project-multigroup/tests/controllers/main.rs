// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! The controllers' tests on a real API server: one crate, a module per controller (`create api` adds
//! it below), so they link once however many kinds the project has. Shared helpers: `mod support;`.

mod apps_deployment;
mod cache_memcached;
mod cert_manager_certificate;
mod explore;
mod harbor_frigate;
mod ship_cruiser;
mod ship_frigate;
mod ship_frigate_audit;
// +rustbuilder:scaffold:modules
