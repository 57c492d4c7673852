// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! Webhooks of the cache.example.com/v1alpha1 APIs, one module per kind.

pub mod memcached;
// +rustbuilder:scaffold:kinds
