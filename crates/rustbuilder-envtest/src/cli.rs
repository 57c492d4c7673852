//! A project's `examples/envtest.rs`: the control plane from the command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::{TestEnv, assets};

/// Where `local-cluster` writes its kubeconfig unless told otherwise.
const DEFAULT_KUBECONFIG: &str = "bin/local-cluster.kubeconfig";

/// Where `certs` writes the certificate unless told otherwise: the manager's `--webhook-cert-path`
/// default.
const DEFAULT_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";

const USAGE: &str = "\
Usage: envtest <COMMAND>

Commands:
  assets [--cluster] [VERSION]
                              Print the directory of the control-plane binaries of VERSION
                              (default: $ENVTEST_K8S_VERSION, else the crate's default; `1.36` means
                              its newest release), downloading them first when they are not cached
                              (building them with Go when that is impossible); with --cluster also
                              kube-controller-manager, kube-scheduler (downloaded) and kwok (built
                              with Go)
  local-cluster [KUBECONFIG]  Run a local cluster with fake nodes until Ctrl-C, writing its admin
                              kubeconfig to KUBECONFIG (default: bin/local-cluster.kubeconfig)
  certs [DIR]                 Write a self-signed serving certificate for localhost and 127.0.0.1,
                              tls.crt and tls.key, into DIR (default:
                              /tmp/k8s-webhook-server/serving-certs, where the manager looks for its
                              webhook server's): `make certs`, so that `make run` serves the webhooks
  help                        Print this message";

/// The command line of a project's `examples/envtest.rs`, with arguments from the process:
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     rustbuilder_envtest::main()
/// }
/// ```
///
/// so that `cargo run --example envtest -- assets` prints where the binaries are (a `KUBEBUILDER_ASSETS`
/// value) and `cargo run --example envtest -- local-cluster` runs a cluster to try an operator on.
pub fn main() -> ExitCode {
    run(std::env::args().skip(1))
}

/// [`main`] with explicit arguments (without the program name). Exits 0 on success, 1 when the command
/// failed, 2 on a usage error.
pub fn run(args: impl IntoIterator<Item = String>) -> ExitCode {
    let args: Vec<String> = args.into_iter().collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["assets"] => print_assets(None, assets::Components::ControlPlane),
        ["assets", "--cluster"] => print_assets(None, assets::Components::Cluster),
        ["assets", "--cluster", version] | ["assets", version, "--cluster"] => {
            print_assets(Some(version), assets::Components::Cluster)
        }
        ["assets", version] if !version.starts_with('-') => {
            print_assets(Some(version), assets::Components::ControlPlane)
        }
        ["local-cluster"] => run_local_cluster(Path::new(DEFAULT_KUBECONFIG)),
        ["local-cluster", path] => run_local_cluster(Path::new(path)),
        ["certs"] => write_certs(Path::new(DEFAULT_CERT_DIR)),
        ["certs", dir] if !dir.starts_with('-') => write_certs(Path::new(dir)),
        ["help" | "--help" | "-h"] => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!(
                "error: unexpected arguments `{}`\n\n{USAGE}",
                args.join(" ")
            );
            ExitCode::from(2)
        }
    }
}

/// `assets [--cluster] [VERSION]`: the cache directory of the version (never `KUBEBUILDER_ASSETS`, so
/// the output can be used to set it), downloaded or built if missing.
fn print_assets(version: Option<&str>, components: assets::Components) -> ExitCode {
    let result = (|| {
        let version = match version {
            Some(v) => v.to_string(),
            None => std::env::var("ENVTEST_K8S_VERSION")
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| assets::DEFAULT_KUBERNETES_VERSION.to_string()),
        };
        let version = assets::parse_version(&version)?;
        let bin_dir = assets::default_bin_dir()?;
        let options = assets::Options {
            components,
            ..assets::Options::from_env()
        };
        assets::provide(&version, &bin_dir, &options, &assets::print_status)
    })();
    match result {
        Ok(provided) => {
            println!("{}", provided.dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `certs [DIR]`: a serving certificate and key for a webhook server on this machine, replacing any
/// there.
fn write_certs(dir: &Path) -> ExitCode {
    match crate::harness::pki::write_serving_pair(dir) {
        Ok(()) => {
            println!(
                "Wrote a self-signed serving certificate for localhost and 127.0.0.1: {} and {}",
                dir.join("tls.crt").display(),
                dir.join("tls.key").display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "error: cannot write the certificate into {}: {e}",
                dir.display()
            );
            ExitCode::FAILURE
        }
    }
}

fn run_local_cluster(kubeconfig: &Path) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    match runtime.block_on(local_cluster(kubeconfig)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Where a project keeps its CRDs (`make manifests` writes them there).
const PROJECT_CRDS: &str = "config/crd/bases";

/// Runs a local cluster (see [`TestEnv::start_cluster`]) until Ctrl-C or SIGTERM, to try an operator
/// without Docker or a real cluster: kube-controller-manager, kube-scheduler and kwok fake nodes, on
/// which Pods become Running without containers. Run from a project, it installs the project's CRDs
/// (`config/crd/bases`) before it reports ready. Writes the admin kubeconfig to `kubeconfig` (creating
/// its directory), prints how to use it, and removes it and everything else it started on the way out.
pub async fn local_cluster(kubeconfig: impl AsRef<Path>) -> std::io::Result<()> {
    let path: PathBuf = kubeconfig.as_ref().to_owned();
    let mut builder = TestEnv::builder().cluster(true);
    if Path::new(PROJECT_CRDS).is_dir() {
        builder = builder.crd_dir(PROJECT_CRDS);
    }
    let env = builder.start().await;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::copy(env.kubeconfig(), &path)?;
    println!(
        "Local cluster ready. In another shell:\n  export KUBECONFIG={}\nPress Ctrl-C to stop it.",
        path.display()
    );
    wait_for_signal().await?;
    let _ = std::fs::remove_file(&path);
    drop(env);
    println!("Local cluster stopped.");
    Ok(())
}

#[cfg(unix)]
async fn wait_for_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result,
        _ = terminate.recv() => Ok(()),
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() -> std::io::Result<()> {
    tokio::signal::ctrl_c().await
}
