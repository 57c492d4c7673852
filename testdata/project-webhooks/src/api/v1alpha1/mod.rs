// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! API version v1alpha1 of the cache.example.com group.

mod memcached;
pub use memcached::*;
mod memcached_conversion;
// +rustbuilder:scaffold:kinds
