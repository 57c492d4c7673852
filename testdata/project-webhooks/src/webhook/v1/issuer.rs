// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! The admission webhooks of `Issuer` (cert-manager.io/v1). The API server calls them
//! on every create and update, before it stores the object: defaulting first, then validation.
//!
//! Rules about one field belong in the type (`#[schemars(range(...))]`, `#[x_kube(validation = ...)]`):
//! the API server checks them with no webhook to call. A webhook is for what the schema cannot say. Each
//! `// +rustbuilder:webhook:` marker becomes an entry of `config/webhook/manifests.yaml` (`make
//! manifests`), and `src/main.rs` registers the webhooks with the manager.

use kube::ResourceExt;
use rustbuilder_runtime::webhook::{AdmissionRequest, Defaulter, Denied};

use crate::external::cert_manager::v1::Issuer;

/// The label of the examples: the name of the application, one of Kubernetes' recommended labels.
const NAME_LABEL: &str = "app.kubernetes.io/name";

/// The webhooks of `Issuer`. When they need more than the object and the request, give it fields
/// (e.g. a cache of other objects from `manager.cache()`) and build it so in `src/main.rs`.
pub struct IssuerWebhook;

// +rustbuilder:webhook:path=/custom-mutate-issuer,mutating=true,failurePolicy=fail,sideEffects=None,groups=cert-manager.io,resources=issuers,verbs=create;update,versions=v1,name=missuer-v1.kb.io,admissionReviewVersions=v1
impl Defaulter for IssuerWebhook {
    type Object = Issuer;

    /// Fills in what the user left out, on create and update. The runtime sends the changes back to
    /// the API server as a JSON patch. The request tells who asks (`user_info`), whether it is a dry
    /// run, and on an update holds the stored object (`old_object`).
    async fn set_defaults(
        &self,
        issuer: &mut Issuer,
        _request: &AdmissionRequest<Issuer>,
    ) -> Result<(), Denied> {
        // TODO(user): set your defaults. The example names the application the object belongs to,
        // unless the user did.
        issuer
            .labels_mut()
            .entry(NAME_LABEL.to_string())
            .or_insert_with(|| "issuer".to_string());
        Ok(())
    }
}
// +rustbuilder:scaffold:webhooks

#[cfg(test)]
mod tests {
    use super::*;
    use rustbuilder_runtime::webhook;

    /// A Issuer as a user would write it, with the name label if given.
    fn sample(name_label: Option<&str>) -> Issuer {
        let mut issuer = Issuer::new("sample", Default::default());
        if let Some(value) = name_label {
            issuer
                .labels_mut()
                .insert(NAME_LABEL.to_string(), value.to_string());
        }
        issuer
    }

    #[tokio::test]
    async fn defaulting_sets_the_name_label_when_missing() {
        let mut issuer = sample(None);
        let request = webhook::create_request(&issuer);
        let defaulted = IssuerWebhook.set_defaults(&mut issuer, &request).await;
        assert_eq!(defaulted, Ok(()));
        assert_eq!(issuer.labels()[NAME_LABEL], "issuer");
    }

    #[tokio::test]
    async fn defaulting_keeps_the_users_label() {
        let mut issuer = sample(Some("mine"));
        let request = webhook::create_request(&issuer);
        let defaulted = IssuerWebhook.set_defaults(&mut issuer, &request).await;
        assert_eq!(defaulted, Ok(()));
        assert_eq!(issuer.labels()[NAME_LABEL], "mine");
    }
    // +rustbuilder:scaffold:webhook-tests
}
