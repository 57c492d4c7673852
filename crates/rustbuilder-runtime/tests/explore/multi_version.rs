//! A copy of a controller of a kind served at two versions: `v1`, which the controller was written
//! against, and `v2`, stored, which adds a field and which users write (their sample is `v2`). The
//! versions convert with `None` (the same fields but the one `v2` adds): read at `v1`, an object
//! lacks that field, and written at `v1`, it loses it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::crd::merge_crds;
use kube::runtime::controller::Action;
use kube::{CustomResource, CustomResourceExt, KubeSchema, Resource, ResourceExt};
use rustbuilder_runtime::Manager;
use rustbuilder_runtime::apply;
use rustbuilder_runtime::owned::Owned;
use rustbuilder_runtime::testing::explore::{Explorer, Workload};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Case, settings};

const MANAGER: &str = "website-explored";
const SAMPLE: &str = "\
apiVersion: explore.example.com/v2
kind: Website
metadata:
  name: shop
spec:
  host: shop.example.com
  replicas: 2
  tls: true
";
const SEEN: &str = "explore.example.com/seen";

mod v1 {
    use super::*;

    /// A web site, as `v1` has it.
    #[derive(CustomResource, KubeSchema, Clone, Debug, Deserialize, Serialize)]
    #[kube(
        group = "explore.example.com",
        version = "v1",
        kind = "Website",
        namespaced
    )]
    pub struct WebsiteSpec {
        pub host: String,
        /// Servers, 1 to 5.
        #[schemars(range(min = 1, max = 5))]
        pub replicas: i32,
    }
}

mod v2 {
    use super::*;

    /// A web site, as `v2` has it: `tls` is new.
    #[derive(CustomResource, KubeSchema, Clone, Debug, Deserialize, Serialize)]
    #[kube(
        group = "explore.example.com",
        version = "v2",
        kind = "Website",
        namespaced
    )]
    pub struct WebsiteSpec {
        pub host: String,
        /// Servers, 1 to 5.
        #[schemars(range(min = 1, max = 5))]
        pub replicas: i32,
        /// Whether the site is served over HTTPS.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub tls: Option<bool>,
    }
}

/// Both versions, `v2` stored.
pub fn crd() -> CustomResourceDefinition {
    merge_crds(vec![v2::Website::crd(), v1::Website::crd()], "v2")
        .expect("two versions of one kind")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    None,
    /// Marks each site it has seen by writing it back at `v1`, the version it reads (a PUT of the
    /// whole object; a patch would do no better): the field only `v2` has is lost.
    WrittenAtOldVersion,
}

struct Context {
    client: kube::Client,
    configmaps: Owned<ConfigMap>,
    bug: Bug,
}

async fn run(manager: Manager, bug: Bug) {
    let configmaps = manager.owned::<ConfigMap>();
    let ctx = Arc::new(Context {
        client: manager.client(),
        configmaps: configmaps.clone(),
        bug,
    });
    manager
        .controller(manager.api::<v1::Website>(), "website")
        .owns(&configmaps)
        .run(reconcile, ctx)
        .await;
}

async fn reconcile(site: Arc<v1::Website>, ctx: Arc<Context>) -> Result<Action, kube::Error> {
    let (name, namespace) = (site.name_any(), site.namespace().unwrap_or_default());
    let sites: Api<v1::Website> = Api::namespaced(ctx.client.clone(), &namespace);
    let configmaps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let desired = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{name}-site")),
            namespace: Some(namespace.clone()),
            owner_references: site.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        data: Some(
            [
                ("host".to_string(), site.spec.host.clone()),
                ("replicas".to_string(), site.spec.replicas.to_string()),
            ]
            .into(),
        ),
        ..Default::default()
    };
    let current = ctx.configmaps.find(&namespace, &desired.name_any()).await?;
    apply::apply(&configmaps, current.as_deref(), &desired, MANAGER).await?;
    if !site.annotations().contains_key(SEEN) {
        match ctx.bug {
            Bug::WrittenAtOldVersion => {
                let mut seen = site.as_ref().clone();
                seen.annotations_mut().insert(SEEN.into(), "true".into());
                sites.replace(&name, &PostParams::default(), &seen).await?;
            }
            // Any write at `v1` loses `tls`, a patch of the metadata alone too: the API server
            // reads the object at `v1` (without it), patches that, and stores the result. Written
            // at the version stored, it stays.
            Bug::None => {
                let stored: Api<v2::Website> = Api::namespaced(ctx.client.clone(), &namespace);
                let patch = json!({ "metadata": { "annotations": { SEEN: "true" } } });
                stored
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await?;
            }
        }
    }
    Ok(Action::await_change())
}

/// The corpus of this copy: its reference runs alone catch the bug.
pub fn cases(client: &kube::Client) -> Vec<Case> {
    let explorer = |bug: Bug| {
        let workload = Workload::from_sample(&crd(), SAMPLE).expect("the v2 sample");
        Explorer::new(client.clone(), MANAGER)
            .controller(move |manager| run(manager, bug))
            .workload(workload)
            .plan(super::replay(&[]))
            .settings(settings())
            .replay_command("cargo test -p rustbuilder-runtime --test explore")
    };
    vec![
        Case::unseeded("Website (two versions)", explorer(Bug::None)),
        Case::seeded(
            "Website WrittenAtOldVersion".to_string(),
            "the operator changed the spec of explore.example.com/v2/websites/shop",
            explorer(Bug::WrittenAtOldVersion),
        ),
    ]
}
