//! `TestEnv::start()` and the builder: etcd + kube-apiserver, CRDs from Rust values or YAML files.

mod widget;

use k8s_openapi::api::core::v1::Namespace;
use kube::CustomResourceExt;
use kube::api::{Api, PostParams};
use rustbuilder_envtest::TestEnv;
use widget::{Widget, WidgetSpec};

#[tokio::test]
async fn crd_from_a_rust_value_is_installed_and_served() {
    let env = TestEnv::builder().crd(Widget::crd()).start().await;
    let widgets: Api<Widget> = Api::default_namespaced(env.client());
    let widget = Widget::new("w1", WidgetSpec { size: 3 });
    widgets
        .create(&PostParams::default(), &widget)
        .await
        .unwrap();
    assert_eq!(widgets.get("w1").await.unwrap().spec.size, 3);

    // kubectl from the assets talks to the same apiserver, and discovery already lists the CRD.
    let out = env
        .kubectl()
        .args(["get", "widgets", "-o", "name"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "widget.test.example.com/w1\n"
    );
}

#[tokio::test]
async fn crds_from_a_yaml_directory_are_installed() {
    let dir = tempfile::tempdir().unwrap();
    // Several documents in one file, with a leading separator, as `make manifests` writes them.
    let yaml = format!("---\n{}", serde_yaml::to_string(&Widget::crd()).unwrap());
    std::fs::write(dir.path().join("test.example.com_widgets.yaml"), yaml).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not yaml: ignored").unwrap();

    let env = TestEnv::builder().crd_dir(dir.path()).start().await;
    let widgets: Api<Widget> = Api::default_namespaced(env.client());
    widgets
        .create(
            &PostParams::default(),
            &Widget::new("from-yaml", WidgetSpec { size: 1 }),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn without_crds_only_built_in_apis_are_served() {
    let env = TestEnv::start().await;
    let namespaces: Api<Namespace> = Api::all(env.client());
    assert!(namespaces.get_opt("default").await.unwrap().is_some());
    let widgets: Api<Widget> = Api::default_namespaced(env.client());
    let err = widgets.get_opt("w1").await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(status) if status.code == 404),
        "{err}"
    );
}

#[tokio::test]
async fn two_envs_at_once_are_isolated() {
    let (a, b) = tokio::join!(
        TestEnv::builder().crd(Widget::crd()).start(),
        TestEnv::builder().crd(Widget::crd()).start()
    );
    let in_a: Api<Widget> = Api::default_namespaced(a.client());
    let in_b: Api<Widget> = Api::default_namespaced(b.client());
    in_a.create(
        &PostParams::default(),
        &Widget::new("only-in-a", WidgetSpec { size: 1 }),
    )
    .await
    .unwrap();
    assert!(in_a.get_opt("only-in-a").await.unwrap().is_some());
    assert!(in_b.get_opt("only-in-a").await.unwrap().is_none());
    assert_ne!(a.kubeconfig(), b.kubeconfig());
}

#[tokio::test]
async fn dropping_the_env_stops_its_processes_and_removes_its_directory() {
    let env = TestEnv::start().await;
    let pids = env.pids();
    let names: Vec<&str> = pids.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["etcd", "kube-apiserver"]);
    let dir = env.kubeconfig().parent().unwrap().to_owned();
    assert!(dir.is_dir());
    drop(env);
    for (name, pid) in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{name} ({pid}) still runs"
        );
    }
    assert!(!dir.exists(), "{} was not removed", dir.display());
}
