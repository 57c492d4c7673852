// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! Conversion between `Memcached` v1alpha1 (this version, a spoke) and v1, the hub: the version
//! the API server stores. Each version converts to and from the hub only; when a client asks for one
//! spoke and etcd holds another, the conversion webhook goes through the hub.
//!
//! A conversion must lose nothing: an object that goes to the hub and back must come back the same (the
//! tests below check it). When one version has a field the other lacks, keep its value in an annotation
//! so that it survives the trip, as Kubernetes' own APIs do.

use super::{Memcached, MemcachedSpec, MemcachedStatus};
use crate::api::v1 as hub;

impl From<hub::Memcached> for Memcached {
    fn from(memcached: hub::Memcached) -> Self {
        Self {
            metadata: memcached.metadata,
            // TODO(user): convert each field that differs between the versions.
            spec: MemcachedSpec {
                foo: memcached.spec.foo,
            },
            status: memcached.status.map(|status| MemcachedStatus {
                conditions: status.conditions,
                observed_generation: status.observed_generation,
            }),
        }
    }
}

impl From<Memcached> for hub::Memcached {
    fn from(memcached: Memcached) -> Self {
        Self {
            metadata: memcached.metadata,
            // TODO(user): convert each field that differs between the versions.
            spec: hub::MemcachedSpec {
                foo: memcached.spec.foo,
            },
            status: memcached.status.map(|status| hub::MemcachedStatus {
                conditions: status.conditions,
                observed_generation: status.observed_generation,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Memcached at this version with its fields set, so that a field a conversion drops shows.
    // TODO(user): set every field of the version here as you add them.
    fn sample() -> Memcached {
        let mut memcached = Memcached::new(
            "sample",
            MemcachedSpec {
                foo: Some("bar".to_string()),
            },
        );
        memcached.metadata.labels = Some([("app".to_string(), "sample".to_string())].into());
        memcached.status = Some(MemcachedStatus {
            conditions: Vec::new(),
            observed_generation: Some(3),
        });
        memcached
    }

    #[test]
    fn a_v1alpha1_object_round_trips_through_the_hub() {
        let memcached = sample();
        let stored = hub::Memcached::from(memcached.clone());
        assert_eq!(stored.metadata, memcached.metadata);
        let back = Memcached::from(stored);
        assert_eq!(back.metadata, memcached.metadata);
        assert_eq!(back.spec, memcached.spec);
        assert_eq!(back.status, memcached.status);
    }
}
