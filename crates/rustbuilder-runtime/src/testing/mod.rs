//! What a project's tests against a real API server keep needing (feature `testing`, for
//! `[dev-dependencies]`): polling with a deadline, reading events and metrics, granting a
//! service account exactly the role the project's RBAC markers declare, and a client whose lists of
//! one kind come late (a cache still filling).
//!
//! ```no_run
//! # async fn f(client: kube::Client) {
//! use std::time::Duration;
//! use rustbuilder_runtime::testing;
//!
//! // The manager's role, from the `// +rustbuilder:rbac:` markers under src/, bound to an account.
//! testing::grant_manager_role(&client, env!("CARGO_MANIFEST_DIR").as_ref(), "operator-system", "controller-manager").await;
//! let event = testing::wait_for_event(&client, "default", "sample", "DeploymentCreated", Duration::from_secs(30)).await;
//! # }
//! ```

pub mod explore;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::Client;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};

use crate::manager::Manager;
use crate::manifests;

/// `client`, but each list of `resource` (a `GET` of the collection, not a watch) is answered
/// `delay` late: a cache of that kind still filling, as one of many thousand objects does after a
/// restart, for tests of what a controller does meanwhile. Give it to [`Manager::new`].
///
/// ```no_run
/// # async fn f(client: kube::Client) {
/// use std::time::Duration;
/// use rustbuilder_runtime::{Manager, testing};
///
/// let slow = testing::with_slow_lists(client, "jobs", Duration::from_secs(5));
/// let manager = Manager::new("my-operator", slow);
/// # }
/// ```
pub fn with_slow_lists(client: Client, resource: &str, delay: Duration) -> Client {
    let collection = format!("/{resource}");
    let default_namespace = client.default_namespace().to_string();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let uri = request.uri();
        let watch = uri
            .query()
            .is_some_and(|query| query.split('&').any(|pair| pair.starts_with("watch=")));
        let slow =
            request.method() == http::Method::GET && uri.path().ends_with(&collection) && !watch;
        let client = client.clone();
        async move {
            if slow {
                tokio::time::sleep(delay).await;
            }
            client.send(request).await
        }
    });
    Client::new(service, default_namespace)
}

/// Calls `check` every 250 ms until it returns `Some`, and returns that.
///
/// # Panics
///
/// After `timeout`, naming `what` was waited for.
pub async fn eventually<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The events (`events.k8s.io/v1`) about the object `name` in `namespace`, oldest first.
///
/// # Panics
///
/// If the events cannot be listed.
pub async fn events_about(client: &Client, namespace: &str, name: &str) -> Vec<Event> {
    let events = Api::<Event>::namespaced(client.clone(), namespace);
    let list = events
        .list(&ListParams::default())
        .await
        .expect("events listed");
    let about =
        |event: &Event| event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name);
    list.items.into_iter().filter(about).collect()
}

/// Waits for an event with `reason` about the object `name`.
///
/// # Panics
///
/// After `timeout`.
pub async fn wait_for_event(
    client: &Client,
    namespace: &str,
    name: &str,
    reason: &str,
    timeout: Duration,
) -> Event {
    eventually(
        &format!("a {reason} event about {name}"),
        timeout,
        async || {
            let events = events_about(client, namespace, name).await;
            events
                .into_iter()
                .find(|event| event.reason.as_deref() == Some(reason))
        },
    )
    .await
}

/// The requests the API server has served for `resource` (and `subresource`, `""` for none) with
/// one of `verbs`, from its `apiserver_request_total` metric. Server-side apply counts as `APPLY`.
///
/// # Panics
///
/// If the API server's metrics cannot be read (the client needs `get` on `/metrics`).
pub async fn api_requests(
    client: &Client,
    verbs: &[&str],
    resource: &str,
    subresource: &str,
) -> u64 {
    let request = kube::core::Request::new("")
        .get("metrics", &Default::default())
        .expect("a request for /metrics");
    let text = client
        .request_text(request)
        .await
        .expect("the API server's metrics");
    text.lines()
        .filter_map(|line| line.strip_prefix("apiserver_request_total{"))
        .filter_map(|line| line.split_once("} "))
        .filter(|(labels, _)| {
            let has = |key: &str, value: &str| labels.contains(&format!("{key}=\"{value}\""));
            verbs.iter().any(|verb| has("verb", verb))
                && has("resource", resource)
                && has("subresource", subresource)
        })
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

/// The reconciles of `controller` that ended with `result` (`success`, `error`, `requeue`,
/// `requeue_after`), as the manager counts them (`controller_runtime_reconcile_total`).
pub fn reconciles(manager: &Manager, controller: &str, result: &str) -> u64 {
    let prefix = "controller_runtime_reconcile_total{";
    let labels = [
        format!("controller=\"{controller}\""),
        format!("result=\"{result}\""),
    ];
    manager
        .metrics()
        .encode()
        .lines()
        .filter_map(|line| line.strip_prefix(prefix))
        .filter(|line| labels.iter().all(|label| line.contains(label.as_str())))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Creates the ClusterRole `manager-role` with the rules of the `// +rustbuilder:rbac:` markers
/// under `project_dir/src` (what `make manifests` writes to `config/rbac/role.yaml`), and binds it
/// to the service account `namespace/service_account`: the operator's permissions, exactly.
///
/// # Panics
///
/// If a marker cannot be read or the API server refuses the objects.
pub async fn grant_manager_role(
    client: &Client,
    project_dir: &Path,
    namespace: &str,
    service_account: &str,
) {
    let rules = manifests::rbac_rules(project_dir).expect("the RBAC markers");
    assert!(
        !rules.is_empty(),
        "no RBAC marker under {}",
        project_dir.join("src").display()
    );
    let rules = rules.into_iter().map(|rule| PolicyRule {
        api_groups: Some(rule.api_groups),
        resources: Some(rule.resources),
        verbs: rule.verbs,
        ..PolicyRule::default()
    });
    let role = ClusterRole {
        metadata: named("manager-role"),
        rules: Some(rules.collect()),
        ..ClusterRole::default()
    };
    let binding = ClusterRoleBinding {
        metadata: named("manager-rolebinding"),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: "manager-role".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: service_account.into(),
            namespace: Some(namespace.into()),
            ..Subject::default()
        }]),
    };
    let pp = PostParams::default();
    let roles = Api::<ClusterRole>::all(client.clone());
    roles
        .create(&pp, &role)
        .await
        .expect("the manager's ClusterRole");
    let bindings = Api::<ClusterRoleBinding>::all(client.clone());
    bindings.create(&pp, &binding).await.expect("its binding");
}

fn named(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn eventually_returns_the_first_value() {
        let mut calls = 0;
        let found = eventually("the third call", Duration::from_secs(5), async || {
            calls += 1;
            (calls == 3).then_some(calls)
        })
        .await;
        assert_eq!(found, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 300ms waiting for nothing")]
    async fn eventually_fails_at_its_deadline() {
        eventually("nothing", Duration::from_millis(300), async || None::<()>).await;
    }

    #[tokio::test]
    async fn reconciles_are_read_from_the_managers_metrics() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let manager = Manager::new("test", Client::try_from(config).unwrap());
        let metrics = manager.metrics().controller("widget", 1);
        use kube::runtime::controller::Action;
        let success = Ok(&Action::await_change());
        metrics.record(success, Duration::ZERO);
        metrics.record(success, Duration::ZERO);
        metrics.record(Err(()), Duration::ZERO);
        assert_eq!(reconciles(&manager, "widget", "success"), 2);
        assert_eq!(reconciles(&manager, "widget", "error"), 1);
        assert_eq!(reconciles(&manager, "other", "success"), 0);
    }
}
