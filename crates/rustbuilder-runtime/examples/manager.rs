//! A small operator on rustbuilder-runtime, with every manager flag: for each ConfigMap labelled
//! `example.com/echo`, it keeps a copy of the data in a ConfigMap named `<name>-echo`, owned by the
//! original (so the copy is deleted with it) and labelled as created by this manager.
//!
//! ```text
//! cargo run --example manager -- --help
//! cargo run --example manager -- --health-probe-bind-address=:8081 --metrics-bind-address=:8443
//! kubectl create configmap greeting --from-literal=hello=world
//! kubectl label configmap greeting example.com/echo=
//! kubectl get configmap greeting-echo -o yaml
//! ```
//!
//! A source ConfigMap with a `fail` key makes the reconcile fail (retried with backoff), to show what
//! failures look like in logs and metrics.
//!
//! With `--fleet` it copies in every cluster of a fleet instead (the `--cluster-*` flags say where
//! the clusters come from), the same controller in each; with `--sharding` too, its replicas share
//! the clusters:
//!
//! ```text
//! cargo run --example manager -- --fleet --cluster-provider kubeconfig-dir --cluster-kubeconfig-dir clusters/
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use rustbuilder_runtime::apply::{self, Applied};
use rustbuilder_runtime::events::Events;
use rustbuilder_runtime::fleet::{Cluster, Fleet, FleetArgs};
use rustbuilder_runtime::manager::{Manager, ManagerArgs};
use rustbuilder_runtime::owned::{self, MANAGED_BY_LABEL, Owned};

/// The field manager, event reporter and `app.kubernetes.io/managed-by` value of this operator.
const MANAGER_NAME: &str = "echo-operator";

/// The leader-election Lease: unique to this operator, the same for all its replicas.
const LEADER_ELECTION_ID: &str = "echo-operator.example.com";

/// ConfigMaps with this label are copied.
const SOURCE_LABEL: &str = "example.com/echo";

// The API calls below, as `make manifests` would collect them into the manager's ClusterRole.
// +rustbuilder:rbac:groups=core,resources=configmaps,verbs=get;list;watch;create;patch
// +rustbuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

/// The echo operator: copies labelled ConfigMaps. Every flag can also be set through the environment
/// variable shown next to it.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    #[command(flatten)]
    manager: ManagerArgs,

    /// Pause this many milliseconds in every reconcile (to watch graceful shutdown at work).
    #[arg(long, env = "ECHO_RECONCILE_DELAY_MS", default_value_t = 0)]
    reconcile_delay_ms: u64,

    /// Copy in every cluster of a fleet, not in this one.
    #[arg(long, env = "ECHO_FLEET")]
    fleet: bool,

    #[command(flatten)]
    clusters: FleetArgs,
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Refused(String),
}

/// What every reconcile shares.
struct Context {
    client: Client,
    events: Events,
    copies: Owned<ConfigMap>,
    delay: Duration,
}

#[tokio::main]
async fn main() -> Result<(), rustbuilder_runtime::manager::Error> {
    let args = Args::parse();
    let delay = Duration::from_millis(args.reconcile_delay_ms);
    let manager = Manager::start(MANAGER_NAME, LEADER_ELECTION_ID, args.manager).await?;
    let controllers = manager.controllers();
    if args.fleet {
        // The same controller in each cluster, started at its engagement, stopped at its end.
        let engage = move |cluster: &Cluster| {
            let manager = cluster.manager();
            manager.controllers().add(run(manager.clone(), delay));
        };
        let fleet = Fleet::new(&manager, args.clusters.provider(&manager)?, engage);
        controllers.add(fleet.run());
    } else {
        controllers.add(run(manager.clone(), delay));
    }
    controllers.run().await
}

/// Runs the echo controller until shutdown.
async fn run(manager: Manager, delay: Duration) {
    // The copies this manager made, cached; a change to one reconciles its source. A cluster holds
    // many ConfigMaps that are not ours, and every copy carries our label: the labelled cache keeps
    // only the copies (and the names of the others, so that a free name costs no API call).
    let copies = manager.owned_labelled::<ConfigMap>().with_other_names();
    let ctx = Arc::new(Context {
        client: manager.client(),
        events: manager.events(),
        copies: copies.clone(),
        delay,
    });
    manager
        .controller(Api::<ConfigMap>::all(manager.client()), "echo")
        .watcher_config(watcher::Config::default().labels(SOURCE_LABEL))
        .owns(&copies)
        .concurrency(4)
        .run(reconcile, ctx)
        .await;
}

/// Makes `<name>-echo` hold the data of `source`.
async fn reconcile(source: Arc<ConfigMap>, ctx: Arc<Context>) -> Result<Action, Error> {
    tokio::time::sleep(ctx.delay).await;
    let data = source.data.clone().unwrap_or_default();
    if data.contains_key("fail") {
        return Err(Error::Refused("the source has a `fail` key".into()));
    }
    let namespace = source.namespace().unwrap_or_default();
    let name = format!("{}-echo", source.name_any());

    let current = ctx.copies.find(&namespace, &name).await?;
    if let Some(current) = &current
        && !owned::controlled_by(&**current, &*source)
    {
        let note = format!("ConfigMap {name} exists and is not a copy of this one: left alone");
        ctx.events.warning(&*source, "CopyConflict", "Apply", &note);
        return Err(Error::Refused(note));
    }

    let desired = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY_LABEL.to_string(),
                MANAGER_NAME.to_string(),
            )])),
            owner_references: source.controller_owner_ref(&()).map(|owner| vec![owner]),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    // Containment alone would miss a key removed from the source: compare the data as a whole.
    let current = current.filter(|c| c.data == desired.data);
    let api = Api::<ConfigMap>::namespaced(ctx.client.clone(), &namespace);
    let applied = apply::apply(&api, current.as_deref(), &desired, MANAGER_NAME).await?;
    if let Applied::Changed(_) = applied {
        let note = format!("Copied the data to ConfigMap {name}");
        ctx.events.normal(&*source, "Copied", "Apply", &note);
    }
    Ok(Action::await_change())
}
