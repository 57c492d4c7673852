//! `rustbuilder envtest`: control-plane binaries for tests (etcd, kube-apiserver, kubectl,
//! kube-controller-manager, kube-scheduler, kwok), found in the cache or built from Go modules.

use std::path::PathBuf;

use anyhow::Result;

use crate::envtest::{self, Source};
use crate::{shell, versions};

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
            None => envtest::default_bin_dir(),
        }
    }
}

pub fn run(command: Command) -> Result<()> {
    match command {
        Command::Use(args) => {
            let version = envtest::parse_version(&args.version)?;
            let bin_dir = args.bin_dir.resolve()?;
            let (dir, source) = envtest::provide(&version, &bin_dir, !args.ignore_env)?;
            match args.print {
                Print::Path => println!("{}", dir.display()),
                Print::Env => println!("export KUBEBUILDER_ASSETS='{}'", dir.display()),
                Print::Overview => {
                    let from = match source {
                        Source::Environment => "KUBEBUILDER_ASSETS",
                        Source::Cache => "cache",
                        Source::Built => "built now",
                    };
                    let (os, arch) = envtest::platform();
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
            let found = envtest::list(&bin_dir)?;
            if found.is_empty() {
                shell::note(
                    "Empty",
                    format!(
                        "nothing cached in {}\nhelp: run `rustbuilder envtest use`",
                        bin_dir.display()
                    ),
                );
            }
            for (name, path, complete) in found {
                let state = if complete { "complete" } else { "incomplete" };
                println!("{name}\t{state}\t{}", path.display());
            }
            Ok(())
        }
    }
}
