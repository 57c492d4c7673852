// Copyright The project-basic Authors
// SPDX-License-Identifier: Apache-2.0

//! The test control plane from the command line, without Docker or a real cluster:
//!
//! - `cargo run --example envtest -- assets [--cluster]` prints the directory of the control-plane
//!   binaries, downloading them on first use (`make setup-envtest`); `--cluster` adds the simulated
//!   cluster's, of which kwok is built with Go;
//! - `cargo run --example envtest -- local-cluster [KUBECONFIG]` runs etcd, kube-apiserver,
//!   kube-controller-manager, kube-scheduler and kwok fake nodes until Ctrl-C (`make local-cluster`);
//! - `cargo run --example envtest -- certs [DIR]` writes a self-signed certificate for the webhook
//!   server of `make run` (`make certs`).

fn main() -> std::process::ExitCode {
    rustbuilder_envtest::main()
}
