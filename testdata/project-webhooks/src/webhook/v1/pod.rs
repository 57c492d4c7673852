// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! The admission webhooks of `Pod` (v1). The API server calls them
//! on every create and update, before it stores the object: defaulting first, then validation.
//!
//! Rules about one field belong in the type (`#[schemars(range(...))]`, `#[x_kube(validation = ...)]`):
//! the API server checks them with no webhook to call. A webhook is for what the schema cannot say. Each
//! `// +rustbuilder:webhook:` marker becomes an entry of `config/webhook/manifests.yaml` (`make
//! manifests`), and `src/main.rs` registers the webhooks with the manager.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use rustbuilder_runtime::webhook::{AdmissionRequest, Denied, Validation, Validator};

/// The label of the examples: the name of the application, one of Kubernetes' recommended labels.
const NAME_LABEL: &str = "app.kubernetes.io/name";

/// The webhooks of `Pod`. When they need more than the object and the request, give it fields
/// (e.g. a cache of other objects from `manager.cache()`) and build it so in `src/main.rs`.
pub struct PodWebhook;

// +rustbuilder:webhook:path=/validate--v1-pod,mutating=false,failurePolicy=fail,sideEffects=None,groups="",resources=pods,verbs=create;update,versions=v1,name=vpod-v1.kb.io,admissionReviewVersions=v1
impl Validator for PodWebhook {
    type Object = Pod;

    /// Checks a new object: `Ok` admits it (with warnings for kubectl to print), `Err` refuses it with
    /// the message the user sees. The request tells who asks (`user_info`) and whether it is a dry
    /// run.
    async fn validate_create(&self, _pod: &Pod, _request: &AdmissionRequest<Pod>) -> Validation {
        // TODO(user): check what a new object must satisfy.
        Ok(Vec::new())
    }

    /// Checks a change from `old`, the stored object, to `new`.
    async fn validate_update(
        &self,
        old: &Pod,
        new: &Pod,
        _request: &AdmissionRequest<Pod>,
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
    async fn validate_delete(&self, _pod: &Pod, _request: &AdmissionRequest<Pod>) -> Validation {
        Ok(Vec::new())
    }
}
// +rustbuilder:scaffold:webhooks

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use rustbuilder_runtime::webhook;

    /// A Pod as a user would write it, with the name label if given.
    fn sample(name_label: Option<&str>) -> Pod {
        let mut pod = Pod {
            metadata: ObjectMeta {
                name: Some("sample".to_string()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        if let Some(value) = name_label {
            pod.labels_mut()
                .insert(NAME_LABEL.to_string(), value.to_string());
        }
        pod
    }

    #[tokio::test]
    async fn validation_refuses_changing_or_removing_the_name_label() {
        let old = sample(Some("pod"));
        for new in [sample(Some("other")), sample(None)] {
            let request = webhook::update_request(&old, &new);
            let refused = PodWebhook.validate_update(&old, &new, &request).await;
            let denied = refused.unwrap_err();
            assert!(denied.to_string().contains(NAME_LABEL), "{denied}");
        }
    }

    #[tokio::test]
    async fn validation_admits_creates_deletes_and_other_updates() {
        let pod = sample(Some("pod"));
        let admitted = Ok(Vec::new());
        let request = webhook::create_request(&pod);
        let created = PodWebhook.validate_create(&pod, &request).await;
        assert_eq!(created, admitted);
        for old in [pod.clone(), sample(None)] {
            let request = webhook::update_request(&old, &pod);
            let updated = PodWebhook.validate_update(&old, &pod, &request).await;
            assert_eq!(updated, admitted);
        }
        let request = webhook::delete_request(&pod);
        let deleted = PodWebhook.validate_delete(&pod, &request).await;
        assert_eq!(deleted, admitted);
    }
    // +rustbuilder:scaffold:webhook-tests
}
