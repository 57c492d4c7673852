// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! `CronJob` at every version through the running manager: the API server stores v1 (the hub)
//! and calls the manager's conversion webhook whenever an object is written or read at another version.
//! The sample of each version is read at both, with its schedule as each version writes it.

use serde_json::Value;

use crate::{Cluster, cluster};

const NAMESPACE: &str = "cronjob-conversion";
/// The versions the CRD serves: the spokes, then the hub.
const VERSIONS: [&str; 2] = ["v2", "v1"];

/// The sample `create api` wrote for `version`, as JSON, named `name` in the test's namespace.
fn sample(cluster: &Cluster, version: &str, name: &str) -> Value {
    let path = format!("config/samples/batch_{version}_cron_job.yaml");
    let json = cluster.kubectl(&["create", "--dry-run=client", "-o", "json", "-f", &path]);
    let mut object: Value = serde_json::from_str(&json).expect("kubectl prints the sample as JSON");
    object["metadata"]["name"] = name.into();
    object["metadata"]["namespace"] = NAMESPACE.into();
    object
}

#[tokio::test]
async fn cron_job_objects_read_at_every_version() {
    let cluster = cluster().await;
    let manager = cluster.deploy_manager(&[]).await;
    cluster.kubectl(&["create", "namespace", NAMESPACE]);
    for version in VERSIONS {
        let name = format!("from-{version}");
        cluster.create(&sample(&cluster, version, &name)).await;
        for read_at in VERSIONS {
            let resource = format!("cronjobs.{read_at}.batch.tutorial.kubebuilder.io");
            let args = [
                "get",
                &resource,
                &name,
                "-n",
                NAMESPACE,
                "-o",
                "jsonpath={.apiVersion}",
            ];
            let api_version = cluster.kubectl(&args);
            assert_eq!(
                api_version,
                format!("batch.tutorial.kubebuilder.io/{read_at}")
            );
            // Both samples run every minute: one string at v1, the minute field at v2.
            let args = [
                "get",
                &resource,
                &name,
                "-n",
                NAMESPACE,
                "-o",
                "jsonpath={.spec.schedule}",
            ];
            let expected = match read_at {
                "v1" => "*/1 * * * *",
                _ => r#"{"minute":"*/1"}"#,
            };
            assert_eq!(cluster.kubectl(&args), expected, "{name} read at {read_at}");
        }
    }
    assert!(manager.stop(), "the manager did not exit 0 on SIGTERM");
}
