// Copyright The project-basic Authors
// SPDX-License-Identifier: Apache-2.0

//! Controllers, one module per kind. Each exposes `run(client, shutdown)`, which `main` spawns.

pub mod memcached;
// +rustbuilder:scaffold:controllers
