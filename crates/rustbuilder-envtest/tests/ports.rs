//! Envs started at once never share a port: each kube-apiserver serves its own etcd. Eight envs start
//! together, two rounds in a row, and each sees only the object written through it.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use rustbuilder_envtest::TestEnv;

const ENVS: usize = 8;
const ROUNDS: usize = 2;

fn server_of(env: &TestEnv) -> String {
    let kubeconfig: serde_json::Value =
        serde_yaml::from_str(&std::fs::read_to_string(env.kubeconfig()).unwrap()).unwrap();
    kubeconfig["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn eight_envs_started_at_once_are_each_on_their_own_etcd() {
    for round in 0..ROUNDS {
        let envs = futures::future::join_all((0..ENVS).map(|_| TestEnv::start())).await;
        let servers: BTreeSet<String> = envs.iter().map(server_of).collect();
        assert_eq!(
            servers.len(),
            ENVS,
            "round {round}: shared servers {servers:?}"
        );

        let pp = PostParams::default();
        for (i, env) in envs.iter().enumerate() {
            let marker: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": { "name": format!("env-{i}"), "labels": { "marker": "yes" } },
            }))
            .unwrap();
            let configmaps: Api<ConfigMap> = Api::default_namespaced(env.client());
            configmaps.create(&pp, &marker).await.unwrap();
        }
        for (i, env) in envs.iter().enumerate() {
            let configmaps: Api<ConfigMap> = Api::default_namespaced(env.client());
            let markers = configmaps
                .list(&ListParams::default().labels("marker=yes"))
                .await
                .unwrap();
            let names: Vec<String> = markers.iter().map(ResourceExt::name_any).collect();
            assert_eq!(names, [format!("env-{i}")], "round {round}, env {i}");
            let running: Vec<&str> = env.pids().into_iter().map(|(name, _)| name).collect();
            assert_eq!(
                running,
                ["etcd", "kube-apiserver"],
                "round {round}, env {i}"
            );
        }
    }
}
