//! [`KubeconfigSecrets`]: one cluster per kubeconfig Secret.

use std::collections::HashMap;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher;

use super::provider::{Announcement, Provider, Seen};
use crate::cache::Change;
use crate::manager::Manager;

/// The label of Cluster API's kubeconfig Secrets that names their cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// The keys a kubeconfig Secret may hold its kubeconfig under, in the order they are looked up:
/// Cluster API's `value`, then `kubeconfig`.
pub const KUBECONFIG_KEYS: [&str; 2] = ["value", "kubeconfig"];

/// The clusters of the kubeconfig Secrets a label selector selects in one namespace of the
/// operator's own cluster, watched through the manager's cache (so `/readyz` waits for their first
/// list, and the watch stops with the manager).
///
/// A Secret holds a kubeconfig under one of [`KUBECONFIG_KEYS`], and its cluster's name is the
/// value of its [`CLUSTER_NAME_LABEL`] label if it has one, else the Secret's name. A labelled
/// Secret counts only when it is named `<cluster>-kubeconfig`: Cluster API labels a cluster's other
/// Secrets (`-ca`, `-etcd`, `-sa`, `-proxy`, each Machine's bootstrap data) with its name too. That
/// reads both common forms:
///
/// - Cluster API's `<cluster>-kubeconfig` Secrets (key `value`, labelled
///   `cluster.x-k8s.io/cluster-name=<cluster>`): select them with that label, e.g.
///   `cluster.x-k8s.io/cluster-name` (every cluster's) in the clusters' namespace;
/// - Secrets labelled for a fleet, one per cluster and named after it, with the key `kubeconfig`,
///   e.g. selected by `sigs.k8s.io/multicluster-runtime-kubeconfig=true`.
///
/// A created Secret engages its cluster, a changed kubeconfig engages it again, a deleted Secret
/// (or one that no longer matches the selector) disengages it. A Secret without a usable kubeconfig
/// is reported and ignored: its cluster stays as it was. Give each cluster one Secret. The
/// operator needs `get`, `list` and `watch` on Secrets in that namespace.
#[derive(Clone, Debug)]
pub struct KubeconfigSecrets {
    manager: Manager,
    namespace: String,
    selector: String,
}

impl KubeconfigSecrets {
    /// The clusters of the Secrets in `namespace` of `manager`'s cluster that `label_selector`
    /// selects (e.g. `cluster.x-k8s.io/cluster-name` or `fleet.example.com/member=true`).
    pub fn new(manager: &Manager, namespace: &str, label_selector: &str) -> Self {
        KubeconfigSecrets {
            manager: manager.clone(),
            namespace: namespace.to_string(),
            selector: label_selector.to_string(),
        }
    }
}

impl Provider for KubeconfigSecrets {
    fn clusters(self) -> BoxStream<'static, Announcement> {
        let KubeconfigSecrets {
            manager,
            namespace,
            selector,
        } = self;
        // The cache starts when the fleet first reads, i.e. once it runs.
        let changes = futures::stream::once(async move {
            let api = Api::<Secret>::namespaced(manager.client(), &namespace);
            let config = watcher::Config::default().labels(&selector);
            manager.cache_with(api, config).changes()
        });
        let state = (changes.flatten().boxed(), Secrets::default());
        let announced = futures::stream::unfold(state, |(mut changes, mut secrets)| async move {
            let change = changes.next().await?;
            let announced = secrets.change(change).await;
            Some((futures::stream::iter(announced), (changes, secrets)))
        });
        announced.flatten().boxed()
    }
}

/// The Secrets seen, and the kubeconfig each last held.
#[derive(Default)]
struct Secrets {
    seen: Seen,
    /// The cluster of each Secret, by Secret name.
    clusters: HashMap<String, String>,
}

impl Secrets {
    /// What a change of one Secret announces.
    async fn change(&mut self, change: Change<Secret>) -> Vec<Announcement> {
        let mut announced = Vec::new();
        match change {
            Change::Applied(secret) => {
                let Some(cluster) = cluster_name(&secret) else {
                    // One of Cluster API's other Secrets (now, or since a change of its label).
                    if let Some(before) = self.clusters.remove(&secret.name_any()) {
                        announced.extend(self.seen.gone(&before));
                    }
                    return announced;
                };
                let before = self.clusters.insert(secret.name_any(), cluster.clone());
                // Its label now names another cluster: the one it named is gone.
                if let Some(before) = before.filter(|before| *before != cluster) {
                    announced.extend(self.seen.gone(&before));
                }
                let source = format!(
                    "Secret {}/{}",
                    secret.namespace().unwrap_or_default(),
                    secret.name_any()
                );
                let text = kubeconfig_of(&secret).unwrap_or_default();
                announced.extend(self.seen.read(&cluster, text, &source).await);
            }
            Change::Deleted(secret) => {
                if let Some(cluster) = self.clusters.remove(&secret.name_any()) {
                    announced.extend(self.seen.gone(&cluster));
                }
            }
        }
        announced
    }
}

/// The cluster a kubeconfig Secret stands for; `None` for Cluster API's other Secrets.
///
/// Cluster API labels every Secret of a cluster with its name (its CAs, its service account keys,
/// each Machine's bootstrap data, whose key `value` is the kubeconfig's): of those, only
/// `<cluster>-kubeconfig` holds the kubeconfig.
fn cluster_name(secret: &Secret) -> Option<String> {
    let labelled = secret
        .labels()
        .get(CLUSTER_NAME_LABEL)
        .filter(|n| !n.is_empty());
    match labelled {
        Some(cluster) => {
            (secret.name_any() == format!("{cluster}-kubeconfig")).then(|| cluster.clone())
        }
        None => Some(secret.name_any()),
    }
}

/// The kubeconfig a Secret holds under the first of [`KUBECONFIG_KEYS`] it has.
fn kubeconfig_of(secret: &Secret) -> Option<Vec<u8>> {
    let data = secret.data.as_ref()?;
    KUBECONFIG_KEYS
        .iter()
        .find_map(|key| data.get(*key))
        .map(|bytes| bytes.0.clone())
}
