// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! The explorer: the controllers run through each kind's sample (`config/samples/`) on a real API
//! server, once without faults, then again under each fault of a plan (the manager crashing right
//! after a write, a cache that lists the past, events lost or late, a leader losing its Lease), each
//! end compared with the fault-free one. `make test` runs a short plan; `make test-explore
//! EXPLORE_PLAN=full` runs every fault, and a failure's report ends with the command that replays it.
//!
//! The CronJob controller runs on a clock stopped ten minutes from now, the same for every run: its
//! Jobs, named after their scheduled time, are then the same in every run, where the system clock
//! would make a run that crosses a minute differ from one that does not.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::clock::FakeClock;
use rustbuilder_runtime::manifests::crd;
use rustbuilder_runtime::testing::explore::Explorer;

use project_cronjob::api;
use project_cronjob::controller::{self, MANAGER_NAME};

#[tokio::test]
async fn controllers_converge_through_faults() {
    let env = TestEnv::builder()
        .crd(crd::<api::v1::CronJob>())
        // +rustbuilder:scaffold:crds
        .start()
        .await;
    let stopped_at = Timestamp::now() + Duration::from_secs(600);
    let clock = Arc::new(FakeClock::new(stopped_at));
    Explorer::new(env.client(), MANAGER_NAME)
        .controller(move |manager| controller::cron_job::run_with_clock(manager, clock.clone()))
        .sample::<api::v1::CronJob>(include_str!("../../config/samples/batch_v1_cron_job.yaml"))
        // +rustbuilder:scaffold:controllers
        .replay_command("make test-explore")
        .explore()
        .await
        .assert_ok();
}
