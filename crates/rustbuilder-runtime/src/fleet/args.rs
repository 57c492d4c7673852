//! [`FleetArgs`]: the manager flags that choose where a fleet's clusters come from.

use std::path::PathBuf;

use futures::StreamExt;
use futures::stream::BoxStream;

use super::cluster_api::ClusterApiClusters;
use super::kubeconfig_dir::KubeconfigDir;
use super::kubeconfig_secrets::{CLUSTER_NAME_LABEL, KubeconfigSecrets};
use super::provider::{Announcement, Provider};
use crate::error::Error;
use crate::manager::{Manager, pod_namespace};

/// The flags of a multi-cluster manager: which [`Provider`] announces its clusters, and where it
/// reads them. Flatten them into the manager's arguments beside
/// [`ManagerArgs`](crate::manager::ManagerArgs), then hand [`FleetArgs::provider`] to
/// [`Fleet::new`](super::Fleet::new):
///
/// ```no_run
/// use rustbuilder_runtime::fleet::{Cluster, Fleet, FleetArgs};
/// use rustbuilder_runtime::manager::{Manager, ManagerArgs};
///
/// #[derive(clap::Parser)]
/// struct Args {
///     #[command(flatten)]
///     manager: ManagerArgs,
///     #[command(flatten)]
///     fleet: FleetArgs,
/// }
///
/// # async fn run(args: Args) -> Result<(), rustbuilder_runtime::manager::Error> {
/// let manager = Manager::start("my-operator", "my-operator.example.com", args.manager).await?;
/// let clusters = args.fleet.provider(&manager)?;
/// let fleet = Fleet::new(&manager, clusters, |cluster: &Cluster| {
///     // Add the cluster's controllers to `cluster.manager().controllers()`.
/// });
/// manager.controllers().add(fleet.run());
/// manager.controllers().run().await
/// # }
/// ```
#[derive(Clone, Debug, clap::Args)]
pub struct FleetArgs {
    /// Where the clusters the controllers run in come from: kubeconfig Secrets in this cluster
    /// (Cluster API's, or your own), the kubeconfig files of a directory, or Cluster API's
    /// Clusters in this cluster, once their control plane is up.
    #[arg(long, env = "CLUSTER_PROVIDER", value_enum, default_value_t = ClusterProvider::KubeconfigSecrets)]
    pub cluster_provider: ClusterProvider,

    /// With `--cluster-provider kubeconfig-dir`: the directory, one kubeconfig file per cluster,
    /// named after it (`east.yaml` is `east`), read again every 5 s.
    #[arg(
        long,
        env = "CLUSTER_KUBECONFIG_DIR",
        value_name = "DIR",
        required_if_eq("cluster_provider", "kubeconfig-dir")
    )]
    pub cluster_kubeconfig_dir: Option<PathBuf>,

    /// With `--cluster-provider kubeconfig-secrets`: the namespace of the Secrets [default: the
    /// pod's namespace, else $POD_NAMESPACE, else `default`].
    #[arg(long, env = "CLUSTER_SECRETS_NAMESPACE", value_name = "NAMESPACE")]
    pub cluster_secrets_namespace: Option<String>,

    /// With `--cluster-provider kubeconfig-secrets`: the label selector of the Secrets; each
    /// Secret's cluster is named by its `cluster.x-k8s.io/cluster-name` label, else by the
    /// Secret's name.
    #[arg(long, env = "CLUSTER_SECRETS_SELECTOR", value_name = "SELECTOR", default_value = CLUSTER_NAME_LABEL)]
    pub cluster_secrets_selector: String,

    /// With `--cluster-provider cluster-api`: the namespace of the Clusters and their kubeconfig
    /// Secrets [default: the pod's namespace, else $POD_NAMESPACE, else `default`].
    #[arg(long, env = "CLUSTER_API_NAMESPACE", value_name = "NAMESPACE")]
    pub cluster_api_namespace: Option<String>,

    /// With `--cluster-provider cluster-api`: the label selector of the Clusters [default: every
    /// Cluster of the namespace].
    #[arg(long, env = "CLUSTER_API_SELECTOR", value_name = "SELECTOR")]
    pub cluster_api_selector: Option<String>,
}

/// The `--cluster-provider` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClusterProvider {
    /// The kubeconfig Secrets that `--cluster-secrets-selector` selects in
    /// `--cluster-secrets-namespace` (`KubeconfigSecrets`).
    KubeconfigSecrets,
    /// The kubeconfig files of `--cluster-kubeconfig-dir` (`KubeconfigDir`).
    KubeconfigDir,
    /// Cluster API's Clusters that `--cluster-api-selector` selects in `--cluster-api-namespace`,
    /// each reached through its kubeconfig Secret (`ClusterApiClusters`).
    ClusterApi,
}

impl FleetArgs {
    /// The provider these flags choose; `manager` is the process manager, which watches the
    /// Secrets of [`ClusterProvider::KubeconfigSecrets`], and the Clusters and Secrets of
    /// [`ClusterProvider::ClusterApi`], in its own cluster.
    pub fn provider(&self, manager: &Manager) -> Result<BoxStream<'static, Announcement>, Error> {
        match self.cluster_provider {
            ClusterProvider::KubeconfigSecrets => {
                let namespace = self
                    .cluster_secrets_namespace
                    .clone()
                    .unwrap_or_else(pod_namespace);
                let secrets =
                    KubeconfigSecrets::new(manager, &namespace, &self.cluster_secrets_selector);
                Ok(secrets.clusters())
            }
            ClusterProvider::KubeconfigDir => match &self.cluster_kubeconfig_dir {
                Some(dir) => Ok(KubeconfigDir::new(dir).clusters().boxed()),
                None => Err(Error::config(
                    "--cluster-provider kubeconfig-dir needs --cluster-kubeconfig-dir <DIR>",
                )),
            },
            ClusterProvider::ClusterApi => {
                let namespace = self
                    .cluster_api_namespace
                    .clone()
                    .unwrap_or_else(pod_namespace);
                let mut clusters = ClusterApiClusters::new(manager, &namespace);
                if let Some(selector) = &self.cluster_api_selector {
                    clusters = clusters.label_selector(selector);
                }
                Ok(clusters.clusters())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Args {
        #[command(flatten)]
        fleet: FleetArgs,
    }

    #[test]
    fn kubeconfig_secrets_with_cluster_apis_label_by_default() {
        let args = Args::try_parse_from(["manager"]).unwrap().fleet;
        assert_eq!(args.cluster_provider, ClusterProvider::KubeconfigSecrets);
        assert_eq!(args.cluster_secrets_selector, CLUSTER_NAME_LABEL);
        assert_eq!(args.cluster_secrets_namespace, None);
    }

    #[test]
    fn a_kubeconfig_directory_must_be_named() {
        let refused = Args::try_parse_from(["manager", "--cluster-provider", "kubeconfig-dir"]);
        let error = refused.unwrap_err().to_string();
        assert!(error.contains("--cluster-kubeconfig-dir <DIR>"), "{error}");
        let args = Args::try_parse_from([
            "manager",
            "--cluster-provider",
            "kubeconfig-dir",
            "--cluster-kubeconfig-dir",
            "/etc/fleet",
        ]);
        let args = args.unwrap().fleet;
        assert_eq!(args.cluster_provider, ClusterProvider::KubeconfigDir);
        assert_eq!(
            args.cluster_kubeconfig_dir,
            Some(PathBuf::from("/etc/fleet"))
        );
    }

    #[test]
    fn cluster_api_reads_its_namespace_and_selector() {
        let args = Args::try_parse_from([
            "manager",
            "--cluster-provider",
            "cluster-api",
            "--cluster-api-namespace",
            "capi-clusters",
            "--cluster-api-selector",
            "fleet.example.com/member=true",
        ]);
        let args = args.unwrap().fleet;
        assert_eq!(args.cluster_provider, ClusterProvider::ClusterApi);
        assert_eq!(args.cluster_api_namespace.as_deref(), Some("capi-clusters"));
        assert_eq!(
            args.cluster_api_selector.as_deref(),
            Some("fleet.example.com/member=true")
        );
    }

    #[tokio::test]
    async fn a_directory_provider_without_its_directory_is_a_configuration_error() {
        let args = FleetArgs {
            cluster_provider: ClusterProvider::KubeconfigDir,
            cluster_kubeconfig_dir: None,
            cluster_secrets_namespace: None,
            cluster_secrets_selector: CLUSTER_NAME_LABEL.into(),
            cluster_api_namespace: None,
            cluster_api_selector: None,
        };
        // Nothing is listening there: building the provider does not talk to the cluster.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let manager = Manager::new("test", kube::Client::try_from(config).unwrap());
        let error = args.provider(&manager).err().expect("refused");
        assert!(
            error.to_string().contains("--cluster-kubeconfig-dir"),
            "{error}"
        );
    }
}
