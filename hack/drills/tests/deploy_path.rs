//! The deploy path: `config/default` of the golden project, rendered by kustomize and applied as
//! `make deploy` does, then the manager run exactly as the rendered Deployment's container says.
//!
//! The Deployment itself lands on a kwok node, where no container runs; this test plays the kubelet
//! for it on the host: the container's command and args, its env, a token of the rendered
//! ServiceAccount from the TokenRequest API (what the kubelet mounts, here in a kubeconfig), the pod's
//! name as `HOSTNAME` and its namespace as `POD_NAMESPACE` (the mounted namespace file), and, when the
//! test may make one, a network namespace of its own, so the declared ports are the manager's alone,
//! as in a pod. Then it checks what the manifests promise:
//!
//! - the pod template passes the namespace's `restricted` Pod Security level (the pod exists);
//! - the liveness and readiness probes answer 200 on the declared port and paths;
//! - `/metrics` on the port of `--metrics-bind-address` (the metrics Service's target port, and the
//!   network policy's) answers over HTTPS: 200 to an account bound to the rendered `metrics-reader`
//!   ClusterRole, 401 without a valid token, 403 to another account;
//! - leader election works with the rendered Role: the Lease appears in the manager's namespace, held
//!   by this process, and is released on SIGTERM within the pod's termination grace period;
//! - the sample `Memcached` converges: its Deployment has `size` replicas, available.

mod support;

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, Pod, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};
use project::api::v1alpha1::Memcached;
use project::controller::memcached::{AVAILABLE, IMAGE_ENV};
use rustbuilder_envtest::TestEnv;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};

/// The golden project, whose `config/` is deployed.
const PROJECT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/project");
/// What `make deploy IMG=...` puts in place of `controller:latest`.
const IMG: &str = "localhost/project:deploy-path";
/// The namespace of the sample `Memcached`.
const SAMPLES: &str = "memcached-sample";
/// The whole test, cluster start included.
const BUDGET: Duration = Duration::from_secs(240);
/// Each wait inside it.
const STEP: Duration = Duration::from_secs(60);

#[test]
fn the_manager_runs_as_config_default_deploys_it() {
    // Built (or found) before the network goes away: cargo may want the registry.
    let operator = support::operator_binary();
    let isolated = own_network();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        tokio::time::timeout(BUDGET, deploy_path(&operator, isolated))
            .await
            .expect("the deploy path took longer than its budget")
    });
}

async fn deploy_path(operator: &Path, isolated: bool) {
    let started = Instant::now();
    let env = TestEnv::builder().cluster(true).start().await;
    let client = env.client();
    let cluster_up = started.elapsed();

    // `make deploy`: kustomize, the image set, server-side apply.
    let rendered = render(&env);
    let applied = apply(&env, &rendered);
    webhook_policies_are_accepted(&env);
    let one = |kind: &str, name_suffix: &str| -> Value {
        let found: Vec<&Value> = applied
            .iter()
            .filter(|o| o["kind"] == kind)
            .filter(|o| {
                o["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .ends_with(name_suffix)
            })
            .collect();
        assert_eq!(found.len(), 1, "one {kind} *{name_suffix} in {applied:#?}");
        found[0].clone()
    };
    let namespace = one("Namespace", "-system");
    let ns = namespace["metadata"]["name"].as_str().unwrap().to_string();
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "restricted",
        "the manager's namespace enforces the restricted Pod Security level"
    );
    let deployment: Deployment = typed(one("Deployment", "controller-manager"));
    let service = one("Service", "metrics-service");
    let policy: NetworkPolicy = typed(one("NetworkPolicy", "allow-metrics-traffic"));
    let reader = one("ClusterRole", "metrics-reader");
    let crd: CustomResourceDefinition = typed(one("CustomResourceDefinition", ""));
    let template = deployment.spec.clone().unwrap().template;
    let pod_spec = template.spec.clone().unwrap();
    let account = pod_spec.service_account_name.clone().unwrap();
    let container = pod_spec
        .containers
        .iter()
        .find(|c| c.name == "manager")
        .expect("a container named manager")
        .clone();
    assert_eq!(container.image.as_deref(), Some(IMG), "make deploy's image");

    // The Deployment on a kwok node: its pod was admitted under `restricted`.
    let pod = running_pod(&client, &ns, &deployment).await;
    let pod_name = pod.name_any();

    // The kubelet's part: the token, the environment, the ports.
    let kubeconfig = env.service_account_kubeconfig(&ns, &account).await;
    let probes = Probes::of(&container);
    let metrics_port = metrics_port(&container);
    assert_eq!(
        port_number(&service["spec"]["ports"][0]["targetPort"], &container),
        metrics_port,
        "the metrics Service targets --metrics-bind-address"
    );
    let policy_ports: Vec<u16> = policy.spec.as_ref().unwrap().ingress.as_ref().unwrap()[0]
        .ports
        .iter()
        .flatten()
        .map(|p| int_port(p.port.as_ref().unwrap(), &container))
        .collect();
    assert_eq!(
        policy_ports,
        [metrics_port],
        "the network policy admits the metrics port"
    );
    let selects = policy
        .spec
        .clone()
        .unwrap()
        .pod_selector
        .unwrap()
        .match_labels;
    let labels = template.metadata.as_ref().unwrap().labels.clone().unwrap();
    assert!(
        selects
            .iter()
            .flatten()
            .all(|(k, v)| labels.get(k) == Some(v)),
        "the network policy selects the manager's pods ({selects:?} in {labels:?})"
    );

    let log = env.kubeconfig().with_file_name("manager.log");
    let mut manager = Manager::start(operator, &container, &pod_name, &ns, &kubeconfig, &log);
    let manager_started = Instant::now();

    // Probes, on the declared port and paths.
    for (what, port, path) in probes.list() {
        let answered =
            eventually(async || matches!(get(port, None, &path, None).await, Ok((200, _)))).await;
        assert!(
            answered,
            "{what} probe http://:{port}{path} never answered 200; {}",
            manager.tail()
        );
    }
    let probes_ready = manager_started.elapsed();

    // Leader election with the rendered Role: the Lease in the pod's namespace, held by this process.
    let became = manager.wait_for_log("became leader").await;
    let (lease_name, identity) = (
        became["fields"]["lease"].as_str().unwrap().to_string(),
        became["fields"]["identity"].as_str().unwrap().to_string(),
    );
    assert!(
        identity.starts_with(&format!("{pod_name}_")),
        "the holder identity {identity} names the pod {pod_name}"
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    assert_eq!(
        lease_holder(&leases, &lease_name).await.as_deref(),
        Some(identity.as_str())
    );
    let user = format!("system:serviceaccount:{ns}:{account}");
    assert!(
        may(&client, &user, &ns, "update", "leases").await,
        "{user} may update its Lease"
    );
    assert!(
        !may(&client, &user, "default", "update", "leases").await,
        "{user} may update Leases in its own namespace only (a Role, not a ClusterRole)"
    );
    let leader = manager_started.elapsed();

    // Metrics over HTTPS on the declared port: 200 for metrics-reader, 401 or 403 for the rest.
    let reader_name = reader["metadata"]["name"].as_str().unwrap();
    let (allowed, denied) = scrapers(&client, reader_name).await;
    let tls = Some(any_certificate());
    let scrape = async |token: Option<&str>| {
        let answer = get(metrics_port, tls.clone(), "/metrics", token).await;
        answer.unwrap_or_else(|e| {
            panic!(
                "GET https://:{metrics_port}/metrics: {e}; {}",
                manager.tail()
            )
        })
    };
    let (status, body) = scrape(Some(&allowed)).await;
    assert_eq!(status, 200, "the metrics-reader account scrapes: {body}");
    assert!(
        body.contains("controller_runtime_reconcile_total"),
        "{body}"
    );
    assert_eq!(scrape(None).await.0, 401, "no token");
    assert_eq!(scrape(Some("not-a-token")).await.0, 401, "an invalid token");
    assert_eq!(
        scrape(Some(&denied)).await.0,
        403,
        "an account without metrics-reader"
    );
    let plain = get(metrics_port, None, "/metrics", Some(&allowed)).await;
    assert!(
        !matches!(plain, Ok((200, _))),
        "metrics are not served in clear text: {plain:?}"
    );

    // The sample converges.
    let crd_name = crd.name_any();
    let established = await_condition(
        Api::all(client.clone()),
        &crd_name,
        conditions::is_crd_established(),
    );
    tokio::time::timeout(STEP, established)
        .await
        .unwrap()
        .unwrap();
    env.create_namespace(SAMPLES).await;
    let applied = Instant::now();
    kubectl_ok(
        env.kubectl()
            .args(["apply", "--server-side", "-n", SAMPLES, "-k"])
            .arg(Path::new(PROJECT).join("config/samples")),
        None,
    );
    let image = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == IMAGE_ENV)
        .and_then(|e| e.value.clone())
        .expect("the rendered env sets the operand image");
    let done =
        eventually(async || converged(&client, "memcached-sample", &image).await.is_ok()).await;
    assert!(
        done,
        "the sample did not converge: {:?}; {}",
        converged(&client, "memcached-sample", &image).await,
        manager.tail()
    );
    let sample = applied.elapsed();

    // SIGTERM, as the kubelet stops the pod: out within the grace period, the Lease handed over.
    let grace = Duration::from_secs(pod_spec.termination_grace_period_seconds.unwrap() as u64);
    let stopping = Instant::now();
    let status = manager.terminate(grace);
    assert!(
        status.success(),
        "the manager exited with {status}; {}",
        manager.tail()
    );
    let holder = lease_holder(&leases, &lease_name).await;
    assert!(
        holder.is_none(),
        "the Lease is released on SIGTERM, held by {holder:?}"
    );
    let stopped = stopping.elapsed();

    eprintln!(
        "deploy path ({}): cluster up {cluster_up:.1?}; probes 200 {probes_ready:.1?} after start; \
         leader {leader:.1?}; sample converged {sample:.1?} after apply; SIGTERM to exit {stopped:.1?}; \
         whole test {:.1?}",
        if isolated {
            "own network namespace"
        } else {
            "host network"
        },
        started.elapsed()
    );
}

/// A network namespace of this thread's own, with its loopback up, inherited by the runtime's threads
/// and every process the test starts: the ports the Deployment declares (8081, 8443) are then free, as
/// in a pod, whatever else runs on the machine. Needs root (CAP_SYS_ADMIN); without it the test runs
/// on the host's network and needs those ports free.
fn own_network() -> bool {
    // SAFETY: unshare(2) moves only the calling thread into a new network namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        let error = std::io::Error::last_os_error();
        eprintln!("deploy path: no network namespace of its own ({error}): using the host's ports");
        return false;
    }
    // SAFETY: plain ioctls on a socket we own, with a zeroed `ifreq` naming `lo`.
    unsafe {
        let socket = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        assert!(socket >= 0, "a socket: {}", std::io::Error::last_os_error());
        let mut request: libc::ifreq = std::mem::zeroed();
        for (to, from) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *to = *from as libc::c_char;
        }
        let up = libc::ioctl(socket, libc::SIOCGIFFLAGS, &mut request) == 0 && {
            request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(socket, libc::SIOCSIFFLAGS, &request) == 0
        };
        assert!(up, "loopback up: {}", std::io::Error::last_os_error());
        libc::close(socket);
    }
    true
}

/// `kubectl kustomize config/default` with the network policy turned on as its comment says (on a
/// copy of `config/`), and the image set as `make deploy` sets it.
fn render(env: &TestEnv) -> String {
    let config = env.kubeconfig().with_file_name("config");
    copy_dir(&Path::new(PROJECT).join("config"), &config);
    let kustomization = config.join("default/kustomization.yaml");
    let text = std::fs::read_to_string(&kustomization).unwrap();
    let commented = "#- ../network-policy";
    assert_eq!(text.matches(commented).count(), 1, "{commented} in {text}");
    std::fs::write(
        &kustomization,
        text.replace(commented, "- ../network-policy"),
    )
    .unwrap();
    let yaml = kubectl_ok(
        env.kubectl().arg("kustomize").arg(config.join("default")),
        None,
    );
    assert!(yaml.contains("image: controller:latest"), "{yaml}");
    yaml.replace("image: controller:latest", &format!("image: {IMG}"))
}

/// The network policies of a project with webhooks (the metrics one and the one admitting the API
/// server's webhook calls), as `kubectl kustomize` renders them, accepted by the API server: a
/// server-side dry run, in `default` (the project's namespace is not there).
fn webhook_policies_are_accepted(env: &TestEnv) {
    let policies = Path::new(PROJECT).with_file_name("project-webhooks/config/network-policy");
    let yaml = kubectl_ok(env.kubectl().arg("kustomize").arg(&policies), None);
    assert!(yaml.contains("name: allow-webhook-traffic"), "{yaml}");
    assert_eq!(yaml.matches("namespace: system").count(), 2, "{yaml}");
    let yaml = yaml.replace("namespace: system", "namespace: default");
    let out = kubectl_ok(
        env.kubectl().args(["apply", "--dry-run=server", "-f", "-"]),
        Some(&yaml),
    );
    assert!(
        out.contains(
            "networkpolicy.networking.k8s.io/allow-webhook-traffic created (server dry run)"
        ),
        "{out}"
    );
}

/// `kubectl apply --server-side`; the objects as the API server stored them.
fn apply(env: &TestEnv, yaml: &str) -> Vec<Value> {
    let out = kubectl_ok(
        env.kubectl()
            .args(["apply", "--server-side", "-o", "json", "-f", "-"]),
        Some(yaml),
    );
    let out: Value = serde_json::from_str(&out).expect("kubectl prints JSON");
    match out["kind"].as_str() {
        Some("List") => out["items"].as_array().unwrap().clone(),
        _ => vec![out],
    }
}

fn kubectl_ok(command: &mut Command, stdin: Option<&str>) -> String {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{command:?} failed: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn typed<K: DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("a well-formed object")
}

/// The Deployment's pod once it runs on a kwok node; fails with the ReplicaSet's story otherwise (e.g.
/// Pod Security rejecting the template).
async fn running_pod(client: &Client, ns: &str, deployment: &Deployment) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let labels = deployment
        .spec
        .as_ref()
        .unwrap()
        .selector
        .match_labels
        .clone()
        .unwrap();
    let selector: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let params = ListParams::default().labels(&selector.join(","));
    let mut found = None;
    let running = eventually(async || {
        let listed = pods
            .list(&params)
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        found = listed
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        found.is_some()
    })
    .await;
    if !running {
        let events = kube::Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), ns)
            .list(&Default::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .filter_map(|e| e.message)
                    .collect::<Vec<_>>()
            });
        panic!("the manager's pod never ran on a kwok node; events: {events:#?}");
    }
    found.unwrap()
}

/// The declared probes: (which, port, path).
struct Probes(Vec<(&'static str, u16, String)>);

impl Probes {
    fn of(container: &Container) -> Probes {
        let mut probes = Vec::new();
        for (what, probe) in [
            ("liveness", &container.liveness_probe),
            ("readiness", &container.readiness_probe),
        ] {
            let get = probe.as_ref().and_then(|p| p.http_get.clone());
            let get = get.unwrap_or_else(|| panic!("an httpGet {what} probe"));
            let path = get.path.unwrap_or_else(|| "/".into());
            probes.push((what, int_port(&get.port, container), path));
        }
        Probes(probes)
    }

    fn list(&self) -> Vec<(&'static str, u16, String)> {
        self.0.clone()
    }
}

/// A port as a probe, Service or NetworkPolicy writes it: a number, or the name of a container port.
fn int_port(port: &IntOrString, container: &Container) -> u16 {
    match port {
        IntOrString::Int(n) => *n as u16,
        IntOrString::String(name) => {
            let ports = container.ports.iter().flatten();
            let named = ports.clone().find(|p| p.name.as_deref() == Some(name));
            let named = named.unwrap_or_else(|| panic!("no container port named {name}"));
            named.container_port as u16
        }
    }
}

fn port_number(port: &Value, container: &Container) -> u16 {
    int_port(&typed(port.clone()), container)
}

/// The port of `--metrics-bind-address=[HOST]:PORT` in the container's args.
fn metrics_port(container: &Container) -> u16 {
    let flag = "--metrics-bind-address=";
    let args = container.args.iter().flatten();
    let address = args.clone().find_map(|a| a.strip_prefix(flag));
    let address = address.unwrap_or_else(|| panic!("{flag} in {args:?}", args = container.args));
    let port = address.rsplit_once(':').map(|(_, port)| port.parse().ok());
    port.flatten()
        .unwrap_or_else(|| panic!("a port in {flag}{address}"))
}

/// The manager as the container would run it.
struct Manager {
    child: Child,
    log: PathBuf,
}

impl Manager {
    /// `command` + `args`, the container's `env`, and what the kubelet adds; nothing from this test's
    /// own environment.
    fn start(
        binary: &Path,
        container: &Container,
        pod: &str,
        namespace: &str,
        kubeconfig: &Path,
        log: &Path,
    ) -> Manager {
        // The image's entrypoint is /manager, the project's binary (tests/image.rs checks it).
        assert_eq!(
            container.command.as_deref(),
            Some(&["/manager".to_string()][..])
        );
        let mut command = Command::new(binary);
        command
            .args(container.args.iter().flatten())
            .env_clear()
            .current_dir("/");
        for var in container.env.iter().flatten() {
            // A plain value, or a field of the Pod's own metadata (the Downward API), as the
            // kubelet resolves it.
            let field = var
                .value_from
                .as_ref()
                .and_then(|from| from.field_ref.as_ref());
            let value = match (&var.value, field.map(|f| f.field_path.as_str())) {
                (Some(value), _) => value.clone(),
                (None, Some("metadata.name")) => pod.to_string(),
                (None, Some("metadata.namespace")) => namespace.to_string(),
                (None, Some("metadata.uid")) => format!("{pod}-uid"),
                _ => panic!(
                    "env {}: neither a plain value nor a field of the Pod",
                    var.name
                ),
            };
            command.env(&var.name, value);
        }
        // What the kubelet provides: the pod's name, the mounted namespace and token (the token in a
        // kubeconfig: the in-cluster paths are fixed and this is a host).
        command
            .env("HOSTNAME", pod)
            .env("POD_NAMESPACE", namespace)
            .env("KUBECONFIG", kubeconfig);
        let out = std::fs::File::create(log).expect("the manager's log");
        let child = command
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("the manager starts");
        Manager {
            child,
            log: log.to_owned(),
        }
    }

    /// Waits for a JSON log line with this message (the rendered env sets `LOG_FORMAT=json`).
    async fn wait_for_log(&mut self, message: &str) -> Value {
        let deadline = Instant::now() + STEP;
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines = text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok());
            if let Some(line) = lines
                .into_iter()
                .find(|l| l["fields"]["message"] == message)
            {
                return line;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the manager exited ({status}) before `{message}`; {}",
                    self.tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no `{message}` in {STEP:?}; {}",
                self.tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM, then waits up to `grace` (SIGKILL after it, as the kubelet would, failing the test).
    fn terminate(&mut self, grace: Duration) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!(
            "the manager outlived its grace period of {grace:?}; {}",
            self.tail()
        );
    }

    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("last lines of {}:\n{tail}", self.log.display())
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

async fn lease_holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    let lease = leases.get_opt(name).await.expect("the Lease is readable")?;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

/// Whether `user` (a ServiceAccount) may `verb` `resource` (coordination.k8s.io) in `namespace`.
async fn may(client: &Client, user: &str, namespace: &str, verb: &str, resource: &str) -> bool {
    let (ns_of_user, _) = user
        .trim_start_matches("system:serviceaccount:")
        .split_once(':')
        .unwrap();
    let review: SubjectAccessReview = typed(json!({
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns_of_user}"), "system:authenticated"],
            "resourceAttributes": {
                "group": "coordination.k8s.io", "resource": resource, "verb": verb, "namespace": namespace
            }
        }
    }));
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let reviewed = reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    reviewed.status.is_some_and(|s| s.allowed)
}

/// Tokens (TokenRequest) of two ServiceAccounts in `monitoring`: one bound to the rendered
/// `metrics-reader` ClusterRole, as Prometheus' would be, and one without it.
async fn scrapers(client: &Client, reader_role: &str) -> (String, String) {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "monitoring");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let pp = PostParams::default();
    namespaces
        .create(&pp, &typed(json!({ "metadata": { "name": "monitoring" } })))
        .await
        .unwrap();
    for name in ["prometheus", "stranger"] {
        let account: ServiceAccount = typed(json!({ "metadata": { "name": name } }));
        accounts.create(&pp, &account).await.unwrap();
    }
    let binding: ClusterRoleBinding = typed(json!({
        "metadata": { "name": "prometheus-metrics-reader" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader_role },
        "subjects": [{ "kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring" }]
    }));
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&pp, &binding)
        .await
        .unwrap();
    let token = async |name: &str| {
        let request: TokenRequest = typed(json!({ "spec": { "expirationSeconds": 3600 } }));
        let issued = accounts.create_token_request(name, &pp, &request).await;
        issued.unwrap().status.unwrap().token.expect("a token")
    };
    (token("prometheus").await, token("stranger").await)
}

/// Why the sample has not converged yet, if it has not: its Deployment (controlled by it) runs `size`
/// replicas of `image`, all available, and it reports `Available=True` for its generation.
async fn converged(client: &Client, name: &str, image: &str) -> Result<(), String> {
    let sample = Api::<Memcached>::namespaced(client.clone(), SAMPLES)
        .get(name)
        .await
        .map_err(|e| e.to_string())?;
    let deployment = Api::<Deployment>::namespaced(client.clone(), SAMPLES)
        .get_opt(name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no Deployment")?;
    let size = sample.spec.size;
    let controller = deployment
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true));
    if controller.map(|o| &o.uid) != sample.uid().as_ref() {
        return Err(format!("controlled by {controller:?}"));
    }
    let spec = deployment.spec.clone().unwrap_or_default();
    let pod = spec.template.spec.unwrap_or_default();
    let images: Vec<_> = pod.containers.iter().map(|c| c.image.clone()).collect();
    if spec.replicas != Some(size) || images != [Some(image.to_string())] {
        return Err(format!("replicas {:?}, images {images:?}", spec.replicas));
    }
    let status = deployment.status.unwrap_or_default();
    if status.available_replicas != Some(size) {
        return Err(format!(
            "{:?} of {size} available",
            status.available_replicas
        ));
    }
    let conditions = sample.status.map(|s| s.conditions).unwrap_or_default();
    let available = conditions.iter().find(|c| c.type_ == AVAILABLE);
    match available {
        Some(c) if c.status == "True" && c.observed_generation == sample.metadata.generation => {
            Ok(())
        }
        other => Err(format!("Available: {other:?}")),
    }
}

/// Polls `check` every 200 ms for up to [`STEP`].
async fn eventually(mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + STEP;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// `GET path` on 127.0.0.1:`port`, HTTPS when `tls` is given, with an optional bearer token: the
/// status code and the body.
async fn get(
    port: u16,
    tls: Option<Arc<ClientConfig>>,
    path: &str,
    token: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let exchange = async {
        let stream = TcpStream::connect(address).await?;
        let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n"));
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {address}\r\n{}Connection: close\r\n\r\n",
            auth.unwrap_or_default()
        );
        match tls {
            None => exchange(stream, &request).await,
            Some(config) => {
                let name = ServerName::IpAddress(address.ip().into());
                let stream = TlsConnector::from(config).connect(name, stream).await?;
                exchange(stream, &request).await
            }
        }
    };
    let response = tokio::time::timeout(Duration::from_secs(20), exchange)
        .await
        .map_err(|_| std::io::Error::new(ErrorKind::TimedOut, "no response"))??;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok());
    let status =
        status.ok_or_else(|| std::io::Error::new(ErrorKind::InvalidData, head.to_string()))?;
    Ok((status, body.to_string()))
}

async fn exchange(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    request: &str,
) -> std::io::Result<String> {
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    match stream.read_to_end(&mut response).await {
        Ok(_) => {}
        // A server that closes without TLS close_notify: what arrived is the whole response.
        Err(e) if e.kind() == ErrorKind::UnexpectedEof && !response.is_empty() => {}
        Err(e) => return Err(e),
    }
    Ok(String::from_utf8_lossy(&response).into_owned())
}

/// A TLS client that accepts the manager's self-signed certificate, as a scraper configured with
/// `insecureSkipVerify` does (the default without cert-manager); the handshake is still verified.
/// With rustls' `ring` provider, as the manager serves (rustls 0.23.48 deprecates it: see the runtime's
/// `tls` module).
#[allow(deprecated)]
fn any_certificate() -> Arc<ClientConfig> {
    let provider = Arc::new(ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    Arc::new(config)
}

#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, tokio_rustls::rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        tokio_rustls::rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        tokio_rustls::rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
