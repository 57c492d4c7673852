//! Drill: the operator is SIGKILLed in the middle of a wave (no graceful shutdown, reconciles cut off
//! mid-flight) and a new process starts, as its Deployment would make it. The new process must finish
//! the wave from what the cluster holds: no duplicate, no orphan, every object converged.

mod support;

use std::os::unix::process::ExitStatusExt;

use support::{DRILL_BUDGET, Drill};

const OBJECTS: usize = 300;

#[tokio::test]
async fn the_operator_is_killed_mid_wave_and_restarted() {
    tokio::time::timeout(DRILL_BUDGET, drill())
        .await
        .expect("the drill took longer than its budget");
}

async fn drill() {
    let mut drill = Drill::start().await;
    drill.create_wave(OBJECTS).await;
    drill.wait_for_deployments(OBJECTS / 3).await;
    let at_fault = drill.progress(OBJECTS).await;

    let status = drill.operator.kill();
    assert_eq!(status.signal(), Some(9), "{status:?}");
    drill.operator.restart();

    let recovery = drill.wait_converged(OBJECTS).await;
    let status = drill.operator.exited();
    assert!(
        status.is_none(),
        "the new operator exited ({status:?}); {}",
        drill.operator.tail()
    );
    eprintln!(
        "drill operator-killed: {OBJECTS} objects; at the kill {} Deployments, {} converged; \
         converged {recovery:.1?} after the new process started",
        at_fault.0, at_fault.1
    );
}
