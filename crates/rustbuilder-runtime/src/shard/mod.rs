//! Scale-out: the objects of one kind shared among the replicas of an operator, each replica
//! reconciling its own part of them.
//!
//! The API server places every object at a point of a 64-bit hash space: the FNV-1a [`hash`] of
//! its uid. The replicas of a *shard group* split that space into 256 buckets (by the top byte of
//! the hash) and each bucket goes to one of them by rendezvous hashing ([`Ranges::assigned`]): with
//! three replicas each works on about a third of the buckets, and a fourth takes about a quarter
//! of the space from the others without moving a bucket between two that stay. An object a
//! controller creates (a Deployment of a Memcached) follows its controller owner
//! ([`ShardKey::ControllerOwner`]), so owner and children live in one replica.
//!
//! ## Membership
//!
//! Each replica is a member ([`Membership::start`] gives its [`Shard`]) with a
//! `coordination.k8s.io/v1` Lease of its own in the manager's namespace, named
//! `<group>-shard-<identity>` and labelled [`GROUP_LABEL`]`=<group>`. It renews the Lease every retry
//! period ([`Timing`](crate::manager::leader::Timing), the same as leader election's). The live
//! members are those whose Lease changed within its duration, judged on the reader's own clock
//! from when it saw the change, so clock skew between nodes does not matter. The identities of the
//! live members give each one its part ([`Ranges::assigned`]).
//!
//! ## Handover without overlap
//!
//! Parts move when members come and go. No hash is ever worked on by two members at once:
//!
//! - Each member *publishes* in its Lease ([`RANGES_ANNOTATION`]) every range it may have work on.
//! - To start a range, a member first publishes it, then reads every Lease of the group again (a
//!   consistent read). If another member whose Lease has not expired publishes part of it, it
//!   withdraws its claim and tries again after a random pause; else it starts. The API server
//!   orders the writes and reads of Leases, so of two members claiming one range at once at least
//!   one sees the other's claim: both may back off, never both start.
//! - To give a range up, a member stops admitting work on it ([`Shard::enter`] says `None`),
//!   waits for the reconciles already admitted (their [`Permit`]s), and only then stops publishing
//!   it. A reconcile that would never end (a request never answered, a deadlock) must not keep the
//!   range forever: past the lease duration, the time the others would wait for a member that
//!   vanished, the member revokes the permits still in flight there ([`Permit::revoked`]: a
//!   controller drops the reconcile) and lets the range go once they are dropped.
//! - A member that cannot renew its Lease within the renew deadline drops everything
//!   ([`Shard::lost`]) before its Lease expires; the others take its ranges only once the Lease has
//!   expired (and delete the Lease). The renew deadline counts from when the last successful
//!   renewal was *sent*, and a member that wakes up past it (paused, throttled, starved) writes
//!   nothing more: its [`Fence`] has passed, so [`Shard::enter`] admits nothing, the reconciles in
//!   flight are cancelled, and the manager's client refuses the writes they would still send. It
//!   rejoins once a renewal gets through again, claiming its part anew like a member that just
//!   joined: an outage of the API server past the renew deadline costs the members their ranges
//!   for a while, never their processes. A member that stops cleanly ([`Shard::stop`]) gives its
//!   ranges up and deletes its Lease, so the others take over at once.
//!
//! ## Watching a shard
//!
//! [`Cache::sharded`](crate::cache::Cache::sharded) keeps the objects of the ranges a member holds
//! and lists again when they change. When the API server has the `ShardedListAndWatch` feature
//! (Kubernetes 1.36, alpha), the cache's lists and watches carry a `shardSelector`
//! ([`Ranges::selector`], sent by [`selecting_client`]) and the server sends only the member's
//! objects; otherwise it sends all of them and the cache drops the others by the same hash. The log
//! says which ([`detect`], [`Filtering`]).
//!
//! The server's selector hashes an object's own uid, not its owner's, so a cache of children either
//! receives every object of the kind and keeps those whose controller owner is in its ranges
//! ([`ShardKey::ControllerOwner`]: every child counts, however it was made), or selects them by a
//! label ([`ShardKey::OwnerBucket`]): a member's `apply` writes [`BUCKET_LABEL`] with the top byte
//! of the owner's hash ([`bucket`]), and the member's cache of children asks for the buckets its
//! ranges touch (about its part of them; the few of a bucket it shares with a neighbour are dropped
//! by the exact hash). A label selector needs no feature gate, and saves the watch traffic of the
//! others; a child without the label is not seen.
//!
//! ## In a manager
//!
//! A manager started with `--sharding` ([`ManagerArgs::sharding`](crate::manager::ManagerArgs::sharding))
//! does all of the following itself: it joins the group named by its leader-election id, each
//! controller's cache holds the controller's part, [`Manager::owned`](crate::Manager::owned) caches
//! hold the children of that part (by their controller reference;
//! [`Manager::owned_labelled`](crate::Manager::owned_labelled) ones by their bucket label), and every reconcile passes the
//! gate. By hand, a controller of a
//! sharded kind reads a [`Cache::sharded`](crate::cache::Cache::sharded) of its
//! kind ([`ShardKey::Uid`]) and of each owned kind ([`ShardKey::ControllerOwner`]), and each
//! reconcile first passes [`Shard::enter`] with the object's uid, holding the permit until it
//! returns; an object outside the active ranges is skipped (its member reconciles it), and work
//! in flight stops once the [`Shard::fence`] has passed. The process calls [`Shard::stop`] once
//! its controllers have stopped.
//!
//! Uids the API server makes are random; made-up ones that differ only in their last characters
//! (`uid-1`, `uid-2`) hash close together, into one range.
//!
//! ## Example
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # use kube::ResourceExt;
//! use rustbuilder_runtime::cache::Cache;
//! use rustbuilder_runtime::shard::{Membership, ShardKey};
//!
//! # async fn run(manager: rustbuilder_runtime::Manager) {
//! let shard = Membership::new(manager.client(), "my-operator-system", "my-operator")
//!     .metrics(manager.metrics())
//!     .start();
//! let configmaps = Cache::<ConfigMap>::sharded(
//!     &manager,
//!     manager.api(),
//!     Default::default(),
//!     &shard,
//!     ShardKey::Uid,
//! );
//! configmaps.synced().await;
//! for object in configmaps.list() {
//!     // Reconcile only while the range is this member's, and hold the permit meanwhile.
//!     let Some(_permit) = shard.enter(&object.uid().unwrap_or_default()) else {
//!         continue;
//!     };
//!     println!("reconciling {}", object.name_any());
//! }
//! shard.stop().await;
//! # }
//! ```

pub(crate) mod bucket;
mod client;
mod fence;
mod member;
mod range;
pub(crate) mod watch;

pub use bucket::{BUCKET_LABEL, bucket};
pub use client::{Filtering, detect, selecting_client};
pub use fence::{Fence, FenceLayer, FenceService, Fenced};
pub(crate) use fence::{FencedExecutor, boxed};
pub use member::{
    GROUP_LABEL, Membership, Permit, RANGES_ANNOTATION, Shard, ShardState, Transition,
};
pub use range::{InvalidRanges, Range, Ranges, hash};
pub use watch::ShardKey;
