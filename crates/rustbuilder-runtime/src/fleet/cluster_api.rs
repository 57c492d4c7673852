//! [`ClusterApiClusters`]: one cluster per Cluster API `Cluster` whose control plane is up.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tracing::{info, warn};

use super::kubeconfig_secrets::CLUSTER_NAME_LABEL;
use super::provider::{Announcement, Provider, Seen};
use crate::cache::Change;
use crate::manager::Manager;

/// Cluster API's group, whose `Cluster` kind the provider reads.
pub const CLUSTER_API_GROUP: &str = "cluster.x-k8s.io";

/// How long [`ClusterApiClusters`] waits before asking again for Cluster API's `Cluster` kind when
/// the API server does not serve it (Cluster API not installed yet).
pub const DISCOVERY_RETRY: Duration = Duration::from_secs(10);

/// The suffix of a Cluster's kubeconfig Secret: `<cluster>-kubeconfig`.
const SECRET_SUFFIX: &str = "-kubeconfig";

/// The key of the kubeconfig in Cluster API's kubeconfig Secrets.
const SECRET_KEY: &str = "value";

/// The clusters Cluster API manages in one namespace of the operator's own cluster: one per
/// `Cluster` object (those a label selector selects, or all), named as the object is, engaged while
/// the Cluster is ready for clients and its kubeconfig Secret is there.
///
/// A Cluster is ready for clients when it is not being deleted, its `status.phase` is
/// `Provisioned`, and its control plane has been initialized: `status.initialization.controlPlaneInitialized`
/// (`v1beta2`), `status.controlPlaneReady` (`v1beta1`), or a condition `ControlPlaneInitialized`
/// with status `True` in `status.conditions` or `status.v1beta2.conditions`. Its kubeconfig is the
/// key `value` of the Secret `<cluster>-kubeconfig` in the Cluster's namespace, which Cluster API
/// labels `cluster.x-k8s.io/cluster-name=<cluster>`: the Secrets are watched by that label, through
/// the manager's cache (so `/readyz` waits for their first list).
///
/// A Cluster that becomes ready with its Secret there is engaged; a changed kubeconfig engages it
/// again; a Cluster deleted (or being deleted), no longer ready (its phase `Failed`, say), no longer
/// selected, or whose Secret goes is disengaged. A Secret without a usable kubeconfig is reported
/// and ignored: its cluster stays as it was.
///
/// The `Cluster` kind is read as a dynamic object, at the version the API server prefers
/// (`v1beta2` where Cluster API serves it, else `v1beta1`), asked once when the fleet starts and
/// again every [`DISCOVERY_RETRY`] while Cluster API is not installed. The operator needs `get`,
/// `list` and `watch` on `clusters.cluster.x-k8s.io` and on Secrets in that namespace.
#[derive(Clone, Debug)]
pub struct ClusterApiClusters {
    manager: Manager,
    namespace: String,
    selector: Option<String>,
}

impl ClusterApiClusters {
    /// The clusters of every `Cluster` in `namespace` of `manager`'s cluster.
    pub fn new(manager: &Manager, namespace: &str) -> Self {
        ClusterApiClusters {
            manager: manager.clone(),
            namespace: namespace.to_string(),
            selector: None,
        }
    }

    /// Only the Clusters this label selector selects (e.g. `fleet.example.com/member=true`).
    pub fn label_selector(mut self, selector: &str) -> Self {
        self.selector = Some(selector.to_string()).filter(|s| !s.is_empty());
        self
    }
}

/// What the provider reads: a Cluster's watch event, or a change of a kubeconfig Secret.
enum Observed {
    Cluster(Box<watcher::Event<DynamicObject>>),
    Secret(Change<Secret>),
}

impl Provider for ClusterApiClusters {
    fn clusters(self) -> BoxStream<'static, Announcement> {
        let ClusterApiClusters {
            manager,
            namespace,
            selector,
        } = self;
        let client = manager.client();
        let watched = namespace.clone();
        let clusters = futures::stream::once(async move {
            let resource = discover(&client).await;
            info!(
                namespace = watched,
                version = resource.version,
                "watching Cluster API's Clusters"
            );
            let api = Api::<DynamicObject>::namespaced_with(client, &watched, &resource);
            let mut config = watcher::Config::default();
            if let Some(selector) = &selector {
                config = config.labels(selector);
            }
            watcher(api, config).default_backoff()
        });
        let clusters = clusters.flatten().filter_map(|event| async move {
            match event {
                Ok(event) => Some(Observed::Cluster(Box::new(event))),
                Err(error) => {
                    warn!(%error, "watching Cluster API's Clusters: retrying");
                    None
                }
            }
        });
        // The cache starts when the fleet first reads, i.e. once it runs.
        let secrets = futures::stream::once(async move {
            let api = Api::<Secret>::namespaced(manager.client(), &namespace);
            let config = watcher::Config::default().labels(CLUSTER_NAME_LABEL);
            manager.cache_with(api, config).changes()
        });
        let secrets = secrets.flatten().map(Observed::Secret);
        let events = futures::stream::select(clusters.boxed(), secrets.boxed());
        let state = (events, Clusters::default());
        let announced = futures::stream::unfold(state, |(mut events, mut clusters)| async move {
            let event = events.next().await?;
            let announced = clusters.see(event).await;
            Some((futures::stream::iter(announced), (events, clusters)))
        });
        announced.flatten().boxed()
    }
}

/// The `Cluster` kind at the version the API server prefers, asked until it is served.
async fn discover(client: &Client) -> ApiResource {
    let mut reported = false;
    loop {
        let group = kube::discovery::oneshot::group(client, CLUSTER_API_GROUP).await;
        let found = group.map_err(|e| e.to_string()).and_then(|group| {
            let kind = group.recommended_kind("Cluster");
            kind.map(|(resource, _)| resource)
                .ok_or_else(|| format!("{CLUSTER_API_GROUP} serves no Cluster kind"))
        });
        match found {
            Ok(resource) => return resource,
            Err(error) if !reported => {
                warn!(%error, retry = ?DISCOVERY_RETRY, "Cluster API's Clusters are not served here (yet): no clusters until they are");
                reported = true;
            }
            Err(_) => {}
        }
        tokio::time::sleep(DISCOVERY_RETRY).await;
    }
}

/// What the provider has seen of the Clusters and their Secrets.
#[derive(Default)]
struct Clusters {
    seen: Seen,
    /// Whether each Cluster seen is ready for clients, by name.
    ready: HashMap<String, bool>,
    /// The Clusters listed since the watch (re)started, until its list is done.
    listing: Option<HashSet<String>>,
    /// The kubeconfig of each cluster whose Secret is there, by cluster name.
    kubeconfigs: HashMap<String, Vec<u8>>,
}

impl Clusters {
    /// What one event announces.
    async fn see(&mut self, event: Observed) -> Vec<Announcement> {
        let changed = match event {
            Observed::Cluster(event) => self.cluster_event(*event),
            Observed::Secret(change) => self.secret_change(change),
        };
        let mut announced = Vec::new();
        for name in changed {
            announced.extend(self.settle(&name).await);
        }
        announced
    }

    /// Records a watch event of the Clusters; the clusters it may change.
    fn cluster_event(&mut self, event: watcher::Event<DynamicObject>) -> Vec<String> {
        match event {
            watcher::Event::Init => {
                self.listing = Some(HashSet::new());
                Vec::new()
            }
            watcher::Event::InitApply(cluster) | watcher::Event::Apply(cluster) => {
                let name = cluster.name_any();
                if let Some(listing) = &mut self.listing {
                    listing.insert(name.clone());
                }
                self.ready.insert(name.clone(), ready_for_clients(&cluster));
                vec![name]
            }
            watcher::Event::InitDone => {
                // Those deleted while the watch was away.
                let listed = self.listing.take().unwrap_or_default();
                let gone: Vec<String> = self
                    .ready
                    .keys()
                    .filter(|name| !listed.contains(*name))
                    .cloned()
                    .collect();
                for name in &gone {
                    self.ready.remove(name);
                }
                gone
            }
            watcher::Event::Delete(cluster) => {
                let name = cluster.name_any();
                self.ready.remove(&name);
                vec![name]
            }
        }
    }

    /// Records a change of a kubeconfig Secret; the cluster it may change.
    fn secret_change(&mut self, change: Change<Secret>) -> Vec<String> {
        let secret = change.object().clone();
        let Some(name) = secret
            .name_any()
            .strip_suffix(SECRET_SUFFIX)
            .map(String::from)
        else {
            return Vec::new();
        };
        match change {
            Change::Applied(_) => {
                let data = secret.data.as_ref();
                let text = data.and_then(|data| data.get(SECRET_KEY));
                let text = text.map(|bytes| bytes.0.clone()).unwrap_or_default();
                self.kubeconfigs.insert(name.clone(), text);
            }
            Change::Deleted(_) => {
                self.kubeconfigs.remove(&name);
            }
        }
        vec![name]
    }

    /// Engages `name` if its Cluster is ready and its Secret holds a kubeconfig not yet announced;
    /// disengages it if either is missing.
    async fn settle(&mut self, name: &str) -> Option<Announcement> {
        let ready = self.ready.get(name).copied().unwrap_or(false);
        match (ready, self.kubeconfigs.get(name)) {
            (true, Some(text)) => {
                let source = format!("Secret {name}{SECRET_SUFFIX}");
                self.seen.read(name, text.clone(), &source).await
            }
            _ => self.seen.gone(name),
        }
    }
}

/// Whether a `Cluster` (`v1beta1` or `v1beta2`) takes clients: not being deleted, `Provisioned`,
/// its control plane initialized.
fn ready_for_clients(cluster: &DynamicObject) -> bool {
    if cluster.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let status = cluster.data.get("status").unwrap_or(&Value::Null);
    let provisioned = status["phase"].as_str() == Some("Provisioned");
    let initialized = |conditions: &Value| {
        let conditions = conditions.as_array().map(Vec::as_slice).unwrap_or_default();
        conditions.iter().any(|condition| {
            condition["type"].as_str() == Some("ControlPlaneInitialized")
                && condition["status"].as_str() == Some("True")
        })
    };
    let control_plane = status["initialization"]["controlPlaneInitialized"].as_bool() == Some(true)
        || status["controlPlaneReady"].as_bool() == Some(true)
        || initialized(&status["conditions"])
        || initialized(&status["v1beta2"]["conditions"]);
    provisioned && control_plane
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(version: &str, status: Value) -> DynamicObject {
        let object = json!({
            "apiVersion": format!("cluster.x-k8s.io/{version}"),
            "kind": "Cluster",
            "metadata": {"name": "east", "namespace": "fleet"},
            "status": status,
        });
        serde_json::from_value(object).unwrap()
    }

    #[test]
    fn a_cluster_takes_clients_once_provisioned_with_its_control_plane_up() {
        let v1beta2 = |status| ready_for_clients(&cluster("v1beta2", status));
        let v1beta1 = |status| ready_for_clients(&cluster("v1beta1", status));
        let up =
            json!({"phase": "Provisioned", "initialization": {"controlPlaneInitialized": true}});
        assert!(v1beta2(up.clone()));
        let condition = json!({"type": "ControlPlaneInitialized", "status": "True"});
        assert!(v1beta2(
            json!({"phase": "Provisioned", "conditions": [condition]})
        ));
        assert!(v1beta1(
            json!({"phase": "Provisioned", "controlPlaneReady": true})
        ));
        assert!(v1beta1(
            json!({"phase": "Provisioned", "conditions": [condition]})
        ));
        assert!(v1beta1(
            json!({"phase": "Provisioned", "v1beta2": {"conditions": [condition]}})
        ));

        // Not yet, or no more.
        assert!(!v1beta2(json!({})));
        assert!(!v1beta2(
            json!({"phase": "Provisioning", "initialization": {"controlPlaneInitialized": true}})
        ));
        assert!(!v1beta2(json!({"phase": "Provisioned"})));
        assert!(!v1beta2(
            json!({"phase": "Provisioned", "initialization": {"controlPlaneInitialized": false}})
        ));
        let unknown = json!({"type": "ControlPlaneInitialized", "status": "Unknown"});
        assert!(!v1beta2(
            json!({"phase": "Provisioned", "conditions": [unknown]})
        ));
        assert!(!v1beta1(
            json!({"phase": "Failed", "controlPlaneReady": true})
        ));
        let mut deleting = cluster("v1beta2", up);
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        assert!(!ready_for_clients(&deleting));
    }
}
