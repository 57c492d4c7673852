//! `ENVTEST_<NAME>_FLAGS` reaches the component it names, after the harness's own flags, and
//! the component still starts. A test binary of its own: the variables are process-wide.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use rustbuilder_envtest::TestEnv;

const CONTROLLER_MANAGER_FLAGS: &str = "--kube-api-qps=500 --kube-api-burst=1000";
const APISERVER_FLAGS: &str = "--max-requests-inflight=345";

fn command_line(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

#[tokio::test]
async fn component_flags_come_from_the_environment() {
    // SAFETY: the only test of this binary; no other thread reads the environment yet.
    unsafe {
        std::env::set_var(
            "ENVTEST_KUBE_CONTROLLER_MANAGER_FLAGS",
            CONTROLLER_MANAGER_FLAGS,
        );
        std::env::set_var(
            "ENVTEST_KUBE_APISERVER_FLAGS",
            format!("  {APISERVER_FLAGS}\n"),
        );
    }
    let env = TestEnv::start_cluster().await;
    let pids = env.pids();
    let pid = |name| pids.iter().find(|(n, _)| *n == name).unwrap().1;

    let controller_manager = command_line(pid("kube-controller-manager"));
    assert!(
        controller_manager
            .trim_end()
            .ends_with(CONTROLLER_MANAGER_FLAGS),
        "{controller_manager}"
    );
    let apiserver = command_line(pid("kube-apiserver"));
    assert!(
        apiserver.trim_end().ends_with(APISERVER_FLAGS),
        "{apiserver}"
    );
    for other in ["etcd", "kube-scheduler", "kwok"] {
        let line = command_line(pid(other));
        assert!(!line.contains("--kube-api-qps=500"), "{other}: {line}");
        assert!(!line.contains("--max-requests-inflight"), "{other}: {line}");
    }

    // Both still work: the apiserver answers, and the controller-manager makes the new
    // namespace's `default` ServiceAccount (create_namespace waits for it).
    env.create_namespace("flags").await;
    let nodes: Api<Node> = Api::all(env.client());
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        3
    );
}
