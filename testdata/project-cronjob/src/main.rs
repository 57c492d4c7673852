// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! The manager: runs every controller of the project until SIGTERM or Ctrl-C.
//!
//! The runtime does the rest (flags: `project-cronjob --help`; more: `Manager::builder`): it connects
//! to the cluster (in-cluster config, else the current kubeconfig), serves probes and metrics, waits for
//! the lease with `--leader-elect`, and on shutdown lets in-flight reconciles finish and hands it over.
//! `rustbuilder create api` adds each controller at the marker below, `create webhook` each webhook.

use std::time::Duration;

use clap::Parser;
use rustbuilder_runtime::allocator;
use rustbuilder_runtime::manager::{self, Manager, ManagerArgs};

use project_cronjob::api;
use project_cronjob::controller;
use project_cronjob::webhook;
// +rustbuilder:scaffold:imports

/// The name of the leader-election Lease: unique to this project, the same for all its replicas.
const LEADER_ELECTION_ID: &str = "project-cronjob.tutorial.kubebuilder.io";

/// The project-cronjob manager: runs the controllers of the project.
///
/// Every flag can also be set through the environment variable shown next to it.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    #[command(flatten)]
    manager: ManagerArgs,
}

fn main() -> Result<(), manager::Error> {
    // First, before tokio starts its threads: one malloc heap for them all (see its docs).
    allocator::one_arena();
    run(Args::parse())
}

/// Starts the manager and runs the controllers until SIGTERM or Ctrl-C.
#[tokio::main]
async fn run(args: Args) -> Result<(), manager::Error> {
    let manager = Manager::builder(controller::MANAGER_NAME)
        .leader_election_id(LEADER_ELECTION_ID)
        // Under `terminationGracePeriodSeconds: 10` (manager.yaml): the Lease goes before SIGKILL.
        .graceful_shutdown_timeout(Duration::from_secs(8))
        .start(args.manager)
        .await?;
    manager
        .webhooks()
        .defaulter(webhook::v1::cron_job::CronJobWebhook);
    manager
        .webhooks()
        .validator(webhook::v1::cron_job::CronJobWebhook);
    manager
        .webhooks()
        .conversion::<api::v2::CronJob, api::v1::CronJob>();
    // +rustbuilder:scaffold:webhooks
    let controllers = manager.controllers();
    controllers.add(controller::cron_job::run(manager.clone()));
    // +rustbuilder:scaffold:controllers
    // Waits for leadership when `--leader-elect` is on, then runs until SIGTERM.
    controllers.run().await
}
