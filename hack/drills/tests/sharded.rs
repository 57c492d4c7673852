//! Drill: three replicas started with `--sharding` share a wave of 300 objects on a cluster whose API
//! server lists and watches by shard (feature gate `ShardedListAndWatch`); one is SIGKILLed mid-wave
//! and its ranges are taken over, then a fourth joins and the ranges are rebalanced. The end state is
//! the one every drill checks, and kube-apiserver's audit log proves that no object was written by a
//! replica that did not hold it alone (`support::shards`).

mod support;

use support::{DRILL_BUDGET, objects, scaled};

#[tokio::test]
async fn three_replicas_share_a_wave_through_a_kill_and_a_join() {
    let objects = objects(300);
    tokio::time::timeout(
        scaled(DRILL_BUDGET, objects),
        support::shards::drill(objects, true),
    )
    .await
    .expect("the drill took longer than its budget");
}
