//! Fleets: the same controllers run in every cluster of a set that changes while the operator runs.
//!
//! A [`Provider`] announces clusters as they appear, change and go ([`Announcement`]): a fixed
//! list ([`StaticClusters`]), the kubeconfig files of a directory ([`KubeconfigDir`]), or the
//! kubeconfig Secrets of a namespace ([`KubeconfigSecrets`], e.g. Cluster API's), or Cluster API's
//! `Cluster` objects once their control plane is up ([`ClusterApiClusters`]). A [`Fleet`]
//! engages each cluster announced: it makes a bare [`Manager`] around the cluster's client and calls
//! the operator's engage function with a [`Cluster`] handle, which adds the cluster's controllers.
//! When the cluster goes, its manager shuts down: its controllers finish their reconciles in flight
//! and its caches close their watches. A cluster whose API server is away stays engaged: its
//! watches retry on their own, and the other clusters do not wait for it.
//!
//! The fleet runs as one of the process manager's controllers, so it engages clusters only while
//! the process may reconcile (once it leads, with `--leader-elect`). The process's `/readyz` is its
//! own cluster's: a member that does not answer takes neither the pod's webhooks out of their
//! Service nor its rollout down with it. Each member's health is `fleet_cluster_ready{cluster}`
//! and [`Fleet::ready`]. A member whose API server accepts connections and stops replying is
//! disengaged once it has left the fleet's probes unanswered for [`SILENCE_BOUND`], and engaged
//! again on fresh connections as soon as it answers (see [`Fleet::disengage_silent_after`]):
//!
//! ```no_run
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::runtime::controller::Action;
//! use rustbuilder_runtime::Manager;
//! use rustbuilder_runtime::fleet::{Cluster, Fleet, KubeconfigSecrets};
//!
//! async fn reconcile(object: Arc<ConfigMap>, cluster: Arc<Cluster>) -> Result<Action, kube::Error> {
//!     tracing::info!(cluster = cluster.name(), "reconciling");
//!     Ok(Action::await_change())
//! }
//!
//! # async fn run(manager: Manager) -> Result<(), rustbuilder_runtime::manager::Error> {
//! let clusters = KubeconfigSecrets::new(&manager, "fleet-system", "cluster.x-k8s.io/cluster-name");
//! let fleet = Fleet::new(&manager, clusters, |cluster: &Cluster| {
//!     let controller = cluster
//!         .manager()
//!         .controller(cluster.manager().api::<ConfigMap>(), "configmap")
//!         .run(reconcile, Arc::new(cluster.clone()));
//!     cluster.manager().controllers().add(controller);
//! });
//! manager.controllers().add(fleet.clone().run());
//! manager.controllers().run().await
//! # }
//! ```
//!
//! With `--sharding`, the replicas share the clusters: each engages only those whose name's
//! [`hash`] lies in the ranges its [`Shard`] admits, holding a [`Permit`](crate::shard::Permit)
//! per engaged cluster until the cluster's controllers have stopped. A replica gives a range up
//! only once its permits have dropped, and another starts a range only once no live member
//! publishes it: so the replica giving a cluster up has stopped it before the one taking it engages
//! it. Past the replica's [`Fence`], its clusters are cancelled at once and
//! their clients refuse writes, as its own does.
//!
//! A controller of the operator's own cluster can also write into the members: [`Spread`] keeps the
//! children of objects at home in the members their spec selects, naming their owner by labels
//! (owner references cannot cross clusters) and deleting them before their owner goes.
//!
//! Each cluster's manager has the process manager's name (its field manager and event reporter),
//! identity and `--watch-namespace`, and metrics of its own, which the process's `/metrics` serves
//! while the cluster is engaged: the same families, each series labelled `cluster="<name>"`
//! (`controller_runtime_reconcile_total{cluster="east",controller="configmap",…}`), beside the
//! process's own series, whose labels do not change; and `fleet_cluster_ready{cluster}`, 1 once the
//! cluster's caches have synced.

mod args;
mod cluster;
mod cluster_api;
mod health;
mod kubeconfig_dir;
mod kubeconfig_secrets;
mod metrics;
mod provider;
mod spread;
mod static_list;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{Instrument, error, info, info_span, warn};

pub use args::{ClusterProvider, FleetArgs};
pub use cluster::{Cluster, ClusterStatus};
pub use cluster_api::{CLUSTER_API_GROUP, ClusterApiClusters, DISCOVERY_RETRY};
pub use health::SILENCE_BOUND;
pub use kubeconfig_dir::{DEFAULT_SCAN_INTERVAL, KubeconfigDir};
pub use kubeconfig_secrets::{CLUSTER_NAME_LABEL, KUBECONFIG_KEYS, KubeconfigSecrets};
pub use provider::{Announcement, Provider};
pub use spread::{
    MemberError, OWNER_ANNOTATION, OWNER_CLUSTER_LABEL, OWNER_KIND_LABEL, OWNER_UID_LABEL,
    SPREAD_PREFIX, Spread, SpreadError,
};
pub use static_list::StaticClusters;

use crate::bearer::Bearer;
use crate::manager::Manager;
use crate::shard::{Fence, Shard, ShardState, hash};

/// Where a cluster falls in the hash space, for sharding by cluster: the FNV-1a hash of its name,
/// mixed over all 64 bits (MurmurHash3's finaliser). Replicas hold ranges cut by the top byte,
/// and FNV-1a's last bytes move the top bits little: unmixed, `cluster-000` to `cluster-099` all
/// fell to one replica.
pub fn placement(name: &str) -> u64 {
    let mut x = hash(name);
    x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x = (x ^ (x >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// How long a disengaged cluster's controllers may take to finish their reconciles in flight
/// before they are cancelled.
pub const DISENGAGE_GRACE: Duration = Duration::from_secs(30);

/// How many clusters of a fleet make their first lists at once, by default (see
/// [`Fleet::engage_at_once`]).
pub const ENGAGE_AT_ONCE: usize = 32;

/// How long a cluster engaged may take for its caches' first lists before the next one starts
/// its own anyway: one that never lists (its API server away) does not hold a turn for good.
const FIRST_LISTS_TIMEOUT: Duration = Duration::from_secs(60);

type Engage = Arc<dyn Fn(&Cluster) + Send + Sync>;
type Announcements = Box<dyn FnOnce() -> BoxStream<'static, Announcement> + Send>;

/// The clusters one [`Provider`] announces, each engaged with the same engage function: see the
/// [module](self). Cheap to clone; clones share the clusters. Made by [`Fleet::new`], run by
/// [`Fleet::run`].
#[derive(Clone)]
pub struct Fleet {
    shared: Arc<Shared>,
}

struct Shared {
    /// The process's manager: when the fleet may engage, and when it stops.
    process: Manager,
    engage: Engage,
    /// The provider's announcements, taken by the one [`Fleet::run`].
    announcements: Mutex<Option<Announcements>>,
    /// The clusters engaged now, by name.
    members: Mutex<BTreeMap<String, Member>>,
    /// Counts the changes of `members`, for whoever follows them (a [`Spread`]).
    membership: watch::Sender<u64>,
    /// How long a member may leave every probe unanswered before it is disengaged.
    silence_bound: Mutex<Duration>,
    /// The clusters disengaged because their API server went silent, until it answers.
    silent: Mutex<BTreeSet<String>>,
    /// The turns to make a cluster's first lists: one per cluster listing now.
    turns: Mutex<Arc<tokio::sync::Semaphore>>,
}

struct Member {
    cluster: Cluster,
    /// Tells this engagement of the cluster from the ones before and after it.
    engagement: u64,
    /// The token its client sends, if its kubeconfig has one: replaced in place when rotated.
    bearer: Option<Bearer>,
    /// Set once the cluster's controllers have stopped (on their own, or at disengagement).
    stopped: Arc<AtomicBool>,
    /// The cluster's series on the process's `/metrics`, removed with the member.
    _series: crate::metrics::ServedCluster,
}

impl fmt::Debug for Fleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.shared.members().keys().cloned().collect();
        f.debug_struct("Fleet").field("clusters", &names).finish()
    }
}

impl Fleet {
    /// A fleet of the clusters `provider` announces, run under `process` (the operator's own
    /// manager). `engage` is called once per engagement, in the cluster's logging span, and adds the
    /// cluster's controllers to `cluster.manager().controllers()`; they start when it returns. It
    /// should not wait on the cluster (it may be unreachable): its controllers do that.
    ///
    /// The members' readiness is not part of `process`'s `/readyz`: see [`Fleet::ready`].
    pub fn new(
        process: &Manager,
        provider: impl Provider,
        engage: impl Fn(&Cluster) + Send + Sync + 'static,
    ) -> Self {
        let shared = Arc::new(Shared {
            process: process.clone(),
            engage: Arc::new(engage),
            announcements: Mutex::new(Some(Box::new(move || provider.clusters()))),
            members: Mutex::default(),
            membership: watch::Sender::new(0),
            silence_bound: Mutex::new(SILENCE_BOUND),
            silent: Mutex::default(),
            turns: Mutex::new(Arc::new(tokio::sync::Semaphore::new(ENGAGE_AT_ONCE))),
        });
        Fleet { shared }
    }

    /// Disengages a member whose API server has left every probe (`GET /version`, three per
    /// `bound`) unanswered for `bound`, and engages it again as soon as it answers; default
    /// [`SILENCE_BOUND`]. Without it, a member that accepts connections and never replies holds each
    /// request, each list and each watch that stopped receiving until kube's read timeout, almost
    /// five minutes. A member that refuses connections is away, not silent: it stays engaged, and
    /// its watches retry on their own.
    pub fn disengage_silent_after(self, bound: Duration) -> Self {
        *lock(&self.shared.silence_bound) = bound;
        self
    }

    /// How many clusters make their first lists at once (default [`ENGAGE_AT_ONCE`]): the others
    /// wait for their turn, engaged once a cluster before them has listed (or a minute has passed).
    /// A fleet of thousands that starts, or a replica that takes over their ranges, then does
    /// not send thousands of LISTs at once, nor hold every first list in memory together. Set
    /// before [`Fleet::run`].
    pub fn engage_at_once(self, clusters: usize) -> Self {
        *lock(&self.shared.turns) = Arc::new(tokio::sync::Semaphore::new(clusters.max(1)));
        self
    }

    /// The clusters engaged now, by name, each with its readiness, and those disengaged until
    /// their API server answers again (never ready).
    pub fn clusters(&self) -> Vec<ClusterStatus> {
        let members = self.shared.members();
        let status = |(name, member): (&String, &Member)| ClusterStatus {
            name: name.clone(),
            ready: match member.stopped.load(Ordering::SeqCst) {
                true => Err("its controllers have stopped".into()),
                false => member.cluster.manager().ready(),
            },
        };
        let mut clusters: Vec<ClusterStatus> = members.iter().map(status).collect();
        let bound = *lock(&self.shared.silence_bound);
        for name in lock(&self.shared.silent).iter() {
            clusters.push(ClusterStatus {
                name: name.clone(),
                ready: Err(format!(
                    "its API server left every probe unanswered for {bound:?}: disengaged until it answers"
                )),
            });
        }
        clusters.sort_by(|a, b| a.name.cmp(&b.name));
        clusters
    }

    /// The engaged cluster `name`, if it is.
    pub fn cluster(&self, name: &str) -> Option<Cluster> {
        let members = self.shared.members();
        members.get(name).map(|member| member.cluster.clone())
    }

    /// The engaged clusters' handles, by name.
    pub(crate) fn engaged(&self) -> Vec<Cluster> {
        let members = self.shared.members();
        members
            .values()
            .map(|member| member.cluster.clone())
            .collect()
    }

    /// Changes whenever a cluster is engaged or disengaged.
    pub(crate) fn membership(&self) -> watch::Receiver<u64> {
        self.shared.membership.subscribe()
    }

    /// The process manager the fleet runs under.
    pub(crate) fn process(&self) -> &Manager {
        &self.shared.process
    }

    /// `Ok` when every engaged cluster is ready (see [`ClusterStatus::ready`]), else which are not
    /// and why. Not part of the process's `/readyz`, on purpose: one member down would make the pod
    /// NotReady, drop its webhooks from their Service and stall its own rollout, for all the
    /// clusters that answer.
    pub fn ready(&self) -> Result<(), String> {
        let unready: Vec<String> = self
            .clusters()
            .into_iter()
            .filter_map(|status| Some(format!("{} ({})", status.name, status.ready.err()?)))
            .collect();
        match unready.is_empty() {
            true => Ok(()),
            false => Err(format!("clusters not ready: {}", unready.join(", "))),
        }
    }

    /// Engages and disengages the clusters the provider announces until the process manager shuts
    /// down, then disengages them all and returns once their controllers have stopped. Waits first
    /// until the process may reconcile ([`Manager::until_leading`]). Add it to the process
    /// manager's controllers: `manager.controllers().add(fleet.clone().run())`.
    ///
    /// If the process stops reconciling without shutting down (its controllers are cancelled when
    /// it loses the Lease), every cluster is shut down as this future is dropped. A fleet runs
    /// once: a second `run` logs an error and returns.
    pub async fn run(self) {
        let taken = self.shared.lock_announcements().take();
        let Some(announcements) = taken else {
            error!("this fleet already runs: a fleet runs once");
            return;
        };
        let process = self.shared.process.clone();
        // Among the process's controllers, the fleet counts as synced at once: its clusters count
        // through its readiness check.
        process.report_controller_synced();
        if !process.until_leading().await {
            return;
        }
        let mut announcements = announcements();
        let shard = process.shard().cloned();
        let (health, mut reports) = mpsc::unbounded_channel();
        let mut running = Running {
            shared: self.shared.clone(),
            shard: shard.clone(),
            announced: BTreeMap::new(),
            tasks: HashMap::new(),
            stopping: JoinSet::new(),
            engagements: 0,
            silent: HashMap::new(),
            health,
            census: Census::new(&process),
        };
        let shutdown = process.shutdown_signal();
        let mut shutdown = std::pin::pin!(shutdown);
        let mut provider_done = false;
        // With --sharding: what this replica holds, and until when its writes are safe.
        let mut held = shard.as_ref().map(Shard::state);
        let fence = shard.as_ref().map(|shard| shard.fence().clone());
        info!(sharded = shard.is_some(), "fleet started");
        loop {
            let fence_open = fence.as_ref().is_some_and(Fence::is_open);
            tokio::select! {
                () = &mut shutdown => break,
                announced = announcements.next(), if !provider_done => match announced {
                    Some(Announcement::Engage { name, config }) => running.engage(&name, config),
                    Some(Announcement::Disengage { name }) => running.disengage(&name),
                    None => {
                        info!("the provider announces no more clusters; those engaged stay");
                        provider_done = true;
                    }
                },
                changed = changed(&mut held) => match changed {
                    Ok(()) => running.follow_shard(),
                    // The member is gone with its manager: nothing is this replica's any more.
                    Err(_) => {
                        held = None;
                        running.cancel_all();
                    }
                },
                // Past the fence, the others may take this replica's clusters at any moment:
                // their reconciles are cancelled at once, as a sharded controller's are. Open
                // again (a renewal in time after all), its clusters are engaged again.
                () = fence_turns(fence.as_ref(), fence_open) => match fence_open {
                    true => running.cancel_all(),
                    false => running.follow_shard(),
                },
                Some(report) = reports.recv() => match report {
                    Health::Silent { name, engagement } => running.went_silent(&name, engagement),
                    Health::Answers { name } => running.answers_again(&name),
                },
                // Reaped as they finish, so that they do not pile up.
                Some(_) = running.stopping.join_next(), if !running.stopping.is_empty() => {}
            }
            running.count();
        }
        running.stop_all().await;
        info!("fleet stopped");
    }
}

impl Shared {
    fn members(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Member>> {
        // Inserting into or removing from a map cannot leave it half-done.
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn membership_changed(&self) {
        self.membership.send_modify(|changes| *changes += 1);
    }

    fn lock_announcements(&self) -> std::sync::MutexGuard<'_, Option<Announcements>> {
        self.announcements.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each value is set whole under the lock, never left half-done.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a cluster's probe tells the fleet.
enum Health {
    /// The engagement `engagement` of `name` has left every probe unanswered for the bound.
    Silent { name: String, engagement: u64 },
    /// `name`, disengaged as silent, answers again.
    Answers { name: String },
}

/// Resolves when the fence passes if it is `open`, else when it opens; never without a fence.
async fn fence_turns(fence: Option<&Fence>, open: bool) {
    match (fence, open) {
        (Some(fence), true) => fence.passed().await,
        (Some(fence), false) => fence.opened().await,
        (None, _) => std::future::pending().await,
    }
}

/// The next change of the shard's state, if sharded; else never.
async fn changed(
    held: &mut Option<watch::Receiver<ShardState>>,
) -> Result<(), watch::error::RecvError> {
    match held {
        Some(held) => held.changed().await,
        None => std::future::pending().await,
    }
}

/// The clusters' tasks while the fleet runs. Dropped (the fleet's future cancelled, say), it shuts
/// every cluster down.
struct Running {
    shared: Arc<Shared>,
    /// With --sharding, this replica's part: it engages the clusters whose name hashes into it.
    shard: Option<Shard>,
    /// Every cluster announced and not withdrawn, engaged here or not (sharded, another replica's).
    announced: BTreeMap<String, kube::Config>,
    /// Each engaged cluster's task: its engagement, then its controllers until they stop.
    tasks: HashMap<String, JoinHandle<()>>,
    /// The tasks of disengaged clusters, finishing their reconciles in flight.
    stopping: JoinSet<()>,
    /// The engagements made so far.
    engagements: u64,
    /// The clusters disengaged as silent, each with the probe that waits for its answer.
    silent: HashMap<String, JoinHandle<()>>,
    /// Where the clusters' probes report.
    health: mpsc::UnboundedSender<Health>,
    /// The fleet's clusters on `/metrics`, by state.
    census: Census,
}

impl Running {
    /// Engages `name` with `config`; if it is engaged already, its manager shuts down, and the new one
    /// starts once the old one's controllers have stopped (two reconciles of one object never
    /// overlap). Nothing here waits on the cluster.
    ///
    /// Sharded, it engages only a cluster whose name's [`hash`] this replica admits
    /// ([`Shard::enter_hash`]), and holds the [`Permit`](crate::shard::Permit) until the cluster's
    /// controllers have stopped: the replica does not give the cluster's range up, so no other
    /// takes the cluster, while they run.
    fn engage(&mut self, name: &str, config: kube::Config) {
        if self.rotate(name, &config) {
            info!(
                cluster = name,
                "new credentials for the cluster: rotated in place"
            );
            self.announced.insert(name.to_string(), config);
            return;
        }
        self.announced.insert(name.to_string(), config.clone());
        self.forget_silence(name);
        let permit = match &self.shard {
            Some(shard) => match shard.enter_hash(placement(name)) {
                Some(permit) => Some(permit),
                None => {
                    if self.tasks.contains_key(name) {
                        info!(
                            cluster = name,
                            "another replica's cluster now: disengaging it"
                        );
                    }
                    let stopped = self.stop(name, false);
                    self.stopping.spawn(stopped);
                    return;
                }
            },
            None => None,
        };
        let previous = self.stop(name, false);
        let mut config = config;
        let bearer = Bearer::take_from(&mut config);
        let manager = match self.shared.process.for_cluster(config, bearer.as_ref()) {
            Ok(manager) => manager,
            Err(error) => {
                error!(cluster = name, %error, "cannot make a client for the cluster: not engaged");
                self.stopping.spawn(previous);
                return;
            }
        };
        let cluster = Cluster::new(name, manager);
        let stopped = Arc::new(AtomicBool::new(false));
        self.engagements += 1;
        let engagement = self.engagements;
        let member = Member {
            _series: metrics::serve(&self.shared.process, &cluster, stopped.clone()),
            cluster: cluster.clone(),
            engagement,
            bearer,
            stopped: stopped.clone(),
        };
        self.shared.members().insert(name.to_string(), member);
        self.shared.membership_changed();
        let engage = self.shared.engage.clone();
        let span = info_span!("fleet", cluster = name);
        let silent = health::silent_for(cluster.client(), *lock(&self.shared.silence_bound));
        let health = self.health.clone();
        let reported = name.to_string();
        let turns = lock(&self.shared.turns).clone();
        let waiting = self.census.waiting.clone();
        let task = async move {
            // Dropped when the task ends, or is aborted: only then may the range go.
            let _permit = permit;
            previous.await;
            // Its turn to make its first lists, held until its caches hold them.
            let turn = {
                let _waiting = Counted::new(waiting);
                turns.acquire_owned().await
            };
            let manager = cluster.manager().clone();
            let engaged = async move {
                tokio::select! {
                    () = run_cluster(cluster, engage) => {}
                    () = silent => {
                        // The fleet disengages it, cancelling this task.
                        let _ = health.send(Health::Silent { name: reported, engagement });
                        std::future::pending::<()>().await;
                    }
                }
            };
            let first_lists = async move {
                first_lists(&manager).await;
                drop(turn);
            };
            tokio::join!(engaged, first_lists);
            stopped.store(true, Ordering::SeqCst);
        };
        self.tasks
            .insert(name.to_string(), tokio::spawn(task.instrument(span)));
    }

    /// Whether `config`, announced for the engaged cluster `name`, differs from the one it was
    /// engaged with by its bearer token only, now sent by the running client: a token refreshed
    /// every few minutes costs no new watches, no new lists and no change of readiness.
    fn rotate(&self, name: &str, config: &kube::Config) -> bool {
        let Some(announced) = self.announced.get(name) else {
            return false;
        };
        let members = self.shared.members();
        let bearer = members.get(name).and_then(|member| member.bearer.as_ref());
        bearer.is_some_and(|bearer| bearer.rotate(announced, config))
    }

    /// Updates `fleet_clusters{state}`.
    fn count(&mut self) {
        let engaged = self.shared.members().len();
        let counts = [self.announced.len(), engaged, self.silent.len()];
        self.census.count(counts);
    }

    /// Once the engagement `engagement` of `name` has gone silent: cancels its controllers (their
    /// requests would wait for minutes) and waits for the cluster to answer again.
    fn went_silent(&mut self, name: &str, engagement: u64) {
        let current = self.shared.members().get(name).map(|m| m.engagement);
        if current != Some(engagement) {
            return; // engaged again, or gone, meanwhile
        }
        let bound = *lock(&self.shared.silence_bound);
        warn!(
            cluster = name,
            ?bound,
            "its API server left every probe unanswered: disengaged until it answers"
        );
        let stopped = self.stop(name, true);
        self.stopping.spawn(stopped);
        let Some(config) = self.announced.get(name).cloned() else {
            return;
        };
        let client = match kube::Client::try_from(config) {
            Ok(client) => client,
            Err(error) => {
                error!(cluster = name, %error, "cannot make a client for the cluster: not probed");
                return;
            }
        };
        let health = self.health.clone();
        let answer = name.to_string();
        let probe = async move {
            health::until_it_answers(client, bound).await;
            let _ = health.send(Health::Answers { name: answer });
        };
        let span = info_span!("fleet", cluster = name);
        self.silent
            .insert(name.to_string(), tokio::spawn(probe.instrument(span)));
        lock(&self.shared.silent).insert(name.to_string());
    }

    /// Once `name`, disengaged as silent, answers: engages it again, on fresh connections.
    fn answers_again(&mut self, name: &str) {
        if !self.silent.contains_key(name) {
            return;
        }
        let Some(config) = self.announced.get(name).cloned() else {
            return;
        };
        info!(cluster = name, "its API server answers again: engaging it");
        self.engage(name, config);
    }

    /// Stops waiting for `name` to answer, if it was silent.
    fn forget_silence(&mut self, name: &str) {
        if let Some(probe) = self.silent.remove(name) {
            probe.abort();
            lock(&self.shared.silent).remove(name);
        }
    }

    /// Disengages `name`, if it is engaged, and forgets it.
    fn disengage(&mut self, name: &str) {
        self.announced.remove(name);
        self.forget_silence(name);
        if self.tasks.contains_key(name) {
            info!(cluster = name, "disengaging the cluster");
        }
        let stopped = self.stop(name, false);
        self.stopping.spawn(stopped);
    }

    /// Sharded, after the ranges this replica holds changed: first disengages the clusters it no
    /// longer admits (each keeps its range until its controllers have stopped), then engages
    /// those it now admits.
    fn follow_shard(&mut self) {
        let Some(shard) = &self.shard else { return };
        let fence_open = shard.fence().is_open();
        let active = shard.active();
        let admitted = |name: &str| fence_open && active.contains(placement(name));
        let given_up: Vec<String> = self
            .tasks
            .keys()
            .filter(|name| !admitted(name))
            .cloned()
            .collect();
        for name in given_up {
            info!(
                cluster = name,
                "another replica's cluster now: disengaging it"
            );
            // Past the fence, without waiting for its reconciles (see `cancel_all`).
            let stopped = self.stop(&name, !fence_open);
            self.stopping.spawn(stopped);
        }
        let silent_given_up: Vec<String> = self
            .silent
            .keys()
            .filter(|name| !admitted(name))
            .cloned()
            .collect();
        for name in silent_given_up {
            self.forget_silence(&name);
        }
        // A silent cluster is engaged again once it answers.
        let idle =
            |name: &String| !self.tasks.contains_key(name) && !self.silent.contains_key(name);
        let taken: Vec<(String, kube::Config)> = self
            .announced
            .iter()
            .filter(|(name, _)| idle(name) && admitted(name))
            .map(|(name, config)| (name.clone(), config.clone()))
            .collect();
        for (name, config) in taken {
            info!(cluster = name, "this replica's cluster now: engaging it");
            self.engage(&name, config);
        }
    }

    /// Sharded, once this replica's fence has passed (or its membership is gone): cancels every
    /// cluster's controllers at once, without waiting for their reconciles.
    fn cancel_all(&mut self) {
        let names: Vec<String> = self.tasks.keys().cloned().collect();
        if !names.is_empty() {
            warn!(clusters = ?names, "this replica's shard fence has passed: cancelling its clusters");
        }
        for name in names {
            let stopped = self.stop(&name, true);
            self.stopping.spawn(stopped);
        }
    }

    /// Shuts the cluster `name` down, if engaged; the future returned resolves once its task has
    /// ended (cancelled at once if `cancel`, else after [`DISENGAGE_GRACE`]).
    fn stop(&mut self, name: &str, cancel: bool) -> impl Future<Output = ()> + Send + 'static {
        let removed = self.shared.members().remove(name);
        if let Some(member) = removed {
            member.cluster.manager().shutdown();
            self.shared.membership_changed();
        }
        let task = self.tasks.remove(name);
        if cancel && let Some(task) = &task {
            task.abort();
        }
        let cluster = name.to_string();
        async move {
            let Some(mut task) = task else { return };
            if tokio::time::timeout(DISENGAGE_GRACE, &mut task)
                .await
                .is_err()
            {
                warn!(cluster, grace = ?DISENGAGE_GRACE, "reconciles still in flight: cancelled");
                task.abort();
                let _ = task.await;
            }
        }
    }

    /// Disengages every cluster and waits until they have stopped.
    async fn stop_all(&mut self) {
        let silent: Vec<String> = self.silent.keys().cloned().collect();
        for name in silent {
            self.forget_silence(&name);
        }
        let names: Vec<String> = self.tasks.keys().cloned().collect();
        for name in names {
            self.disengage(&name);
        }
        while self.stopping.join_next().await.is_some() {}
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Their tasks see the shutdown and end on their own.
        let members = std::mem::take(&mut *self.shared.members());
        for member in members.values() {
            member.cluster.manager().shutdown();
        }
        for probe in self.silent.values() {
            probe.abort();
        }
        lock(&self.shared.silent).clear();
        self.census.count([0, 0, 0]);
        self.shared.membership_changed();
    }
}

/// Resolves once `manager`'s caches hold their first lists, or it shuts down, or
/// [`FIRST_LISTS_TIMEOUT`] has passed.
async fn first_lists(manager: &Manager) {
    let deadline = tokio::time::Instant::now() + FIRST_LISTS_TIMEOUT;
    while manager.ready().is_err()
        && !manager.is_shutting_down()
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One more on a gauge while it lives.
struct Counted(prometheus_client::metrics::gauge::Gauge);

impl Counted {
    fn new(gauge: prometheus_client::metrics::gauge::Gauge) -> Self {
        gauge.inc();
        Counted(gauge)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The fleet's part of `fleet_clusters{state}`: what it last added to each state's gauge.
struct Census {
    /// announced, engaged and silent, with what this fleet counts in each.
    states: [(prometheus_client::metrics::gauge::Gauge, i64); 3],
    waiting: prometheus_client::metrics::gauge::Gauge,
}

impl Census {
    fn new(process: &Manager) -> Self {
        let gauge = |state| (process.metrics().fleet_clusters(state), 0);
        Census {
            states: [gauge("announced"), gauge("engaged"), gauge("silent")],
            waiting: process.metrics().fleet_clusters("waiting"),
        }
    }

    /// Moves the gauges to `counts` (announced, engaged, silent).
    fn count(&mut self, counts: [usize; 3]) {
        for ((gauge, counted), count) in self.states.iter_mut().zip(counts) {
            let count = i64::try_from(count).unwrap_or(i64::MAX);
            gauge.inc_by(count - *counted);
            *counted = count;
        }
    }
}

/// Engages one cluster and runs its controllers until its manager shuts down.
async fn run_cluster(cluster: Cluster, engage: Engage) {
    let manager = cluster.manager().clone();
    // Disengaged while the previous engagement was stopping.
    if manager.is_shutting_down() {
        return;
    }
    let engaged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engage(&cluster)));
    if let Err(panic) = engaged {
        let panic = crate::controller::Panicked::from_payload(&*panic);
        error!(panic = %panic.message, "the engage function panicked: the cluster runs no controllers");
        manager.shutdown();
        return;
    }
    info!("cluster engaged");
    match manager.controllers().run().await {
        Ok(()) => info!("cluster disengaged"),
        Err(error) => error!(%error, "the cluster's controllers stopped"),
    }
}

#[cfg(test)]
mod tests {
    use super::placement;
    use crate::shard::Ranges;

    /// Names that differ only at their end, as fleets name clusters, spread over three replicas
    /// like any others (an unmixed FNV-1a hash put all of them on one).
    #[test]
    fn suffix_numbered_clusters_spread_over_the_replicas() {
        let replicas = ["operator-0", "operator-1", "operator-2"];
        let names: Vec<String> = (0..100).map(|n| format!("cluster-{n:03}")).collect();
        for replica in replicas {
            let part = Ranges::assigned(&replicas, replica);
            let held = names.iter().filter(|n| part.contains(placement(n))).count();
            assert!(
                (20..=47).contains(&held),
                "{replica} holds {held} of 100 clusters"
            );
        }
    }
}
