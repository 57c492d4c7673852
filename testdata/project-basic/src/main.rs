// Copyright The project-basic Authors
// SPDX-License-Identifier: Apache-2.0

//! The manager: connects to the cluster (in-cluster config, else the current kubeconfig) and runs every
//! controller of the project until SIGTERM or Ctrl-C, then lets in-flight reconciles finish and exits 0.

use clap::Parser;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use tokio::task::JoinSet;
use tracing::info;

use project_basic::controller;
// +rustbuilder:scaffold:imports

/// The project-basic manager: runs the controllers of the project.
///
/// Every flag can also be set through the environment variable shown next to it.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Log filter in `RUST_LOG` syntax, e.g. `info` or `project_basic=debug,kube=info`.
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

    let shutdown = shutdown_signal();
    let mut controllers: JoinSet<()> = JoinSet::new();
    controllers.spawn(controller::memcached::run(client.clone(), shutdown.clone()));
    // +rustbuilder:scaffold:controllers

    shutdown.clone().await;
    info!("shutdown requested: finishing in-flight reconciles");
    while let Some(finished) = controllers.join_next().await {
        finished?;
    }
    info!("manager stopped");
    Ok(())
}

fn init_logging(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)?;
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    match args.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    Ok(())
}

/// Resolves once on SIGTERM (how Kubernetes stops a pod) or Ctrl-C. Cloned into every controller so they
/// all stop taking new work at the same moment.
fn shutdown_signal() -> Shared<BoxFuture<'static, ()>> {
    async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate()).expect("a SIGTERM handler");
        tokio::select! {
            _ = terminate.recv() => info!("received SIGTERM"),
            _ = tokio::signal::ctrl_c() => info!("received Ctrl-C"),
        }
    }
    .boxed()
    .shared()
}
