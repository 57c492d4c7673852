//! A copy of a controller of an external kind: each `Site` asks cert-manager for its TLS
//! certificate with a `Certificate` (cert-manager.io/v1, a CRD of another project; here its CRD
//! trimmed to the fields used).

use std::sync::Arc;

use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{CustomResource, CustomResourceExt, KubeSchema, Resource, ResourceExt};
use rustbuilder_runtime::Manager;
use rustbuilder_runtime::apply;
use rustbuilder_runtime::owned::Owned;
use rustbuilder_runtime::testing::explore::Explorer;
use serde::{Deserialize, Serialize};

use super::{Case, settings};

const MANAGER: &str = "site-explored";
const SAMPLE: &str = "\
apiVersion: explore.example.com/v1
kind: Site
metadata:
  name: shop
spec:
  host: shop.example.com
  renewBeforeHours: 24
";

/// A web site: its host name, and when its certificate is renewed.
#[derive(CustomResource, KubeSchema, Clone, Debug, Deserialize, Serialize)]
#[kube(
    group = "explore.example.com",
    version = "v1",
    kind = "Site",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub struct SiteSpec {
    host: String,
    /// Hours before expiry to renew, 1 to 720.
    #[schemars(range(min = 1, max = 720))]
    renew_before_hours: i32,
}

/// cert-manager's `Certificate`, with only the fields this controller sets.
#[derive(CustomResource, KubeSchema, Clone, Debug, Deserialize, Serialize)]
#[kube(
    group = "cert-manager.io",
    version = "v1",
    kind = "Certificate",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub struct CertificateSpec {
    secret_name: String,
    dns_names: Vec<String>,
    renew_before: String,
}

pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    vec![Site::crd(), Certificate::crd()]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    None,
    /// Does not watch Certificates (cert-manager may not be installed when it starts): one deleted
    /// by someone else is made again only when its Site next changes.
    ExternalKindUnwatched,
}

struct Context {
    client: kube::Client,
    certificates: Owned<Certificate>,
}

async fn run(manager: Manager, bug: Bug) {
    let certificates = manager.owned::<Certificate>();
    let ctx = Arc::new(Context {
        client: manager.client(),
        certificates: certificates.clone(),
    });
    let controller = manager.controller(manager.api::<Site>(), "site");
    let controller = match bug {
        Bug::ExternalKindUnwatched => controller,
        Bug::None => controller.owns(&certificates),
    };
    controller.run(reconcile, ctx).await;
}

async fn reconcile(site: Arc<Site>, ctx: Arc<Context>) -> Result<Action, kube::Error> {
    let site = site.as_ref();
    let (name, namespace) = (site.name_any(), site.namespace().unwrap_or_default());
    let api: Api<Certificate> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut desired = Certificate::new(
        &name,
        CertificateSpec {
            secret_name: format!("{name}-tls"),
            dns_names: vec![site.spec.host.clone()],
            renew_before: format!("{}h", site.spec.renew_before_hours),
        },
    );
    desired.metadata.namespace = Some(namespace.clone());
    desired.metadata.owner_references = site.controller_owner_ref(&()).map(|o| vec![o]);
    let current = ctx.certificates.find(&namespace, &name).await?;
    apply::apply(&api, current.as_deref(), &desired, MANAGER).await?;
    Ok(Action::await_change())
}

/// The corpus of this copy.
pub fn cases(client: &kube::Client) -> Vec<Case> {
    // The foreign delete of the Certificate, then a relist of Sites: a controller that watches
    // only Sites makes it again only now.
    let perturbation = "relist:step=5:resource=sites";
    let expected = "cert-manager.io/v1/certificates/shop";
    let explorer = |bug: Bug| {
        Explorer::new(client.clone(), MANAGER)
            .controller(move |manager| run(manager, bug))
            .sample::<Site>(SAMPLE)
            .plan(super::replay(&[perturbation]))
            .settings(settings())
            .replay_command("cargo test -p rustbuilder-runtime --test explore")
    };
    vec![
        Case::unseeded("Site (external Certificate)", explorer(Bug::None)),
        Case::seeded(
            "Site ExternalKindUnwatched".to_string(),
            expected,
            explorer(Bug::ExternalKindUnwatched),
        ),
    ]
}
