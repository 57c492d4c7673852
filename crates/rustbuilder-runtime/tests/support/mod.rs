//! Helpers for tests that run the example manager (`examples/manager.rs`) as a process against an
//! envtest control plane: build and start it with a kubeconfig, read its JSON logs, signal it, and
//! talk to its HTTP(S) endpoints.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use rustbuilder_envtest::TestEnv;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The example manager's name (its field manager and `managed-by` label value).
pub const MANAGER_NAME: &str = "echo-operator";
/// The leader-election Lease name the example manager uses.
pub const LEASE: &str = "echo-operator.example.com";
/// The label that makes a ConfigMap a source of the example's controller.
pub const SOURCE_LABEL: &str = "example.com/echo";
/// The example's controller name in logs and metrics.
pub const CONTROLLER: &str = "echo";

/// The example manager binary, built once per test binary with the cargo running the tests (same
/// target directory and profile); `TEST_MANAGER_BIN` may name another build.
fn manager_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(bin) = std::env::var_os("TEST_MANAGER_BIN") {
                return bin.into();
            }
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
            let mut build = Command::new(&cargo);
            build
                .args([
                    "build",
                    "--quiet",
                    "--example",
                    "manager",
                    "--manifest-path",
                ])
                .arg(&manifest);
            // This test runs from <target>/<profile>/deps/; the example lands in <profile>/examples.
            let exe = std::env::current_exe().expect("the test binary's path");
            let profile_dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("the test binary lies in <target>/<profile>/deps");
            let target_dir = profile_dir.parent().expect("a target directory");
            build.env("CARGO_TARGET_DIR", target_dir);
            if profile_dir.file_name().is_some_and(|p| p == "release") {
                build.arg("--release");
            }
            let status = build.status().unwrap_or_else(|e| {
                panic!("cannot run {cargo:?} to build the example manager: {e}")
            });
            assert!(
                status.success(),
                "building the example manager failed: {status}"
            );
            profile_dir.join("examples").join("manager")
        })
        .clone()
}

/// A manager process; SIGKILLed when dropped.
pub struct ManagerProcess {
    pub name: String,
    child: Child,
    log: PathBuf,
}

impl ManagerProcess {
    /// Runs the manager with `args` (JSON logs are added) against the cluster of `kubeconfig`; its
    /// output goes to `<dir>/<name>.log`.
    pub fn start(name: &str, dir: &Path, kubeconfig: &Path, args: &[String]) -> Self {
        Self::start_with_env(name, dir, kubeconfig, args, &[])
    }

    pub fn start_with_env(
        name: &str,
        dir: &Path,
        kubeconfig: &Path,
        args: &[String],
        vars: &[(&str, &str)],
    ) -> Self {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log).expect("a log file");
        let mut cmd = Command::new(manager_binary());
        cmd.args(args)
            .arg("--log-format=json")
            .env("KUBECONFIG", kubeconfig)
            // TEST_MANAGER_LOG overrides the filter, e.g. `debug` to investigate a failure. The
            // tests read the `reconciled` lines, logged at debug.
            .env(
                "RUST_LOG",
                std::env::var("TEST_MANAGER_LOG")
                    .unwrap_or("info,rustbuilder_runtime::controller=debug".into()),
            )
            // Not in a pod: no in-cluster config, no namespace from the environment unless given.
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("POD_NAMESPACE")
            .envs(vars.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out);
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: only async-signal-safe calls between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    // Dies with the test, even when the test is SIGKILLed.
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().expect("the manager binary runs");
        ManagerProcess {
            name: name.to_string(),
            child,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every JSON log line so far (other lines, e.g. a panic message, are skipped).
    pub fn logs(&self) -> Vec<Value> {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// The log lines whose message is `message`.
    pub fn logged(&self, message: &str) -> Vec<Value> {
        let is = |line: &Value| line["fields"]["message"] == message;
        self.logs().into_iter().filter(is).collect()
    }

    /// Waits for a log line with this message; panics with the log after `timeout` or if the process
    /// exits.
    pub async fn wait_for_log(&mut self, message: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.logged(message).into_iter().next() {
                return line;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited ({status}) before logging `{message}`:\n{}",
                    self.name,
                    self.log_text()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "{} did not log `{message}` within {timeout:?}:\n{}",
                    self.name,
                    self.log_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(sent, 0, "cannot signal {}", self.name);
    }

    /// Waits for the process to exit; `None` if it still runs after `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("waitpid") {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Resident and peak resident memory, in KiB, from /proc.
    pub fn memory_kib(&self) -> (u64, u64) {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let field = |key: &str| {
            let line = status
                .lines()
                .find(|l| l.starts_with(key))
                .unwrap_or_default();
            let digits: String = line.chars().filter(char::is_ascii_digit).collect();
            digits.parse().unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for ManagerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback address to hand to the manager (a tiny race with other binders is possible).
pub fn free_address() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("an address")
}

/// The holder of the leader-election Lease, if any.
pub async fn lease_holder(client: &kube::Client, namespace: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = leases.get_opt(LEASE).await.ok()??;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

/// Polls `check` every 100 ms until it is true or `timeout` passes; returns whether it became true.
pub async fn eventually(timeout: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The bearer token in a kubeconfig written by the envtest harness.
pub fn token_of(kubeconfig: &Path) -> String {
    let config: Value = serde_json::from_str(&fs::read_to_string(kubeconfig).unwrap()).unwrap();
    config["users"][0]["user"]["token"]
        .as_str()
        .expect("a token kubeconfig")
        .to_string()
}

/// Applies YAML with `kubectl apply -f -`, replacing the kustomize placeholder namespace `system`.
pub fn kubectl_apply(env: &TestEnv, yaml: &str, namespace: &str) {
    let mut child = env
        .kubectl()
        .args(["apply", "-n", namespace, "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "kubectl apply failed: {stderr}\n{yaml}"
    );
}

/// How to reach an endpoint.
#[derive(Clone)]
pub enum Scheme {
    Http,
    Https(Arc<ClientConfig>),
}

impl Scheme {
    /// HTTPS that accepts any server certificate (like `insecureSkipVerify`), for the self-signed one.
    pub fn https_insecure() -> Scheme {
        let provider = Arc::new(ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        Scheme::Https(Arc::new(config))
    }

    /// HTTPS that trusts only `ca` (PEM).
    pub fn https_trusting(ca: &str) -> Scheme {
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
            .unwrap();
        let provider = Arc::new(ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Scheme::Https(Arc::new(config))
    }
}

/// `GET path` on `address` with an optional bearer token: the status code and the body, or an error
/// (e.g. connection refused, TLS failure).
pub async fn get(
    address: SocketAddr,
    scheme: &Scheme,
    path: &str,
    token: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let stream = TcpStream::connect(address).await?;
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\n{}Connection: close\r\n\r\n",
        auth.unwrap_or_default()
    );
    let exchange = async {
        match scheme {
            Scheme::Http => exchange(stream, &request).await,
            Scheme::Https(config) => {
                let name = ServerName::IpAddress(address.ip().into());
                let tls = TlsConnector::from(config.clone())
                    .connect(name, stream)
                    .await?;
                exchange(tls, &request).await
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
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::new(ErrorKind::InvalidData, response.clone()))?;
    Ok((status, body.to_string()))
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: &str,
) -> std::io::Result<String> {
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    match stream.read_to_end(&mut response).await {
        Ok(_) => {}
        // A peer that closes without TLS close_notify: what arrived is still the whole response.
        Err(e) if e.kind() == ErrorKind::UnexpectedEof && !response.is_empty() => {}
        Err(e) => return Err(e),
    }
    Ok(String::from_utf8_lossy(&response).into_owned())
}

/// Accepts any server certificate; still checks the handshake signatures.
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

impl ManagerProcess {
    /// Log lines of successful reconciles of the example's controller. Failed ones are logged as
    /// `reconcile failed` and not counted.
    pub fn reconciles(&self) -> Vec<Value> {
        self.logs()
            .into_iter()
            .filter(|line| {
                let fields = &line["fields"];
                fields["controller"] == CONTROLLER && fields["message"] == "reconciled"
            })
            .collect()
    }

    /// Log lines of failed reconciles of the example's controller.
    pub fn failed_reconciles(&self) -> Vec<Value> {
        self.logs()
            .into_iter()
            .filter(|line| {
                let fields = &line["fields"];
                fields["controller"] == CONTROLLER && fields["message"] == "reconcile failed"
            })
            .collect()
    }

    /// How many different objects have been reconciled successfully.
    pub fn reconciled_objects(&self) -> usize {
        let objects: std::collections::BTreeSet<String> = self
            .reconciles()
            .iter()
            .filter_map(|line| line["fields"]["object"].as_str().map(String::from))
            .collect();
        objects.len()
    }
}

/// Creates a ConfigMap the example's controller copies; `data` as given.
pub async fn create_source(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    data: &[(&str, &str)],
) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), Value::from(*v)))
        .collect();
    let object: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "labels": { SOURCE_LABEL: "" } },
        "data": data,
    }))
    .unwrap();
    let created = api.create(&Default::default(), &object).await;
    created.expect("the API server accepts the ConfigMap");
}

/// The data of the example's copy of `namespace/name`, if it exists.
pub async fn copy_of(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Option<std::collections::BTreeMap<String, String>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let copy = api
        .get_opt(&format!("{name}-echo"))
        .await
        .expect("GET works")?;
    Some(copy.data.unwrap_or_default())
}

/// The value of the sample `name{labels}` in Prometheus text, if present.
pub fn sample(metrics: &str, name_and_labels: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// RBAC of the example manager (its `+rustbuilder:rbac` markers, plus leader election), bound to a
/// ServiceAccount by [`MANAGER_BINDING`].
pub const MANAGER_ROLE: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: echo-manager
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update]
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
"#;

/// Binds everything of [`MANAGER_ROLE`] but the controller's own ConfigMap access.
pub const MANAGER_BASE_ROLE: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: echo-manager-base
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update]
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
"#;

/// A ClusterRoleBinding of ClusterRole `role` to ServiceAccount `namespace/account`.
pub fn binding(name: &str, role: &str, namespace: &str, account: &str) -> String {
    format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {name}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {role}
subjects:
- kind: ServiceAccount
  name: {account}
  namespace: {namespace}
"#
    )
}

/// What Kubebuilder's `metrics-reader` ClusterRole grants: `get` on `/metrics`.
pub const METRICS_READER_ROLE: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: metrics-reader
rules:
- nonResourceURLs: ["/metrics"]
  verbs: ["get"]
"#;

/// Requests with `verb` on `resource` the API server has answered so far, from its own
/// `apiserver_request_total`.
pub async fn requests(client: &kube::Client, verb: &str, resource: &str) -> u64 {
    let request = kube::core::Request::new("")
        .get("metrics", &Default::default())
        .unwrap();
    let text = client.request_text(request).await.unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("apiserver_request_total{"))
        .filter_map(|line| line.split_once("} "))
        .filter(|(labels, _)| {
            labels.contains(&format!(r#"verb="{verb}""#))
                && labels.contains(&format!(r#"resource="{resource}""#))
        })
        .map(|(_, value)| {
            let value = value.trim();
            value
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("a counter of {value}")) as u64
        })
        .sum()
}

/// A manager named `name` started with `--sharding` on `env`'s API server, as a replica in a process
/// of its own would be, with `timing`, as member `identity` when one is given.
pub async fn sharded_manager(
    env: &TestEnv,
    name: &str,
    identity: Option<&str>,
    timing: rustbuilder_runtime::manager::leader::Timing,
) -> rustbuilder_runtime::Manager {
    sharded_manager_of(env.kubeconfig(), name, identity, timing).await
}

/// [`sharded_manager`] on the API server of `kubeconfig`.
pub async fn sharded_manager_of(
    kubeconfig: &std::path::Path,
    name: &str,
    identity: Option<&str>,
    timing: rustbuilder_runtime::manager::leader::Timing,
) -> rustbuilder_runtime::Manager {
    #[derive(clap::Parser)]
    struct Args {
        #[command(flatten)]
        manager: rustbuilder_runtime::manager::ManagerArgs,
    }
    let kubeconfig = kubeconfig.display().to_string();
    let args = [
        "manager",
        "--kubeconfig",
        &kubeconfig,
        "--health-probe-bind-address=0",
        "--metrics-bind-address=0",
        "--sharding",
        "--leader-election-namespace=default",
    ];
    let args = <Args as clap::Parser>::try_parse_from(args).unwrap();
    let mut builder = rustbuilder_runtime::Manager::builder(name)
        .external_tracing()
        .lease_timing(timing);
    if let Some(identity) = identity {
        builder = builder.identity(identity);
    }
    builder.start(args.manager).await.unwrap()
}

/// A TCP proxy to an API server that can go silent, as a hung API server does: from
/// [`SilentProxy::silence`] on, it accepts connections and never replies, and the connections it
/// was forwarding stop carrying bytes, held open. Dropped, it closes every connection.
pub struct SilentProxy {
    address: SocketAddr,
    silent: tokio::sync::watch::Sender<bool>,
    accepting: tokio::task::JoinHandle<()>,
}

impl SilentProxy {
    /// A proxy on a free loopback port to the API server of `config`, forwarding.
    pub async fn start(config: &kube::Config) -> SilentProxy {
        let authority = config
            .cluster_url
            .authority()
            .expect("an API server address");
        let upstream = authority.as_str().to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (silent, _) = tokio::sync::watch::channel(false);
        let silence = silent.clone();
        let accepting = tokio::spawn(async move {
            // Aborted with the accepting task, so every connection closes with the proxy.
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((mut client, _)) = listener.accept().await {
                let mut silenced = silence.subscribe();
                let upstream = upstream.clone();
                connections.spawn(async move {
                    if *silenced.borrow_and_update() {
                        return std::future::pending().await;
                    }
                    let Ok(mut server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let silence = async move {
                        let _ = silenced.wait_for(|silent| *silent).await;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        () = silence => {
                            // Both ends stay open, carrying nothing.
                            std::future::pending::<()>().await
                        }
                    }
                });
            }
        });
        SilentProxy {
            address,
            silent,
            accepting,
        }
    }

    /// `config` with its API server at the proxy.
    pub fn config(&self, config: &kube::Config) -> kube::Config {
        let mut config = config.clone();
        let scheme = config
            .cluster_url
            .scheme_str()
            .unwrap_or("https")
            .to_string();
        let url = format!("{scheme}://{}", self.address);
        config.cluster_url = url.parse().unwrap();
        config
    }

    /// Goes silent (`true`), or forwards new connections again (`false`).
    pub fn silence(&self, silent: bool) {
        self.silent.send_replace(silent);
    }
}

impl Drop for SilentProxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}
