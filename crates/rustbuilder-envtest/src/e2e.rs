//! The plumbing of a generated project's end-to-end tests: the cluster they run on, the manager
//! process they deploy, and polling. A project's `tests/e2e/` keeps only its checks.
//!
//! The manager runs as its own process, authenticated as its own ServiceAccount with nothing but the
//! RBAC in the project's `config/rbac`, the way it runs in a cluster. By default the cluster is
//! simulated (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok fake nodes), one for
//! the tests of a test binary, which take turns on it as they would share a real one; with
//! `USE_EXISTING_CLUSTER=true` it is the cluster of `$KUBECONFIG` (the tests create and delete objects
//! there: use a throw-away cluster).
//!
//! ```no_run
//! use rustbuilder_envtest::e2e::{Cluster, Project};
//!
//! const PROJECT: Project = Project {
//!     dir: env!("CARGO_MANIFEST_DIR"),
//!     manager: "target/debug/memcached-operator",
//!     namespace: "memcached-operator-system",
//!     service_account: "memcached-operator-controller-manager",
//!     deployment: "memcached-operator-controller-manager",
//!     watch_namespace: false,
//! };
//!
//! # async fn demo() {
//! let cluster = Cluster::start(&PROJECT).await;
//! let manager = cluster.deploy_manager(&[]).await;
//! assert!(cluster.can_i("create", "leases.coordination.k8s.io"));
//! assert!(manager.stop(), "the manager exits 0 on SIGTERM");
//! # }
//! ```

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::Value;

use crate::{TestEnv, Turn, take_turn};

/// How long an e2e step may take on a slow machine.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// The project under test, as its `config/default` deploys it.
#[derive(Debug, Clone, Copy)]
pub struct Project {
    /// The project's root: `env!("CARGO_MANIFEST_DIR")`.
    pub dir: &'static str,
    /// The manager binary: `env!("CARGO_BIN_EXE_<project name>")`.
    pub manager: &'static str,
    /// The namespace `config/default` deploys the manager to.
    pub namespace: &'static str,
    /// The manager's ServiceAccount there.
    pub service_account: &'static str,
    /// The manager's Deployment there.
    pub deployment: &'static str,
    /// Whether the manager watches its own namespace only (`WATCH_NAMESPACE`, `init --namespaced`).
    pub watch_namespace: bool,
}

impl Project {
    fn path(&self, relative: &str) -> PathBuf {
        Path::new(self.dir).join(relative)
    }
}

/// The cluster under test: simulated, or the one of `$KUBECONFIG`.
pub struct Cluster {
    project: &'static Project,
    /// This test's turn on the simulated cluster; `None` on an existing one.
    env: Option<Turn>,
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    client: Client,
}

impl Cluster {
    /// The simulated cluster of this test binary, once the tests before have had their turn on it (the
    /// first one starts it), or `$KUBECONFIG`'s with `USE_EXISTING_CLUSTER=true`. Each test deploys the
    /// manager anew; what an earlier one left in the cluster stays, as it would in a real one.
    pub async fn start(project: &'static Project) -> Cluster {
        if std::env::var("USE_EXISTING_CLUSTER").is_ok_and(|v| v == "true") {
            let kubeconfig = std::env::var_os("KUBECONFIG")
                .map(PathBuf::from)
                .expect("USE_EXISTING_CLUSTER=true needs KUBECONFIG");
            let client = Client::try_default()
                .await
                .expect("the cluster of $KUBECONFIG is reachable");
            return Cluster {
                project,
                env: None,
                kubeconfig,
                kubectl: PathBuf::from("kubectl"),
                client,
            };
        }
        let env = take_turn(|| TestEnv::builder().cluster(true)).await;
        Cluster {
            project,
            kubeconfig: env.kubeconfig().to_path_buf(),
            kubectl: PathBuf::from(env.kubectl().get_program()),
            client: env.client(),
            env: Some(env),
        }
    }

    /// A client with the cluster's admin credentials.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Runs kubectl against the cluster and returns its stdout; a failure fails the test.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_with_input(args, None)
    }

    /// Runs kubectl with `input` on stdin; a failure fails the test.
    pub fn kubectl_with_input(&self, args: &[&str], input: Option<&str>) -> String {
        let (ok, stdout, stderr) = self.try_kubectl(args, input);
        assert!(ok, "kubectl {} failed:\n{stderr}", args.join(" "));
        stdout
    }

    /// Runs kubectl and returns (success, stdout, stderr).
    pub fn try_kubectl(&self, args: &[&str], input: Option<&str>) -> (bool, String, String) {
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

    /// Whether the manager's ServiceAccount may `verb` `resource` in its namespace
    /// (`kubectl auth can-i`).
    pub fn can_i(&self, verb: &str, resource: &str) -> bool {
        let project = self.project;
        let who = format!(
            "--as=system:serviceaccount:{}:{}",
            project.namespace, project.service_account
        );
        let args = [
            "auth",
            "can-i",
            verb,
            resource,
            "-n",
            project.namespace,
            &who,
        ];
        let (allowed, answer, errors) = self.try_kubectl(&args, None);
        let answer = answer.trim();
        assert!(
            answer == "yes" || answer == "no",
            "kubectl auth can-i failed: {errors}"
        );
        allowed
    }

    /// Creates `object` with kubectl. While the manager's webhook server is not listening yet, the API
    /// server cannot call it and refuses objects its webhooks check (they fail closed): that is
    /// retried, any other refusal fails the test.
    pub async fn create(&self, object: &Value) {
        let json = object.to_string();
        eventually("the API server to admit the object", async || {
            let (created, _, errors) = self.try_kubectl(&["create", "-f", "-"], Some(&json));
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
            .current_dir(self.project.dir)
            .status()
            .expect("make runs");
        assert!(status.success(), "make {target} failed");
    }

    /// Installs the CRDs and the manager's RBAC (everything `config/default` holds but the manager
    /// Deployment, whose image is not built here), then starts the manager binary as its ServiceAccount
    /// with the environment variables `env`.
    ///
    /// Webhooks, once the project has some, are served by that process: the simulated cluster routes
    /// them to it with a certificate of its own CA, standing in for cert-manager and the Service.
    pub async fn deploy_manager(&self, env: &[(&str, &str)]) -> Manager {
        // The CRDs of other operators' kinds (config/crd/external/) come with those operators in a
        // real cluster; the simulated one gets them here.
        let external = self.project.path("config/crd/external");
        if self.env.is_some() && external.is_dir() {
            let external = external.to_string_lossy();
            self.kubectl(&["apply", "--server-side", "-f", &external]);
        }
        self.make("install");
        let config = self.project.path("config/default");
        let rendered = self.kubectl(&["kustomize", &config.to_string_lossy()]);
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

        let project = self.project;
        let kubeconfig = match &self.env {
            Some(env) => {
                env.service_account_kubeconfig(project.namespace, project.service_account)
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
        Manager::start(project, &kubeconfig, &args, env)
    }

    /// A kubeconfig for the manager's ServiceAccount on an existing cluster (TokenRequest via kubectl).
    fn service_account_kubeconfig(&self) -> PathBuf {
        let project = self.project;
        let token = self.kubectl(&[
            "create",
            "token",
            project.service_account,
            "-n",
            project.namespace,
        ]);
        let path = std::env::temp_dir().join(format!("{}-e2e.kubeconfig", project.service_account));
        std::fs::copy(&self.kubeconfig, &path).expect("the kubeconfig can be copied");
        let path_arg = format!("--kubeconfig={}", path.display());
        let token = format!("--token={}", token.trim());
        for args in [
            &[
                path_arg.as_str(),
                "config",
                "set-credentials",
                "e2e-manager",
                &token,
            ][..],
            &[
                &path_arg,
                "config",
                "set-context",
                "--current",
                "--user=e2e-manager",
            ],
        ] {
            let status = Command::new(&self.kubectl).args(args).status();
            assert!(
                status.is_ok_and(|s| s.success()),
                "kubectl {} failed",
                args[1..].join(" ")
            );
        }
        path
    }
}

/// The manager process; stopped with SIGTERM when dropped.
pub struct Manager {
    child: Child,
}

impl Manager {
    fn start(
        project: &Project,
        kubeconfig: &Path,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Manager {
        let mut command = Command::new(project.manager);
        command
            .args([
                "--health-probe-bind-address=127.0.0.1:0",
                "--metrics-bind-address=0",
            ])
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAMESPACE", project.namespace);
        if project.watch_namespace {
            // As config/manager sets it: the manager watches its own namespace only.
            command.env("WATCH_NAMESPACE", project.namespace);
        }
        let child = command
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
pub fn without_cert_manager(rendered: &str) -> (String, usize) {
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

/// Applies the project's `config/default` (what `make deploy` applies, without cert-manager's objects
/// and the webhook configurations) to a fresh API server and checks that a Pod made from the manager's template is admitted under the
/// restricted Pod Security Standard its namespace enforces, while a Pod that may escalate privileges is
/// refused there (so the first check could fail).
pub async fn check_restricted_pod_security(project: &Project) {
    let env = TestEnv::start().await;
    let config = project.path("config/default");
    let rendered = env
        .kubectl()
        .arg("kustomize")
        .arg(&config)
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
    // No manager runs here to answer webhooks, and one on Pods would refuse the Pods below: the
    // webhook configurations are left out with cert-manager's objects.
    let (rendered, _) = without_cert_manager(&String::from_utf8_lossy(&rendered.stdout));
    let rendered = rendered
        .split("\n---\n")
        .filter(|doc| {
            !doc.lines()
                .any(|line| line.starts_with("kind: ") && line.ends_with("WebhookConfiguration"))
        })
        .collect::<Vec<_>>()
        .join("\n---\n");
    apply
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(rendered.as_bytes())
        .expect("kubectl reads its input");
    let applied = apply.wait_with_output().expect("kubectl finishes");
    assert!(
        applied.status.success(),
        "config/default was rejected: {}",
        String::from_utf8_lossy(&applied.stderr)
    );

    let deployments: Api<Deployment> = Api::namespaced(env.client(), project.namespace);
    let deployment = deployments
        .get(project.deployment)
        .await
        .expect("config/default has the manager's Deployment");
    let template = deployment.spec.expect("the Deployment has a spec").template;
    let mut pod = Pod {
        metadata: template.metadata.unwrap_or_default(),
        spec: template.spec,
        ..Default::default()
    };
    pod.metadata.name = Some("manager-template".into());
    let pods: Api<Pod> = Api::namespaced(env.client(), project.namespace);
    let created = pods.create(&PostParams::default(), &pod).await;
    assert!(created.is_ok(), "the manager Pod was rejected: {created:?}");

    pod.metadata.name = Some("escalating".into());
    let container = &mut pod.spec.as_mut().expect("the Pod has a spec").containers[0];
    container
        .security_context
        .get_or_insert_with(Default::default)
        .allow_privilege_escalation = Some(true);
    let rejected = pods.create(&PostParams::default(), &pod).await;
    assert!(
        matches!(&rejected, Err(kube::Error::Api(status)) if status.code == 403),
        "restricted is not enforced: {rejected:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cert_manager_objects_are_left_out() {
        let rendered = "apiVersion: v1\nkind: Namespace\n---\napiVersion: cert-manager.io/v1\nkind: Issuer\n---\napiVersion: v1\nkind: Service";
        let (kept, removed) = without_cert_manager(rendered);
        assert_eq!(removed, 1);
        assert_eq!(
            kept,
            "apiVersion: v1\nkind: Namespace\n---\napiVersion: v1\nkind: Service"
        );
    }
}
