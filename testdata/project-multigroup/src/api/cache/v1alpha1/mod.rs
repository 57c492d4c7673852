// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! API version v1alpha1 of the cache.example.com group.

mod memcached;
pub use memcached::*;
// +rustbuilder:scaffold:kinds
