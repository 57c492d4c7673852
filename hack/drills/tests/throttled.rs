//! Drill: the API server answers the operator with 429 Too Many Requests. API Priority and Fairness
//! gets a FlowSchema that puts the operator's ServiceAccount in a priority level of its own with
//! almost no concurrency and a tiny queue, so most of its bursts are rejected. The operator must back
//! off and retry (kube's client retries a 429 after the server's `Retry-After`; a reconcile that still
//! fails is retried with backoff) and lose nothing: every object converges. The API server's
//! `apiserver_flowcontrol_rejected_requests_total` proves the rejections happened.
//!
//! The operator runs as a ServiceAccount with the project's own ClusterRole (`config/rbac/role.yaml`):
//! an admin (group `system:masters`) is exempt from Priority and Fairness.

mod support;

use std::path::Path;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::json;
use support::knobs::{apiserver_metrics, metric_sum};
use support::{DRILL_BUDGET, Drill, NAMESPACE, Operator};

const OBJECTS: usize = 200;
const ACCOUNT: &str = "drill-operator";
/// The FlowSchema and PriorityLevelConfiguration, both named so.
const FLOW: &str = "drill-operator";

#[tokio::test]
async fn the_apiserver_answers_429_and_nothing_is_lost() {
    tokio::time::timeout(DRILL_BUDGET, drill())
        .await
        .expect("the drill took longer than its budget");
}

/// The ServiceAccount `ACCOUNT`, bound to the project's ClusterRole.
async fn service_account(drill: &Drill) {
    let role =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/project/config/rbac/role.yaml");
    let applied = drill
        .env
        .kubectl()
        .args(["apply", "--server-side", "-f"])
        .arg(&role)
        .output()
        .expect("kubectl runs");
    assert!(applied.status.success(), "{applied:?}");
    let accounts: Api<ServiceAccount> = Api::namespaced(drill.client(), NAMESPACE);
    let account = serde_json::from_value(json!({ "metadata": { "name": ACCOUNT } })).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": { "name": ACCOUNT },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "manager-role" },
        "subjects": [{ "kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE }],
    }))
    .unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(drill.client());
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

/// A priority level with the smallest nominal share and a one-request queue, and the FlowSchema that
/// sends every request of `ACCOUNT` there, ahead of the default schemas.
async fn throttle(drill: &Drill) {
    let params = PatchParams::apply("drill").force();
    let resource = |kind| {
        let gvk = GroupVersionKind::gvk("flowcontrol.apiserver.k8s.io", "v1", kind);
        Api::<DynamicObject>::all_with(drill.client(), &ApiResource::from_gvk(&gvk))
    };
    let level = json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": { "name": FLOW },
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 1,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {
                    "type": "Queue",
                    "queuing": { "queues": 1, "handSize": 1, "queueLengthLimit": 1 },
                },
            },
        },
    });
    let schema = json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": { "name": FLOW },
        "spec": {
            "priorityLevelConfiguration": { "name": FLOW },
            "matchingPrecedence": 300,
            "distinguisherMethod": { "type": "ByUser" },
            "rules": [{
                "subjects": [{
                    "kind": "ServiceAccount",
                    "serviceAccount": { "name": ACCOUNT, "namespace": NAMESPACE },
                }],
                "resourceRules": [{
                    "verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                    "clusterScope": true, "namespaces": ["*"],
                }],
                "nonResourceRules": [{ "verbs": ["*"], "nonResourceURLs": ["*"] }],
            }],
        },
    });
    for (kind, object) in [
        ("PriorityLevelConfiguration", level),
        ("FlowSchema", schema),
    ] {
        let api = resource(kind);
        api.patch(FLOW, &params, &Patch::Apply(&object))
            .await
            .unwrap_or_else(|e| panic!("{kind} {FLOW}: {e}"));
    }
}

/// The operator's requests so far: (rejected with 429, dispatched), from the API server's Priority
/// and Fairness metrics for the FlowSchema.
async fn requests(drill: &Drill) -> (f64, f64) {
    let text = apiserver_metrics(&drill.client()).await.unwrap();
    let labels = [("flow_schema", FLOW)];
    let count = |metric| metric_sum(&text, metric, &labels);
    (
        count("apiserver_flowcontrol_rejected_requests_total"),
        count("apiserver_flowcontrol_dispatched_requests_total"),
    )
}

async fn drill() {
    let mut drill = Drill::start().await;
    service_account(&drill).await;
    throttle(&drill).await;
    let kubeconfig = drill
        .env
        .service_account_kubeconfig(NAMESPACE, ACCOUNT)
        .await;
    // The operator as its ServiceAccount instead of as admin (no object exists yet).
    drill.operator = Operator::launch(&kubeconfig, "operator-throttled", &[]);

    drill.create_wave(OBJECTS).await;
    let recovery = drill.wait_converged(OBJECTS).await;
    let (rejections, dispatched) = requests(&drill).await;
    assert!(
        rejections > 0.0,
        "the API server rejected none of the operator's requests: the drill throttled nothing"
    );
    let status = drill.operator.exited();
    assert!(
        status.is_none(),
        "the operator exited ({status:?}); {}",
        drill.operator.tail()
    );
    eprintln!(
        "drill throttled: {OBJECTS} objects; the operator's requests: {rejections} answered 429, \
         {dispatched} served; converged {recovery:.1?} after the wave was created"
    );
}
