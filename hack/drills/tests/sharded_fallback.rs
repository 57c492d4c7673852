//! Drill: the sharding drill (`sharded.rs`) on an API server without the `ShardedListAndWatch` feature
//! gate: each replica lists and watches everything and keeps only its ranges (filtering on the
//! client). The same wave, faults and proofs must hold.

mod support;

use support::{DRILL_BUDGET, objects, scaled};

#[tokio::test]
async fn replicas_filtering_on_the_client_share_a_wave_through_a_kill_and_a_join() {
    let objects = objects(300);
    tokio::time::timeout(
        scaled(DRILL_BUDGET, objects),
        support::shards::drill(objects, false),
    )
    .await
    .expect("the drill took longer than its budget");
}
