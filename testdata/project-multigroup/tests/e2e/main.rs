// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! End-to-end tests: the manager runs as its own process, authenticated as its own ServiceAccount with
//! nothing but the RBAC in `config/rbac`, the way it runs in a cluster.
//!
//! By default they start a simulated cluster (etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler and kwok fake nodes, from rustbuilder-envtest). With `USE_EXISTING_CLUSTER=true`
//! they use the cluster of `$KUBECONFIG` instead (they create and delete objects there: use a
//! throw-away cluster). `make test-e2e` runs them after `make manifests`; `create api` adds one module
//! per kind at the marker below.

mod memcached;
// +rustbuilder:scaffold:e2e

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use rustbuilder_envtest::TestEnv;
use serde_json::Value;

/// The namespace and ServiceAccount `config/default` deploys the manager with.
pub const NAMESPACE: &str = "project-multigroup-system";
pub const SERVICE_ACCOUNT: &str = "project-multigroup-controller-manager";
/// The manager's Deployment in `config/default`.
pub const DEPLOYMENT: &str = "project-multigroup-controller-manager";

/// How long an e2e step may take on a slow machine.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// The cluster under test: simulated, or the one of `$KUBECONFIG`.
pub struct Cluster {
    env: Option<TestEnv>,
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    client: Client,
}

impl Cluster {
    pub async fn start() -> Cluster {
        if std::env::var("USE_EXISTING_CLUSTER").is_ok_and(|v| v == "true") {
            let kubeconfig = std::env::var_os("KUBECONFIG")
                .map(PathBuf::from)
                .expect("USE_EXISTING_CLUSTER=true needs KUBECONFIG");
            let client = Client::try_default()
                .await
                .expect("the cluster of $KUBECONFIG is reachable");
            let kubectl = PathBuf::from("kubectl");
            return Cluster {
                env: None,
                kubeconfig,
                kubectl,
                client,
            };
        }
        let env = TestEnv::start_cluster().await;
        let kubeconfig = env.kubeconfig().to_path_buf();
        let kubectl = PathBuf::from(env.kubectl().get_program());
        let client = env.client();
        Cluster {
            env: Some(env),
            kubeconfig,
            kubectl,
            client,
        }
    }

    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Runs kubectl against the cluster and returns its stdout; a failure fails the test.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_with_input(args, None)
    }

    /// Runs kubectl with `input` on stdin.
    pub fn kubectl_with_input(&self, args: &[&str], input: Option<&str>) -> String {
        let output = self.try_kubectl(args, input);
        assert!(output.0, "kubectl {} failed:\n{}", args.join(" "), output.2);
        output.1
    }

    /// Runs kubectl and returns (success, stdout, stderr).
    pub fn try_kubectl(&self, args: &[&str], input: Option<&str>) -> (bool, String, String) {
        use std::io::Write;
        let mut child = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        let mut stdin = child.stdin.take().expect("stdin is piped");
        if let Some(input) = input {
            stdin
                .write_all(input.as_bytes())
                .expect("kubectl reads its input");
        }
        drop(stdin);
        let output = child.wait_with_output().expect("kubectl finishes");
        let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
        (
            output.status.success(),
            text(output.stdout),
            text(output.stderr),
        )
    }

    /// Creates `object` with kubectl. While the manager's webhook server is not listening yet, the API
    /// server cannot call it and refuses objects its webhooks check (they fail closed): that is
    /// retried, any other refusal fails the test.
    pub async fn create(&self, object: &Value) {
        let input = object.to_string();
        eventually("the manager's webhook server to answer", async || {
            let (created, _, errors) = self.try_kubectl(&["create", "-f", "-"], Some(&input));
            let starting = errors.contains("connection refused");
            assert!(created || starting, "kubectl create was refused: {errors}");
            created.then_some(())
        })
        .await;
    }

    /// Runs a target of the project's Makefile against the cluster, as a user would.
    /// `manifests` is taken as done: `make test-e2e` ran it before the tests were built.
    pub fn make(&self, target: &str) {
        let kubectl = format!(
            "{} --kubeconfig={}",
            self.kubectl.display(),
            self.kubeconfig.display()
        );
        let status = Command::new("make")
            .args(["-o", "manifests", target])
            .arg(format!("KUBECTL={kubectl}"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("make runs");
        assert!(status.success(), "make {target} failed");
    }

    /// Installs the CRDs and the manager's RBAC (everything `config/default` holds but the manager
    /// Deployment, whose image is not built here), then starts the manager binary as its ServiceAccount.
    ///
    /// Webhooks, once the project has some, are served by that process: the simulated cluster routes
    /// them to it with a certificate of its own CA, standing in for cert-manager and the Service.
    pub async fn deploy_manager(&self, env: &[(&str, &str)]) -> Manager {
        // The CRDs of other operators' kinds (config/crd/external/) come with those operators in a
        // real cluster; the simulated one gets them here.
        let external = concat!(env!("CARGO_MANIFEST_DIR"), "/config/crd/external");
        if self.env.is_some() && Path::new(external).is_dir() {
            self.kubectl(&["apply", "--server-side", "-f", external]);
        }
        self.make("install");
        let rendered = self.kubectl(&["kustomize", "config/default"]);
        let (rendered, cert_manager) = without_cert_manager(&rendered);
        assert!(
            self.env.is_some() || cert_manager == 0,
            "the manager runs on this machine, where the API server of an existing cluster cannot \
             call its webhooks: run the e2e tests without USE_EXISTING_CLUSTER"
        );
        let objects = self.kubectl_with_input(
            &["create", "--dry-run=client", "-o", "json", "-f", "-"],
            Some(&rendered),
        );
        // kubectl prints one JSON document per object.
        let mut items: Vec<Value> = serde_json::Deserializer::from_str(&objects)
            .into_iter::<Value>()
            .map(|object| object.expect("kubectl prints JSON objects"))
            .filter(|object| object["kind"] != "Deployment")
            .collect();
        if let Some(env) = &self.env {
            // The webhook configurations and conversions call the manager process, not a Service.
            for object in &mut items {
                env.route_webhooks(object);
            }
        }
        let list = serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": items });
        self.kubectl_with_input(
            &["apply", "--server-side", "-f", "-"],
            Some(&list.to_string()),
        );

        let kubeconfig = match &self.env {
            Some(env) => {
                env.service_account_kubeconfig(NAMESPACE, SERVICE_ACCOUNT)
                    .await
            }
            None => self.service_account_kubeconfig(),
        };
        let mut args = Vec::new();
        if let Some(env) = &self.env {
            args.push(format!("--webhook-port={}", env.webhook_port()));
            let certs = env.webhook_cert_dir();
            args.push(format!("--webhook-cert-path={}", certs.display()));
        }
        Manager::start(&kubeconfig, &args, env)
    }

    /// A kubeconfig for the manager's ServiceAccount on an existing cluster (TokenRequest via kubectl).
    fn service_account_kubeconfig(&self) -> PathBuf {
        let token = self.kubectl(&["create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE]);
        let path = std::env::temp_dir().join(format!("{SERVICE_ACCOUNT}-e2e.kubeconfig"));
        std::fs::copy(&self.kubeconfig, &path).expect("the kubeconfig can be copied");
        let path_arg = format!("--kubeconfig={}", path.display());
        let set = Command::new(&self.kubectl)
            .args([
                &path_arg,
                "config",
                "set-credentials",
                "e2e-manager",
                &format!("--token={}", token.trim()),
            ])
            .status();
        assert!(
            set.is_ok_and(|s| s.success()),
            "kubectl config set-credentials failed"
        );
        let user = Command::new(&self.kubectl)
            .args([
                &path_arg,
                "config",
                "set-context",
                "--current",
                "--user=e2e-manager",
            ])
            .status();
        assert!(
            user.is_ok_and(|s| s.success()),
            "kubectl config set-context failed"
        );
        path
    }
}

/// The manager process; stopped with SIGTERM when dropped.
pub struct Manager {
    child: Child,
}

impl Manager {
    fn start(kubeconfig: &Path, args: &[String], env: &[(&str, &str)]) -> Manager {
        let child = Command::new(env!("CARGO_BIN_EXE_project-multigroup"))
            .args([
                "--health-probe-bind-address=127.0.0.1:0",
                "--metrics-bind-address=0",
            ])
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAMESPACE", NAMESPACE)
            .envs(env.iter().copied())
            .spawn()
            .expect("the manager starts");
        Manager { child }
    }

    /// Stops the manager like Kubernetes does (SIGTERM) and returns whether it exited 0 in time.
    pub fn stop(mut self) -> bool {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `rendered` (kustomize output) without cert-manager's objects, and how many there were. A project
/// with webhooks gets its serving certificate from cert-manager's Issuer and Certificate; the simulated
/// cluster has no cert-manager, and its own CA signs the certificate instead.
fn without_cert_manager(rendered: &str) -> (String, usize) {
    let documents: Vec<&str> = rendered.split("\n---\n").collect();
    let kept: Vec<&str> = documents
        .iter()
        .copied()
        .filter(|doc| {
            !doc.lines()
                .any(|line| line.starts_with("apiVersion: cert-manager.io/"))
        })
        .collect();
    let removed = documents.len() - kept.len();
    (kept.join("\n---\n"), removed)
}

/// Polls `check` until it returns `Some`, or fails the test after [`TIMEOUT`] naming `what`.
pub async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {TIMEOUT:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn the_manager_runs_with_only_its_own_rbac() {
    let cluster = Cluster::start().await;
    let manager = cluster.deploy_manager(&[]).await;
    // The manager's ServiceAccount may do what config/rbac grants, and nothing more: the verbs next
    // to the granted ones are refused.
    let who = format!("--as=system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}");
    let can = |verb: &str, resource: &str| {
        let args = ["auth", "can-i", verb, resource, "-n", NAMESPACE, &who];
        let (allowed, answer, errors) = cluster.try_kubectl(&args, None);
        let answer = answer.trim();
        assert!(
            answer == "yes" || answer == "no",
            "kubectl auth can-i failed: {errors}"
        );
        allowed
    };
    assert!(
        can("create", "leases.coordination.k8s.io"),
        "the leader-election role is missing"
    );
    assert!(
        can("create", "events.events.k8s.io"),
        "the manager cannot publish events"
    );
    assert!(
        !can("create", "secrets"),
        "the manager may read or write Secrets"
    );
    assert!(
        !can("delete", "namespaces"),
        "the manager may delete namespaces"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(manager.stop(), "the manager did not exit 0 on SIGTERM");
}

/// `config/default`, what `make deploy` applies, is accepted by the API server, and the manager's Pod
/// passes the restricted Pod Security Standard that its namespace enforces.
#[tokio::test]
async fn config_default_deploys_under_restricted_pod_security() {
    let env = TestEnv::start().await;
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/default");
    let rendered = env
        .kubectl()
        .args(["kustomize", config])
        .output()
        .expect("kubectl runs");
    assert!(
        rendered.status.success(),
        "kustomize failed: {}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let mut apply = env
        .kubectl()
        .args(["apply", "--server-side", "--field-manager=test", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    use std::io::Write as _;
    // As the simulated cluster has no cert-manager, its objects (a project with webhooks has some)
    // are left out.
    let (rendered, _) = without_cert_manager(&String::from_utf8_lossy(&rendered.stdout));
    apply
        .stdin
        .take()
        .unwrap()
        .write_all(rendered.as_bytes())
        .unwrap();
    let applied = apply.wait_with_output().unwrap();
    assert!(
        applied.status.success(),
        "config/default was rejected: {}",
        String::from_utf8_lossy(&applied.stderr)
    );

    // A Pod made from the manager's template is admitted in its namespace...
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
    assert!(created.is_ok(), "the manager Pod was rejected: {created:?}");

    // ...where a Pod that may escalate privileges is not: the check above could fail.
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
