//! Starts a throw-away control plane and lists its namespaces: `cargo run --example list_namespaces`.
//!
//! The binaries come from `KUBEBUILDER_ASSETS`, else from the cache, else they are built with Go first
//! (a cold build takes a while; progress shows on stderr).

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use rustbuilder_envtest::TestEnv;

#[tokio::main]
async fn main() -> Result<(), kube::Error> {
    let env = TestEnv::start().await;
    println!("kubeconfig: {}", env.kubeconfig().display());
    let namespaces: Api<Namespace> = Api::all(env.client());
    for namespace in namespaces.list(&ListParams::default()).await? {
        println!("{}", namespace.name_any());
    }
    // Dropping `env` stops etcd and kube-apiserver and removes their files.
    Ok(())
}
