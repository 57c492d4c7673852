// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! The webhooks of `CronJob` called by a real API server. rustbuilder-envtest registers
//! `config/webhook/manifests.yaml` (which `make manifests` writes from the markers) with the address of
//! the webhook server this test starts, so the API server calls the webhooks as it does in a cluster.

use kube::api::{Api, PostParams};
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::manager::CertSource;
use rustbuilder_runtime::manifests::crd;
use rustbuilder_runtime::webhook::{Server, Webhooks};

use project_cronjob::api::v1::{ConcurrencyPolicy, CronJob, CronJobSpec};
use project_cronjob::webhook::v1::cron_job::CronJobWebhook;

/// One control plane with the CRD and the webhook configurations, and the webhook server they point
/// at, for every check.
#[tokio::test]
async fn the_api_server_defaults_and_validates_cronjobs() {
    let env = TestEnv::builder()
        .crd(crd::<CronJob>())
        .webhook_manifests("config/webhook")
        .start()
        .await;
    // The webhooks `src/main.rs` registers.
    let webhooks = Webhooks::new();
    webhooks.defaulter(CronJobWebhook);
    webhooks.validator(CronJobWebhook);
    let address = format!("127.0.0.1:{}", env.webhook_port());
    let cert = CertSource::Files {
        cert: env.webhook_cert_dir().join("tls.crt"),
        key: env.webhook_cert_dir().join("tls.key"),
    };
    let _server = Server::start(webhooks, &address.parse().unwrap(), cert)
        .await
        .expect("the webhook server starts");
    let api: Api<CronJob> = Api::namespaced(env.client(), "default");
    let sample = |name: &str, schedule: &str| {
        CronJob::new(
            name,
            CronJobSpec {
                schedule: schedule.into(),
                ..Default::default()
            },
        )
    };

    // Defaulting: the stored object has every default.
    let created = api
        .create(&PostParams::default(), &sample("defaulted", "*/5 * * * *"))
        .await
        .expect("a good CronJob is admitted");
    let spec = &created.spec;
    assert_eq!(spec.concurrency_policy, ConcurrencyPolicy::Allow);
    assert_eq!(spec.suspend, Some(false));
    assert_eq!(spec.successful_jobs_history_limit, Some(3));
    assert_eq!(spec.failed_jobs_history_limit, Some(1));

    // Validation: a bad schedule and a name too long, refused as invalid fields (422, a cause per
    // field), as the API server refuses what its schema rejects; a time zone not in the database;
    // and a starting deadline past the schema's bound, refused by the schema itself.
    let too_long = "a".repeat(53);
    let mut forever = sample("forever", "*/5 * * * *");
    forever.spec.starting_deadline_seconds = Some(400_000_000_000);
    let mut on_mars = sample("on-mars", "0 9 * * *");
    on_mars.spec.time_zone = Some("Mars/Olympus_Mons".into());
    for (object, field, expected) in [
        (
            on_mars,
            "spec.timeZone",
            r#"spec.timeZone: Invalid value: "Mars/Olympus_Mons": not a time zone"#,
        ),
        (
            forever,
            "spec.startingDeadlineSeconds",
            "spec.startingDeadlineSeconds in body should be less than or equal to",
        ),
        (
            sample("bad-schedule", "61 * * * *"),
            "spec.schedule",
            r#"spec.schedule: Invalid value: "61 * * * *": not a cron schedule"#,
        ),
        (
            sample(&too_long, "*/5 * * * *"),
            "metadata.name",
            "metadata.name: Invalid value: ",
        ),
    ] {
        match api.create(&PostParams::default(), &object).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(
                    (status.code, status.reason.as_str()),
                    (422, "Invalid"),
                    "{status:?}"
                );
                assert!(status.message.contains(expected), "{}", status.message);
                let causes = status.details.as_ref().map(|d| &d.causes);
                let fields: Vec<_> = causes
                    .into_iter()
                    .flatten()
                    .map(|c| c.field.as_str())
                    .collect();
                assert_eq!(fields, [field], "{status:?}");
            }
            other => panic!("the CronJob should be refused, got {other:?}"),
        }
    }
}
