//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several replicas only one runs the
//! controllers. It follows client-go's protocol, so its Leases read the same in `kubectl`:
//!
//! - A candidate takes the Lease when it does not exist, has no holder, or its holder has not renewed
//!   it for `leaseDurationSeconds`. "Not renewed" is judged on this process's clock, from when it last
//!   saw the Lease change, so clock skew between nodes does not matter. A candidate watches the Lease
//!   besides reading it every retry period, so it sees each renewal as it happens and takes over
//!   `leaseDurationSeconds` after the last one, not up to a retry period later. Writes carry the
//!   `resourceVersion` that was read, so of two candidates only one can win.
//! - The leader renews every [`Timing::retry_period`]. If it cannot for [`Timing::renew_deadline`], or
//!   sees another holder, it has lost: the manager must stop at once (it exits non-zero), before a
//!   follower can take over. The renew deadline counts from when the last successful renewal was
//!   *sent*: the followers saw it then at the earliest, and its answer may come late (a slow
//!   network, a paused process). Until then the manager's client lets its writes through (its
//!   fence); after, it refuses them, even if the leader has not noticed its loss yet.
//! - On a clean shutdown the leader clears the holder, and a follower, which sees it by its watch,
//!   takes over at once instead of waiting for the Lease to expire.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn};

use super::Manager;
pub use crate::lease::{InvalidTiming, Timing};

/// A candidate for the Lease `namespace/name`.
pub struct LeaderElection {
    leases: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    manager: Manager,
}

/// What one look at the Lease found.
enum Attempt {
    /// We hold it (we took it or renewed it), by a write sent at this instant.
    Leading(Instant),
    /// Another process holds the Lease, valid for this long from now (as far as we can tell).
    HeldBy(String, Duration),
    /// Someone wrote the Lease between our read and our write: try again later.
    Conflict,
}

/// When this process last saw the Lease change (its `resourceVersion`).
struct Observed {
    version: Option<String>,
    at: Instant,
}

impl LeaderElection {
    /// The manager as a candidate (as [`Manager::identity`]), with the default [`Timing`].
    pub fn new(manager: &Manager, namespace: &str, name: &str) -> Self {
        LeaderElection {
            leases: Api::namespaced(manager.client(), namespace),
            name: name.to_string(),
            identity: manager.identity().to_string(),
            timing: Timing::default(),
            manager: manager.clone(),
        }
    }

    /// This candidate with other timing, unless it is invalid (see [`Timing::check`]).
    pub fn with_timing(mut self, timing: Timing) -> Result<Self, InvalidTiming> {
        timing.check()?;
        self.timing = timing;
        Ok(self)
    }

    /// The holder identity this process writes into the Lease.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Tries every retry period until this process holds the Lease, then keeps renewing it in the
    /// background. `None` if shutdown was requested first. While it waits, the manager reports ready.
    pub async fn acquire(self) -> Option<Leadership> {
        let (lease, identity) = (self.name.as_str(), self.identity.as_str());
        info!(lease, identity, "waiting for leadership");
        self.manager.metrics().set_leader(lease, false);
        self.manager.set_waiting_for_leadership(true);
        let won = tokio::select! {
            won = self.campaign() => Some(won),
            () = self.manager.shutdown_signal() => None,
        };
        self.manager.set_waiting_for_leadership(false);
        let (observed, sent) = won?;
        self.manager
            .fence()
            .open_until(sent + self.timing.renew_deadline);
        self.manager.metrics().set_leader(lease, true);
        info!(lease, identity, "became leader");

        let (lost, lost_signal) = watch::channel(false);
        let election = Arc::new(self);
        let renewer = tokio::spawn(election.clone().keep_renewing(observed, sent, lost));
        Some(Leadership {
            election,
            renewer,
            lost: lost_signal,
        })
    }

    /// Loops until this process holds the Lease; returns what it last saw of it, and when it sent
    /// the write that took it.
    async fn campaign(&self) -> (Option<Observed>, Instant) {
        let lease = self.name.as_str();
        let mut observed = None;
        let mut last_holder = String::new();
        // Each change of the Lease wakes the candidate, which reads it at once: the holder's last
        // renewal is then seen when it happens. (A watch that fails only leaves the retry period.)
        let only_ours = watcher::Config::default().fields(&format!("metadata.name={lease}"));
        let changes = watcher(self.leases.clone(), only_ours).default_backoff();
        let mut changes = std::pin::pin!(changes);
        loop {
            let mut next_try = self.timing.retry_period;
            match self.try_acquire_or_renew(&mut observed).await {
                Ok(Attempt::Leading(sent)) => return (observed, sent),
                Ok(Attempt::HeldBy(holder, valid_for)) => {
                    if holder != last_holder {
                        info!(lease, holder, "the lease is held by another process");
                        last_holder = holder;
                    }
                    // Try again as soon as it expires, if that is before the next retry.
                    next_try = next_try.min(valid_for + Duration::from_millis(10));
                }
                Ok(Attempt::Conflict) => {}
                Err(error) => warn!(lease, %error, "cannot read or write the lease"),
            }
            tokio::select! {
                () = tokio::time::sleep(next_try) => {}
                Some(_) = changes.next() => {}
            }
        }
    }

    /// Renews every retry period until the renew deadline, counted from when the last successful
    /// renewal was sent (`renewed`), passes without another; keeps the fence open until then.
    async fn keep_renewing(
        self: Arc<Self>,
        mut observed: Option<Observed>,
        mut renewed: Instant,
        lost: watch::Sender<bool>,
    ) {
        let Timing {
            renew_deadline,
            retry_period,
            ..
        } = self.timing;
        let fence = self.manager.fence().clone();
        loop {
            tokio::time::sleep(retry_period).await;
            let deadline = (renewed + renew_deadline).into();
            let renewing = self.try_acquire_or_renew(&mut observed);
            match tokio::time::timeout_at(deadline, renewing).await {
                Ok(Ok(Attempt::Leading(sent))) => {
                    renewed = sent;
                    fence.open_until(sent + renew_deadline);
                }
                Ok(Ok(Attempt::HeldBy(holder, _))) => {
                    error!(lease = self.name, holder, "another process took the lease");
                    break;
                }
                Ok(Ok(Attempt::Conflict)) => {
                    debug!(lease = self.name, "conflict renewing the lease")
                }
                Ok(Err(error)) => warn!(lease = self.name, %error, "cannot renew the lease"),
                Err(_) => {}
            }
            if renewed.elapsed() >= renew_deadline {
                error!(
                    lease = self.name,
                    "could not renew the lease within {renew_deadline:?}"
                );
                break;
            }
        }
        fence.close();
        self.manager.metrics().set_leader(&self.name, false);
        lost.send_replace(true);
    }

    /// One round of the protocol: read the Lease, and take or renew it if we may.
    async fn try_acquire_or_renew(&self, observed: &mut Option<Observed>) -> kube::Result<Attempt> {
        let now = MicroTime(Timestamp::now());
        let duration_seconds =
            i32::try_from(self.timing.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.leases.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration_seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            let sent = Instant::now();
            let created = self.leases.create(&PostParams::default(), &lease).await;
            return written(created, observed, sent);
        };

        let version = lease.metadata.resource_version.clone();
        let seen = match observed.take() {
            Some(seen) if seen.version == version => seen,
            _ => Observed {
                version,
                at: Instant::now(),
            },
        };
        let seen_at = seen.at;
        *observed = Some(seen);

        let spec = lease.spec.get_or_insert_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(self.identity.as_str());
        if let Some(holder) = holder.filter(|_| !ours) {
            let seconds = spec.lease_duration_seconds.unwrap_or_default().max(0);
            let valid_for = Duration::from_secs(seconds.unsigned_abs().into());
            if let Some(left) = valid_for.checked_sub(seen_at.elapsed()) {
                return Ok(Attempt::HeldBy(holder, left));
            }
        }
        if !ours {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or_default() + 1);
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(duration_seconds);
        spec.renew_time = Some(now);
        let sent = Instant::now();
        let replaced = self
            .leases
            .replace(&self.name, &PostParams::default(), &lease)
            .await;
        written(replaced, observed, sent)
    }

    /// Clears the holder if it is still us. The short duration tells client-go candidates too that
    /// the Lease is free.
    async fn release(&self) -> kube::Result<()> {
        let Some(mut lease) = self.leases.get_opt(&self.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        let now = MicroTime(Timestamp::now());
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        let pp = PostParams::default();
        self.leases.replace(&self.name, &pp, &lease).await?;
        Ok(())
    }
}

/// The outcome of a create or replace of the Lease sent at `sent`.
fn written(
    result: kube::Result<Lease>,
    observed: &mut Option<Observed>,
    sent: Instant,
) -> kube::Result<Attempt> {
    match result {
        Ok(lease) => {
            *observed = Some(Observed {
                version: lease.metadata.resource_version,
                at: Instant::now(),
            });
            Ok(Attempt::Leading(sent))
        }
        // 409: it was created or changed since we read it.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Conflict),
        Err(error) => Err(error),
    }
}

/// Holding the Lease; renewed in the background until [`Leadership::release`] or loss.
pub struct Leadership {
    election: Arc<LeaderElection>,
    renewer: JoinHandle<()>,
    lost: watch::Receiver<bool>,
}

impl Leadership {
    /// Resolves if the Lease is lost: not renewed within the renew deadline, or taken by another
    /// process. The caller must then stop acting as leader at once.
    pub async fn lost(&mut self) {
        // The sender only goes away with the renewing task: when the Lease is lost or released.
        let _ = self.lost.wait_for(|lost| *lost).await;
    }

    /// Stops renewing and gives the Lease up, so that a follower need not wait for it to expire. Call
    /// it once the controllers have stopped. Gives up after one retry period if the API server does
    /// not answer (the Lease then simply expires).
    pub async fn release(self) {
        self.renewer.abort();
        let _ = self.renewer.await;
        let election = &self.election;
        // Nothing more is written as leader: the Lease is given up next.
        election.manager.fence().close();
        let lease = election.name.as_str();
        election.manager.metrics().set_leader(lease, false);
        let released = tokio::time::timeout(election.timing.retry_period, election.release()).await;
        match released {
            Ok(Ok(())) => info!(lease, "released the lease"),
            Ok(Err(error)) => warn!(lease, %error, "cannot release the lease; it will expire"),
            Err(_) => warn!(lease, "timed out releasing the lease; it will expire"),
        }
    }
}
