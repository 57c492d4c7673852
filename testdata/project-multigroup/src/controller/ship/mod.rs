// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! Controllers of the ship.example.com API group, one module per controller.

pub mod cruiser;
pub mod frigate;
pub mod frigate_audit;
// +rustbuilder:scaffold:controllers
