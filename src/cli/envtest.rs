//! `rustbuilder envtest`: control-plane binaries for tests (etcd, kube-apiserver, kubectl, and for the
//! simulated cluster kube-controller-manager, kube-scheduler, kwok), found in the cache, downloaded or
//! built from Go modules by `rustbuilder_envtest::assets`.

use std::path::PathBuf;

use anyhow::Result;
use rustbuilder_envtest::assets::{self, Source};

use crate::{shell, versions};

// The CLI pins projects to the release its `envtest use` builds by default.
const _: () = assert!(
    same(versions::KUBERNETES, assets::DEFAULT_KUBERNETES_VERSION)
        && same(versions::ETCD, assets::ETCD_VERSION)
        && same(versions::KWOK, assets::KWOK_VERSION),
    "src/versions.rs disagrees with rustbuilder_envtest::assets"
);

/// String equality in a const context.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    Use(UseArgs),
    List(ListArgs),
}

/// How `envtest use` prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Print {
    /// Version, platform and path, for people.
    Overview,
    /// The directory only: `KUBEBUILDER_ASSETS=$(rustbuilder envtest use -p path)`.
    Path,
    /// `export KUBEBUILDER_ASSETS=...`, for `eval`.
    Env,
}

/// Provide the control-plane binaries of a Kubernetes version and print where they are.
///
/// Uses `KUBEBUILDER_ASSETS` when it holds them, else the cache (`<bin-dir>/k8s/<version>-<os>-<arch>/`),
/// else downloads etcd, kube-apiserver and kubectl from controller-tools' envtest release and checks them
/// against the index's SHA-512 (with `--cluster`, kube-controller-manager and kube-scheduler from the
/// Kubernetes release, checked against its SHA-256 files). What cannot be downloaded (no network,
/// `--from-source`, kwok) is built from Go modules with the local Go toolchain (a cold build takes
/// minutes; later runs reuse Go's build cache). Safe to interrupt and run again.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  rustbuilder envtest use\n  \
                        export KUBEBUILDER_ASSETS=\"$(rustbuilder envtest use 1.36.3 --bin-dir bin -p path)\"\n  \
                        rustbuilder envtest use 1.36 --cluster --from-source")]
pub struct UseArgs {
    /// Kubernetes version: a release (major.minor.patch) or a minor (major.minor) for its newest release.
    #[arg(default_value = versions::KUBERNETES)]
    pub version: String,
    #[command(flatten)]
    pub bin_dir: BinDir,
    /// What to print.
    #[arg(short = 'p', long = "print", value_enum, default_value_t = Print::Overview)]
    pub print: Print,
    /// Ignore `KUBEBUILDER_ASSETS` and use or fill the cache.
    #[arg(long)]
    pub ignore_env: bool,
    /// Also kube-controller-manager, kube-scheduler (downloaded) and kwok (built with Go), for the
    /// simulated cluster.
    #[arg(long)]
    pub cluster: bool,
    /// Build with Go instead of downloading.
    #[arg(long, env = "ENVTEST_FROM_SOURCE")]
    pub from_source: bool,
    /// The index of envtest releases and their SHA-512 (a mirror's copy of envtest-releases.yaml).
    #[arg(long, value_name = "URL", env = "ENVTEST_INDEX_URL", default_value = assets::DEFAULT_INDEX_URL)]
    pub index_url: String,
    /// Download archives from `<URL>/envtest-v<version>/` instead of the index's links (a mirror).
    #[arg(long, value_name = "URL", env = "ENVTEST_DOWNLOAD_URL")]
    pub download_url: Option<String>,
    /// Where `--cluster` downloads kube-controller-manager and kube-scheduler from:
    /// `<URL>/v<version>/bin/<os>/<arch>/<name>` and its `.sha256`.
    #[arg(long, value_name = "URL", env = "ENVTEST_KUBERNETES_URL", default_value = assets::DEFAULT_RELEASE_URL)]
    pub kubernetes_url: String,
}

/// List the cached control-plane versions: `complete` (the simulated cluster's binaries too),
/// `control-plane` (etcd, kube-apiserver, kubectl) or `incomplete`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  rustbuilder envtest list --bin-dir bin")]
pub struct ListArgs {
    #[command(flatten)]
    pub bin_dir: BinDir,
}

#[derive(Debug, clap::Args)]
pub struct BinDir {
    /// Where assets are cached [default: $XDG_DATA_HOME/kubebuilder-envtest or ~/.local/share/kubebuilder-envtest]
    #[arg(long, value_name = "DIR")]
    pub bin_dir: Option<PathBuf>,
}

impl BinDir {
    fn resolve(self) -> Result<PathBuf> {
        match self.bin_dir {
            Some(dir) => Ok(std::path::absolute(dir)?),
            None => Ok(assets::default_bin_dir()?),
        }
    }
}

pub fn run(command: Command) -> Result<()> {
    match command {
        Command::Use(args) => {
            let version = assets::parse_version(&args.version)?;
            let bin_dir = args.bin_dir.resolve()?;
            let options = assets::Options {
                components: if args.cluster {
                    assets::Components::Cluster
                } else {
                    assets::Components::ControlPlane
                },
                use_env: !args.ignore_env,
                from_source: args.from_source,
                index_url: args.index_url,
                download_url: args.download_url,
                release_url: args.kubernetes_url,
                ..assets::Options::from_env()
            };
            let assets::Provided {
                dir,
                version,
                source,
            } = assets::provide(&version, &bin_dir, &options, &|verb, message| {
                shell::status(verb, message)
            })?;
            match args.print {
                Print::Path => println!("{}", dir.display()),
                Print::Env => println!("export KUBEBUILDER_ASSETS='{}'", dir.display()),
                Print::Overview => {
                    let from = match source {
                        Source::Environment => "KUBEBUILDER_ASSETS",
                        Source::Cache => "cache",
                        Source::Downloaded => "downloaded now",
                        Source::Built => "built now",
                    };
                    let (os, arch) = assets::platform();
                    let path = dir.display();
                    println!(
                        "Version: {version}\nOS/Arch: {os}/{arch}\nSource:  {from}\nPath:    {path}"
                    );
                }
            }
            Ok(())
        }
        Command::List(args) => {
            let bin_dir = args.bin_dir.resolve()?;
            let found = assets::list(&bin_dir)?;
            if found.is_empty() {
                shell::note(
                    "Empty",
                    format!(
                        "nothing cached in {}\nhelp: run `rustbuilder envtest use`",
                        bin_dir.display()
                    ),
                );
            }
            for cached in found {
                let state = if cached.complete {
                    "complete"
                } else if cached.control_plane {
                    "control-plane"
                } else {
                    "incomplete"
                };
                println!("{}\t{state}\t{}", cached.name, cached.path.display());
            }
            Ok(())
        }
    }
}
