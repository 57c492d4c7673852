// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! `CronJob` at both versions on a real API server. The CRD holds v1 and v2, stored at v1 (the hub),
//! with `spec.conversion.strategy: Webhook` pointed at the webhook server this test starts: the API
//! server calls it whenever a client writes or reads the version it does not store. The defaulting
//! and validating webhooks of v1 are registered too: the API server converts a v2 object to v1 to call
//! them.

use kube::ResourceExt;
use kube::api::{Api, PostParams};
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::manager::CertSource;
use rustbuilder_runtime::manifests::{Crds, crd};
use rustbuilder_runtime::webhook::{Server, Webhooks};

use project_cronjob::api::{v1, v2};
use project_cronjob::webhook::v1::cron_job::CronJobWebhook;

/// A control plane with the CRD as `make manifests` writes it and the webhook configurations, and the
/// webhook server they point at, with the webhooks `src/main.rs` registers.
async fn start() -> (TestEnv, Server) {
    let crds = Crds::new(vec![crd::<v1::CronJob>(), crd::<v2::CronJob>()])
        .storage_version::<v1::CronJob>()
        .conversion_webhook::<v1::CronJob>()
        .merged()
        .expect("the versions merge into one CRD");
    let env = TestEnv::builder()
        .crds(crds)
        .webhook_manifests("config/webhook")
        .start()
        .await;
    let webhooks = Webhooks::new();
    webhooks.defaulter(CronJobWebhook);
    webhooks.validator(CronJobWebhook);
    webhooks.conversion::<v2::CronJob, v1::CronJob>();
    let address = format!("127.0.0.1:{}", env.webhook_port());
    let cert = CertSource::Files {
        cert: env.webhook_cert_dir().join("tls.crt"),
        key: env.webhook_cert_dir().join("tls.key"),
    };
    let server = Server::start(webhooks, &address.parse().unwrap(), cert)
        .await
        .expect("the webhook server starts");
    (env, server)
}

fn at_v1(name: &str, schedule: &str) -> v1::CronJob {
    v1::CronJob::new(
        name,
        v1::CronJobSpec {
            schedule: schedule.into(),
            ..Default::default()
        },
    )
}

fn at_v2(name: &str, fields: [Option<&str>; 5]) -> v2::CronJob {
    let [minute, hour, day_of_month, month, day_of_week] =
        fields.map(|f| f.map(|f| v2::CronField(f.into())));
    v2::CronJob::new(
        name,
        v2::CronJobSpec {
            schedule: v2::CronSchedule {
                minute,
                hour,
                day_of_month,
                month,
                day_of_week,
            },
            ..Default::default()
        },
    )
}

#[tokio::test]
async fn objects_written_at_one_version_read_the_same_at_the_other() {
    let (env, _server) = start().await;
    let hub: Api<v1::CronJob> = Api::namespaced(env.client(), "default");
    let spoke: Api<v2::CronJob> = Api::namespaced(env.client(), "default");
    let create = PostParams::default();

    // Written at v1, read at v2: the string's fields, a `*` left out.
    let written = hub
        .create(&create, &at_v1("from-v1", "*/5 1 * * MON-FRI"))
        .await
        .unwrap();
    let read = spoke.get("from-v1").await.unwrap();
    assert_eq!(read.uid(), written.uid());
    let expected = at_v2("", [Some("*/5"), Some("1"), None, None, Some("MON-FRI")]);
    assert_eq!(read.spec.schedule, expected.spec.schedule);
    assert_eq!(read.annotations().len(), 0, "{:?}", read.annotations());

    // Written at v2, read at v1: one string; the v1 defaulting webhook ran on it (the API server
    // converted the object to call it), and v2 shows the defaults too.
    let written = spoke
        .create(
            &create,
            &at_v2("from-v2", [Some("*/1"), None, None, None, None]),
        )
        .await
        .unwrap();
    assert_eq!(written.spec.successful_jobs_history_limit, Some(3));
    let read = hub.get("from-v2").await.unwrap();
    assert_eq!(read.spec.schedule, "*/1 * * * *");
    assert_eq!(read.spec.suspend, Some(false));

    // What one version cannot say comes back from the other unchanged. (The API server answers a
    // write with the stored object converted back, so the checks compare with what was sent.)
    let star = at_v2("star", [Some("*"), Some("0"), None, None, None]);
    spoke.create(&create, &star).await.unwrap();
    assert_eq!(hub.get("star").await.unwrap().spec.schedule, "* 0 * * *");
    let read = spoke.get("star").await.unwrap();
    assert_eq!(read.spec.schedule, star.spec.schedule);

    // A v1 string v2 has no fields for, read at v2 and written back there (suspended): still v1's.
    hub.create(&create, &at_v1("hourly", "@hourly"))
        .await
        .unwrap();
    let mut read = spoke.get("hourly").await.unwrap();
    assert_eq!(read.spec.schedule, v2::CronSchedule::default());
    read.spec.suspend = Some(true);
    spoke.replace("hourly", &create, &read).await.unwrap();
    let stored = hub.get("hourly").await.unwrap();
    assert_eq!(stored.spec.schedule, "@hourly");
    assert_eq!(stored.spec.suspend, Some(true));

    // A bad v2 schedule is refused by the v1 validating webhook, with its field error.
    let bad = at_v2("bad", [Some("61"), None, None, None, None]);
    match spoke.create(&create, &bad).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(
                status.message.contains("not a cron schedule"),
                "{}",
                status.message
            );
        }
        other => panic!("the CronJob should be refused, got {other:?}"),
    }
}
