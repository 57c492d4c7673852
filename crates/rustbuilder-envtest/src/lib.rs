//! A real, throw-away Kubernetes control plane for tests: etcd and kube-apiserver, optionally with
//! kube-controller-manager, kube-scheduler and kwok fake nodes, each test on its own ports.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::Namespace;
//! use kube::api::{Api, ListParams};
//! use rustbuilder_envtest::TestEnv;
//!
//! # async fn demo() {
//! let env = TestEnv::start().await;
//! let namespaces: Api<Namespace> = Api::all(env.client());
//! let list = namespaces.list(&ListParams::default()).await.unwrap();
//! assert!(list.items.iter().any(|ns| ns.metadata.name.as_deref() == Some("default")));
//! # }
//! ```
//!
//! The binaries come from `KUBEBUILDER_ASSETS` when it is set (the `setup-envtest` layout); else from
//! the cache for `ENVTEST_K8S_VERSION` (default [`assets::DEFAULT_KUBERNETES_VERSION`]) under
//! `$XDG_DATA_HOME/kubebuilder-envtest` or `~/.local/share/kubebuilder-envtest`; else they are downloaded
//! there on first use (checked against published checksums), or built there with Go (1.26 or newer) when
//! that is impossible, once for all test binaries running at the same time (see [`assets`]).
//! `ENVTEST_<NAME>_FLAGS` adds flags to one component, e.g. `ENVTEST_KUBE_APISERVER_FLAGS`.
//!
//! Features: `harness` (default) brings `TestEnv`, `local_cluster` and `main`; without it only
//! [`assets`] remains, which depends on neither kube nor tokio. `download` (default) fetches the
//! binaries from their release pages; without it they are always built with Go.

#![warn(missing_docs)]

pub mod assets;

#[cfg(feature = "harness")]
mod cli;
#[cfg(feature = "harness")]
pub mod e2e;
#[cfg(feature = "harness")]
mod harness;
#[cfg(feature = "harness")]
mod shared;

#[cfg(feature = "harness")]
pub use cli::{local_cluster, main, run};
#[cfg(feature = "harness")]
pub use harness::{Component, STOP_GRACE, TestEnv, TestEnvBuilder};
#[cfg(feature = "harness")]
pub use shared::{Turn, take_turn};
