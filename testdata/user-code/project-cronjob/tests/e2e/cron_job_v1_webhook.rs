// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! The webhooks of `CronJob` (batch.tutorial.kubebuilder.io/v1) in the running manager: kubectl creates
//! objects, and the API server calls the manager's webhook server before it stores them, as it does in
//! a cluster.

use serde_json::Value;

use crate::{Cluster, cluster};

const NAMESPACE: &str = "cronjob-v1-webhooks";
/// The tutorial's sample.
const SAMPLE: &str = "config/samples/batch_v1_cron_job.yaml";

/// The sample as JSON, named `name` in the test's namespace, with `schedule`.
fn sample(cluster: &Cluster, name: &str, schedule: &str) -> Value {
    let json = cluster.kubectl(&["create", "--dry-run=client", "-o", "json", "-f", SAMPLE]);
    let mut object: Value = serde_json::from_str(&json).expect("kubectl prints the sample as JSON");
    object["metadata"]["name"] = name.into();
    object["metadata"]["namespace"] = NAMESPACE.into();
    object["spec"]["schedule"] = schedule.into();
    object
}

#[tokio::test]
async fn the_api_server_calls_the_cron_job_webhooks() {
    let cluster = cluster().await;
    let manager = cluster.deploy_manager(&[]).await;
    cluster.kubectl(&["create", "namespace", NAMESPACE]);

    // Defaulting: the sample names no history limit; the stored object has the default.
    cluster
        .create(&sample(&cluster, "defaulted", "*/1 * * * *"))
        .await;
    let resource = "cronjobs.v1.batch.tutorial.kubebuilder.io";
    let limit = cluster.kubectl(&[
        "get",
        resource,
        "defaulted",
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={.spec.successfulJobsHistoryLimit}",
    ]);
    assert_eq!(
        limit, "3",
        "the defaulting webhook did not set the history limit"
    );

    // Validation: a bad schedule is refused as an invalid field, as kubectl shows it.
    let bad = serde_json::to_string(&sample(&cluster, "bad", "every minute")).unwrap();
    let (created, _, message) = cluster.try_kubectl(&["create", "-f", "-"], Some(&bad));
    assert!(!created, "the validating webhook admitted a bad schedule");
    // kubectl prints a 422's causes as it prints the API server's own validation errors.
    assert!(
        message.contains(r#"The CronJob "bad" is invalid"#),
        "{message}"
    );
    let cause = r#"spec.schedule: Invalid value: "every minute": not a cron schedule"#;
    assert!(message.contains(cause), "{message}");
    // +rustbuilder:scaffold:e2e-webhook-checks
    assert!(manager.stop(), "the manager did not exit 0 on SIGTERM");
}
