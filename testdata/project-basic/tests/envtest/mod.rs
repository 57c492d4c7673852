//! envtest: a real, throw-away Kubernetes control plane for integration tests.
//!
//! [`TestEnv::start`] runs etcd and kube-apiserver; [`TestEnv::start_cluster`] adds
//! kube-controller-manager, kube-scheduler and kwok with fake nodes, so Deployments get
//! Running pods and owned objects are garbage-collected. Binaries come from
//! `KUBEBUILDER_ASSETS` (the `setup-envtest` layout). Each env lives in its own temporary
//! directory on its own free ports, so tests and test binaries can run side by side.
//! Dropping the env kills its processes and removes the directory, also on panic.
//!
//! Each test binary includes this file with `mod envtest;`. Use one `TestEnv` per test:
//! its processes are tied to the thread that started them (`PR_SET_PDEATHSIG`), so an env
//! must not outlive the runtime that created it (e.g. no env shared through a `static`).
#![allow(dead_code)] // every test binary uses a different part of this module

use std::fs::{self, File};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::await_condition;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::{Value, json};

const HINT: &str = "run `make setup-envtest` or `export KUBEBUILDER_ASSETS=$(rustbuilder envtest use 1.36.3 -p path)`";
/// How long startup may take before we give up (2 busy cores can be slow).
const BUDGET: Duration = Duration::from_secs(60);
const FAKE_NODES: usize = 3;
/// kwok only manages nodes carrying this annotation.
const KWOK_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// A running control plane. Dropping it stops everything.
pub struct TestEnv {
    procs: Vec<Proc>, // in start order; stopped in reverse order
    client: kube::Client,
    server: String,
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    cluster: bool,
    dir: tempfile::TempDir, // dropped last: removed once every process is gone
}

/// A child process whose stdout and stderr go to `log`.
struct Proc {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl TestEnv {
    /// etcd + kube-apiserver only; installs every CRD in `<CARGO_MANIFEST_DIR>/config/crd/bases`
    /// and waits until they are Established.
    pub async fn start() -> TestEnv {
        Self::launch(false).await
    }

    /// Also runs kube-controller-manager, kube-scheduler and kwok with fake nodes, so
    /// Deployments make Pods that become Running/Ready and garbage collection works.
    pub async fn start_cluster() -> TestEnv {
        Self::launch(true).await
    }

    /// A client authenticated as an admin (group `system:masters`).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The admin kubeconfig, for kubectl or an operator process (`KUBECONFIG=...`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// kubectl from the assets, talking to this env as admin.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        // A private discovery cache: another env may have used the same port before.
        cmd.arg(flag("kubeconfig", &self.kubeconfig))
            .arg(flag("cache-dir", &self.dir.path().join("kubectl-cache")));
        cmd
    }

    /// The pid of every process of this env, e.g. to measure memory use.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.procs.iter().map(|p| (p.name, p.child.id())).collect()
    }

    /// Creates the namespace unless it exists. In cluster mode, also waits for its `default`
    /// ServiceAccount, without which Pods are rejected.
    pub async fn create_namespace(&self, name: &str) {
        let ns = Namespace {
            metadata: named(name),
            ..Default::default()
        };
        let namespaces: Api<Namespace> = Api::all(self.client());
        ok_if_exists(namespaces.create(&PostParams::default(), &ns).await);
        if self.cluster {
            let sas: Api<ServiceAccount> = Api::namespaced(self.client(), name);
            let found = await_condition(sas, "default", |sa: Option<&ServiceAccount>| sa.is_some());
            match tokio::time::timeout(BUDGET, found).await {
                Ok(Ok(_)) => {}
                _ => panic!("envtest: no `default` ServiceAccount in namespace {name}"),
            }
        }
    }

    /// A kubeconfig authenticating as ServiceAccount `namespace/name` (created if missing)
    /// with a one-hour token from the TokenRequest API.
    pub async fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        self.create_namespace(namespace).await;
        let sas: Api<ServiceAccount> = Api::namespaced(self.client(), namespace);
        let sa = ServiceAccount {
            metadata: named(name),
            ..Default::default()
        };
        ok_if_exists(sas.create(&PostParams::default(), &sa).await);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..Default::default()
            }),
            ..Default::default()
        };
        let token = sas
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("envtest: TokenRequest for {namespace}/{name}: {e}"))
            .status
            .expect("TokenRequest without status")
            .token;
        let path = self.dir.path().join(format!("sa-{namespace}-{name}.kubeconfig"));
        write_kubeconfig(&path, &self.server, self.dir.path(), json!({ "token": token }));
        path
    }

    /// A client authenticating as ServiceAccount `namespace/name` (created if missing).
    pub async fn service_account_client(&self, namespace: &str, name: &str) -> kube::Client {
        client_for(&self.service_account_kubeconfig(namespace, name).await).await
    }

    async fn launch(cluster: bool) -> TestEnv {
        // Resolve every binary first: a missing one fails fast, before anything runs.
        let etcd = asset("etcd");
        let apiserver = asset("kube-apiserver");
        let kubectl = asset("kubectl");
        let extra = cluster.then(|| {
            let kwok = asset("kwok");
            let stages = kwok_stages(&kwok);
            let kcm = asset("kube-controller-manager");
            (kcm, asset("kube-scheduler"), kwok, stages)
        });

        let dir = tempfile::Builder::new()
            .prefix("envtest-")
            .tempdir()
            .expect("envtest: cannot create a temporary directory");
        let d = dir.path();
        write_pki(d);
        let [etcd_port, peer_port, api_port] = free_ports();
        let server = format!("https://127.0.0.1:{api_port}");
        let kubeconfig = d.join("admin.kubeconfig");
        let admin = json!({
            "client-certificate": d.join("admin.crt"),
            "client-key": d.join("admin.key"),
        });
        write_kubeconfig(&kubeconfig, &server, d, admin);
        let mut env = TestEnv {
            procs: Vec::new(),
            client: client_for(&kubeconfig).await, // connects lazily
            server,
            kubeconfig,
            kubectl,
            cluster,
            dir,
        };
        // From here on a panic drops `env`, which cleans up whatever already runs.
        let d = env.dir.path().to_owned();

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        env.spawn("etcd", &etcd, vec![
            flag("data-dir", &d.join("etcd")),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            "--unsafe-no-fsync=true".into(), // throw-away data: skip the slow fsyncs
            "--log-level=warn".into(),
        ]);
        // Without a controller-manager nothing creates `default` ServiceAccounts, and the
        // ServiceAccount admission plugin would then reject every Pod.
        let admission = match cluster {
            true => "--disable-admission-plugins=",
            false => "--disable-admission-plugins=ServiceAccount",
        };
        env.spawn("kube-apiserver", &apiserver, vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--secure-port={api_port}"),
            "--bind-address=127.0.0.1".into(),
            // Needed on hosts without a default route ("no suitable network address").
            "--advertise-address=127.0.0.1".into(),
            // Endpoints may not point at loopback; don't let the apiserver try.
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
            admission.into(),
        ]);
        let client = env.client();
        env.wait_until("kube-apiserver /readyz", async || readyz(&client).await)
            .await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        env.wait_until("the default namespace", async || {
            namespaces.get_opt("default").await.is_ok_and(|ns| ns.is_some())
        })
        .await;
        // CRDs first, so the garbage collector watches custom owners from its start.
        env.install_crds().await;

        if let Some((kcm, scheduler, kwok, stages)) = extra {
            let kubeconfig = flag("kubeconfig", &env.kubeconfig);
            env.spawn("kube-controller-manager", &kcm, vec![
                kubeconfig.clone(),
                "--leader-elect=false".into(),
                "--secure-port=0".into(), // no metrics/health server: nothing to collide on
                flag("service-account-private-key-file", &d.join("sa.key")),
                flag("root-ca-file", &d.join("ca.crt")),
            ]);
            env.spawn("kube-scheduler", &scheduler, vec![
                kubeconfig.clone(),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
            ]);
            let selector = format!("{}={}", KWOK_ANNOTATION.0, KWOK_ANNOTATION.1);
            let mut args = vec![
                kubeconfig,
                "--manage-all-nodes=false".into(),
                format!("--manage-nodes-with-annotation-selector={selector}"),
                "--cidr=10.244.0.1/16".into(), // fake pod IPs
            ];
            // Since v0.8.0 kwok has no built-in behaviour: Stage objects drive nodes and pods.
            args.extend(stages.iter().map(|s| flag("config", s)));
            env.spawn("kwok", &kwok, args);

            let nodes: Api<Node> = Api::all(client.clone());
            for i in 0..FAKE_NODES {
                ok_if_exists(nodes.create(&PostParams::default(), &fake_node(i)).await);
            }
            env.wait_until("fake nodes Ready and untainted", async || {
                nodes_ready(&nodes).await
            })
            .await;
            let sas: Api<ServiceAccount> = Api::namespaced(client, "default");
            env.wait_until("the default ServiceAccount", async || {
                sas.get_opt("default").await.is_ok_and(|sa| sa.is_some())
            })
            .await;
        }
        env
    }

    /// Starts `bin` with its output in `<dir>/<name>.log`.
    fn spawn(&mut self, name: &'static str, bin: &Path, args: Vec<String>) {
        let log = self.dir.path().join(format!("{name}.log"));
        let out = File::create(&log).expect("envtest: cannot create a log file");
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("envtest: cannot clone a log file"))
            .stderr(out);
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            let parent = std::process::id();
            // SAFETY: between fork and exec the closure only makes async-signal-safe calls.
            unsafe {
                cmd.pre_exec(move || {
                    // Have the kernel SIGKILL the child when we die, even by SIGKILL,
                    // which skips Drop. Check the parent is still there: we may have
                    // died before prctl took effect.
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
        self.procs.push(Proc { name, child, log });
    }

    /// Polls `ready` until it returns true. Panics with a log tail when a process exits or
    /// the budget runs out (then showing the last started component).
    async fn wait_until(&mut self, what: &str, mut ready: impl AsyncFnMut() -> bool) {
        let deadline = Instant::now() + BUDGET;
        let poll = Duration::from_secs(5);
        while !tokio::time::timeout(poll, ready()).await.unwrap_or(false) {
            for p in &mut self.procs {
                if let Ok(Some(status)) = p.child.try_wait() {
                    panic!("envtest: {} exited ({status}) while waiting for {what}; {}", p.name, p.tail());
                }
            }
            if Instant::now() > deadline {
                let last = self.procs.last().map(Proc::tail).unwrap_or_default();
                panic!("envtest: timed out after {BUDGET:?} waiting for {what}; {last}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Applies every CRD in `config/crd/bases` with kubectl, then waits until all are served.
    async fn install_crds(&self) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/crd/bases");
        let is_manifest = |p: PathBuf| p.extension().is_some_and(|e| e == "yaml" || e == "yml");
        let any = fs::read_dir(&dir).is_ok_and(|mut d| d.any(|e| e.is_ok_and(|e| is_manifest(e.path()))));
        if !any {
            return;
        }
        let timeout = format!("--timeout={}s", BUDGET.as_secs());
        for args in [
            ["apply", "--server-side", "--field-manager=envtest", "-f"],
            ["wait", "--for=condition=Established", &timeout, "-f"],
        ] {
            let mut cmd = self.kubectl();
            cmd.args(args).arg(&dir);
            let out = tokio::process::Command::from(cmd)
                .output()
                .await
                .expect("envtest: cannot run kubectl");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "envtest: kubectl {} {} failed: {stderr}", args.join(" "), dir.display());
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        // SIGKILL: the state is throw-away, so a graceful shutdown would only cost time.
        for p in self.procs.iter_mut().rev() {
            let _ = p.child.kill();
        }
        // Reap them (no zombies) before `dir` is removed.
        for p in &mut self.procs {
            let _ = p.child.wait();
        }
    }
}

impl Proc {
    /// The last lines of the log, to explain a failure.
    fn tail(&self) -> String {
        let text = fs::read(&self.log).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("last lines of {}:\n{tail}", self.log.display())
    }
}

/// Finds a binary: `TEST_ASSET_<NAME>` (as Go envtest), else `$KUBEBUILDER_ASSETS/<name>`.
fn asset(name: &str) -> PathBuf {
    let var = format!("TEST_ASSET_{}", name.to_uppercase().replace('-', "_"));
    let path = match (std::env::var_os(&var), std::env::var_os("KUBEBUILDER_ASSETS")) {
        (Some(path), _) => PathBuf::from(path),
        (None, Some(dir)) => Path::new(&dir).join(name),
        (None, None) => panic!("KUBEBUILDER_ASSETS is not set: {HINT}"),
    };
    assert!(path.is_file(), "envtest: {name} not found at {}: {HINT}", path.display());
    path
}

/// kwok's Stage files live next to the kwok binary, in `kwok-stages/*.yaml`.
fn kwok_stages(kwok: &Path) -> Vec<PathBuf> {
    let dir = kwok.with_file_name("kwok-stages");
    let mut stages: Vec<PathBuf> = fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    assert!(!stages.is_empty(), "envtest: no kwok stages in {}: {HINT}", dir.display());
    stages.sort();
    stages
}

/// Free loopback ports: bind port 0 and let the OS choose. All listeners are held until
/// every port is chosen, so the ports differ; the race with other binders is tiny.
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: [TcpListener; N] = std::array::from_fn(|_| {
        TcpListener::bind("127.0.0.1:0").expect("envtest: cannot bind a free port")
    });
    listeners.map(|l| l.local_addr().expect("bound socket has an address").port())
}

/// Writes a CA, a serving cert for 127.0.0.1/localhost and an admin client cert (both
/// signed by the CA), and a key pair that signs ServiceAccount tokens. Keys are PKCS#8
/// ECDSA P-256, which Go and rustls both read.
fn write_pki(dir: &Path) {
    let write = |name: &str, pem: String| fs::write(dir.join(name), pem).expect("envtest: cannot write PKI");
    let ca_key = KeyPair::generate().expect("key generation");
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "envtest-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    write("ca.crt", ca.self_signed(&ca_key).expect("CA certificate").pem());
    let issuer = Issuer::new(ca, &ca_key);

    // (file stem, subject alt names, common name, organization = group, usage)
    let leaves = [
        ("serving", vec!["127.0.0.1", "localhost"], "kube-apiserver", None, ExtendedKeyUsagePurpose::ServerAuth),
        ("admin", vec![], "envtest-admin", Some("system:masters"), ExtendedKeyUsagePurpose::ClientAuth),
    ];
    for (stem, sans, cn, group, usage) in leaves {
        let key = KeyPair::generate().expect("key generation");
        let mut params = CertificateParams::new(sans.into_iter().map(String::from).collect::<Vec<_>>())
            .expect("valid subject alt names");
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(group) = group {
            params.distinguished_name.push(DnType::OrganizationName, group);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        write(&format!("{stem}.crt"), params.signed_by(&key, &issuer).expect("certificate").pem());
        write(&format!("{stem}.key"), key.serialize_pem());
    }
    let sa = KeyPair::generate().expect("key generation");
    write("sa.key", sa.serialize_pem());
    write("sa.pub", sa.public_key_pem());
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

/// A client from a kubeconfig file: the same path kubectl and an operator process take.
async fn client_for(kubeconfig: &Path) -> kube::Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("envtest: unreadable kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("envtest: invalid kubeconfig");
    kube::Client::try_from(config).expect("envtest: cannot build a client")
}

async fn readyz(client: &kube::Client) -> bool {
    // kube has no raw GET helper; a named GET on the empty path is `GET /readyz`.
    let request = kube::core::Request::new("")
        .get("readyz", &Default::default())
        .expect("valid request");
    client.request_text(request).await.is_ok()
}

async fn nodes_ready(nodes: &Api<Node>) -> bool {
    let Ok(list) = nodes.list(&Default::default()).await else {
        return false;
    };
    let ready = |n: &Node| {
        let conditions = n.status.as_ref().and_then(|s| s.conditions.as_ref());
        let ready = conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        // The node lifecycle controller taints a node until it has seen it Ready.
        let taints = n.spec.as_ref().and_then(|s| s.taints.as_ref());
        ready && taints.is_none_or(|t| t.is_empty())
    };
    list.items.len() >= FAKE_NODES && list.items.iter().all(ready)
}

/// A Node that kwok will run: room for plenty of pods, no taints.
fn fake_node(i: usize) -> Node {
    let name = format!("kwok-node-{i}");
    let resources = json!({ "cpu": "32", "memory": "256Gi", "pods": "110" });
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "annotations": { KWOK_ANNOTATION.0: KWOK_ANNOTATION.1 },
            "labels": { "kubernetes.io/hostname": name, "type": "kwok" },
        },
        "status": { "capacity": resources, "allocatable": resources },
    }))
    .expect("valid Node")
}

fn named(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

fn ok_if_exists<T>(result: kube::Result<T>) {
    match result {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("envtest: create failed: {e}"),
    }
}

fn flag(name: &str, path: &Path) -> String {
    format!("--{name}={}", path.display())
}
