//! [`StaticClusters`]: a fixed list of clusters.

use futures::StreamExt;
use futures::stream::BoxStream;

use super::provider::{Announcement, Provider};

/// A fixed list of clusters, each engaged once the fleet runs and never disengaged: for clusters
/// known when the operator starts (from flags, say), and for tests.
///
/// ```no_run
/// # async fn f() -> Result<(), kube::Error> {
/// use rustbuilder_runtime::fleet::StaticClusters;
///
/// let east = kube::Config::from_kubeconfig(&Default::default()).await.unwrap();
/// let clusters = StaticClusters::new().cluster("east", east);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct StaticClusters {
    clusters: Vec<(String, kube::Config)>,
}

impl StaticClusters {
    /// No cluster yet.
    pub fn new() -> Self {
        StaticClusters::default()
    }

    /// Adds the cluster `name`, reached with `config`. A later cluster of the same name replaces it.
    pub fn cluster(mut self, name: &str, config: kube::Config) -> Self {
        self.clusters.push((name.to_string(), config));
        self
    }
}

impl FromIterator<(String, kube::Config)> for StaticClusters {
    fn from_iter<I: IntoIterator<Item = (String, kube::Config)>>(clusters: I) -> Self {
        StaticClusters {
            clusters: clusters.into_iter().collect(),
        }
    }
}

impl Provider for StaticClusters {
    fn clusters(self) -> BoxStream<'static, Announcement> {
        let announced = self.clusters.into_iter();
        let announced = announced.map(|(name, config)| Announcement::Engage { name, config });
        futures::stream::iter(announced).boxed()
    }
}
