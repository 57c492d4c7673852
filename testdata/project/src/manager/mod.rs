// Copyright The project Authors
// SPDX-License-Identifier: Apache-2.0

//! What the controllers share, and what runs them.
//!
//! [`Manager`] is the handle every controller's `run` takes: the API client, the metrics, the shutdown
//! signal and readiness reporting. [`Controllers`] runs the controllers and tells when they are done.
//! The submodules hold the rest of the manager process: the HTTP endpoints ([`http`]), their TLS
//! ([`tls`]) and leader election ([`leader`]).

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kube::Client;
use kube::runtime::reflector::Store;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{error, info};

use crate::metrics::Metrics;

pub mod http;
pub mod leader;
pub mod tls;

/// How often readiness looks whether a controller's cache has synced.
const SYNC_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// Why the manager stopped early.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: String,
        source: std::io::Error,
    },

    #[error("metrics TLS: {0}")]
    Tls(String),

    #[error("a controller stopped before shutdown was requested")]
    ControllerStopped,

    #[error("leader election lost")]
    LeadershipLost,
}

/// The handle each controller gets: clone it freely, clones share everything.
#[derive(Clone)]
pub struct Manager {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    metrics: Metrics,
    stop: watch::Sender<bool>,
    stopped: Shared<BoxFuture<'static, ()>>,
    readiness: Mutex<Readiness>,
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Manager").finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager around `client` with fresh metrics. Tests build one per controller under test and call
    /// [`Manager::shutdown`] to stop it.
    pub fn new(client: Client) -> Self {
        let (stop, mut stop_requested) = watch::channel(false);
        let stopped = async move {
            // An error means the sender is gone, i.e. the manager was dropped: stop as well.
            let _ = stop_requested.wait_for(|stop| *stop).await;
        };
        Manager {
            inner: Arc::new(Inner {
                client,
                metrics: Metrics::new(),
                stop,
                stopped: stopped.boxed().shared(),
                readiness: Mutex::new(Readiness::default()),
            }),
        }
    }

    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Resolves once shutdown is requested. Give it to `Controller::graceful_shutdown_on`: the controller
    /// then stops taking new work and finishes the reconciles in flight.
    pub fn shutdown_signal(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        self.inner.stopped.clone()
    }

    /// Requests shutdown (e.g. on SIGTERM). Idempotent.
    pub fn shutdown(&self) {
        self.inner.stop.send_replace(true);
    }

    pub fn is_shutting_down(&self) -> bool {
        *self.inner.stop.borrow()
    }

    /// Reports the manager ready (`/readyz`) only once `store` (a controller's cache, from
    /// `Controller::store()`) holds the first full list of its objects. Call it once per controller.
    pub fn ready_when_synced<K>(&self, store: Store<K>)
    where
        K: kube::Resource + Clone + Send + Sync + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let manager = self.clone();
        tokio::spawn(async move {
            // The controller waits on the same store, and kube-runtime (5.0) wakes only the last of
            // several concurrent waiters: wait in short rounds, so this task looks again regardless.
            loop {
                let round = tokio::time::timeout(SYNC_POLL, store.wait_until_ready()).await;
                match round {
                    Ok(Ok(())) => break manager.readiness().synced += 1,
                    // The controller stopped before its cache filled: it never counts as synced.
                    Ok(Err(_)) => break,
                    Err(_) => {}
                }
            }
        });
    }

    /// Whether `/readyz` should succeed, and if not, why.
    pub fn ready(&self) -> Result<(), String> {
        self.readiness().check()
    }

    /// Marks whether this process is waiting to become leader: a follower is ready as soon as it serves.
    pub(crate) fn set_waiting_for_leadership(&self, waiting: bool) {
        self.readiness().waiting_for_leadership = waiting;
    }

    /// Runs controllers: `controllers.spawn(controller::<kind>::run(manager.clone()))` for each.
    pub fn controllers(&self) -> Controllers {
        Controllers {
            manager: self.clone(),
            tasks: JoinSet::new(),
        }
    }

    fn readiness(&self) -> std::sync::MutexGuard<'_, Readiness> {
        // A panic while holding this lock cannot leave it inconsistent (plain counters).
        self.inner
            .readiness
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Readiness bookkeeping. Not ready at first; a follower is ready while it waits; once controllers run,
/// ready when each has reported its cache synced.
#[derive(Debug, Default)]
struct Readiness {
    waiting_for_leadership: bool,
    /// Every controller has been spawned.
    started: bool,
    spawned: usize,
    synced: usize,
}

impl Readiness {
    fn check(&self) -> Result<(), String> {
        if self.waiting_for_leadership {
            return Ok(());
        }
        if !self.started {
            return Err("starting".into());
        }
        if self.synced < self.spawned {
            let (synced, spawned) = (self.synced, self.spawned);
            return Err(format!("{synced} of {spawned} controller caches synced"));
        }
        Ok(())
    }
}

/// The running controllers of a [`Manager`].
pub struct Controllers {
    manager: Manager,
    tasks: JoinSet<()>,
}

impl Controllers {
    /// Starts one controller. It is expected to call [`Manager::ready_when_synced`] once.
    pub fn spawn(&mut self, controller: impl Future<Output = ()> + Send + 'static) {
        self.manager.readiness().spawned += 1;
        self.tasks.spawn(controller);
    }

    /// Waits until every controller has stopped, which they do after [`Manager::shutdown`] once their
    /// reconciles in flight are done. A controller that stops on its own (or panics) is an error: the
    /// others are then shut down too.
    pub async fn wait(mut self) -> Result<(), Error> {
        self.manager.readiness().started = true;
        info!(controllers = self.tasks.len(), "controllers started");
        if self.tasks.is_empty() {
            // A project without controllers yet still runs until it is told to stop.
            self.manager.shutdown_signal().await;
            return Ok(());
        }
        let mut result = Ok(());
        while let Some(ended) = self.tasks.join_next().await {
            if let Err(panic) = ended {
                error!(%panic, "a controller panicked");
            } else if self.manager.is_shutting_down() {
                continue;
            } else {
                error!("a controller stopped on its own");
            }
            result = Err(Error::ControllerStopped);
            self.manager.shutdown();
        }
        result
    }
}

/// The namespace of the pod this process runs in: the service-account mount's, else `$POD_NAMESPACE`,
/// else `default` (e.g. when run on a workstation).
pub fn pod_namespace() -> String {
    const MOUNTED: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
    let mounted = std::fs::read_to_string(MOUNTED).ok();
    let from_env = || std::env::var("POD_NAMESPACE").ok();
    mounted
        .map(|ns| ns.trim().to_string())
        .filter(|ns| !ns.is_empty())
        .or_else(from_env)
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness() {
        let mut r = Readiness::default();
        assert!(r.check().is_err(), "not ready before anything started");
        r.waiting_for_leadership = true;
        assert!(r.check().is_ok(), "a follower is ready");
        r.waiting_for_leadership = false;
        r.spawned = 2;
        r.started = true;
        assert_eq!(r.check(), Err("0 of 2 controller caches synced".into()));
        r.synced = 2;
        assert!(r.check().is_ok());
    }
}
