//! `TestEnv::start()`: the CRDs of config/crd/bases are installed and served.

#[path = "../../../templates/init/tests/envtest/mod.rs"]
mod envtest;

use envtest::TestEnv;
use envtest_harness::{Widget, WidgetSpec};
use kube::api::{Api, PostParams};

#[tokio::test]
async fn widget_crd_is_installed_and_served() {
    let env = TestEnv::start().await;
    let widgets: Api<Widget> = Api::default_namespaced(env.client());
    let widget = Widget::new("w1", WidgetSpec { size: 3 });
    widgets
        .create(&PostParams::default(), &widget)
        .await
        .unwrap();
    assert_eq!(widgets.get("w1").await.unwrap().spec.size, 3);

    // kubectl from the assets talks to the same apiserver.
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
async fn two_envs_at_once_are_isolated() {
    let (a, b) = tokio::join!(TestEnv::start(), TestEnv::start());
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
}
