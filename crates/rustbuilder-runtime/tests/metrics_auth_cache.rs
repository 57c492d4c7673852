//! The metrics endpoint's TokenReview and SubjectAccessReview answers are cached: 100 scrapes by the
//! metrics-reader account (200 each), then 100 by an account that may not read metrics (403 each, all
//! within the 30 s deny TTL), each cost at most one TokenReview and one SubjectAccessReview, as the API
//! server's own `apiserver_request_total` counts them.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use kube::api::{Api, PostParams};
use rustbuilder_envtest::TestEnv;
use support::{ManagerProcess, Scheme, binding, eventually, free_address, get, requests};

const SCRAPES: usize = 100;

/// TokenReviews and SubjectAccessReviews created so far.
async fn reviews(client: &kube::Client) -> (u64, u64) {
    (
        requests(client, "POST", "tokenreviews").await,
        requests(client, "POST", "subjectaccessreviews").await,
    )
}

/// Scrapes `/metrics` [`SCRAPES`] times with `token`; the status codes seen, and how long it took.
async fn scrape(
    address: std::net::SocketAddr,
    scheme: &Scheme,
    token: &str,
) -> (Vec<u16>, Duration) {
    let start = Instant::now();
    let mut codes = Vec::with_capacity(SCRAPES);
    for _ in 0..SCRAPES {
        match get(address, scheme, "/metrics", Some(token)).await {
            Ok((status, _)) => codes.push(status),
            Err(error) => panic!("GET /metrics on {address}: {error}"),
        }
    }
    (codes, start.elapsed())
}

/// Whether the API server lets the ServiceAccount `default/name` get `/metrics`.
async fn may_get_metrics(client: &kube::Client, name: &str) -> bool {
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({
        "spec": {
            "user": format!("system:serviceaccount:default:{name}"),
            "groups": ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"],
            "nonResourceAttributes": { "path": "/metrics", "verb": "get" }
        }
    }))
    .unwrap();
    let reviewed = reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    reviewed.status.is_some_and(|s| s.allowed)
}

#[tokio::test]
async fn scrapes_cost_one_review_each_per_ttl() {
    let env = TestEnv::start().await;
    let client = env.client();
    let dir = tempfile::tempdir().unwrap();

    // The reader's binding takes effect before the manager asks about it (otherwise its first answer
    // could be a denial, cached for 30 s).
    support::kubectl_apply(&env, support::METRICS_READER_ROLE, "default");
    let reader = env
        .service_account_kubeconfig("default", "prometheus")
        .await;
    let reader = support::token_of(&reader);
    let reader_binding = binding(
        "prometheus-metrics-reader",
        "metrics-reader",
        "default",
        "prometheus",
    );
    support::kubectl_apply(&env, &reader_binding, "default");
    let bound = async || may_get_metrics(&client, "prometheus").await;
    assert!(
        eventually(Duration::from_secs(30), bound).await,
        "binding not effective"
    );
    let denied = env
        .service_account_kubeconfig("default", "no-metrics")
        .await;
    let denied = support::token_of(&denied);

    let (metrics, probes) = (free_address(), free_address());
    let args = [
        format!("--metrics-bind-address={metrics}"),
        format!("--health-probe-bind-address={probes}"),
    ];
    let manager = ManagerProcess::start("secure", dir.path(), env.kubeconfig(), &args);
    let https = Scheme::https_insecure();
    // No token: 401 without any review.
    let serving = async || matches!(get(metrics, &https, "/metrics", None).await, Ok((401, _)));
    assert!(
        eventually(Duration::from_secs(30), serving).await,
        "metrics not served:\n{}",
        manager.log_text()
    );

    let before = reviews(&client).await;
    let (codes, took) = scrape(metrics, &https, &reader).await;
    let after = reviews(&client).await;
    let cost = (after.0 - before.0, after.1 - before.1);
    let allowed_cost = cost;
    eprintln!(
        "allowed: {SCRAPES} scrapes in {took:?}: {} TokenReviews, {} SubjectAccessReviews",
        cost.0, cost.1
    );
    assert!(
        codes.iter().all(|&c| c == 200),
        "not all 200: {codes:?}\n{}",
        manager.log_text()
    );
    assert!(
        cost.0 <= 1 && cost.1 <= 1,
        "{SCRAPES} allowed scrapes cost {} TokenReviews and {} SubjectAccessReviews",
        cost.0,
        cost.1
    );

    let before = reviews(&client).await;
    let (codes, took) = scrape(metrics, &https, &denied).await;
    let after = reviews(&client).await;
    let cost = (after.0 - before.0, after.1 - before.1);
    eprintln!(
        "denied: {SCRAPES} scrapes in {took:?}: {} TokenReviews, {} SubjectAccessReviews",
        cost.0, cost.1
    );
    assert!(
        took < Duration::from_secs(30),
        "denied scrapes outlasted the deny TTL: {took:?}"
    );
    assert!(
        codes.iter().all(|&c| c == 403),
        "not all 403: {codes:?}\n{}",
        manager.log_text()
    );
    assert!(
        cost.0 <= 1 && cost.1 <= 1,
        "{SCRAPES} denied scrapes cost {} TokenReviews and {} SubjectAccessReviews",
        cost.0,
        cost.1
    );
    // The counters do see the manager's reviews (the bounds above are not met by counting nothing).
    let total = (allowed_cost.0 + cost.0, allowed_cost.1 + cost.1);
    assert!(total.0 >= 1 && total.1 >= 1, "no review counted: {total:?}");
    drop(manager);
}
