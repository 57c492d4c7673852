//! Membership of a shard group on Leases, the handover protocol, and the gate reconciles pass.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn};

use super::fence::Fence;
use super::range::{Range, Ranges, hash};
use crate::lease::{InvalidTiming, Timing, hostname};
use crate::metrics::Metrics;

/// The label that puts a Lease in a shard group; its value is the group's name.
pub const GROUP_LABEL: &str = "rustbuilder.io/shard-group";

/// The annotation in which a member publishes the ranges it works on (see [`Ranges`]'s `Display`).
pub const RANGES_ANNOTATION: &str = "rustbuilder.io/shard-ranges";

/// How to join a shard group; [`Membership::start`] joins it.
///
/// A group is the set of replicas that share one operator's work: the Leases labelled
/// [`GROUP_LABEL`]`=<group>` in one namespace, one per replica, named `<group>-shard-<identity>`.
#[must_use = "a membership does nothing until `start`"]
pub struct Membership {
    client: Client,
    namespace: String,
    group: String,
    identity: String,
    timing: Timing,
    metrics: Option<Metrics>,
    on_transition: Option<TransitionHook>,
    fence: Fence,
}

type TransitionHook = Arc<dyn Fn(&Transition) + Send + Sync>;

impl fmt::Debug for Membership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Membership")
            .field("namespace", &self.namespace)
            .field("group", &self.group)
            .field("identity", &self.identity)
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

/// A change of the hashes one member holds: the moment it may start work on more of them, or the
/// moment the last work on the ones it gave up has finished.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Transition {
    /// The member.
    pub identity: String,
    /// What it holds from now on (see [`ShardState::held`]).
    pub held: Ranges,
    /// When, on this process's monotonic clock.
    pub at: Instant,
}

/// What a member works on now, as [`Shard::state`] tells it.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ShardState {
    /// The hashes [`Shard::enter`] admits: new work may start on them.
    pub active: Ranges,
    /// The hashes this member may have work on: [`active`](Self::active), and those it is giving
    /// up while the work already admitted on them finishes. A cache of the shard holds these.
    pub held: Ranges,
    /// The live members of the group, this one included, as last read.
    pub members: usize,
    /// This member's place among them (sorted by identity), which names its part of the hash space.
    pub index: Option<usize>,
    /// Set when the member could not renew its Lease within the renew deadline (the API server
    /// out of reach, the process paused): it holds nothing until a renewal gets through again,
    /// then claims its part anew and this is unset.
    pub lost: bool,
}

impl Membership {
    /// Joins `group` (e.g. the operator's name) with a Lease in `namespace` (the manager's, like the
    /// leader-election Lease), as a unique identity (`<hostname>-<random>`), with the default
    /// [`Timing`].
    pub fn new(client: Client, namespace: &str, group: &str) -> Self {
        let host = hostname().unwrap_or_else(|| "unknown".into());
        let random = RandomState::new().hash_one(std::process::id()) as u32;
        Membership {
            client,
            namespace: namespace.to_string(),
            group: group.to_string(),
            identity: format!("{host}-{random:08x}"),
            timing: Timing::default(),
            metrics: None,
            on_transition: None,
            fence: Fence::new(),
        }
    }

    /// Another identity. It must be unique in the group (two processes with one identity would
    /// share one Lease): the pod's name is, if the pod never runs two processes of the operator.
    pub fn identity(mut self, identity: &str) -> Self {
        self.identity = identity.to_string();
        self
    }

    /// Other timing, unless it is invalid (see [`Timing::check`]): a member must give its ranges
    /// up before the others may take them. The lease duration is written in whole seconds, so keep
    /// it a whole number.
    pub fn timing(mut self, timing: Timing) -> Result<Self, InvalidTiming> {
        timing.check()?;
        self.timing = timing;
        Ok(self)
    }

    /// Records `shard_*` metrics (see [`crate::metrics`]) into `metrics`.
    pub fn metrics(mut self, metrics: &Metrics) -> Self {
        self.metrics = Some(metrics.clone());
        self
    }

    /// Keeps `fence` (e.g. the one of the manager's client layer, [`Fence::layer`]) open while the
    /// member's renewals are in time, and closes it once they are not. Without it, the member has a
    /// fence of its own ([`Shard::fence`]).
    pub fn fence(mut self, fence: &Fence) -> Self {
        self.fence = fence.clone();
        self
    }

    /// Calls `hook` at each [`Transition`] of this member, at the moment it happens (before the
    /// member takes new work on ranges it gained, after the last work on ranges it gave up): for
    /// audit logs, and for tests that prove no two members ever hold one hash at once.
    pub fn on_transition(mut self, hook: impl Fn(&Transition) + Send + Sync + 'static) -> Self {
        self.on_transition = Some(Arc::new(hook));
        self
    }

    /// Creates this member's Lease and keeps it in the group in the background until
    /// [`Shard::stop`]. From then on, the objects this process applies with a controller owner carry
    /// the owner's bucket ([`BUCKET_LABEL`](super::BUCKET_LABEL)). Must be called within a Tokio
    /// runtime.
    pub fn start(self) -> Shard {
        // What this process applies from now on carries its owner's bucket (see `BUCKET_LABEL`).
        super::bucket::label_children();
        let lease_name = lease_name(&self.group, &self.identity);
        let (state, _) = watch::channel(ShardState::default());
        let (stop, stop_requested) = watch::channel(false);
        let (revoked, _) = watch::channel(Ranges::none());
        let inner = Arc::new(Inner {
            identity: self.identity.clone(),
            group: self.group.clone(),
            namespace: self.namespace.clone(),
            gate: Mutex::new(Gate::default()),
            fence: self.fence,
            drained: Notify::new(),
            revoked,
            state,
            stop,
            task: Mutex::new(None),
        });
        info!(
            group = self.group,
            identity = self.identity,
            lease = lease_name,
            "joining the shard group"
        );
        let worker = Worker {
            shard: inner.clone(),
            leases: Api::namespaced(self.client, &self.namespace),
            lease_name,
            timing: self.timing,
            metrics: self.metrics,
            on_transition: self.on_transition,
            own: None,
            renewed: None,
            observed: HashMap::new(),
            active: Ranges::none(),
            draining: Ranges::none(),
            given_up: Vec::new(),
            claiming: Ranges::none(),
            quiet_until: None,
            members: 0,
            index: None,
            stopping: false,
            lost: false,
        };
        let task = tokio::spawn(worker.run(stop_requested));
        *inner.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        Shard { inner }
    }
}

/// A valid Lease name for the member `identity` of `group`: lower case, other characters than
/// letters, digits, `-` and `.` replaced by `-`.
fn lease_name(group: &str, identity: &str) -> String {
    let name = format!("{group}-shard-{identity}").to_lowercase();
    let name: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            _ => '-',
        })
        .collect();
    let name = name.trim_matches(|c| c == '-' || c == '.');
    name.chars().take(253).collect()
}

/// One member of a shard group: what it works on ([`Shard::state`]) and the gate each reconcile
/// passes ([`Shard::enter`]). Cheap to clone; clones are the same member.
#[derive(Clone)]
pub struct Shard {
    inner: Arc<Inner>,
}

struct Inner {
    identity: String,
    group: String,
    namespace: String,
    gate: Mutex<Gate>,
    /// Open while the last renewal is recent enough for work to be safe.
    fence: Fence,
    /// Woken when the last permit in flight on a hash is dropped.
    drained: Notify,
    /// The hashes whose permits must end now ([`Permit::revoked`]).
    revoked: watch::Sender<Ranges>,
    state: watch::Sender<ShardState>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

/// What [`Shard::enter`] admits, and the hashes of the permits in flight.
#[derive(Default)]
struct Gate {
    active: Ranges,
    in_flight: BTreeMap<u64, usize>,
}

impl Gate {
    fn in_flight_within(&self, ranges: &Ranges) -> usize {
        let within = |(hash, _): &(&u64, &usize)| ranges.contains(**hash);
        self.in_flight.iter().filter(within).map(|(_, n)| n).sum()
    }

    /// The part of `ranges` no permit is in flight on, by whole [`Range`]s.
    fn idle_within(&self, ranges: &Ranges) -> Ranges {
        let busy = |range: &Range| self.in_flight.keys().any(|hash| range.contains(*hash));
        Ranges::new(ranges.ranges().iter().filter(|r| !busy(r)).copied())
    }
}

impl Inner {
    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        // Every update leaves the gate whole: a panic elsewhere cannot leave it half-written.
        self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard")
            .field("group", &self.inner.group)
            .field("identity", &self.inner.identity)
            .field("state", &*self.inner.state.borrow())
            .finish()
    }
}

impl Shard {
    /// This member's identity.
    pub fn identity(&self) -> &str {
        &self.inner.identity
    }

    /// The group's name.
    pub fn group(&self) -> &str {
        &self.inner.group
    }

    /// The namespace of the group's Leases.
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// What this member works on now, and each change from now on: a cache of the shard restarts
    /// its watch when [`ShardState::held`] changes.
    pub fn state(&self) -> watch::Receiver<ShardState> {
        self.inner.state.subscribe()
    }

    /// The hashes new work may start on now.
    pub fn active(&self) -> Ranges {
        self.inner.gate().active.clone()
    }

    /// Until when this member's work is safe: cancel work in flight once it has passed
    /// ([`Fence::passed`]).
    pub fn fence(&self) -> &Fence {
        &self.inner.fence
    }

    /// Admits work on the object with this uid if its hash is in the active ranges and the
    /// member's [`fence`](Self::fence) is open: hold the [`Permit`] for the whole reconcile. `None`
    /// if another member is responsible for it (or none is yet, or this member's last renewal is
    /// too old): skip the object, its owner reconciles it.
    pub fn enter(&self, uid: &str) -> Option<Permit> {
        self.enter_hash(hash(uid))
    }

    /// [`enter`](Self::enter) with the hash already computed.
    pub fn enter_hash(&self, hash: u64) -> Option<Permit> {
        let mut gate = self.inner.gate();
        if !gate.active.contains(hash) || !self.inner.fence.is_open() {
            return None;
        }
        *gate.in_flight.entry(hash).or_default() += 1;
        Some(Permit {
            shard: self.inner.clone(),
            hash,
        })
    }

    /// Resolves once the member has lost its place (at once if it has not rejoined since): it
    /// could not renew its Lease within the renew deadline, so the others may take its ranges once
    /// the Lease expires. It holds nothing then, and its fence has passed (the work admitted ends
    /// there); it rejoins by itself once a renewal gets through again ([`ShardState::lost`]).
    pub async fn lost(&self) {
        let mut state = self.state();
        let _ = state.wait_for(|state| state.lost).await;
    }

    /// Leaves the group cleanly: admits no new work, waits for the permits in flight, then deletes
    /// the Lease so that the others take over at once instead of waiting for it to expire. Call it
    /// once the controllers have stopped.
    pub async fn stop(&self) {
        self.inner.stop.send_replace(true);
        let task = self
            .inner
            .task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// Stops the member at once, without giving anything up: its Lease stays until it expires, as
    /// when the process is killed. For fault drills and tests.
    pub fn abort(&self) {
        let task = self
            .inner
            .task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(task) = task {
            task.abort();
        }
        self.inner.fence.close();
        let mut gate = self.inner.gate();
        gate.active = Ranges::none();
    }
}

/// Work admitted on one object by [`Shard::enter`]; the member does not give the object's range
/// up while the permit lives. Drop it when the reconcile ends, or once it is
/// [revoked](Permit::revoked).
pub struct Permit {
    shard: Arc<Inner>,
    hash: u64,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Permit({:#018x})", self.hash)
    }
}

impl Permit {
    /// The hash the permit admits work on.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// Resolves once the member revokes the permit: its range is being given up and the work on
    /// it has run for longer than the lease duration (a request never answered, a deadlock), which
    /// would otherwise keep the range from its next holder forever. Stop the work then and drop
    /// the permit, as at the [fence](Shard::fence) (a controller drops the reconcile); the next
    /// holder of the range works on the object.
    pub async fn revoked(&self) {
        let mut revoked = self.shard.revoked.subscribe();
        // The sender lives in the member, which the permit keeps alive: no error.
        let _ = revoked
            .wait_for(|revoked| revoked.contains(self.hash))
            .await;
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut gate = self.shard.gate();
        if let Some(count) = gate.in_flight.get_mut(&self.hash) {
            *count -= 1;
            if *count == 0 {
                gate.in_flight.remove(&self.hash);
            }
        }
        drop(gate);
        self.shard.drained.notify_one();
    }
}

/// When this process last saw a Lease change (its `resourceVersion`).
struct Observed {
    version: Option<String>,
    at: Instant,
}

/// What one read of the group found.
struct View {
    /// Identities of the live members, this one included, sorted.
    members: Vec<String>,
    /// What the other members whose Lease has not expired publish.
    others: Ranges,
    /// Expired Leases of others: (name, resourceVersion), to delete.
    expired: Vec<(String, Option<String>)>,
}

/// The background task of one member.
struct Worker {
    shard: Arc<Inner>,
    leases: Api<Lease>,
    lease_name: String,
    timing: Timing,
    metrics: Option<Metrics>,
    on_transition: Option<TransitionHook>,
    /// This member's Lease as last written.
    own: Option<Lease>,
    /// When the last successful write of the Lease was sent.
    renewed: Option<Instant>,
    observed: HashMap<String, Observed>,
    /// Admitted by the gate (and published).
    active: Ranges,
    /// No longer admitted, published until the permits on them are gone.
    draining: Ranges,
    /// When each part of `draining` was given up, for the drain deadline.
    given_up: Vec<(Instant, Ranges)>,
    /// Published, to start once a read of the group shows no other member publishes them.
    claiming: Ranges,
    /// No claim before this (after a claim collided with another member's).
    quiet_until: Option<Instant>,
    members: usize,
    index: Option<usize>,
    stopping: bool,
    /// Lost its place and not renewed since ([`ShardState::lost`]).
    lost: bool,
}

/// What a write of the own Lease found.
enum Written {
    Ok,
    /// The Lease changed or vanished under us: someone judged it expired.
    Gone,
    /// The Lease changed since our last write, still ours: read back, to write again.
    ReadBack,
    Failed(kube::Error),
}

impl Worker {
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        loop {
            if *stop.borrow_and_update() && !self.stopping {
                info!(group = self.shard.group, "leaving the shard group");
                self.stopping = true;
            }
            let published = self.active.union(&self.draining).union(&self.claiming);
            // Woken past the renew deadline (the process was paused, say): the others may be
            // working on our ranges already, so renewing now would claim them twice.
            if self.is_late() && !published.is_empty() {
                error!(
                    lease = self.lease_name,
                    "the last shard lease renewal is older than {:?}", self.timing.renew_deadline
                );
                self.lose().await;
                continue;
            }
            // Renewing, and reading the group, must end before the renew deadline.
            let deadline = self.deadline(&published);
            let sent = Instant::now();
            let wrote = match tokio::time::timeout_at(deadline, self.write(&published)).await {
                Ok(Written::Ok) => {
                    // The others count the lease from when they saw this write, after it was sent.
                    self.renewed = Some(sent);
                    self.shard
                        .fence
                        .open_until(sent + self.timing.renew_deadline);
                    if self.lost {
                        info!(
                            lease = self.lease_name,
                            "renewed the shard lease: rejoining"
                        );
                        self.lost = false;
                        self.publish_state();
                    }
                    true
                }
                Ok(Written::Gone) if !published.is_empty() => {
                    error!(lease = self.lease_name, "the shard lease was taken away");
                    self.lose().await;
                    continue;
                }
                Ok(Written::Gone | Written::ReadBack) => false,
                Ok(Written::Failed(error)) => {
                    warn!(lease = self.lease_name, %error, "cannot renew the shard lease");
                    false
                }
                Err(_) => false,
            };
            if self.is_late() && !published.is_empty() {
                error!(
                    lease = self.lease_name,
                    "could not renew the shard lease within {:?}", self.timing.renew_deadline
                );
                self.lose().await;
                continue;
            }
            if self.stopping && published.is_empty() {
                return self.leave().await;
            }

            let deadline = self.deadline(&published);
            let view = match tokio::time::timeout_at(deadline, self.read()).await {
                Ok(Ok(view)) => view,
                Ok(Err(error)) => {
                    warn!(group = self.shard.group, %error, "cannot read the shard group");
                    self.pause(&mut stop).await;
                    continue;
                }
                Err(_) => {
                    warn!(
                        group = self.shard.group,
                        "timed out reading the shard group"
                    );
                    continue;
                }
            };
            if wrote && !self.claiming.is_empty() {
                self.settle_claim(&view);
            }
            let target = self.target(&view);
            self.rebalance(&target);
            if self.claim(&target, &view.others) && wrote {
                // Publish the claim at once.
                continue;
            }
            if !view.expired.is_empty() {
                let deleting = self.delete_expired(&view.expired);
                let _ = tokio::time::timeout(self.timing.retry_period, deleting).await;
            }
            self.pause(&mut stop).await;
        }
    }

    /// When a request must have ended: the renew deadline while this member publishes ranges,
    /// else a renew deadline from now.
    fn deadline(&self, published: &Ranges) -> tokio::time::Instant {
        let from = match self.renewed {
            Some(renewed) if !published.is_empty() => renewed,
            _ => Instant::now(),
        };
        (from + self.timing.renew_deadline).into()
    }

    /// Whether the renew deadline has passed since the last renewal.
    fn is_late(&self) -> bool {
        let deadline = self.timing.renew_deadline;
        self.renewed.is_some_and(|at| at.elapsed() >= deadline)
    }

    /// Waits a retry period, or less if the work on a range given up drains or a stop is asked.
    async fn pause(&self, stop: &mut watch::Receiver<bool>) {
        let draining = !self.draining.is_empty();
        tokio::select! {
            () = tokio::time::sleep(self.timing.retry_period) => {}
            () = self.shard.drained.notified(), if draining => {}
            _ = stop.changed(), if !self.stopping => {}
        }
    }

    /// Creates or renews the own Lease, publishing `published`; once more after reading it back
    /// when a write answered with a conflict.
    async fn write(&mut self, published: &Ranges) -> Written {
        match self.write_once(published).await {
            Written::ReadBack => match self.write_once(published).await {
                Written::ReadBack => Written::Failed(kube::Error::Service(
                    "the shard lease keeps changing under its own writes".into(),
                )),
                written => written,
            },
            written => written,
        }
    }

    async fn write_once(&mut self, published: &Ranges) -> Written {
        let now = MicroTime(Timestamp::now());
        let seconds = self.timing.lease_duration.as_secs_f64().ceil() as i32;
        let pp = PostParams::default();
        let result = match self.own.clone() {
            Some(mut lease) => {
                lease
                    .annotations_mut()
                    .insert(RANGES_ANNOTATION.into(), published.to_string());
                let spec = lease.spec.get_or_insert_default();
                spec.renew_time = Some(now);
                spec.lease_duration_seconds = Some(seconds);
                self.leases.replace(&self.lease_name, &pp, &lease).await
            }
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.lease_name.clone()),
                        labels: Some([(GROUP_LABEL.into(), self.shard.group.clone())].into()),
                        annotations: Some(
                            [(RANGES_ANNOTATION.into(), published.to_string())].into(),
                        ),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.shard.identity.clone()),
                        lease_duration_seconds: Some(seconds),
                        acquire_time: Some(now.clone()),
                        renew_time: Some(now),
                        ..Default::default()
                    }),
                };
                self.leases.create(&pp, &lease).await
            }
        };
        match result {
            Ok(lease) => {
                self.own = Some(lease);
                Written::Ok
            }
            // 409 on create: a Lease of this name lies there (a previous process of this identity):
            // it counts as another member's until it expires and is deleted.
            Err(kube::Error::Api(status)) if status.code == 409 && self.own.is_none() => {
                Written::Failed(kube::Error::Api(status))
            }
            // 409 on replace: our last write may have gone through unanswered; read the Lease
            // back. Gone, or someone else's: someone judged it expired and deleted it.
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
                let uid = self.own.as_ref().and_then(|own| own.metadata.uid.clone());
                match self.leases.get_opt(&self.lease_name).await {
                    Ok(Some(lease)) if status.code == 409 && lease.metadata.uid == uid => {
                        self.own = Some(lease);
                        Written::ReadBack
                    }
                    Ok(_) => {
                        self.own = None;
                        Written::Gone
                    }
                    Err(error) => Written::Failed(error),
                }
            }
            Err(error) => Written::Failed(error),
        }
    }

    /// Reads every Lease of the group (a consistent read) and judges which are live.
    async fn read(&mut self) -> kube::Result<View> {
        let selector = format!("{GROUP_LABEL}={}", self.shard.group);
        let leases = self
            .leases
            .list(&ListParams::default().labels(&selector))
            .await?;
        let own_uid = self.own.as_ref().and_then(|own| own.metadata.uid.clone());
        let mut members = vec![self.shard.identity.clone()];
        let mut others = Ranges::none();
        let mut expired = Vec::new();
        let mut seen = HashMap::new();
        for lease in leases {
            let name = lease.name_any();
            let version = lease.metadata.resource_version.clone();
            if own_uid.is_some() && lease.metadata.uid == own_uid {
                continue;
            }
            let observed = match self.observed.remove(&name) {
                Some(observed) if observed.version == version => observed,
                _ => Observed {
                    version: version.clone(),
                    at: Instant::now(),
                },
            };
            let spec = lease.spec.clone().unwrap_or_default();
            let seconds = spec.lease_duration_seconds.unwrap_or_default().max(0);
            let valid_for = Duration::from_secs(seconds.unsigned_abs().into());
            if observed.at.elapsed() >= valid_for {
                expired.push((name.clone(), version));
            } else {
                // A Lease whose ranges cannot be read may hold anything.
                let published = lease.annotations().get(RANGES_ANNOTATION);
                let published = published.map_or(Ok(Ranges::none()), |text| text.parse());
                others = others.union(&published.unwrap_or_else(|_| Ranges::full()));
                if let Some(holder) = spec.holder_identity.filter(|h| !h.is_empty()) {
                    members.push(holder);
                }
            }
            seen.insert(name, observed);
        }
        self.observed = seen;
        members.sort();
        members.dedup();
        Ok(View {
            members,
            others,
            expired,
        })
    }

    /// Deletes the Leases of members that stopped renewing, unless they changed since.
    async fn delete_expired(&self, expired: &[(String, Option<String>)]) {
        for (name, version) in expired {
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: version.clone(),
                    uid: None,
                }),
                ..Default::default()
            };
            match self.leases.delete(name, &dp).await {
                Ok(_) => info!(lease = name, "deleted the expired lease of a shard member"),
                Err(error) => debug!(lease = name, %error, "cannot delete an expired lease"),
            }
        }
    }

    /// The part of the hash space this member should work on among the live members
    /// ([`Ranges::assigned`]).
    fn target(&mut self, view: &View) -> Ranges {
        let index = view.members.iter().position(|m| *m == self.shard.identity);
        let count = view.members.len();
        if (count, index) != (self.members, self.index) {
            info!(
                group = self.shard.group,
                members = count,
                index,
                "shard group changed"
            );
            self.members = count;
            self.index = index;
            if let Some(metrics) = &self.metrics {
                metrics.shard().set_members(&self.shard.group, count);
            }
            self.publish_state();
        }
        match index {
            Some(_) if !self.stopping => Ranges::assigned(&view.members, &self.shard.identity),
            _ => Ranges::none(),
        }
    }

    /// Starts the ranges claimed unless another member publishes some of them; then retracts the
    /// claim (the next write) and keeps quiet for a random while, so that of two members claiming
    /// at once, neither keeps insisting in step with the other.
    fn settle_claim(&mut self, view: &View) {
        let claimed = std::mem::take(&mut self.claiming);
        if view.others.overlaps(&claimed) {
            let jitter = RandomState::new().hash_one(Instant::now()) % 1000;
            let quiet = self
                .timing
                .retry_period
                .mul_f64(1.0 + jitter as f64 / 1000.0);
            debug!(
                group = self.shard.group,
                %claimed,
                "another member works on part of the claimed ranges; retracting"
            );
            self.quiet_until = Some(Instant::now() + quiet);
            return;
        }
        // The moment of the transition comes before the first work it admits.
        let at = Instant::now();
        self.active = self.active.union(&claimed);
        self.shard.gate().active = self.active.clone();
        info!(group = self.shard.group, ranges = %claimed, "started ranges");
        self.count_handover("acquired");
        self.transition(at);
    }

    /// Gives up what is no longer this member's: no new work on it, and once the work admitted
    /// has finished, no longer published, range by range (work still running on one range does
    /// not hold the others back). Takes back at once what it is still giving up and is its own
    /// again.
    fn rebalance(&mut self, target: &Ranges) {
        let back = self.draining.intersection(target);
        let give_up = self.active.difference(target);
        if !back.is_empty() || !give_up.is_empty() {
            self.draining = self.draining.difference(&back).union(&give_up);
            self.active = self.active.union(&back).intersection(target);
            self.shard.gate().active = self.active.clone();
            if !give_up.is_empty() {
                info!(group = self.shard.group, ranges = %give_up, "giving up ranges");
                self.given_up.push((Instant::now(), give_up));
            }
            self.publish_state();
        }
        let drained = self.shard.gate().idle_within(&self.draining);
        if !drained.is_empty() {
            self.draining = self.draining.difference(&drained);
            info!(group = self.shard.group, ranges = %drained, "gave up ranges");
            self.count_handover("released");
            self.transition(Instant::now());
        }
        let draining = &self.draining;
        self.given_up
            .iter_mut()
            .for_each(|(_, ranges)| *ranges = ranges.intersection(draining));
        self.given_up.retain(|(_, ranges)| !ranges.is_empty());
        self.revoke_overdue();
    }

    /// Revokes the permits still in flight on ranges given up longer than the lease duration ago
    /// (checked once a retry period): had this member vanished, the others would have taken the
    /// ranges after that long, and work that never ends (a request never answered, a deadlock)
    /// must not keep them longer. The ranges go once the revoked permits are dropped.
    fn revoke_overdue(&self) {
        let deadline = self.timing.lease_duration;
        let overdue = self
            .given_up
            .iter()
            .filter(|(at, _)| at.elapsed() >= deadline);
        let overdue = overdue.fold(Ranges::none(), |all, (_, ranges)| all.union(ranges));
        let newly = overdue.difference(&self.shard.revoked.borrow());
        if !newly.is_empty() {
            let reconciles = self.shard.gate().in_flight_within(&newly);
            warn!(
                group = self.shard.group,
                ranges = %newly,
                reconciles,
                "work on ranges given up still runs after {deadline:?}: cancelling it"
            );
        }
        self.shard.revoked.send_if_modified(|revoked| {
            let changed = *revoked != overdue;
            *revoked = overdue;
            changed
        });
    }

    /// Claims the part of `target` no other member publishes (unless keeping quiet). True if
    /// there is a claim to publish.
    fn claim(&mut self, target: &Ranges, others: &Ranges) -> bool {
        if self.quiet_until.is_some_and(|until| Instant::now() < until) {
            return false;
        }
        self.quiet_until = None;
        let wanted = target.difference(&self.active).difference(&self.draining);
        self.claiming = wanted.difference(others);
        !self.claiming.is_empty()
    }

    fn count_handover(&self, direction: &'static str) {
        if let Some(metrics) = &self.metrics {
            metrics.shard().handover(&self.shard.group, direction);
        }
    }

    /// Tells [`Shard::state`] readers and the transition hook what this member holds now.
    fn transition(&self, at: Instant) {
        let held = self.active.union(&self.draining);
        if let Some(hook) = &self.on_transition {
            hook(&Transition {
                identity: self.shard.identity.clone(),
                held,
                at,
            });
        }
        self.publish_state();
    }

    fn publish_state(&self) {
        let state = ShardState {
            active: self.active.clone(),
            held: self.active.union(&self.draining),
            members: self.members,
            index: self.index,
            lost: self.lost,
        };
        if let Some(metrics) = &self.metrics {
            metrics
                .shard()
                .set_share(&self.shard.group, state.active.share());
        }
        self.shard.state.send_if_modified(|current| {
            let changed = *current != state;
            *current = state;
            changed
        });
    }

    /// Could not renew in time: holds nothing from now on, until a renewal gets through again (the
    /// member then claims its part anew, as one that just joined). The work admitted ends at the
    /// fence (a controller cancels its reconciles there); the transition comes once it has ended,
    /// or after the margin the others leave (lease duration − renew deadline).
    async fn lose(&mut self) {
        self.shard.fence.close();
        self.shard.gate().active = Ranges::none();
        let margin = self
            .timing
            .lease_duration
            .saturating_sub(self.timing.renew_deadline);
        let drained = async {
            while !self.shard.gate().in_flight.is_empty() {
                self.shard.drained.notified().await;
            }
        };
        let _ = tokio::time::timeout(margin, drained).await;
        self.active = Ranges::none();
        self.draining = Ranges::none();
        self.claiming = Ranges::none();
        self.given_up.clear();
        // Publishing nothing, the member has no deadline to keep until its next renewal.
        self.renewed = None;
        self.lost = true;
        self.count_handover("lost");
        self.transition(Instant::now());
    }

    /// Holds nothing any more: deletes the Lease so that the others take over at once.
    async fn leave(self) {
        let Some(own) = &self.own else {
            return;
        };
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: own.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        let deleting = self.leases.delete(&self.lease_name, &dp);
        match tokio::time::timeout(self.timing.retry_period, deleting).await {
            Ok(Ok(_)) => info!(lease = self.lease_name, "left the shard group"),
            Ok(Err(error)) => {
                warn!(lease = self.lease_name, %error, "cannot delete the shard lease")
            }
            Err(_) => warn!(
                lease = self.lease_name,
                "timed out deleting the shard lease"
            ),
        }
        if let Some(metrics) = &self.metrics {
            metrics.shard().set_share(&self.shard.group, 0.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_are_valid() {
        assert_eq!(
            lease_name("memcached-operator", "pod-1"),
            "memcached-operator-shard-pod-1"
        );
        assert_eq!(lease_name("Op", "host_00ab"), "op-shard-host-00ab");
        assert_eq!(lease_name("op", &"x".repeat(300)).len(), 253);
    }
}
