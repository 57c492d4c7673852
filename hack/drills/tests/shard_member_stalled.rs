//! Drill: three replicas started with `--sharding` share a wave of 300 objects; one is SIGSTOPped
//! mid-wave for longer than its Lease (as under CPU throttling, or on a stalled node), then
//! SIGCONTinued. It must not write once the others may hold its objects: kube-apiserver's audit log
//! proves that no object was written by a replica that did not hold it alone (`support::shards`),
//! and the stalled replica rejoins once it renews its Lease (it does not exit).

mod support;

use support::{DRILL_BUDGET, objects, scaled};

#[tokio::test]
async fn a_replica_paused_past_its_lease_writes_nothing_when_it_wakes() {
    let objects = objects(300);
    tokio::time::timeout(
        scaled(DRILL_BUDGET, objects),
        support::shards::stalled(objects),
    )
    .await
    .expect("the drill took longer than its budget");
}
