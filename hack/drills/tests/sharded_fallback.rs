//! Drill: the sharding drill (`sharded.rs`) on an API server without the `ShardedListAndWatch` feature
//! gate: each replica lists and watches everything and keeps only its ranges (filtering on the
//! client). The same wave, faults and proofs must hold.

mod support;

use support::DRILL_BUDGET;

#[tokio::test]
async fn replicas_filtering_on_the_client_share_a_wave_through_a_kill_and_a_join() {
    tokio::time::timeout(DRILL_BUDGET, support::shards::drill(300, false))
        .await
        .expect("the drill took longer than its budget");
}
