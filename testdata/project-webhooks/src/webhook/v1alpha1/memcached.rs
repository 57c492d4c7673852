// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! The admission webhooks of `Memcached` (cache.example.com/v1alpha1). The API server calls them
//! on every create and update, before it stores the object: defaulting first, then validation.
//!
//! Rules about one field belong in the type (`#[schemars(range(...))]`, `#[x_kube(validation = ...)]`):
//! the API server checks them with no webhook to call. A webhook is for what the schema cannot say. Each
//! `// +rustbuilder:webhook:` marker becomes an entry of `config/webhook/manifests.yaml` (`make
//! manifests`), and `src/main.rs` registers the webhooks with the manager.

use kube::ResourceExt;
use rustbuilder_runtime::webhook::{AdmissionRequest, Defaulter, Denied, Validation, Validator};

use crate::api::v1alpha1::Memcached;

/// The label of the examples: the name of the application, one of Kubernetes' recommended labels.
const NAME_LABEL: &str = "app.kubernetes.io/name";

/// The webhooks of `Memcached`. When they need more than the object and the request, give it fields
/// (e.g. a cache of other objects from `manager.cache()`) and build it so in `src/main.rs`.
pub struct MemcachedWebhook;

// +rustbuilder:webhook:path=/mutate-cache-example-com-v1alpha1-memcached,mutating=true,failurePolicy=fail,sideEffects=None,groups=cache.example.com,resources=memcacheds,verbs=create;update,versions=v1alpha1,name=mmemcached-v1alpha1.kb.io,admissionReviewVersions=v1
impl Defaulter for MemcachedWebhook {
    type Object = Memcached;

    /// Fills in what the user left out, on create and update. The runtime sends the changes back to
    /// the API server as a JSON patch. The request tells who asks (`user_info`), whether it is a dry
    /// run, and on an update holds the stored object (`old_object`).
    async fn set_defaults(
        &self,
        memcached: &mut Memcached,
        _request: &AdmissionRequest<Memcached>,
    ) -> Result<(), Denied> {
        // TODO(user): set your defaults. The example names the application the object belongs to,
        // unless the user did.
        memcached
            .labels_mut()
            .entry(NAME_LABEL.to_string())
            .or_insert_with(|| "memcached".to_string());
        Ok(())
    }
}

// +rustbuilder:webhook:path=/validate-cache-example-com-v1alpha1-memcached,mutating=false,failurePolicy=fail,sideEffects=None,groups=cache.example.com,resources=memcacheds,verbs=create;update,versions=v1alpha1,name=vmemcached-v1alpha1.kb.io,admissionReviewVersions=v1
impl Validator for MemcachedWebhook {
    type Object = Memcached;

    /// Checks a new object: `Ok` admits it (with warnings for kubectl to print), `Err` refuses it with
    /// the message the user sees. The request tells who asks (`user_info`) and whether it is a dry
    /// run.
    async fn validate_create(
        &self,
        _memcached: &Memcached,
        _request: &AdmissionRequest<Memcached>,
    ) -> Validation {
        // TODO(user): check what a new object must satisfy.
        Ok(Vec::new())
    }

    /// Checks a change from `old`, the stored object, to `new`.
    async fn validate_update(
        &self,
        old: &Memcached,
        new: &Memcached,
        _request: &AdmissionRequest<Memcached>,
    ) -> Validation {
        // TODO(user): check what a change must satisfy. The example keeps the name label once it is
        // set: tools find the objects of an application by it.
        if let Some(before) = old.labels().get(NAME_LABEL)
            && new.labels().get(NAME_LABEL) != Some(before)
        {
            return Err(Denied::new(format!(
                "the label {NAME_LABEL} cannot change once set (it is {before:?})"
            )));
        }
        Ok(Vec::new())
    }

    /// Checks a deletion. The marker above does not ask for deletes (`verbs=create;update`): add
    /// `;delete` to it when this should refuse some.
    async fn validate_delete(
        &self,
        _memcached: &Memcached,
        _request: &AdmissionRequest<Memcached>,
    ) -> Validation {
        Ok(Vec::new())
    }
}
// +rustbuilder:scaffold:webhooks

#[cfg(test)]
mod tests {
    use super::*;
    use rustbuilder_runtime::webhook;

    /// A Memcached as a user would write it, with the name label if given.
    fn sample(name_label: Option<&str>) -> Memcached {
        let mut memcached = Memcached::new("sample", Default::default());
        if let Some(value) = name_label {
            memcached
                .labels_mut()
                .insert(NAME_LABEL.to_string(), value.to_string());
        }
        memcached
    }

    #[tokio::test]
    async fn defaulting_sets_the_name_label_when_missing() {
        let mut memcached = sample(None);
        let request = webhook::create_request(&memcached);
        let defaulted = MemcachedWebhook
            .set_defaults(&mut memcached, &request)
            .await;
        assert_eq!(defaulted, Ok(()));
        assert_eq!(memcached.labels()[NAME_LABEL], "memcached");
    }

    #[tokio::test]
    async fn defaulting_keeps_the_users_label() {
        let mut memcached = sample(Some("mine"));
        let request = webhook::create_request(&memcached);
        let defaulted = MemcachedWebhook
            .set_defaults(&mut memcached, &request)
            .await;
        assert_eq!(defaulted, Ok(()));
        assert_eq!(memcached.labels()[NAME_LABEL], "mine");
    }

    #[tokio::test]
    async fn validation_refuses_changing_or_removing_the_name_label() {
        let old = sample(Some("memcached"));
        for new in [sample(Some("other")), sample(None)] {
            let request = webhook::update_request(&old, &new);
            let refused = MemcachedWebhook.validate_update(&old, &new, &request).await;
            let denied = refused.unwrap_err();
            assert!(denied.to_string().contains(NAME_LABEL), "{denied}");
        }
    }

    #[tokio::test]
    async fn validation_admits_creates_deletes_and_other_updates() {
        let memcached = sample(Some("memcached"));
        let admitted = Ok(Vec::new());
        let request = webhook::create_request(&memcached);
        let created = MemcachedWebhook.validate_create(&memcached, &request).await;
        assert_eq!(created, admitted);
        for old in [memcached.clone(), sample(None)] {
            let request = webhook::update_request(&old, &memcached);
            let updated = MemcachedWebhook
                .validate_update(&old, &memcached, &request)
                .await;
            assert_eq!(updated, admitted);
        }
        let request = webhook::delete_request(&memcached);
        let deleted = MemcachedWebhook.validate_delete(&memcached, &request).await;
        assert_eq!(deleted, admitted);
    }
    // +rustbuilder:scaffold:webhook-tests
}
