// Copyright The project Authors
// SPDX-License-Identifier: Apache-2.0

//! The explorer: the controllers run through each kind's sample (`config/samples/`) on a real API
//! server, once without faults, then again under each fault of a plan (the manager crashing right
//! after a write, a cache that lists the past, events lost or late, a leader losing its Lease), each
//! end compared with the fault-free one. `make test` runs a short plan; `make test-explore
//! EXPLORE_PLAN=full` runs every fault, and a failure's report ends with the command that replays it.
//!
//! `create api` adds below each namespaced kind of the project's own that has a controller, with its
//! controllers (each run works in a namespace of its own). For steps and invariants of your own, see
//! `rustbuilder_runtime::testing::explore`.

use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::manifests::crd;
use rustbuilder_runtime::testing::explore::Explorer;

use project::api;
use project::controller::{self, MANAGER_NAME};

#[tokio::test]
async fn controllers_converge_through_faults() {
    let env = TestEnv::builder()
        .crd(crd::<api::v1alpha1::Memcached>())
        // +rustbuilder:scaffold:crds
        .start()
        .await;
    Explorer::new(env.client(), MANAGER_NAME)
        .controller(controller::memcached::run)
        .sample::<api::v1alpha1::Memcached>(include_str!(
            "../../config/samples/cache_v1alpha1_memcached.yaml"
        ))
        // +rustbuilder:scaffold:controllers
        .replay_command("make test-explore")
        .explore()
        .await
        .assert_ok();
}
