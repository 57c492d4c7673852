// Copyright The project Authors
// SPDX-License-Identifier: Apache-2.0

//! The manager: connects to the cluster (in-cluster config, else the current kubeconfig), serves health
//! probes and metrics, optionally waits to be elected leader, and runs every controller of the project
//! until SIGTERM or Ctrl-C. It then lets in-flight reconciles finish, releases the leader lease and
//! exits 0. It exits non-zero if it loses the lease or a controller stops on its own.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Parser;
use tracing::{error, info, warn};

use project::manager::http::{self, BindAddress};
use project::manager::leader::LeaderElection;
use project::manager::{self, Manager, tls};

use project::controller;
// +rustbuilder:scaffold:imports

/// The name of the leader-election Lease: unique to this project, the same for all its replicas.
const LEADER_ELECTION_ID: &str = "project.example.com";

/// The project manager: runs the controllers of the project.
///
/// Every flag can also be set through the environment variable shown next to it.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Where to serve /metrics, e.g. `:8443` or `127.0.0.1:8080`; `0` turns metrics off.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "0")]
    metrics_bind_address: BindAddress,

    /// Serve metrics over HTTPS to authenticated and authorized clients only (TokenReview and
    /// SubjectAccessReview); `false` serves plain HTTP to anyone.
    #[arg(long, env = "METRICS_SECURE", default_value_t = true, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    metrics_secure: bool,

    /// Directory with the metrics serving certificate; without it a self-signed one is made at start.
    #[arg(long, env = "METRICS_CERT_PATH")]
    metrics_cert_path: Option<PathBuf>,

    /// Certificate (chain) file in --metrics-cert-path.
    #[arg(long, default_value = "tls.crt")]
    metrics_cert_name: String,

    /// Private key file in --metrics-cert-path.
    #[arg(long, default_value = "tls.key")]
    metrics_cert_key: String,

    /// Where to serve /healthz and /readyz; `0` turns them off.
    #[arg(long, env = "HEALTH_PROBE_BIND_ADDRESS", default_value = ":8081")]
    health_probe_bind_address: BindAddress,

    /// Run the controllers only while holding the leader-election Lease, so that one replica of
    /// several is active.
    #[arg(long, env = "LEADER_ELECT", default_value_t = false, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    leader_elect: bool,

    /// Namespace of the leader-election Lease [default: the pod's namespace, else $POD_NAMESPACE,
    /// else `default`].
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,

    /// Log filter in `RUST_LOG` syntax, e.g. `info` or `project=debug,kube=info`.
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    log_level: String,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    init_logging(&args)?;

    let client = kube::Client::try_default().await?;
    let server = client.apiserver_version().await?;
    info!(version = %server.git_version, "connected to the API server");

    let manager = Manager::new(client);
    tokio::spawn(shutdown_on_signal(manager.clone()));
    http::serve_probes(&args.health_probe_bind_address, manager.clone()).await?;
    let tls = if args.metrics_secure && !args.metrics_bind_address.is_off() {
        Some(tls::acceptor(metrics_cert(&args))?)
    } else {
        None
    };
    http::serve_metrics(&args.metrics_bind_address, manager.clone(), tls).await?;

    let mut leadership = None;
    if args.leader_elect {
        let namespace = args
            .leader_election_namespace
            .unwrap_or_else(manager::pod_namespace);
        let election = LeaderElection::new(&manager, &namespace, LEADER_ELECTION_ID);
        let Some(acquired) = election.acquire().await else {
            info!("stopped before becoming leader");
            return Ok(());
        };
        leadership = Some(acquired);
    }

    let mut controllers = manager.controllers();
    controllers.spawn(controller::memcached::run(manager.clone()));
    // +rustbuilder:scaffold:controllers

    let stopped = match &mut leadership {
        Some(leadership) => tokio::select! {
            stopped = controllers.wait() => stopped,
            () = leadership.lost() => {
                // Exit at once: another replica may already be leading.
                error!("leader election lost: exiting");
                return Err(manager::Error::LeadershipLost.into());
            }
        },
        None => controllers.wait().await,
    };
    // The controllers have stopped: hand the lease over without waiting for it to expire.
    if let Some(leadership) = leadership {
        leadership.release().await;
    }
    if let Err(stopped) = stopped {
        error!(error = %stopped, "manager failed");
        return Err(stopped.into());
    }
    info!("manager stopped");
    Ok(())
}

fn init_logging(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)?;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal());
    match args.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    Ok(())
}

fn metrics_cert(args: &Args) -> tls::CertSource {
    match &args.metrics_cert_path {
        Some(dir) => tls::CertSource::Files {
            cert: dir.join(&args.metrics_cert_name),
            key: dir.join(&args.metrics_cert_key),
        },
        None => tls::CertSource::SelfSigned(tls::default_names()),
    }
}

/// On SIGTERM (how Kubernetes stops a pod) or Ctrl-C, asks the manager to shut down gracefully. A
/// second signal exits at once.
async fn shutdown_on_signal(manager: Manager) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    let mut signalled = async || {
        tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        }
    };
    let first = signalled().await;
    info!(
        signal = first,
        "shutting down: finishing in-flight reconciles"
    );
    manager.shutdown();
    let second = signalled().await;
    warn!(signal = second, "second signal: exiting at once");
    std::process::exit(1);
}
