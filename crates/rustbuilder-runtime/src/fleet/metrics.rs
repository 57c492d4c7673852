//! A cluster's series on the process's `/metrics`: served from engagement to disengagement.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::Cluster;
use crate::manager::Manager;
use crate::metrics::ServedCluster;

/// Serves `cluster`'s metrics on `process`'s `/metrics`, labelled with its name, and
/// `fleet_cluster_ready{cluster}`: 1 while its controllers run and its caches have synced. The
/// series go when the guard returned is dropped, i.e. when the cluster is disengaged; a cluster
/// engaged again starts from zero (a new manager, new counters), which `rate()` reads as a reset.
pub(super) fn serve(
    process: &Manager,
    cluster: &Cluster,
    stopped: Arc<AtomicBool>,
) -> ServedCluster {
    let manager = cluster.manager().clone();
    let ready = move || !stopped.load(Ordering::SeqCst) && manager.ready().is_ok();
    let metrics = cluster.manager().metrics().clone();
    process
        .metrics()
        .serve_cluster(cluster.name(), metrics, Arc::new(ready))
}
