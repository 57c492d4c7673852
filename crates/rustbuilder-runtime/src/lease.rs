//! The timing of a Lease held by renewing it (leader election, shard membership), and the name this
//! process goes by in one. A leaf: the manager's leader election and the shard members both use it.

use std::time::Duration;

/// How long a Lease is valid, how long a leader keeps trying to renew it, and how often candidates
/// and the leader try. Defaults are controller-runtime's: 15 s, 10 s and 2 s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long a Lease is valid after its last renewal: how long followers wait for a leader that
    /// vanished.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leading.
    pub renew_deadline: Duration,
    /// How often candidates try to take the Lease, and the leader renews it.
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timing {
    /// `Ok` when `lease_duration > renew_deadline > retry_period > 0`: a leader (or a shard member)
    /// must give up before another process may take over, and must try more than once before.
    pub fn check(&self) -> Result<(), InvalidTiming> {
        let ordered = self.lease_duration > self.renew_deadline
            && self.renew_deadline > self.retry_period
            && self.retry_period > Duration::ZERO;
        if ordered {
            Ok(())
        } else {
            Err(InvalidTiming(*self))
        }
    }
}

/// A [`Timing`] whose durations are not ordered `lease_duration > renew_deadline > retry_period > 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "lease duration {:?} > renew deadline {:?} > retry period {:?} > 0 does not hold",
    .0.lease_duration,
    .0.renew_deadline,
    .0.retry_period
)]
pub struct InvalidTiming(pub Timing);

/// This machine's (in Kubernetes: this pod's) name.
pub(crate) fn hostname() -> Option<String> {
    let from_file = |path| std::fs::read_to_string(path).ok();
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| from_file("/proc/sys/kernel/hostname"))
        .or_else(|| from_file("/etc/hostname"))
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
}
