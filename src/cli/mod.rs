//! The command line: one file per command, each holding its clap arguments and a short `run`.

use std::path::PathBuf;

use anyhow::Result;
use clap::{ArgAction, Parser, Subcommand};

pub mod alpha;
pub mod create_api;
pub mod create_webhook;
pub mod edit;
pub mod envtest;
pub mod init;
pub mod license;
pub mod manifests;
pub mod plugin_keys;

/// Scaffold Kubernetes operators in Rust, the Kubebuilder way.
#[derive(Debug, Parser)]
#[command(
    name = "rustbuilder",
    version,
    after_help = "Example:\n  rustbuilder init --domain example.com\n  rustbuilder create api --group cache --version v1alpha1 --kind Memcached\n  rustbuilder manifests"
)]
pub struct Cli {
    /// Print only errors.
    #[arg(long, short, global = true)]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Init(init::Args),
    /// Scaffold a Kubernetes API (its type and controller) or a webhook in the project.
    #[command(subcommand)]
    Create(CreateCommand),
    Edit(edit::Args),
    Manifests(manifests::Args),
    /// Experimental commands: regenerate a project, update its scaffold or its runtime.
    #[command(subcommand)]
    Alpha(alpha::Command),
    /// Provide the control-plane binaries (etcd, kube-apiserver, ...) that tests run.
    #[command(subcommand)]
    Envtest(envtest::Command),
    /// Print the rustbuilder version and the versions it scaffolds with.
    #[command(after_help = "Example:\n  rustbuilder version")]
    Version,
    /// Print a shell completion script.
    #[command(
        after_help = "Example:\n  rustbuilder completion bash > /etc/bash_completion.d/rustbuilder\n  \
                            rustbuilder completion zsh > \"${fpath[1]}/_rustbuilder\""
    )]
    Completion {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
pub enum CreateCommand {
    Api(create_api::Args),
    Webhook(create_webhook::Args),
}

/// Kubebuilder's flags for another operator's kind, shared by `create api` and `create webhook`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExternalApi {
    /// Another operator's kind: the YAML file of its CRD (or, with `--external-api-module`, the Go
    /// import path of its types). Rust types are generated from the CRD into `src/external/`, and a
    /// copy of it is kept in `config/crd/external/`.
    #[arg(long, value_name = "CRD_FILE")]
    pub external_api_path: Option<PathBuf>,
    /// The domain of the external kind's API group (`<group>.<domain>`); by default what follows
    /// `<group>.` in the CRD's group.
    #[arg(long, value_name = "DOMAIN", requires = "external_api_path")]
    pub external_api_domain: Option<crate::model::Domain>,
    /// The Go module that holds the external kind (e.g. `github.com/cert-manager/cert-manager@v1.20.2`):
    /// when `--external-api-path` is not a file, the CRD is taken from that module in Go's module
    /// cache. Recorded in PROJECT.
    #[arg(long, value_name = "MODULE@VERSION", requires = "external_api_path")]
    pub external_api_module: Option<String>,
}

impl ExternalApi {
    /// The options of the plugins, when `--external-api-path` is given.
    pub fn options(self) -> Option<crate::plugins::rust::ExternalOptions> {
        self.external_api_path
            .map(|crd| crate::plugins::rust::ExternalOptions {
                crd,
                domain: self.external_api_domain,
                module: self.external_api_module,
            })
    }
}

/// Kubebuilder's flags of what Go's toolchain does after a scaffold (`go get`, `go mod tidy`, `make
/// generate`). Cargo resolves and builds on its own, and Rust has no generated deep-copy code, so
/// they change nothing here: accepted (with Kubebuilder's `--flag=true|false` forms) so that its
/// scripts run unchanged.
#[derive(Debug, Clone, clap::Args)]
pub struct GoToolchain {
    /// Kubebuilder: run `make generate` afterwards. Nothing to generate in Rust: accepted, no effect.
    #[arg(long, value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", hide_default_value = true, default_value_t = true)]
    pub make: bool,
}

/// The `--dir` option shared by commands that work on a project.
#[derive(Debug, Clone, clap::Args)]
pub struct ProjectDir {
    /// The project directory.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
}

pub fn run(cli: Cli) -> Result<()> {
    crate::shell::set_quiet(cli.quiet);
    match cli.command {
        Command::Init(args) => init::run(args),
        Command::Create(CreateCommand::Api(args)) => create_api::run(args),
        Command::Create(CreateCommand::Webhook(args)) => create_webhook::run(args),
        Command::Edit(args) => edit::run(args),
        Command::Manifests(args) => manifests::run(args),
        Command::Alpha(command) => alpha::run(command),
        Command::Envtest(command) => envtest::run(command),
        Command::Version => {
            println!("rustbuilder {}", env!("CARGO_PKG_VERSION"));
            println!(
                "kube {}, k8s-openapi {} ({})",
                crate::versions::KUBE,
                crate::versions::K8S_OPENAPI,
                crate::versions::K8S_OPENAPI_FEATURE
            );
            println!("kubernetes (envtest) {}", crate::versions::KUBERNETES);
            Ok(())
        }
        Command::Completion { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "rustbuilder", &mut std::io::stdout());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        <super::Cli as clap::CommandFactory>::command().debug_assert();
    }
}
