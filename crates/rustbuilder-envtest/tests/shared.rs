//! The tests of a binary share one env through `take_turn`: one turn at a time, each with a namespace of
//! its own, on the same API server; a turn that panics is given back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams};
use rustbuilder_envtest::{TestEnv, TestEnvBuilder, take_turn};

fn shared_env() -> TestEnvBuilder {
    TestEnv::builder()
}

/// Turns asked for at once follow one another: none begins while another is held.
#[tokio::test]
async fn turns_asked_for_at_once_follow_one_another() {
    static HELD: AtomicBool = AtomicBool::new(false);
    let turns = (0..3).map(|i| {
        tokio::spawn(async move {
            let env = take_turn(shared_env).await;
            assert!(!HELD.swap(true, Ordering::SeqCst), "two turns at once");
            // Long enough for the other tasks to run into the turn, were it not held.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let marker: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": { "name": format!("made-by-{i}") },
            }))
            .unwrap();
            let configmaps: Api<ConfigMap> = Api::namespaced(env.client(), env.namespace());
            configmaps
                .create(&PostParams::default(), &marker)
                .await
                .unwrap();
            let listed = configmaps.list(&ListParams::default()).await.unwrap();
            let names: Vec<_> = listed.iter().map(|c| c.metadata.name.clone()).collect();
            HELD.store(false, Ordering::SeqCst);
            (env.namespace().to_owned(), names)
        })
    });
    let mut namespaces = Vec::new();
    for (i, turn) in futures::future::join_all(turns)
        .await
        .into_iter()
        .enumerate()
    {
        let (namespace, names) = turn.expect("a turn failed");
        // Its namespace holds what it made there, nothing of the others.
        let mine = format!("made-by-{i}");
        assert!(names.contains(&Some(mine.clone())), "{names:?}");
        let others = names
            .iter()
            .flatten()
            .filter(|n| n.starts_with("made-by-") && **n != mine);
        assert_eq!(others.count(), 0, "{names:?}");
        namespaces.push(namespace);
    }
    namespaces.sort();
    namespaces.dedup();
    assert_eq!(
        namespaces.len(),
        3,
        "a namespace given twice: {namespaces:?}"
    );
}

/// A test that panics in its turn gives it back when it unwinds, and leaves the env serving.
#[tokio::test]
async fn a_turn_that_panics_is_given_back() {
    let failed = tokio::spawn(async {
        let _env = take_turn(shared_env).await;
        panic!("a test fails in its turn");
    })
    .await;
    assert!(failed.is_err_and(|e| e.is_panic()));

    let env = tokio::time::timeout(Duration::from_secs(60), take_turn(shared_env))
        .await
        .expect("the turn of a panicked test was never given back");
    let namespaces: Api<Namespace> = Api::all(env.client());
    let own = namespaces.get(env.namespace()).await.unwrap();
    assert_eq!(own.metadata.name.as_deref(), Some(env.namespace()));
}
