//! Drill: objects are deleted and created again under the same name (a new uid, a new size) while the
//! wave converges. Until the garbage collector removes it, the old Deployment is still there, and its
//! controller reference names the old uid: the operator must refuse it (never adopt it), then make its
//! own once it is gone. The garbage collector (kube-controller-manager) is stopped while the objects are
//! recreated, so every recreated object meets its old Deployment; then it starts again. At the end no
//! Deployment of the old objects exists.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::Api;
use project::api::v1alpha1::Memcached;
use project::controller::memcached::DEGRADED;
use rustbuilder_envtest::Component;
use support::{DRILL_BUDGET, Drill, NAMESPACE};

const OBJECTS: usize = 100;
/// Every other object is deleted and created again.
const RECREATED: usize = OBJECTS / 2;
/// How long the operator may take to report that it refuses an old Deployment.
const REFUSAL_BUDGET: Duration = Duration::from_secs(30);

#[tokio::test]
async fn objects_deleted_and_recreated_mid_wave_get_deployments_of_their_own() {
    tokio::time::timeout(DRILL_BUDGET, drill())
        .await
        .expect("the drill took longer than its budget");
}

/// The controller reference's uid of each Deployment named in `names`: (Deployment uid, owner uid).
async fn deployments_of(api: &Api<Deployment>, names: &BTreeSet<String>) -> Vec<(String, String)> {
    let list = api.list(&Default::default()).await.unwrap();
    list.iter()
        .filter(|d| names.contains(&d.name_any()))
        .filter_map(|d| {
            let owners = d.owner_references();
            let controller = owners.iter().find(|o| o.controller == Some(true))?;
            Some((d.uid()?, controller.uid.clone()))
        })
        .collect()
}

async fn drill() {
    let mut drill = Drill::start().await;
    drill.create_wave(OBJECTS).await;
    drill.wait_for_deployments(OBJECTS / 2).await;

    let objects: Api<Memcached> = Api::namespaced(drill.client(), NAMESPACE);
    let deployments: Api<Deployment> = Api::namespaced(drill.client(), NAMESPACE);
    let recreated: Vec<usize> = (0..OBJECTS).step_by(2).collect();
    assert_eq!(recreated.len(), RECREATED);
    let names: BTreeSet<String> = recreated.iter().copied().map(support::name).collect();

    // No garbage collection from here until the objects are back.
    drill.env.stop(Component::KubeControllerManager).await;
    let before = deployments_of(&deployments, &names).await;
    let old_uids: Vec<String> = futures::stream::iter(recreated.iter().copied())
        .map(|i| {
            let objects = objects.clone();
            async move {
                let name = support::name(i);
                let old = objects.get(&name).await.unwrap().uid().unwrap();
                support::delete(&objects, &name).await;
                // A different size, so the new object's spec must win as well.
                support::create(&objects, &name, 3 - support::size(i))
                    .await
                    .unwrap();
                old
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let old_uids: BTreeSet<String> = old_uids.into_iter().collect();
    let after = deployments_of(&deployments, &names).await;
    // Every Deployment an old object had: the ones seen before, and any it got meanwhile.
    let mut old: BTreeSet<String> = before.iter().map(|(uid, _)| uid.clone()).collect();
    let met_old: BTreeSet<String> = after
        .iter()
        .filter(|(_, owner)| old_uids.contains(owner))
        .map(|(uid, _)| uid.clone())
        .collect();
    old.extend(met_old.iter().cloned());
    assert!(
        !met_old.is_empty(),
        "no recreated object met an old Deployment"
    );

    // Each recreated object whose old Deployment is still there says it refuses it.
    let deadline = Instant::now() + REFUSAL_BUDGET;
    let refusing = loop {
        let list = objects.list(&Default::default()).await.unwrap();
        let refusing = list
            .iter()
            .filter(|o| names.contains(&o.name_any()))
            .filter(|o| {
                let status = o.status.as_ref();
                let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
                conditions.iter().any(|c| {
                    c.type_ == DEGRADED && c.status == "True" && c.reason == "DeploymentNotOwned"
                })
            })
            .count();
        if refusing >= met_old.len() {
            break refusing;
        }
        // An old Deployment whose controller is now a recreated object was adopted.
        let now = deployments_of(&deployments, &names).await;
        let adopted = now
            .iter()
            .filter(|(uid, owner)| old.contains(uid) && !old_uids.contains(owner))
            .count();
        assert!(
            Instant::now() < deadline && adopted == 0,
            "{refusing} of {} recreated objects report DeploymentNotOwned; {adopted} of the {} old \
             Deployments are controlled by the recreated objects (adopted)\n{}",
            met_old.len(),
            old.len(),
            drill.operator.tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    drill
        .env
        .start_component(Component::KubeControllerManager)
        .await;
    let recovery = drill.wait_converged(OBJECTS).await;
    let now: BTreeSet<String> = deployments
        .list(&Default::default())
        .await
        .unwrap()
        .iter()
        .filter_map(|d| d.uid())
        .collect();
    let adopted: Vec<&String> = old.intersection(&now).collect();
    assert!(
        adopted.is_empty(),
        "{} Deployments of deleted objects survive, adopted by their successors: {adopted:?}\n{}",
        adopted.len(),
        drill.operator.tail()
    );
    eprintln!(
        "drill recreate: {OBJECTS} objects, {RECREATED} deleted and recreated with the garbage \
         collector stopped; {} met their old Deployment, {refusing} refused it; converged \
         {recovery:.1?} after kube-controller-manager came back ({} old Deployments, none adopted)",
        met_old.len(),
        old.len()
    );
}
