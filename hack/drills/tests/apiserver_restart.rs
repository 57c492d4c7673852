//! Drill: kube-apiserver stops for about ten seconds while a wave of objects converges, and comes
//! back on the same port with the same data. The operator must ride it out (no exit, no lost object)
//! and converge every object once the API is back.

mod support;

use std::time::{Duration, Instant};

use rustbuilder_envtest::Component;
use support::{DRILL_BUDGET, Drill};

const OBJECTS: usize = 300;
const OUTAGE: Duration = Duration::from_secs(10);

#[tokio::test]
async fn the_apiserver_stops_for_ten_seconds_mid_wave() {
    tokio::time::timeout(DRILL_BUDGET, drill())
        .await
        .expect("the drill took longer than its budget");
}

async fn drill() {
    let mut drill = Drill::start().await;
    drill.create_wave(OBJECTS).await;
    drill.wait_for_deployments(OBJECTS / 4).await;
    let at_fault = drill.progress(OBJECTS).await;

    let down = Instant::now();
    drill.env.stop(Component::KubeApiserver).await;
    tokio::time::sleep(OUTAGE.saturating_sub(down.elapsed())).await;
    drill.env.start_component(Component::KubeApiserver).await;
    let outage = down.elapsed();

    let recovery = drill.wait_converged(OBJECTS).await;
    let status = drill.operator.exited();
    assert!(
        status.is_none(),
        "the operator exited ({status:?}) during the outage; {}",
        drill.operator.tail()
    );
    eprintln!(
        "drill apiserver-restart: {OBJECTS} objects; at the fault {} Deployments, {} converged; \
         API down {outage:.1?}; converged {recovery:.1?} after it came back",
        at_fault.0, at_fault.1
    );
}
