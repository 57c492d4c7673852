//! [`Cluster`]: one engaged cluster, as the controllers running in it see it.

use std::fmt;
use std::sync::Arc;

use kube::Client;

use crate::manager::Manager;

/// One cluster of a [`Fleet`](super::Fleet), handed to the engage function: its name and the bare
/// [`Manager`] the fleet made around its client. Controllers built with `cluster.manager()` watch
/// and write that cluster; keep the handle (or its name) in their context to tell which cluster a
/// reconcile is in. Their logs carry the cluster's name (the span `fleet{cluster=<name>}`).
///
/// The manager lives while the cluster is engaged: when the cluster goes, or is engaged again with
/// another kubeconfig, it shuts down (its controllers finish their reconciles in flight, its
/// caches close their watches) and a new engagement gets a new manager.
#[derive(Clone)]
pub struct Cluster {
    name: Arc<str>,
    manager: Manager,
}

impl Cluster {
    pub(crate) fn new(name: &str, manager: Manager) -> Self {
        Cluster {
            name: name.into(),
            manager,
        }
    }

    /// The cluster's name, as its provider announced it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cluster's manager: `cluster.manager().controllers().add(…)` adds a controller to it.
    pub fn manager(&self) -> &Manager {
        &self.manager
    }

    /// The cluster's API client.
    pub fn client(&self) -> Client {
        self.manager.client()
    }
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// How one engaged cluster is doing, from [`Fleet::clusters`](super::Fleet::clusters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterStatus {
    /// The cluster's name.
    pub name: String,
    /// `Ok` once the caches of its controllers hold their first full lists (and stays so while
    /// its API server is away: the caches keep what they had and catch up when it is back); else
    /// why not, e.g. `0 of 1 controller caches synced`, or that its controllers have stopped.
    pub ready: Result<(), String>,
}

impl ClusterStatus {
    /// Whether the cluster's caches have synced and its controllers run.
    pub fn is_ready(&self) -> bool {
        self.ready.is_ok()
    }
}
