//! ServiceAccount clients are subject to RBAC like an in-cluster operator.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, PostParams};
use rustbuilder_envtest::TestEnv;

const NS: &str = "team-a";

fn is_forbidden<T: std::fmt::Debug>(result: kube::Result<T>) -> bool {
    matches!(result, Err(kube::Error::Api(status)) if status.code == 403)
}

#[tokio::test]
async fn service_account_gets_only_what_rbac_grants() {
    let env = TestEnv::start().await;
    let sa = env.service_account_client(NS, "reader").await;
    let configmaps: Api<ConfigMap> = Api::namespaced(sa.clone(), NS);
    assert!(is_forbidden(configmaps.list(&ListParams::default()).await));

    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "configmap-reader" },
        "rules": [{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"] }],
    }))
    .unwrap();
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "configmap-reader" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-reader" },
        "subjects": [{ "kind": "ServiceAccount", "name": "reader", "namespace": NS }],
    }))
    .unwrap();
    let pp = PostParams::default();
    Api::<Role>::namespaced(env.client(), NS)
        .create(&pp, &role)
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(env.client(), NS)
        .create(&pp, &binding)
        .await
        .unwrap();

    // The RBAC authorizer reads roles from an informer cache: allow it a moment.
    let mut allowed = false;
    for _ in 0..100 {
        if configmaps.list(&ListParams::default()).await.is_ok() {
            allowed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(allowed, "the RoleBinding never took effect");
    // Still nothing beyond the grant: other namespaces, other verbs.
    let elsewhere: Api<ConfigMap> = Api::default_namespaced(sa);
    assert!(is_forbidden(elsewhere.list(&ListParams::default()).await));
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("x".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    assert!(is_forbidden(configmaps.create(&pp, &cm).await));

    // The kubeconfig flavour works for kubectl (the last --kubeconfig wins).
    let kubeconfig = env.service_account_kubeconfig(NS, "reader").await;
    let can_i = |verb: &str| {
        let out = env
            .kubectl()
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(["auth", "can-i", verb, "configmaps", "-n", NS])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(can_i("list"), "yes");
    assert_eq!(can_i("delete"), "no");
}
