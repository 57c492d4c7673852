//! `rustbuilder envtest`: control-plane binaries for tests (etcd, kube-apiserver, kubectl,
//! kube-controller-manager, kube-scheduler, kwok), found in the cache or built from Go modules by
//! `rustbuilder_envtest::assets`.

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
/// Uses `KUBEBUILDER_ASSETS` when it points at a complete set, else the cache
/// (`<bin-dir>/k8s/<version>-<os>-<arch>/`), else builds them from Go modules with the local Go toolchain
/// (a cold build takes minutes; later runs reuse Go's build cache). Safe to interrupt and run again.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  rustbuilder envtest use\n  \
                        export KUBEBUILDER_ASSETS=\"$(rustbuilder envtest use 1.36.3 --bin-dir bin -p path)\"")]
pub struct UseArgs {
    /// Kubernetes version (major.minor.patch).
    #[arg(default_value = versions::KUBERNETES)]
    pub version: String,
    #[command(flatten)]
    pub bin_dir: BinDir,
    /// What to print.
    #[arg(short = 'p', long = "print", value_enum, default_value_t = Print::Overview)]
    pub print: Print,
    /// Ignore `KUBEBUILDER_ASSETS` and use or build the cached version.
    #[arg(long)]
    pub ignore_env: bool,
}

/// List the cached control-plane versions.
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
            let (dir, source) =
                assets::provide(&version, &bin_dir, !args.ignore_env, &|verb, message| {
                    shell::status(verb, message)
                })?;
            match args.print {
                Print::Path => println!("{}", dir.display()),
                Print::Env => println!("export KUBEBUILDER_ASSETS='{}'", dir.display()),
                Print::Overview => {
                    let from = match source {
                        Source::Environment => "KUBEBUILDER_ASSETS",
                        Source::Cache => "cache",
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
                } else {
                    "incomplete"
                };
                println!("{}\t{state}\t{}", cached.name, cached.path.display());
            }
            Ok(())
        }
    }
}
