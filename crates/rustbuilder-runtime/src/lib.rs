//! The controller runtime under rustbuilder operators, usable by any [kube](https://kube.rs) operator.
//!
//! An operator's `main` starts a [`Manager`] (logging, the API client, health probes, the metrics
//! endpoint, signal handling) from the flags in [`manager::ManagerArgs`], adds its controllers and runs
//! them, under leader election when asked:
//!
//! ```no_run
//! use clap::Parser;
//! use rustbuilder_runtime::manager::{Manager, ManagerArgs};
//!
//! #[derive(Parser)]
//! struct Args {
//!     #[command(flatten)]
//!     manager: ManagerArgs,
//! }
//!
//! # async fn my_controller(_manager: Manager) {}
//! #[tokio::main]
//! async fn main() -> Result<(), rustbuilder_runtime::manager::Error> {
//!     let args = Args::parse();
//!     let manager = Manager::start("my-operator", "my-operator.example.com", args.manager).await?;
//!     let controllers = manager.controllers();
//!     controllers.add(my_controller(manager.clone()));
//!     controllers.run().await
//! }
//! ```
//!
//! The generated `main` first calls [`allocator::one_arena`], before tokio starts its threads, so
//! that glibc's `malloc` keeps one heap for them all.
//!
//! [`Manager::builder`] changes what the defaults decide: the tracing subscriber, a Prometheus
//! registry with the operator's own metrics, the client configuration, the lease timing.
//!
//! A controller is built with [`Manager::controller`] ([`controller::Builder`]): it gets per-object
//! error backoff (or a policy of its own), reconcile and work-queue metrics, readiness and graceful
//! shutdown without code of its own. The reconcile function reads shared [`cache`]s (one watch per
//! kind and selector: get, list, by label, children of an owner; [`owned`] for the objects its
//! controllers own), writes with [`apply`] (server-side apply that skips no-op writes), reports
//! with [`conditions`] and [`events`], and uses the helpers of [`clock`] (requeue at a time, a clock
//! tests move), [`children`] (deleting what is no longer wanted) and [`finalizer`]. [`webhook`]
//! serves defaulting, validating and conversion webhooks. [`shard`] shares one kind's objects among
//! replicas: Lease membership, handover without overlap, and caches of a replica's own part.
//! [`fleet`] runs the same controllers in every cluster of a set that changes while the operator
//! runs (kubeconfig files, kubeconfig Secrets), each cluster engaged and disengaged on its own, and
//! controllers that keep the children of objects at home in member clusters. The
//! `manifests` feature adds `manifests`, which writes the CRDs, the RBAC role and the webhook
//! configurations that `make manifests` produces; the `testing` feature adds `testing`, helpers for a project's tests.
//!
//! ## Layers
//!
//! Each layer uses only the ones below it; none knows what is above:
//!
//! ```text
//! fleet        clusters that come and go: a bare manager per engaged cluster, under the process's
//! manager      wires it all: flags, client, endpoints, leader election, signals
//!   ├── controller   reconciles one kind from caches, gated by completeness and the shard
//!   ├── owned        the kinds the controllers own: every object, or only the labelled ones
//!   └── webhook      admission and conversion
//! cache        one watch per kind and selector, shared; told its host (field manager, stop, readiness)
//! shard        membership, handover, the fence, sharded watches
//! apply, events, metrics, conditions, … and the leaves: ownership, lease timing, watch scopes,
//!              HTTP(S) serving and certificates, the manager's error
//! ```

#![warn(missing_docs)]

pub mod allocator;
pub mod apply;
pub mod backoff;
mod bearer;
pub mod cache;
pub mod children;
pub mod clock;
pub mod conditions;
pub mod controller;
mod error;
pub mod events;
pub mod finalizer;
pub mod fleet;
mod lease;
pub mod manager;
#[cfg(feature = "manifests")]
pub mod manifests;
pub mod metrics;
pub mod owned;
mod ownership;
pub mod rollout;
pub mod schema;
mod scope;
mod serve;
pub mod shard;
#[cfg(feature = "testing")]
pub mod testing;
mod tls;
pub mod webhook;

pub use manager::Manager;
