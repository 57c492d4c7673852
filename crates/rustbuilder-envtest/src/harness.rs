//! [`TestEnv`]: a real control plane per test, started from the assets and stopped on drop.

pub(crate) mod pki;

use std::fs::{self, File};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use std::{env, process};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use serde::Deserialize as _;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::assets;

/// How long each startup step may take before we give up (2 busy cores can be slow).
const BUDGET: Duration = Duration::from_secs(60);
const FAKE_NODES: usize = 3;
const DIR_PREFIX: &str = "envtest-";
/// Holds the pid of the test process that owns an env's directory.
const OWNER_FILE: &str = "owner.pid";
/// kwok only manages nodes carrying this annotation.
const KWOK_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");
/// The field manager of the CRDs the env installs.
const FIELD_MANAGER: &str = "envtest";
/// How often a component is started on new ports when one it was given is taken.
const PORT_ATTEMPTS: usize = 5;
/// How long [`TestEnv::stop`] waits after SIGTERM before it sends SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// Whether a component came up on its ports.
enum Listening {
    Yes,
    /// It exited saying a port is taken.
    PortTaken,
}

/// A running control plane: etcd and kube-apiserver, plus kube-controller-manager, kube-scheduler and
/// kwok fake nodes in cluster mode. Dropping it kills every process and removes its directory.
///
/// Each env lives in its own temporary directory on its own free ports, so tests and test binaries can
/// run side by side. Its processes die with the thread that started them (`PR_SET_PDEATHSIG` on Linux),
/// and its client needs the runtime it was made on: one env per test is the simple way. [`take_turn`]
/// shares one among the tests of a binary, which take turns on it.
///
/// [`take_turn`]: crate::take_turn
///
/// ```no_run
/// # async fn demo() {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::Api;
/// use rustbuilder_envtest::TestEnv;
///
/// let env = TestEnv::start().await;
/// let configmaps: Api<ConfigMap> = Api::default_namespaced(env.client());
/// assert!(configmaps.get_opt("absent").await.unwrap().is_none());
/// # }
/// ```
pub struct TestEnv {
    procs: Vec<Proc>, // in start order
    client: kube::Client,
    server: String,
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    cluster: bool,
    webhook_port: u16,
    dir: tempfile::TempDir, // dropped last: removed once every process is gone
}

/// Configures a [`TestEnv`] before it starts: which CRDs to install and whether to run a whole cluster.
///
/// ```no_run
/// # async fn demo(crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition) {
/// use rustbuilder_envtest::TestEnv;
///
/// // `crd` is usually `MyKind::crd()` from `#[derive(CustomResource)]`.
/// let env = TestEnv::builder().crd(crd).cluster(true).start().await;
/// # }
/// ```
#[derive(Debug, Default, Clone)]
#[must_use = "a builder does nothing until `start().await`"]
pub struct TestEnvBuilder {
    crds: Vec<CustomResourceDefinition>,
    crd_dirs: Vec<PathBuf>,
    cluster: bool,
    webhook_paths: Vec<PathBuf>,
    webhook_yaml: Vec<String>,
    feature_gates: Vec<String>,
}

/// The webhook configurations to register, parsed.
#[derive(Default)]
struct WebhookConfigurations {
    mutating: Vec<MutatingWebhookConfiguration>,
    validating: Vec<ValidatingWebhookConfiguration>,
}

/// A child process whose stdout and stderr go to `log`, with what it takes to start it again.
struct Proc {
    name: &'static str,
    bin: PathBuf,
    /// Every argument, the `ENVTEST_<NAME>_FLAGS` ones included.
    args: Vec<String>,
    /// The loopback ports it listens on (none for components that serve nothing).
    ports: Vec<u16>,
    child: Child,
    /// False once [`TestEnv::stop`] or [`TestEnv::kill`] ended it (and reaped it).
    running: bool,
    log: PathBuf,
}

/// A process of a [`TestEnv`], to stop and start it again while the others run (fault drills).
///
/// The names are the binaries' names ([`Component::name`], and `str::parse` reads them back).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Component {
    /// etcd, the storage. Its data directory survives a restart.
    Etcd,
    /// kube-apiserver. It comes back on the same port, with the same certificates.
    KubeApiserver,
    /// kube-controller-manager (cluster mode).
    KubeControllerManager,
    /// kube-scheduler (cluster mode).
    KubeScheduler,
    /// kwok, which runs the fake nodes and their pods (cluster mode).
    Kwok,
}

impl Component {
    /// Every component, in start order.
    pub const ALL: [Component; 5] = [
        Component::Etcd,
        Component::KubeApiserver,
        Component::KubeControllerManager,
        Component::KubeScheduler,
        Component::Kwok,
    ];

    /// The binary's name, e.g. `kube-apiserver`.
    pub const fn name(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::KubeApiserver => "kube-apiserver",
            Component::KubeControllerManager => "kube-controller-manager",
            Component::KubeScheduler => "kube-scheduler",
            Component::Kwok => "kwok",
        }
    }
}

impl std::fmt::Display for Component {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Component {
    type Err = String;

    /// Reads a binary's name, e.g. `"kube-apiserver"`.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Component::ALL
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or_else(|| format!("no envtest component is called {name:?}"))
    }
}

/// The binaries that cluster mode adds, and kwok's Stage files.
struct ClusterAssets {
    controller_manager: PathBuf,
    scheduler: PathBuf,
    kwok: PathBuf,
    stages: Vec<PathBuf>,
}

impl TestEnvBuilder {
    /// Installs this CRD (e.g. `Memcached::crd()`) before [`start`](Self::start) returns, and waits
    /// until its API is served.
    pub fn crd(mut self, crd: CustomResourceDefinition) -> Self {
        self.crds.push(crd);
        self
    }

    /// Installs each of these CRDs, like [`crd`](Self::crd).
    pub fn crds(mut self, crds: impl IntoIterator<Item = CustomResourceDefinition>) -> Self {
        self.crds.extend(crds);
        self
    }

    /// Installs every CRD in the `*.yaml`/`*.yml` files of `dir` (e.g. `config/crd/bases`); a file may
    /// hold several documents. The env panics at start if the directory cannot be read or a document
    /// is not a CustomResourceDefinition.
    pub fn crd_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.crd_dirs.push(dir.into());
        self
    }

    /// Cluster mode: also run kube-controller-manager, kube-scheduler and kwok with fake nodes, so
    /// Deployments get Running pods, namespaces get `default` ServiceAccounts and owned objects are
    /// garbage-collected.
    pub fn cluster(mut self, cluster: bool) -> Self {
        self.cluster = cluster;
        self
    }

    /// Registers the MutatingWebhookConfigurations and ValidatingWebhookConfigurations in `path`: a
    /// YAML file, or a directory whose `*.yaml` files are read (e.g. `config/webhook`, whose
    /// `manifests.yaml` `make manifests` writes). Other documents (a Service, a kustomization) are
    /// skipped.
    ///
    /// Each webhook's `clientConfig` is pointed at `https://127.0.0.1:<webhook_port><its path>` with
    /// this env's CA as `caBundle`, so the API server calls the webhook server the test starts on
    /// [`TestEnv::webhook_port`] with the certificate in [`TestEnv::webhook_cert_dir`]. CRDs whose
    /// conversion strategy is `Webhook` are pointed at `/convert` there too, with or without this.
    pub fn webhook_manifests(mut self, path: impl Into<PathBuf>) -> Self {
        self.webhook_paths.push(path.into());
        self
    }

    /// Like [`webhook_manifests`](Self::webhook_manifests), from YAML text.
    pub fn webhook_manifests_yaml(mut self, yaml: impl Into<String>) -> Self {
        self.webhook_yaml.push(yaml.into());
        self
    }

    /// Starts kube-apiserver with these feature gates, e.g. `"ShardedListAndWatch=true"` for an alpha
    /// feature (several separated by commas, or given by several calls). By default the API server
    /// runs with its default gates.
    pub fn feature_gates(mut self, gates: &str) -> Self {
        let gates = gates.split(',').map(str::trim).filter(|g| !g.is_empty());
        self.feature_gates.extend(gates.map(str::to_owned));
        self
    }

    /// Starts the control plane and installs the CRDs. Panics, with the end of the failing component's
    /// log, if anything does not come up within a minute.
    pub async fn start(self) -> TestEnv {
        let mut crds = self.crds;
        for dir in &self.crd_dirs {
            crds.extend(crds_in(dir));
        }
        let mut webhooks = WebhookConfigurations::default();
        for path in &self.webhook_paths {
            let files = if path.is_dir() {
                yaml_files(path)
            } else {
                vec![path.clone()]
            };
            for file in files {
                let text = fs::read_to_string(&file).unwrap_or_else(|e| {
                    panic!(
                        "envtest: cannot read webhook manifests {}: {e}",
                        file.display()
                    )
                });
                webhooks.read(&text, &file.display().to_string());
            }
        }
        for yaml in &self.webhook_yaml {
            webhooks.read(yaml, "webhook manifests");
        }
        TestEnv::launch(self.cluster, crds, webhooks, &self.feature_gates).await
    }
}

impl TestEnv {
    /// A builder, to install CRDs or choose cluster mode.
    pub fn builder() -> TestEnvBuilder {
        TestEnvBuilder::default()
    }

    /// etcd and kube-apiserver: the API with RBAC, admission and storage, but no controllers.
    pub async fn start() -> TestEnv {
        Self::builder().start().await
    }

    /// Cluster mode (see [`TestEnvBuilder::cluster`]) without CRDs.
    pub async fn start_cluster() -> TestEnv {
        Self::builder().cluster(true).start().await
    }

    /// A client authenticated as an admin (group `system:masters`).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The port the API server calls webhooks on (`https://127.0.0.1:<port>`): start the webhook
    /// server under test there, with the certificate in [`webhook_cert_dir`](Self::webhook_cert_dir).
    /// Chosen free when the env started; nothing listens on it until the test does.
    pub fn webhook_port(&self) -> u16 {
        self.webhook_port
    }

    /// A directory with `tls.crt` and `tls.key` for the webhook server under test: a certificate for
    /// 127.0.0.1 and localhost signed by this env's CA, which the webhook configurations and CRD
    /// conversions trust. E.g. `--webhook-cert-path` of a manager process.
    pub fn webhook_cert_dir(&self) -> PathBuf {
        self.dir.path().join(pki::WEBHOOK_DIR)
    }

    /// Points the webhooks of one object of a rendered manifest (e.g. `kubectl kustomize
    /// config/default`) at the webhook server under test, as [`webhook_manifests`] does for the
    /// objects it registers: each `clientConfig` of a Mutating- or ValidatingWebhookConfiguration, and
    /// a CRD's conversion webhook, gets `https://127.0.0.1:<webhook_port><its path>` and this env's
    /// CA in place of the Service that a cluster would route through. Returns whether the object has
    /// webhooks; any other object is left as it is.
    ///
    /// [`webhook_manifests`]: TestEnvBuilder::webhook_manifests
    pub fn route_webhooks(&self, object: &mut Value) -> bool {
        let configs: Vec<&mut Value> = match object["kind"].as_str() {
            Some("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration") => {
                object["webhooks"]
                    .as_array_mut()
                    .map(|webhooks| {
                        webhooks
                            .iter_mut()
                            .map(|w| &mut w["clientConfig"])
                            .collect()
                    })
                    .unwrap_or_default()
            }
            Some("CustomResourceDefinition")
                if object["spec"]["conversion"]["strategy"] == "Webhook" =>
            {
                vec![&mut object["spec"]["conversion"]["webhook"]["clientConfig"]]
            }
            _ => Vec::new(),
        };
        let routed = !configs.is_empty();
        for config in configs {
            let path = match (config["service"]["path"].as_str(), config["url"].as_str()) {
                (Some(path), _) => path.to_string(),
                (None, Some(url)) => url_path(url),
                (None, None) if config.get("service").is_some() => String::new(),
                // A conversion webhook without a clientConfig yet: the runtime serves it here.
                (None, None) => "/convert".to_string(),
            };
            let (url, ca) = self.webhook_client_config(&path);
            *config = json!({ "url": url, "caBundle": ca });
        }
        routed
    }

    /// The env's CA certificate (PEM), which signed every certificate of the env.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// The admin kubeconfig, for kubectl or an operator process (`KUBECONFIG=...`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// kubectl from the assets, talking to this env as admin. A later `--kubeconfig` argument wins, e.g.
    /// one from [`service_account_kubeconfig`](Self::service_account_kubeconfig).
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg(flag("kubeconfig", &self.kubeconfig))
            // A private discovery cache: another env may have had this port before.
            .arg(flag("cache-dir", &self.dir.path().join("kubectl-cache")));
        cmd
    }

    /// The name and pid of every running process of this env, in start order, e.g. to measure memory
    /// use. A component that [`stop`](Self::stop) ended is left out until it starts again.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        let running = self.procs.iter().filter(|p| p.running);
        running.map(|p| (p.name, p.child.id())).collect()
    }

    /// Stops `component` gracefully (SIGTERM, then SIGKILL after [`STOP_GRACE`]) and waits until it is
    /// gone; the other components keep running. Its ports and data stay as they are, for
    /// [`start_component`](Self::start_component). Panics if this env has no such component (the
    /// cluster components exist in cluster mode only) or it is already stopped.
    pub async fn stop(&mut self, component: Component) {
        self.end(component, true).await;
    }

    /// Like [`stop`](Self::stop), but with SIGKILL at once: the component gets no chance to clean up.
    pub async fn kill(&mut self, component: Component) {
        self.end(component, false).await;
    }

    /// Starts a stopped `component` again with the same flags, ports and data (etcd keeps every
    /// object), and returns once it serves: etcd and kube-apiserver listen on their ports (and
    /// kube-apiserver answers `/readyz`); the others are started. Clients made before keep working.
    /// Panics if the component is running, or does not come back within a minute (e.g. its port was
    /// taken meanwhile).
    pub async fn start_component(&mut self, component: Component) {
        let i = self.index(component);
        assert!(
            !self.procs[i].running,
            "envtest: {component} is running; stop it first"
        );
        let (bin, args, ports) = {
            let p = &self.procs[i];
            (p.bin.clone(), p.args.clone(), p.ports.clone())
        };
        let (child, log) = self.launch_process(component.name(), &bin, &args);
        let p = &mut self.procs[i];
        (p.child, p.log, p.running) = (child, log, true);
        if !ports.is_empty() {
            match self.wait_listening(i).await {
                Listening::Yes => {}
                Listening::PortTaken => panic!(
                    "envtest: {component} cannot listen on {ports:?} again: taken while it was stopped; {}",
                    self.procs[i].tail()
                ),
            }
        }
        let apiserver_up = self
            .procs
            .iter()
            .any(|p| p.name == Component::KubeApiserver.name() && p.running);
        if apiserver_up {
            let client = self.client();
            let what = format!("/readyz after starting {component} again");
            self.wait_until(&what, async || readyz(&client).await).await;
        }
    }

    /// [`stop`](Self::stop), then [`start_component`](Self::start_component).
    pub async fn restart(&mut self, component: Component) {
        self.stop(component).await;
        self.start_component(component).await;
    }

    fn index(&self, component: Component) -> usize {
        let found = self.procs.iter().position(|p| p.name == component.name());
        found.unwrap_or_else(|| panic!("envtest: this env has no {component} (cluster mode?)"))
    }

    async fn end(&mut self, component: Component, graceful: bool) {
        let i = self.index(component);
        let p = &mut self.procs[i];
        assert!(p.running, "envtest: {component} is already stopped");
        #[cfg(target_os = "linux")]
        if graceful {
            // SAFETY: kill(2) on our own child, which has not been reaped (it is running).
            unsafe { libc::kill(p.child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + STOP_GRACE;
            while Instant::now() < deadline && matches!(p.child.try_wait(), Ok(None)) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = graceful;
        let _ = p.child.kill();
        let _ = p.child.wait();
        p.running = false;
    }

    /// Creates the namespace unless it exists. In cluster mode, also waits for its `default`
    /// ServiceAccount, without which Pods are rejected.
    pub async fn create_namespace(&self, name: &str) {
        let namespaces: Api<Namespace> = Api::all(self.client());
        let ns = object(json!({ "metadata": { "name": name } }));
        ok_if_exists(namespaces.create(&PostParams::default(), &ns).await);
        if self.cluster {
            let sas: Api<ServiceAccount> = Api::namespaced(self.client(), name);
            let found = await_condition(sas, "default", |sa: Option<&ServiceAccount>| sa.is_some());
            if !matches!(tokio::time::timeout(BUDGET, found).await, Ok(Ok(_))) {
                panic!("envtest: no `default` ServiceAccount in namespace {name}");
            }
        }
    }

    /// A kubeconfig authenticating as ServiceAccount `namespace/name` (both created if missing) with a
    /// one-hour token from the TokenRequest API: what an operator's pod would be allowed, under RBAC.
    pub async fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let namespaces: Api<Namespace> = Api::all(self.client());
        let ns = object(json!({ "metadata": { "name": namespace } }));
        ok_if_exists(namespaces.create(&PostParams::default(), &ns).await);
        let sas: Api<ServiceAccount> = Api::namespaced(self.client(), namespace);
        let sa = object(json!({ "metadata": { "name": name } }));
        ok_if_exists(sas.create(&PostParams::default(), &sa).await);
        let request: TokenRequest = object(json!({ "spec": { "expirationSeconds": 3600 } }));
        let pp = PostParams::default();
        let response = sas.create_token_request(name, &pp, &request).await;
        let response = response.expect("envtest: TokenRequest failed");
        let token = response
            .status
            .expect("envtest: TokenRequest without a token")
            .token;
        let path = self
            .dir
            .path()
            .join(format!("sa-{namespace}-{name}.kubeconfig"));
        let user = json!({ "token": token });
        write_kubeconfig(&path, &self.server, self.dir.path(), user);
        path
    }

    /// A client authenticating as ServiceAccount `namespace/name` (both created if missing).
    pub async fn service_account_client(&self, namespace: &str, name: &str) -> kube::Client {
        client_for(&self.service_account_kubeconfig(namespace, name).await).await
    }

    async fn launch(
        cluster: bool,
        crds: Vec<CustomResourceDefinition>,
        webhooks: WebhookConfigurations,
        feature_gates: &[String],
    ) -> TestEnv {
        // Resolve every binary first: a missing one fails fast, before anything runs.
        let assets = Assets::locate(cluster).await;
        let (etcd, apiserver, kubectl) = (
            assets.binary("etcd"),
            assets.binary("kube-apiserver"),
            assets.binary("kubectl"),
        );
        let cluster_assets = cluster.then(|| {
            let kwok = assets.binary("kwok");
            let stages_dir = kwok.with_file_name(assets::KWOK_STAGES_DIR);
            let stages = yaml_files(&stages_dir);
            if stages.is_empty() {
                panic!(
                    "envtest: no kwok Stage files in {}\nhelp: {}",
                    stages_dir.display(),
                    assets.help
                );
            }
            ClusterAssets {
                controller_manager: assets.binary("kube-controller-manager"),
                scheduler: assets.binary("kube-scheduler"),
                stages,
                kwok,
            }
        });

        #[cfg(target_os = "linux")]
        remove_abandoned_dirs();
        let dir = tempfile::Builder::new().prefix(DIR_PREFIX).tempdir();
        let dir = dir.expect("envtest: cannot create a temporary directory");
        let d = dir.path().to_owned();
        fs::write(d.join(OWNER_FILE), process::id().to_string()).expect("envtest: owner file");
        pki::write(&d);
        let kubeconfig = d.join("admin.kubeconfig");
        let (cert, key) = (d.join("admin.crt"), d.join("admin.key"));
        let admin = json!({ "client-certificate": cert, "client-key": key });
        // The server's port is known once kube-apiserver listens; until then nothing connects.
        write_kubeconfig(&kubeconfig, "https://127.0.0.1:0", &d, admin.clone());
        let mut env = TestEnv {
            procs: Vec::new(),
            client: client_for(&kubeconfig).await, // connects lazily
            server: String::new(),
            kubeconfig,
            kubectl,
            cluster,
            webhook_port: webhook_port(),
            dir,
        };
        // From here on, a panic drops `env`, which stops whatever already runs.

        let etcd_args = |[client_port, peer_port]: [u16; 2]| {
            let etcd_url = format!("http://127.0.0.1:{client_port}");
            let peer_url = format!("http://127.0.0.1:{peer_port}");
            vec![
                // One directory per attempt: etcd records its peer URL there.
                flag("data-dir", &d.join(format!("etcd-{client_port}"))),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
                "--unsafe-no-fsync=true".into(), // throw-away data: skip the slow fsyncs
                "--log-level=warn".into(),
            ]
        };
        let [etcd_port, _] = env
            .spawn_listening("etcd", &etcd, free_ports, etcd_args)
            .await;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        // Without a controller-manager nothing creates `default` ServiceAccounts, and the
        // ServiceAccount admission plugin would reject every Pod.
        let disabled_admission = if cluster { "" } else { "ServiceAccount" };
        let apiserver_args = |[api_port]: [u16; 1]| {
            let gates = (!feature_gates.is_empty())
                .then(|| format!("--feature-gates={}", feature_gates.join(",")));
            let mut args = vec![
                format!("--etcd-servers={etcd_url}"),
                format!("--secure-port={api_port}"),
                "--bind-address=127.0.0.1".into(),
                // Needed on hosts without a default route ("no suitable network address").
                "--advertise-address=127.0.0.1".into(),
                // Endpoints may not point at loopback: don't let the apiserver publish its own.
                "--endpoint-reconciler-type=none".into(),
                flag("cert-dir", &d.join("apiserver")),
                flag("tls-cert-file", &d.join("serving.crt")),
                flag("tls-private-key-file", &d.join("serving.key")),
                flag("client-ca-file", &d.join("ca.crt")),
                "--authorization-mode=RBAC".into(),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
                "--allow-privileged=true".into(),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                flag("service-account-key-file", &d.join("sa.pub")),
                flag("service-account-signing-key-file", &d.join("sa.key")),
                format!("--disable-admission-plugins={disabled_admission}"),
            ];
            args.extend(gates);
            args
        };
        let [api_port] = env
            .spawn_listening("kube-apiserver", &apiserver, free_ports, apiserver_args)
            .await;
        env.server = format!("https://127.0.0.1:{api_port}");
        write_kubeconfig(&env.kubeconfig, &env.server, &d, admin);
        env.client = client_for(&env.kubeconfig).await;

        let client = env.client();
        env.wait_until("/readyz", async || readyz(&client).await)
            .await;
        let ns: Api<Namespace> = Api::all(client);
        env.wait_until("namespace default", async || exists(&ns, "default").await)
            .await;
        // Webhook configurations first: the API server's admission plugins load them in the
        // background, meanwhile the CRDs are installed.
        env.register_webhooks(webhooks).await;
        // CRDs before the controller-manager, so its garbage collector knows custom owners.
        let crds = crds
            .into_iter()
            .map(|crd| env.with_conversion_url(crd))
            .collect();
        env.install_crds(crds).await;
        if let Some(assets) = cluster_assets {
            env.start_cluster_components(assets).await;
        }
        env
    }

    async fn start_cluster_components(&mut self, assets: ClusterAssets) {
        let d = self.dir.path().to_owned();
        let kubeconfig = flag("kubeconfig", &self.kubeconfig);
        let kwok_selector = format!("{}={}", KWOK_ANNOTATION.0, KWOK_ANNOTATION.1);
        let controller_manager_args = vec![
            kubeconfig.clone(),
            "--leader-elect=false".into(),
            "--secure-port=0".into(), // no health/metrics server: no port to collide on
            flag("service-account-private-key-file", &d.join("sa.key")),
            flag("root-ca-file", &d.join("ca.crt")),
        ];
        let controller_manager = &assets.controller_manager;
        self.spawn(
            "kube-controller-manager",
            controller_manager,
            controller_manager_args,
        );
        let scheduler_args = vec![
            kubeconfig.clone(),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
        ];
        self.spawn("kube-scheduler", &assets.scheduler, scheduler_args);
        let mut kwok_args = vec![
            kubeconfig,
            "--manage-all-nodes=false".into(),
            format!("--manage-nodes-with-annotation-selector={kwok_selector}"),
            "--cidr=10.244.0.1/16".into(), // fake pod IPs
            // Renew node Leases (every 10 s): the node lifecycle controller reads them as
            // heartbeats, so nodes stay Ready however long a test runs.
            "--node-lease-duration-seconds=40".into(),
        ];
        // Since v0.8.0 kwok has no built-in behaviour: Stage objects drive nodes and pods.
        kwok_args.extend(assets.stages.iter().map(|s| flag("config", s)));
        self.spawn("kwok", &assets.kwok, kwok_args);

        let nodes: Api<Node> = Api::all(self.client());
        for i in 0..FAKE_NODES {
            ok_if_exists(nodes.create(&PostParams::default(), &fake_node(i)).await);
        }
        self.wait_until("Ready nodes", async || nodes_ready(&nodes).await)
            .await;
        let sas: Api<ServiceAccount> = Api::default_namespaced(self.client());
        self.wait_until("ServiceAccount default", async || {
            exists(&sas, "default").await
        })
        .await;
    }

    /// Starts `bin` with its output in `<dir>/<name>.log`, adding the flags of
    /// [`extra_flags`] after `args` (the last value of a flag wins).
    fn spawn(&mut self, name: &'static str, bin: &Path, args: Vec<String>) {
        self.spawn_on(name, bin, args, Vec::new());
    }

    /// [`spawn`](Self::spawn) for a component listening on `ports` (which `args` name).
    fn spawn_on(&mut self, name: &'static str, bin: &Path, args: Vec<String>, ports: Vec<u16>) {
        let mut args = args;
        args.extend(extra_flags(name));
        let (child, log) = self.launch_process(name, bin, &args);
        let bin = bin.to_owned();
        let running = true;
        let proc = Proc {
            name,
            bin,
            args,
            ports,
            child,
            running,
            log,
        };
        self.procs.push(proc);
    }

    /// Starts a component that listens on the loopback ports `args(ports)` names, with ports from
    /// `pick`, and waits until it holds them all. When one is taken (another env, or any program, got
    /// it between `pick` and the bind), starts it again on new ports, up to [`PORT_ATTEMPTS`] times.
    /// Returns the ports it listens on.
    ///
    /// This is what keeps envs apart: a component counts as up only when the kernel says that its own
    /// process listens on the port, so a client never talks to another env's etcd or kube-apiserver.
    async fn spawn_listening<const N: usize>(
        &mut self,
        name: &'static str,
        bin: &Path,
        mut pick: impl FnMut() -> [u16; N],
        args: impl Fn([u16; N]) -> Vec<String>,
    ) -> [u16; N] {
        for attempt in 1..=PORT_ATTEMPTS {
            let ports = pick();
            self.spawn_on(name, bin, args(ports), ports.to_vec());
            let i = self.procs.len() - 1;
            match self.wait_listening(i).await {
                Listening::Yes => return ports,
                Listening::PortTaken if attempt < PORT_ATTEMPTS => {
                    let mut p = self.procs.remove(i);
                    let _ = p.child.wait();
                    let taken = p.log.with_extension(format!("port-taken-{attempt}.log"));
                    let _ = fs::rename(&p.log, taken); // kept to explain a failure
                }
                Listening::PortTaken => {}
            }
        }
        let tail = self.procs.last().map(Proc::tail).unwrap_or_default();
        panic!("envtest: {name} found its ports taken {PORT_ATTEMPTS} times; {tail}");
    }

    /// Waits until process `i` listens on all its ports, or exits because one is taken. Panics when it
    /// exits otherwise or the budget runs out.
    async fn wait_listening(&mut self, i: usize) -> Listening {
        let deadline = Instant::now() + BUDGET;
        loop {
            let p = &mut self.procs[i];
            if listens_on(p.child.id(), &p.ports) {
                return Listening::Yes;
            }
            if let Ok(Some(status)) = p.child.try_wait() {
                p.running = false;
                let log = fs::read_to_string(&p.log).unwrap_or_default();
                if log.contains("address already in use") {
                    return Listening::PortTaken;
                }
                panic!(
                    "envtest: {} exited ({status}) before listening on {:?}; {}",
                    p.name,
                    p.ports,
                    p.tail()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "envtest: {} did not listen on {:?} within {BUDGET:?}; {}",
                    p.name,
                    p.ports,
                    p.tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Runs `bin` with `args`, its output in `<dir>/<name>.log`, dying with this thread (Linux).
    fn launch_process(&self, name: &str, bin: &Path, args: &[String]) -> (Child, PathBuf) {
        let log = self.dir.path().join(format!("{name}.log"));
        let out = File::create(&log).expect("envtest: cannot create a log file");
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("envtest: log file"))
            .stderr(out);
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            let parent = process::id();
            // SAFETY: between fork and exec the closure only makes async-signal-safe calls.
            unsafe {
                cmd.pre_exec(move || {
                    // The kernel SIGKILLs the child when our thread dies, even by SIGKILL, which
                    // skips Drop. We may have died before prctl: then exit at once.
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    if libc::getppid() as u32 != parent {
                        libc::_exit(1);
                    }
                    Ok(())
                });
            }
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("envtest: cannot run {}: {e}", bin.display()));
        (child, log)
    }

    /// Polls `ready` until it returns true. Panics with a log tail when a process exits or
    /// the budget runs out (then showing the component started last).
    async fn wait_until(&mut self, what: &str, mut ready: impl AsyncFnMut() -> bool) {
        let deadline = Instant::now() + BUDGET;
        while !tokio::time::timeout(Duration::from_secs(5), ready())
            .await
            .unwrap_or(false)
        {
            for p in self.procs.iter_mut().filter(|p| p.running) {
                if let Ok(Some(status)) = p.child.try_wait() {
                    let tail = p.tail();
                    panic!(
                        "envtest: {} exited ({status}) waiting for {what}; {tail}",
                        p.name
                    );
                }
            }
            if Instant::now() > deadline {
                let tail = self.procs.last().map(Proc::tail).unwrap_or_default();
                panic!("envtest: timed out after {BUDGET:?} waiting for {what}; {tail}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `https://127.0.0.1:<webhook port><path>` with the env's CA: where the API server finds the
    /// webhook server under test.
    fn webhook_client_config(&self, path: &str) -> (String, ByteString) {
        let url = format!("https://127.0.0.1:{}{path}", self.webhook_port);
        let ca = fs::read(self.ca_cert()).expect("envtest: the CA certificate");
        (url, ByteString(ca))
    }

    /// Points a CRD's conversion webhook, if it has one, at the webhook server under test.
    fn with_conversion_url(&self, mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
        let conversion = crd.spec.conversion.as_mut();
        let Some(conversion) = conversion.filter(|c| c.strategy == "Webhook") else {
            return crd;
        };
        let webhook = conversion.webhook.get_or_insert_with(Default::default);
        if webhook.conversion_review_versions.is_empty() {
            webhook.conversion_review_versions = vec!["v1".into()];
        }
        let (url, ca) = self.webhook_client_config("/convert");
        let config = webhook.client_config.get_or_insert_with(Default::default);
        (config.url, config.service, config.ca_bundle) = (Some(url), None, Some(ca));
        crd
    }

    /// Creates the webhook configurations, each webhook pointed at the webhook server under test.
    async fn register_webhooks(&self, webhooks: WebhookConfigurations) {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let point = |config: &mut WebhookClientConfig| {
            let path = match (&config.service, &config.url) {
                (Some(service), _) => service.path.clone().unwrap_or_default(),
                (None, Some(url)) => url_path(url),
                (None, None) => String::new(),
            };
            let (url, ca) = self.webhook_client_config(&path);
            (config.url, config.service, config.ca_bundle) = (Some(url), None, Some(ca));
        };
        let api: Api<MutatingWebhookConfiguration> = Api::all(self.client());
        for mut config in webhooks.mutating {
            config
                .webhooks
                .iter_mut()
                .flatten()
                .for_each(|w| point(&mut w.client_config));
            let name = config.metadata.name.clone().unwrap_or_default();
            if let Err(e) = api.patch(&name, &params, &Patch::Apply(&config)).await {
                panic!("envtest: cannot create MutatingWebhookConfiguration {name:?}: {e}");
            }
        }
        let api: Api<ValidatingWebhookConfiguration> = Api::all(self.client());
        for mut config in webhooks.validating {
            config
                .webhooks
                .iter_mut()
                .flatten()
                .for_each(|w| point(&mut w.client_config));
            let name = config.metadata.name.clone().unwrap_or_default();
            if let Err(e) = api.patch(&name, &params, &Patch::Apply(&config)).await {
                panic!("envtest: cannot create ValidatingWebhookConfiguration {name:?}: {e}");
            }
        }
    }

    /// Applies each CRD server-side, then waits until all are Established and listed by discovery
    /// (which kubectl and kube's dynamic clients rely on).
    async fn install_crds(&mut self, crds: Vec<CustomResourceDefinition>) {
        let api: Api<CustomResourceDefinition> = Api::all(self.client());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        for crd in &crds {
            let name = crd.metadata.name.as_deref().unwrap_or_default();
            if let Err(e) = api.patch(name, &params, &Patch::Apply(crd)).await {
                panic!("envtest: cannot install CRD {name:?}: {e}");
            }
        }
        for crd in &crds {
            let name = crd.metadata.name.as_deref().unwrap_or_default();
            let established = await_condition(api.clone(), name, conditions::is_crd_established());
            if !matches!(tokio::time::timeout(BUDGET, established).await, Ok(Ok(_))) {
                panic!("envtest: CRD {name} was not Established within {BUDGET:?}");
            }
            let client = self.client();
            let what = format!("CRD {name} in discovery");
            self.wait_until(&what, async || discovered(&client, crd).await)
                .await;
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        // SIGKILL: the state is throw-away, so a graceful shutdown would only cost time.
        for p in self.procs.iter_mut().rev().filter(|p| p.running) {
            let _ = p.child.kill();
        }
        // Reap them (no zombies) before `dir` is removed.
        for p in self.procs.iter_mut().filter(|p| p.running) {
            let _ = p.child.wait();
        }
    }
}

impl Proc {
    /// The last lines of the log, to explain a failure.
    fn tail(&self) -> String {
        let text = String::from_utf8_lossy(&fs::read(&self.log).unwrap_or_default()).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("last lines of {}:\n{tail}", self.log.display())
    }
}

/// Where the binaries come from, and what to tell the user when one is missing.
struct Assets {
    /// `None` when every needed binary has a `TEST_ASSET_<NAME>` override.
    dir: Option<PathBuf>,
    help: String,
}

impl Assets {
    /// `KUBEBUILDER_ASSETS` when set; else the cache for `ENVTEST_K8S_VERSION` (default
    /// [`assets::DEFAULT_KUBERNETES_VERSION`]), downloaded or built with Go if missing.
    async fn locate(cluster: bool) -> Assets {
        let components = if cluster {
            assets::Components::Cluster
        } else {
            assets::Components::ControlPlane
        };
        let needed: &[&str] = if cluster {
            assets::BINARIES
        } else {
            assets::CONTROL_PLANE
        };
        if needed
            .iter()
            .all(|name| env::var_os(override_var(name)).is_some())
        {
            return Assets {
                dir: None,
                help: "check the TEST_ASSET_<NAME> variables".into(),
            };
        }
        if let Some(dir) = env::var_os("KUBEBUILDER_ASSETS").filter(|d| !d.is_empty()) {
            return Assets {
                dir: Some(PathBuf::from(dir)),
                help: format!(
                    "KUBEBUILDER_ASSETS must hold {}; unset it to use the cache (downloaded or built with Go when missing)",
                    needed.join(", ")
                ),
            };
        }
        match tokio::task::spawn_blocking(move || cached_or_provided(components)).await {
            Ok(Ok(dir)) => Assets {
                dir: Some(dir),
                help: "remove the incomplete directory to rebuild it".into(),
            },
            Ok(Err(message)) => panic!("envtest: {message}"),
            Err(e) => panic!("envtest: the asset download or build did not finish: {e}"),
        }
    }

    /// The path of binary `name`: `TEST_ASSET_<NAME>` (as Go's envtest has), else `<dir>/<name>`.
    /// Panics when it is not a file.
    fn binary(&self, name: &str) -> PathBuf {
        let path = match (env::var_os(override_var(name)), &self.dir) {
            (Some(path), _) => PathBuf::from(path),
            (None, Some(dir)) => dir.join(name),
            (None, None) => panic!("envtest: no {name}: set {}", override_var(name)),
        };
        if !path.is_file() {
            panic!(
                "envtest: {name} not found at {}\nhelp: {}",
                path.display(),
                self.help
            );
        }
        path
    }
}

/// The cache directory of `ENVTEST_K8S_VERSION`, downloaded or built with Go when missing (see
/// [`assets::Options::from_env`] for the variables that steer it). Blocks for as long as that takes;
/// progress goes to stderr.
fn cached_or_provided(components: assets::Components) -> Result<PathBuf, String> {
    let version = env::var("ENVTEST_K8S_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| assets::DEFAULT_KUBERNETES_VERSION.to_string());
    let version =
        assets::parse_version(&version).map_err(|e| format!("ENVTEST_K8S_VERSION: {e}"))?;
    let bin_dir = assets::default_bin_dir().map_err(|e| e.to_string())?;
    let options = assets::Options {
        components,
        ..assets::Options::from_env()
    };
    let provided = assets::provide(&version, &bin_dir, &options, &assets::print_status)
        .map_err(|e| e.to_string())?;
    Ok(provided.dir)
}

/// `TEST_ASSET_KUBE_APISERVER` for `kube-apiserver`.
fn override_var(name: &str) -> String {
    format!("TEST_ASSET_{}", name.to_uppercase().replace('-', "_"))
}

/// More flags for one component, from `ENVTEST_<NAME>_FLAGS` split at whitespace, e.g.
/// `ENVTEST_KUBE_CONTROLLER_MANAGER_FLAGS="--kube-api-qps=500 --kube-api-burst=1000"`.
fn extra_flags(name: &str) -> Vec<String> {
    let var = format!("ENVTEST_{}_FLAGS", name.to_uppercase().replace('-', "_"));
    let flags = env::var(var).unwrap_or_default();
    flags.split_whitespace().map(str::to_owned).collect()
}

/// Removes the directories of envs whose test process died without cleaning up: Ctrl-C
/// and SIGKILL skip Drop (the kernel killed their children already). etcd preallocates
/// 128 MB of WAL, so each one left behind is worth removing.
#[cfg(target_os = "linux")]
fn remove_abandoned_dirs() {
    for entry in fs::read_dir(env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        let dir = entry.path();
        if entry.file_name().to_string_lossy().starts_with(DIR_PREFIX)
            && let Ok(pid) = fs::read_to_string(dir.join(OWNER_FILE))
            && !Path::new("/proc").join(pid.trim()).exists()
        {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// The `*.yaml` (and `*.yml`) files in `dir`, sorted; none if it does not exist.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let entries = fs::read_dir(dir).into_iter().flatten().flatten();
    let is_yaml = |p: &PathBuf| p.extension().is_some_and(|e| e == "yaml" || e == "yml");
    let mut files: Vec<PathBuf> = entries.map(|e| e.path()).filter(is_yaml).collect();
    files.sort();
    files
}

/// Every CustomResourceDefinition in the YAML files of `dir`. Panics on anything else.
fn crds_in(dir: &Path) -> Vec<CustomResourceDefinition> {
    if let Err(e) = fs::read_dir(dir) {
        panic!("envtest: cannot read CRD directory {}: {e}", dir.display());
    }
    let mut crds = Vec::new();
    for file in yaml_files(dir) {
        let text = fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("envtest: cannot read {}: {e}", file.display()));
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_yaml::Value::deserialize(document)
                .unwrap_or_else(|e| panic!("envtest: {}: {e}", file.display()));
            if value.is_null() {
                continue; // an empty document, e.g. after a leading `---`
            }
            if value.get("kind").and_then(|k| k.as_str()) != Some("CustomResourceDefinition") {
                panic!(
                    "envtest: {}: a document is not a CustomResourceDefinition",
                    file.display()
                );
            }
            let crd = serde_yaml::from_value(value)
                .unwrap_or_else(|e| panic!("envtest: {}: {e}", file.display()));
            crds.push(crd);
        }
    }
    crds
}

impl WebhookConfigurations {
    /// Adds the webhook configurations among the YAML documents of `text` (from `source`, for errors).
    fn read(&mut self, text: &str, source: &str) {
        for document in serde_yaml::Deserializer::from_str(text) {
            let value = serde_yaml::Value::deserialize(document)
                .unwrap_or_else(|e| panic!("envtest: {source}: {e}"));
            let kind = value
                .get("kind")
                .and_then(|k| k.as_str())
                .unwrap_or_default();
            let what = format!("{source}: {kind}");
            match kind {
                "MutatingWebhookConfiguration" => self.mutating.push(from_yaml(value, &what)),
                "ValidatingWebhookConfiguration" => self.validating.push(from_yaml(value, &what)),
                _ => {} // e.g. the Service or a kustomization beside them
            }
        }
    }
}

fn from_yaml<T: DeserializeOwned>(value: serde_yaml::Value, what: &str) -> T {
    serde_yaml::from_value(value).unwrap_or_else(|e| panic!("envtest: {what}: {e}"))
}

/// The path of `https://host:port/path`, `` when it has none.
fn url_path(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.find('/')
        .map_or(String::new(), |i| rest[i..].to_string())
}

/// Free loopback ports: bind port 0 and let the OS choose. All listeners are held until every port is
/// chosen, so the ports differ. Another program may bind one before the component does:
/// [`TestEnv::spawn_listening`] notices and picks again.
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: [TcpListener; N] = std::array::from_fn(|_| {
        TcpListener::bind("127.0.0.1:0").expect("envtest: cannot bind a port")
    });
    listeners.map(|l| l.local_addr().expect("bound socket has an address").port())
}

/// A free loopback port for the test's webhook server, which binds it only later, after the API
/// server has been told of it. Unlike the components' ports it cannot be picked again, so it comes
/// from below the ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`): ports there are what
/// every outgoing connection and every `bind(0)` of the machine draws from, and one of them could
/// take it meanwhile. Where the range cannot be read, any free port.
fn webhook_port() -> u16 {
    let ephemeral_start = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok());
    let Some(end) = ephemeral_start.filter(|&end| end > WEBHOOK_PORTS_FROM) else {
        return free_ports::<1>()[0];
    };
    // A different start for each process, so that concurrent test binaries rarely try the same ports.
    let seed = std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), process::id());
    let span = u64::from(end - WEBHOOK_PORTS_FROM);
    (0..span)
        .map(|i| WEBHOOK_PORTS_FROM + ((seed + i) % span) as u16)
        .find(|&port| TcpListener::bind(("127.0.0.1", port)).is_ok())
        .unwrap_or_else(|| free_ports::<1>()[0])
}

/// The lowest port [`webhook_port`] takes: above the ports services usually listen on.
const WEBHOOK_PORTS_FROM: u16 = 20000;

/// Whether process `pid` has a listening TCP socket on 127.0.0.1 (or any address) at each of `ports`,
/// from `/proc/PID/net/tcp{,6}` and the process's file descriptors. Elsewhere than Linux: whether it runs.
fn listens_on(pid: u32, ports: &[u16]) -> bool {
    #[cfg(target_os = "linux")]
    {
        // The inodes of the listening sockets on each port (state 0A = LISTEN), in the process's own
        // network namespace (a test may run the env in one of its own).
        let mut inodes: Vec<Vec<String>> = vec![Vec::new(); ports.len()];
        for table in ["tcp", "tcp6"] {
            let text = fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
            for line in text.lines().skip(1) {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let (Some(local), Some(state), Some(inode)) =
                    (fields.get(1), fields.get(3), fields.get(9))
                else {
                    continue;
                };
                let port = local
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok());
                if *state != "0A" {
                    continue;
                }
                if let Some(i) = ports.iter().position(|p| Some(*p) == port) {
                    inodes[i].push(format!("socket:[{inode}]"));
                }
            }
        }
        if inodes.iter().any(Vec::is_empty) {
            return false;
        }
        let fds = fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten();
        let sockets: Vec<String> = fds
            .filter_map(|fd| fs::read_link(fd.path()).ok())
            .map(|target| target.to_string_lossy().into_owned())
            .collect();
        inodes
            .iter()
            .all(|of_port| of_port.iter().any(|inode| sockets.contains(inode)))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (pid, ports);
        true
    }
}

/// Writes a kubeconfig (JSON is valid YAML) for `server`, trusting `<pki>/ca.crt`.
fn write_kubeconfig(path: &Path, server: &str, pki: &Path, user: Value) {
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "envtest", "cluster": { "server": server, "certificate-authority": pki.join("ca.crt") } }],
        "users": [{ "name": "envtest", "user": user }],
        "contexts": [{ "name": "envtest", "context": { "cluster": "envtest", "user": "envtest", "namespace": "default" } }],
        "current-context": "envtest",
    });
    fs::write(path, config.to_string()).expect("envtest: cannot write a kubeconfig");
}

/// A client from a kubeconfig file: the way kubectl and an operator process connect too.
async fn client_for(kubeconfig: &Path) -> kube::Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("envtest: unreadable kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await;
    kube::Client::try_from(config.expect("envtest: invalid kubeconfig")).expect("envtest: client")
}

async fn readyz(client: &kube::Client) -> bool {
    // kube has no raw GET helper; a named GET on the empty path is `GET /readyz`.
    let request = kube::core::Request::new("").get("readyz", &Default::default());
    let request = request.expect("envtest: valid request");
    client.request_text(request).await.is_ok()
}

/// Whether discovery lists the CRD's resource in every served version.
async fn discovered(client: &kube::Client, crd: &CustomResourceDefinition) -> bool {
    for version in crd.spec.versions.iter().filter(|v| v.served) {
        let group_version = format!("{}/{}", crd.spec.group, version.name);
        let Ok(list) = client.list_api_group_resources(&group_version).await else {
            return false;
        };
        if !list
            .resources
            .iter()
            .any(|r| r.name == crd.spec.names.plural)
        {
            return false;
        }
    }
    true
}

async fn exists<K: Clone + DeserializeOwned + std::fmt::Debug>(api: &Api<K>, name: &str) -> bool {
    api.get_opt(name).await.is_ok_and(|o| o.is_some())
}

async fn nodes_ready(nodes: &Api<Node>) -> bool {
    let Ok(list) = nodes.list(&Default::default()).await else {
        return false;
    };
    let ready = |n: &Node| {
        let mut conditions = n.status.iter().flat_map(|s| s.conditions.iter().flatten());
        let ready = conditions.any(|c| c.type_ == "Ready" && c.status == "True");
        // The node lifecycle controller taints a node until it has seen it Ready.
        let taints = n.spec.as_ref().and_then(|s| s.taints.as_ref());
        ready && taints.is_none_or(|t| t.is_empty())
    };
    list.items.len() >= FAKE_NODES && list.items.iter().all(ready)
}

/// A Node that kwok will run: no taints, and room for far more pods than a kubelet's 110 (a fake pod
/// costs nothing), so a test can run thousands.
fn fake_node(i: usize) -> Node {
    let name = format!("kwok-node-{i}");
    let resources = json!({ "cpu": "256", "memory": "2Ti", "pods": "1500" });
    object(json!({
        "metadata": {
            "name": name,
            "annotations": { KWOK_ANNOTATION.0: KWOK_ANNOTATION.1 },
            "labels": { "kubernetes.io/hostname": name, "type": "kwok" },
        },
        "status": { "capacity": resources, "allocatable": resources },
    }))
}

/// A typed object from JSON: shorter than nested `..Default::default()`.
fn object<K: DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("envtest: invalid object")
}

fn ok_if_exists<T>(result: kube::Result<T>) {
    match result {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {} // AlreadyExists
        Err(e) => panic!("envtest: create failed: {e}"),
    }
}

fn flag(name: &str, path: &Path) -> String {
    format!("--{name}={}", path.display())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A component given a port that another program holds (what the bind-then-close race causes)
    /// exits; the harness notices and starts it again on new ports.
    #[tokio::test]
    async fn a_component_whose_port_is_taken_starts_again_on_new_ports() {
        let mut env = TestEnv::start().await;
        let etcd = env.procs[0].bin.clone();
        let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = squatter.local_addr().unwrap().port();
        let mut picks = 0;
        let pick = || {
            picks += 1;
            match picks {
                1 => [taken, free_ports::<1>()[0]],
                _ => free_ports(),
            }
        };
        let d = env.dir.path().to_owned();
        let args = |[client, peer]: [u16; 2]| {
            vec![
                flag("data-dir", &d.join(format!("second-etcd-{client}"))),
                format!("--listen-client-urls=http://127.0.0.1:{client}"),
                format!("--advertise-client-urls=http://127.0.0.1:{client}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-cluster=default=http://127.0.0.1:{peer}"),
            ]
        };
        let [client, _] = env.spawn_listening("second-etcd", &etcd, pick, args).await;
        assert_ne!(client, taken);
        assert_eq!(picks, 2);
        let second = env.procs.last().unwrap();
        assert!(listens_on(second.child.id(), &second.ports));
        let first_try = d.join("second-etcd.port-taken-1.log");
        let log = fs::read_to_string(&first_try).unwrap();
        assert!(log.contains("address already in use"), "{log}");
        // The squatter's port is still its own, and no process of the env listens there.
        assert!(
            env.procs
                .iter()
                .all(|p| !listens_on(p.child.id(), &[taken]))
        );
        drop(squatter);
    }

    #[test]
    fn webhook_ports_come_from_below_the_ephemeral_range() {
        let range = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
        let start: u16 = range.split_whitespace().next().unwrap().parse().unwrap();
        let port = webhook_port();
        assert!(
            (WEBHOOK_PORTS_FROM..start).contains(&port),
            "{port} not in {WEBHOOK_PORTS_FROM}..{start}"
        );
        TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
    }

    #[test]
    fn listening_sockets_are_found_by_process() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listens_on(process::id(), &[port]));
        drop(listener);
        assert!(!listens_on(process::id(), &[port]));
        // Another process (our parent, cargo) does not hold our socket.
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = other.local_addr().unwrap().port();
        let parent = std::os::unix::process::parent_id();
        assert!(!listens_on(parent, &[port]));
    }
}
