// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! API version v2alpha1 of the ship.example.com group.

mod cruiser;
pub use cruiser::*;
// +rustbuilder:scaffold:kinds
