//! What a provider is: a stream of [`Announcement`]s, and the bookkeeping that turns what a
//! provider reads (files, Secrets) into announcements of changes only.

use std::collections::HashMap;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tracing::warn;

/// A change of the set of clusters, as a [`Provider`] tells it.
#[derive(Clone, Debug)]
// Announcements are few and short-lived: boxing the config would only make them awkward to build.
#[allow(clippy::large_enum_variant)]
pub enum Announcement {
    /// The cluster `name` is there, reached with `config`. Engaged if it was not; engaged again,
    /// with a new manager, if it was.
    Engage {
        /// The cluster's name, unique among the provider's clusters.
        name: String,
        /// How to reach its API server.
        config: kube::Config,
    },
    /// The cluster `name` is gone: disengaged.
    Disengage {
        /// The cluster's name.
        name: String,
    },
}

impl Announcement {
    /// The name of the cluster announced.
    pub fn name(&self) -> &str {
        match self {
            Announcement::Engage { name, .. } | Announcement::Disengage { name } => name,
        }
    }
}

/// A source of clusters: it announces each cluster as it appears, changes and goes.
///
/// The runtime has [`StaticClusters`](super::StaticClusters),
/// [`KubeconfigDir`](super::KubeconfigDir), [`KubeconfigSecrets`](super::KubeconfigSecrets) and
/// [`ClusterApiClusters`](super::ClusterApiClusters).
/// Any stream of announcements is a provider too, e.g. the receiving end of a channel fed by the
/// operator's own discovery.
pub trait Provider: Send + 'static {
    /// The announcements, from the first cluster on. A stream that ends leaves the clusters it
    /// engaged engaged; one that is dropped (when the fleet stops) should stop its work.
    fn clusters(self) -> BoxStream<'static, Announcement>;
}

impl<S> Provider for S
where
    S: Stream<Item = Announcement> + Send + 'static,
{
    fn clusters(self) -> BoxStream<'static, Announcement> {
        self.boxed()
    }
}

/// The kubeconfig a provider last read for each cluster, to announce only what changed.
///
/// A kubeconfig that cannot be read is reported once and otherwise ignored: the cluster stays as
/// it was (engaged with its last good kubeconfig, or not engaged), so that a file caught half
/// written or a Secret edited by hand does not disengage a working cluster.
#[derive(Default)]
pub(crate) struct Seen {
    clusters: HashMap<String, Read>,
}

struct Read {
    /// The kubeconfig as last read, valid or not.
    text: Vec<u8>,
    /// Whether a valid one was announced, so that the cluster's going is announced too.
    engaged: bool,
}

impl Seen {
    /// The announcement that `text` is now the kubeconfig of `name` (read from `source`, for the
    /// logs), if it changed and is valid.
    pub(crate) async fn read(
        &mut self,
        name: &str,
        text: Vec<u8>,
        source: &str,
    ) -> Option<Announcement> {
        if self
            .clusters
            .get(name)
            .is_some_and(|read| read.text == text)
        {
            return None;
        }
        let config = kubeconfig(&text).await;
        let engaged = self.clusters.get(name).is_some_and(|read| read.engaged);
        let read = Read {
            text,
            engaged: engaged || config.is_ok(),
        };
        self.clusters.insert(name.to_string(), read);
        match config {
            Ok(config) => Some(Announcement::Engage {
                name: name.to_string(),
                config,
            }),
            Err(error) => {
                warn!(cluster = name, source, %error, "not a usable kubeconfig: ignored");
                None
            }
        }
    }

    /// The announcement that `name` is gone, if it was engaged.
    pub(crate) fn gone(&mut self, name: &str) -> Option<Announcement> {
        let read = self.clusters.remove(name)?;
        read.engaged.then(|| Announcement::Disengage {
            name: name.to_string(),
        })
    }

    /// The clusters read so far.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.clusters.keys().map(String::as_str)
    }
}

/// The client configuration of a kubeconfig's current context.
pub(crate) async fn kubeconfig(text: &[u8]) -> Result<kube::Config, String> {
    let text = std::str::from_utf8(text).map_err(|e| format!("not UTF-8: {e}"))?;
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| e.to_string())?;
    let options = KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await;
    config.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = r#"{"apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x"}"#;

    fn engaged(announcement: Option<Announcement>) -> Option<String> {
        match announcement {
            Some(Announcement::Engage { name, config }) => {
                assert_eq!(
                    config.cluster_url.authority().unwrap().as_str(),
                    "127.0.0.1:6443"
                );
                Some(name)
            }
            other => panic!("expected an engagement, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn only_changes_are_announced() {
        let mut seen = Seen::default();
        let text = KUBECONFIG.as_bytes().to_vec();
        assert_eq!(
            engaged(seen.read("a", text.clone(), "test").await),
            Some("a".into())
        );
        assert!(
            seen.read("a", text.clone(), "test").await.is_none(),
            "unchanged"
        );

        // Broken, the cluster stays engaged; fixed (even as before), it is engaged again.
        assert!(seen.read("a", b"{".to_vec(), "test").await.is_none());
        assert_eq!(
            engaged(seen.read("a", text, "test").await),
            Some("a".into())
        );
        assert!(matches!(seen.gone("a"), Some(Announcement::Disengage { name }) if name == "a"));
        assert!(seen.gone("a").is_none(), "gone once");

        // Never valid, never engaged: its going is not announced.
        assert!(
            seen.read("b", b"nonsense: [".to_vec(), "test")
                .await
                .is_none()
        );
        assert_eq!(seen.names().collect::<Vec<_>>(), ["b"]);
        assert!(seen.gone("b").is_none());
    }
}
