// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! API version v1 of the harbor.example.com group.

mod frigate;
pub use frigate::*;
// +rustbuilder:scaffold:kinds
