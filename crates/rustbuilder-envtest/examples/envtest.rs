//! The command line a project's `examples/envtest.rs` gets:
//! `cargo run --example envtest -- assets` prints the directory of the control-plane binaries,
//! `cargo run --example envtest -- local-cluster` runs a cluster with fake nodes until Ctrl-C.

fn main() -> std::process::ExitCode {
    rustbuilder_envtest::main()
}
