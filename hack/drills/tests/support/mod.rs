//! What the drills share: a simulated cluster with the operator running as a process, a wave of
//! `Memcached` objects, and the one end-state check every drill ends with.

#![allow(dead_code)] // each drill uses a part

pub mod knobs;
pub mod shards;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use drills::OPERATOR_ENV;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, CustomResourceExt, ResourceExt};
use project::api::v1alpha1::{Memcached, MemcachedSpec};
use project::controller::memcached::{AVAILABLE, DEGRADED, IMAGE_ENV};
use rustbuilder_envtest::TestEnv;

/// The namespace of every drill's objects.
pub const NAMESPACE: &str = "drill";
/// The image the operator is told to run: not its default, so the check sees the setting arrive.
pub const IMAGE: &str = "registry.example/memcached:1.6.38-drill";
/// How long a wave may take to converge after the fault is over.
pub const CONVERGE_BUDGET: Duration = Duration::from_secs(90);
/// How long a whole drill may take, cluster start included.
pub const DRILL_BUDGET: Duration = Duration::from_secs(240);
/// The wave the budgets above are made for.
const BUDGETED_OBJECTS: usize = 300;

/// How many objects a drill's wave has: `DRILLS_OBJECTS` when set (to try a drill at scale), else the
/// drill's own number, the one CI runs.
pub fn objects(default: usize) -> usize {
    match std::env::var("DRILLS_OBJECTS") {
        Ok(text) => text.parse().expect("DRILLS_OBJECTS is a number of objects"),
        Err(_) => default,
    }
}

/// `budget` for a wave of `objects`: as it is up to [`BUDGETED_OBJECTS`], in proportion above.
pub fn scaled(budget: Duration, objects: usize) -> Duration {
    budget.mul_f64((objects as f64 / BUDGETED_OBJECTS as f64).max(1.0))
}
/// kube-controller-manager's client limits: its default of 20 requests per second, not the operator,
/// would set the pace of a wave of Deployments.
const CONTROLLER_MANAGER_FLAGS: &str = "--kube-api-qps=300 --kube-api-burst=600";

/// A simulated cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) with the
/// operator running against it as a process.
pub struct Drill {
    pub operator: Operator, // dropped first: killed before the cluster goes
    pub env: TestEnv,
    pub started: Instant,
}

impl Drill {
    /// Starts the cluster with the `Memcached` CRD, the namespace, and the operator.
    pub async fn start() -> Drill {
        if std::env::var_os("ENVTEST_KUBE_CONTROLLER_MANAGER_FLAGS").is_none() {
            // SAFETY: each drill is the only test of its binary, and nothing else runs yet.
            unsafe {
                std::env::set_var(
                    "ENVTEST_KUBE_CONTROLLER_MANAGER_FLAGS",
                    CONTROLLER_MANAGER_FLAGS,
                )
            };
        }
        let started = Instant::now();
        let env = TestEnv::builder()
            .crd(Memcached::crd())
            .cluster(true)
            .start()
            .await;
        env.create_namespace(NAMESPACE).await;
        let operator = Operator::start(env.kubeconfig());
        Drill {
            operator,
            env,
            started,
        }
    }

    pub fn client(&self) -> Client {
        self.env.client()
    }

    /// Creates `memcached-0` … `memcached-{n-1}` (sizes from [`size`]), 16 requests at a time.
    pub async fn create_wave(&self, n: usize) {
        self.create_objects(0..n).await;
    }

    /// Creates the objects numbered `numbers` (`memcached-<i>`), 16 at a time.
    pub async fn create_objects(&self, numbers: std::ops::Range<usize>) {
        let api: Api<Memcached> = Api::namespaced(self.client(), NAMESPACE);
        futures::stream::iter(numbers)
            .map(|i| {
                let api = api.clone();
                async move { create(&api, &name(i), size(i)).await }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>()
            .await
            .expect("the wave is created");
    }

    /// Waits until at least `count` Deployments exist: the wave is under way.
    pub async fn wait_for_deployments(&self, count: usize) {
        let api: Api<Deployment> = Api::namespaced(self.client(), NAMESPACE);
        let budget = scaled(CONVERGE_BUDGET, count * 3);
        let deadline = Instant::now() + budget;
        loop {
            let made = api.list(&Default::default()).await.map(|l| l.items.len());
            if made.as_ref().is_ok_and(|made| *made >= count) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "fewer than {count} Deployments after {budget:?} ({made:?}); {}",
                self.operator.tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until [`end_state_problems`] finds nothing, with `expected` objects; returns how long
    /// that took. Fails the drill with the problems and the operator's log after [`CONVERGE_BUDGET`].
    pub async fn wait_converged(&self, expected: usize) -> Duration {
        let since = Instant::now();
        let budget = scaled(CONVERGE_BUDGET, expected);
        let mut problems;
        loop {
            problems = match end_state_problems(&self.client(), expected).await {
                Ok(problems) if problems.is_empty() => return since.elapsed(),
                Ok(problems) => problems,
                Err(error) => vec![format!("cannot read the state: {error}")],
            };
            if since.elapsed() > budget {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let shown: Vec<&String> = problems.iter().take(15).collect();
        panic!(
            "not converged {budget:?} after the fault: {} problems, e.g. {shown:#?}\n{}",
            problems.len(),
            self.operator.tail()
        );
    }

    /// How far the wave is: (Deployments, objects whose state is final).
    pub async fn progress(&self, expected: usize) -> (usize, usize) {
        let deployments: Api<Deployment> = Api::namespaced(self.client(), NAMESPACE);
        let made = deployments
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len();
        let open = end_state_problems(&self.client(), expected).await.unwrap();
        let names: BTreeSet<&str> = open.iter().filter_map(|p| p.split(':').next()).collect();
        (made, expected.saturating_sub(names.len()))
    }
}

pub fn name(i: usize) -> String {
    format!("memcached-{i}")
}

/// 1, except 2 for every 20th: a wave of up to 4,000 objects fits the Pods the fake nodes take.
pub fn size(i: usize) -> i32 {
    if i % 20 == 1 { 2 } else { 1 }
}

/// Creates a `Memcached`; retried while an object of that name is still being deleted.
pub async fn create(api: &Api<Memcached>, name: &str, size: i32) -> kube::Result<Memcached> {
    let object = Memcached::new(name, MemcachedSpec { size });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match api.create(&PostParams::default(), &object).await {
            Err(kube::Error::Api(status)) if status.code == 409 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            result => return result,
        }
    }
}

/// Deletes a `Memcached` the way `kubectl delete` does (background: its Deployment goes later, with
/// the garbage collector).
pub async fn delete(api: &Api<Memcached>, name: &str) {
    api.delete(name, &DeleteParams::background())
        .await
        .expect("the object is deleted");
}

/// Everything that differs from what the operator promises, one line per problem starting with the
/// object's name; empty when every `Memcached` in the namespace (`expected` of them) has converged:
///
/// - its Deployment (same name) is controlled by the object's current uid, and was not made before it;
/// - replicas = size, the image is [`IMAGE`], the Deployment controller has seen its latest spec and
///   `size` replicas are updated, ready and available;
/// - the object reports `Available=True` and `Degraded` not True for its current generation, and
///   `observedGeneration` is its generation;
/// - no other Deployment: none without a living `Memcached` controller (orphan), none twice (duplicate).
pub async fn end_state_problems(client: &Client, expected: usize) -> kube::Result<Vec<String>> {
    let objects = Api::<Memcached>::namespaced(client.clone(), NAMESPACE)
        .list(&Default::default())
        .await?
        .items;
    let deployments = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .list(&Default::default())
        .await?
        .items;
    let mut problems = Vec::new();
    if objects.len() != expected {
        let found = objects.len();
        problems.push(format!(
            "namespace: {found} Memcacheds, expected {expected}"
        ));
    }
    let owners: BTreeMap<String, &Memcached> = objects
        .iter()
        .map(|m| (m.uid().unwrap_or_default(), m))
        .collect();
    let mut controlled: BTreeMap<String, Vec<&Deployment>> = BTreeMap::new();
    for deployment in &deployments {
        let controller = controller_of(deployment);
        match controller {
            Some(owner) if owner.kind == "Memcached" && owners.contains_key(&owner.uid) => {
                controlled
                    .entry(owner.uid.clone())
                    .or_default()
                    .push(deployment)
            }
            _ => problems.push(format!(
                "{}: orphan Deployment (controller {:?})",
                deployment.name_any(),
                controller.map(|o| &o.uid)
            )),
        }
    }
    for object in &objects {
        let name = object.name_any();
        let uid = object.uid().unwrap_or_default();
        match controlled.get(&uid).map(Vec::as_slice) {
            None | Some([]) => problems.push(format!("{name}: no Deployment")),
            Some([deployment]) => problems.extend(
                deployment_problems(object, deployment)
                    .into_iter()
                    .map(|p| format!("{name}: {p}")),
            ),
            Some(many) => problems.push(format!("{name}: {} Deployments", many.len())),
        }
        problems.extend(
            status_problems(object)
                .into_iter()
                .map(|p| format!("{name}: {p}")),
        );
    }
    Ok(problems)
}

/// The owner reference with `controller: true`, if any.
fn controller_of(deployment: &Deployment) -> Option<&OwnerReference> {
    let owners = deployment.metadata.owner_references.as_deref();
    owners
        .unwrap_or_default()
        .iter()
        .find(|o| o.controller == Some(true))
}

fn deployment_problems(object: &Memcached, deployment: &Deployment) -> Vec<String> {
    let mut problems = Vec::new();
    let size = object.spec.size;
    if deployment.name_any() != object.name_any() {
        problems.push(format!("controls Deployment {}", deployment.name_any()));
    }
    // RFC 3339 timestamps in UTC with whole seconds: compared as text.
    let created = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.as_ref().map(|t| t.0.to_string())
    };
    let (made, born) = (
        created(&deployment.metadata.creation_timestamp),
        created(&object.metadata.creation_timestamp),
    );
    if made < born {
        problems.push(format!(
            "Deployment made {made:?}, before the object ({born:?})"
        ));
    }
    let spec = deployment.spec.as_ref();
    if spec.and_then(|s| s.replicas) != Some(size) {
        let replicas = spec.and_then(|s| s.replicas);
        problems.push(format!("replicas {replicas:?}, size {size}"));
    }
    let pod = spec.and_then(|s| s.template.spec.as_ref());
    let image = pod.and_then(|p| p.containers.first()?.image.clone());
    if image.as_deref() != Some(IMAGE) {
        problems.push(format!("image {image:?}"));
    }
    let status = deployment.status.clone().unwrap_or_default();
    if status.observed_generation != deployment.metadata.generation {
        problems.push("Deployment status is behind its spec".into());
    }
    // `replicas` too: Pods of an older template (another writer's scale or image) may still be
    // going once the new ones are all ready, and the operator mirrors that count in its status.
    let counts = [
        status.replicas,
        status.updated_replicas,
        status.ready_replicas,
        status.available_replicas,
    ];
    if counts != [Some(size); 4] {
        problems.push(format!(
            "replicas/updated/ready/available {counts:?}, size {size}"
        ));
    }
    problems
}

fn status_problems(object: &Memcached) -> Vec<String> {
    let mut problems = Vec::new();
    let generation = object.metadata.generation;
    let status = object.status.clone().unwrap_or_default();
    if status.observed_generation != generation {
        let observed = status.observed_generation;
        problems.push(format!(
            "observedGeneration {observed:?}, generation {generation:?}"
        ));
    }
    let find = |type_: &str| status.conditions.iter().find(|c| c.type_ == type_);
    match find(AVAILABLE) {
        Some(c) if c.status == "True" && c.observed_generation == generation => {}
        other => problems.push(format!(
            "Available is {:?} for generation {:?}",
            other.map(|c| &c.status),
            other.map(|c| c.observed_generation)
        )),
    }
    if find(DEGRADED).is_some_and(|c| c.status == "True") {
        problems.push("Degraded is True".into());
    }
    // The Deployment's counts as the operator last reported them: until they are final, it has
    // one more status to write.
    let size = Some(object.spec.size);
    if (status.replicas, status.ready_replicas) != (size, size) {
        problems.push(format!(
            "status replicas/readyReplicas {:?}/{:?}, size {}",
            status.replicas, status.ready_replicas, object.spec.size
        ));
    }
    problems
}

/// The operator binary: [`OPERATOR_ENV`] (what `make test-drills` passes), else built from
/// testdata/project into this package's target dir.
pub fn operator_binary() -> PathBuf {
    if let Some(path) = std::env::var_os(OPERATOR_ENV) {
        return PathBuf::from(path);
    }
    let project = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/project");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("operator");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let built = Command::new(cargo)
        .args(["build", "--locked", "--bin", "project", "--manifest-path"])
        .arg(project.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .status()
        .expect("cargo runs");
    assert!(
        built.success(),
        "cannot build the operator ({OPERATOR_ENV} is not set)"
    );
    target.join("debug/project")
}

/// The operator as a process: the `project` binary, as admin of the simulated cluster, probes on a
/// free port, metrics off, its output in `operator.log` next to the cluster's logs.
pub struct Operator {
    child: Child,
    kubeconfig: PathBuf,
    log: PathBuf,
}

impl Operator {
    pub fn start(kubeconfig: &Path) -> Operator {
        let log = kubeconfig.with_file_name("operator.log");
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .expect("the operator's log file");
        let child = Command::new(operator_binary())
            .args([
                "--health-probe-bind-address=127.0.0.1:0",
                "--metrics-bind-address=0",
                // The drills read the `reconciled` lines, logged at debug.
                "--log-level=info,rustbuilder_runtime::controller=debug",
            ])
            .env("KUBECONFIG", kubeconfig)
            .env(IMAGE_ENV, IMAGE)
            .env("POD_NAMESPACE", NAMESPACE)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("the operator starts");
        Operator {
            child,
            kubeconfig: kubeconfig.to_owned(),
            log,
        }
    }

    /// SIGKILL: no graceful shutdown, no lease release, reconciles cut off mid-flight.
    pub fn kill(&mut self) -> ExitStatus {
        self.child.kill().expect("the operator is killed");
        self.child.wait().expect("the operator is reaped")
    }

    /// SIGSTOP: the process stops where it is, every thread at once (as under CPU throttling or a
    /// stalled node), until [`Operator::resume`].
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT: a paused process goes on from where it stopped, its clocks having moved on.
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill(2) on our own child's pid, which is not reaped while `self.child` lives.
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(
            sent,
            0,
            "signal {signal} to the operator: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Starts a new operator process, as its Deployment would after a crash.
    pub fn restart(&mut self) {
        *self = Operator::start(&self.kubeconfig.clone());
    }

    /// `None` while it runs, else how it ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("the operator's state")
    }

    /// The end of its log, to explain a failure.
    pub fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        format!("last lines of {}:\n{tail}", self.log.display())
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
