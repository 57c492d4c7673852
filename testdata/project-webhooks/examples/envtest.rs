// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! The test control plane from the command line, without Docker or a real cluster:
//!
//! - `cargo run --example envtest -- assets` prints the directory of the control-plane binaries,
//!   building them from Go modules on first use (`make setup-envtest`);
//! - `cargo run --example envtest -- local-cluster [KUBECONFIG]` runs etcd, kube-apiserver,
//!   kube-controller-manager, kube-scheduler and kwok fake nodes until Ctrl-C (`make local-cluster`).

fn main() -> std::process::ExitCode {
    rustbuilder_envtest::main()
}
