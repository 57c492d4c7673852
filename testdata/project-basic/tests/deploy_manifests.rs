// Copyright The project-basic Authors
// SPDX-License-Identifier: Apache-2.0

//! The deployment manifests (`kubectl kustomize config/default`, what `make deploy` applies) are accepted
//! by a real API server, and the manager's pod passes the restricted Pod Security Standard that its
//! namespace enforces.

mod envtest;

use std::io::Write;
use std::process::Stdio;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

const NAMESPACE: &str = "project-basic-system";
const DEPLOYMENT: &str = "project-basic-controller-manager";

fn kubectl(env: &envtest::TestEnv, args: &[&str], stdin: &[u8]) -> (bool, String, String) {
    let mut child = env
        .kubectl()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    (out.status.success(), text(out.stdout), text(out.stderr))
}

#[tokio::test]
async fn config_default_deploys_under_restricted_pod_security() {
    let env = envtest::TestEnv::start().await;
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/default");
    let (ok, rendered, stderr) = kubectl(&env, &["kustomize", config], b"");
    assert!(ok, "kustomize failed: {stderr}");
    let apply = ["apply", "--server-side", "--field-manager=test", "-f", "-"];
    let (ok, _, stderr) = kubectl(&env, &apply, rendered.as_bytes());
    assert!(ok, "the API server rejected config/default: {stderr}");

    // A pod made from the manager's template is admitted in its namespace (restricted enforced)...
    let deployments: Api<Deployment> = Api::namespaced(env.client(), NAMESPACE);
    let deployment = deployments.get(DEPLOYMENT).await.unwrap();
    let template = deployment.spec.unwrap().template;
    let mut pod = Pod {
        metadata: template.metadata.unwrap_or_default(),
        spec: template.spec,
        ..Default::default()
    };
    pod.metadata.name = Some("manager-template".into());
    let pods: Api<Pod> = Api::namespaced(env.client(), NAMESPACE);
    let created = pods.create(&PostParams::default(), &pod).await;
    assert!(created.is_ok(), "the manager pod was rejected: {created:?}");

    // ...where a pod that may escalate privileges is not: the check above could fail.
    pod.metadata.name = Some("escalating".into());
    let container = &mut pod.spec.as_mut().unwrap().containers[0];
    container
        .security_context
        .as_mut()
        .unwrap()
        .allow_privilege_escalation = Some(true);
    let rejected = pods.create(&PostParams::default(), &pod).await;
    assert!(
        matches!(&rejected, Err(kube::Error::Api(status)) if status.code == 403),
        "restricted is not enforced: {rejected:?}"
    );
}
