//! The CLI as users run it: the real binary in temporary directories.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::cargo;

fn rustbuilder(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rustbuilder"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("rustbuilder runs")
}

fn ok(dir: &Path, args: &[&str]) -> Output {
    let output = rustbuilder(dir, args);
    assert!(
        output.status.success(),
        "`rustbuilder {}` failed:\n{}",
        args.join(" "),
        stderr(&output)
    );
    output
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Every file under `dir` with its bytes, for before/after comparisons.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.insert(
                    path.strip_prefix(root).unwrap().to_path_buf(),
                    b"<dir>".to_vec(),
                );
                walk(root, &path, out);
            } else {
                out.insert(
                    path.strip_prefix(root).unwrap().to_path_buf(),
                    std::fs::read(&path).unwrap(),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// A project made by `init` + `create api`, as in the tutorial.
fn memcached_project() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("memcached-operator")
        .tempdir()
        .unwrap();
    ok(
        dir.path(),
        &[
            "init",
            "--domain",
            "example.com",
            "--project-name",
            "memcached-operator",
        ],
    );
    ok(
        dir.path(),
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--version",
            "v1alpha1",
            "--kind",
            "Memcached",
        ],
    );
    dir
}

/// Runs a command that must fail, and checks it failed cleanly: non-zero, the expected message, no change.
fn refused(dir: &Path, args: &[&str], expected: &[&str]) {
    let before = tree(dir);
    let output = rustbuilder(dir, args);
    let message = stderr(&output);
    assert!(
        !output.status.success(),
        "`rustbuilder {}` should fail",
        args.join(" ")
    );
    for text in expected {
        assert!(
            message.contains(text),
            "`rustbuilder {}`: expected {text:?} in:\n{message}",
            args.join(" ")
        );
    }
    assert_eq!(
        tree(dir),
        before,
        "`rustbuilder {}` changed the directory",
        args.join(" ")
    );
}

#[test]
fn init_and_create_api_scaffold_the_tutorial_layout() {
    let dir = memcached_project();
    let files = tree(dir.path());
    for expected in [
        "PROJECT",
        "Cargo.toml",
        "Makefile",
        "Dockerfile",
        ".dockerignore",
        ".gitignore",
        "README.md",
        "src/main.rs",
        "src/lib.rs",
        "src/bin/crdgen.rs",
        "src/api/v1alpha1/memcached.rs",
        "src/controller/memcached.rs",
        "tests/controllers/memcached.rs",
        "tests/controllers/explore.rs",
        "config/default/kustomization.yaml",
        "config/manager/manager.yaml",
        "config/rbac/role.yaml",
        "config/rbac/memcached_admin_role.yaml",
        "config/rbac/memcached_editor_role.yaml",
        "config/rbac/memcached_viewer_role.yaml",
        "config/samples/cache_v1alpha1_memcached.yaml",
        "config/crd/kustomization.yaml",
        "config/certmanager/kustomization.yaml",
        "config/certmanager/issuer.yaml",
        "config/certmanager/certificate-metrics.yaml",
        "config/default/cert_metrics_manager_patch.yaml",
        "config/prometheus/monitor_tls_patch.yaml",
        "rustbuilder/README.md",
        "rustbuilder/runtime/Cargo.toml",
        "rustbuilder/runtime/src/lib.rs",
        "rustbuilder/envtest/Cargo.toml",
        "rustbuilder/envtest/src/lib.rs",
    ] {
        assert!(
            files.contains_key(Path::new(expected)),
            "missing {expected}"
        );
    }
    let project = std::fs::read_to_string(dir.path().join("PROJECT")).unwrap();
    for line in [
        "domain: example.com",
        "projectName: memcached-operator",
        "kind: Memcached",
        "group: cache",
    ] {
        assert!(project.contains(line), "PROJECT lacks `{line}`:\n{project}");
    }
    let main = std::fs::read_to_string(dir.path().join("src/main.rs")).unwrap();
    assert!(
        main.contains("    controllers.add(controller::memcached::run(manager.clone()));\n"),
        "{main}"
    );
    let crds = std::fs::read_to_string(dir.path().join("config/crd/kustomization.yaml")).unwrap();
    assert!(crds.contains("- bases/cache.example.com_memcacheds.yaml"));

    // The files for people and tools around the code: a dev container whose JSON parses and whose
    // script exists, AGENTS.md, and `make lint-fix`.
    let devcontainer = read(dir.path(), ".devcontainer/devcontainer.json");
    let devcontainer: serde_json::Value = serde_json::from_str(&devcontainer).unwrap();
    assert_eq!(devcontainer["name"], "memcached-operator");
    let command = devcontainer["onCreateCommand"].as_str().unwrap();
    let script = command.strip_prefix("bash ").unwrap();
    assert!(read(dir.path(), script).contains("make setup-envtest"));
    assert!(read(dir.path(), "AGENTS.md").contains("make manifests"));
    let make = Command::new("make")
        .args(["-n", "lint-fix"])
        .current_dir(dir.path())
        .output()
        .expect("make runs");
    let planned = String::from_utf8_lossy(&make.stdout);
    assert!(make.status.success(), "{}", stderr(&make));
    assert!(
        planned.contains("clippy --fix") && planned.contains("fmt"),
        "{planned}"
    );
}

/// The explorer's test comes with the first controller of a namespaced kind of the project's own, and
/// each such kind after it joins it, with every controller: the kind once, at one version. Built-in,
/// external and cluster-scoped kinds have none, nor has a multi-cluster project.
#[test]
fn create_api_puts_each_controller_of_the_projects_own_kinds_in_the_explorer() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let init = "init --domain example.com --project-name sea";
    ok(d, &init.split(' ').collect::<Vec<_>>());
    let create = |flags: &str| {
        let args = format!("create api --group {flags}");
        ok(d, &args.split(' ').collect::<Vec<_>>());
    };
    // rustfmt wraps the lines as it likes: compared without whitespace.
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    let explorer = || squash(&read(d, "tests/controllers/explore.rs"));

    create("apps --version v1 --kind Deployment --resource=false");
    assert!(!d.join("tests/controllers/explore.rs").exists());
    assert!(!read(d, "tests/controllers/main.rs").contains("mod explore;"));

    create("ship --version v1 --kind Frigate");
    assert!(read(d, "tests/controllers/main.rs").contains("\nmod explore;\n"));
    let frigate = [
        ".crd(crd::<api::v1::Frigate>())",
        ".controller(controller::frigate::run)",
        r#".sample::<api::v1::Frigate>(include_str!("../../config/samples/ship_v1_frigate.yaml"))"#,
    ];
    for line in frigate {
        assert!(
            explorer().contains(&squash(line)),
            "{line} in {}",
            explorer()
        );
    }

    // A second controller of the kind adds itself only.
    create("ship --version v1 --kind Frigate --resource=false --controller-name frigate-audit");
    let text = explorer();
    assert!(text.contains(&squash(".controller(controller::frigate_audit::run)")));
    for line in frigate {
        assert_eq!(text.matches(&squash(line)).count(), 1, "{line} in {text}");
    }

    // A cluster-scoped kind, and the controllers of an explored kind's other versions, stay out.
    create("ship --version v1 --kind Cruiser --namespaced=false");
    create("ship --version v2 --kind Frigate --controller=false");
    create("ship --version v2 --kind Frigate --resource=false --controller-name frigate-watch");
    assert_eq!(explorer(), text);

    // Its module is the test crate's own: no controller may have it.
    refused(
        d,
        &[
            "create",
            "api",
            "--group",
            "ship",
            "--version",
            "v1",
            "--kind",
            "Explore",
        ],
        &[
            "`tests/controllers/explore.rs`, which is the controllers' test crate's own",
            "\nhelp: ",
        ],
    );
    let fleet = multicluster_project();
    assert!(!fleet.path().join("tests/controllers/explore.rs").exists());
}

/// `make certs` writes the webhook server's certificate where `make run`'s manager looks for it (its
/// `--webhook-cert-path` default, or `WEBHOOK_CERT_PATH`), with the envtest example's `certs`.
#[test]
fn make_certs_writes_the_certificate_make_run_serves_the_webhooks_with() {
    let dir = memcached_project();
    let d = dir.path();
    // Under `make test` this `make` is a sub-make, which would print the directories it enters.
    let make = |args: &[&str]| {
        let output = Command::new("make")
            .arg("--no-print-directory")
            .args(args)
            .current_dir(d)
            .output()
            .expect("make runs");
        assert!(output.status.success(), "{}", stderr(&output));
        String::from_utf8(output.stdout).unwrap()
    };
    let planned = make(&["-n", "certs"]);
    assert!(
        planned.ends_with(
            "cargo run --quiet --example envtest -- certs /tmp/k8s-webhook-server/serving-certs\n"
        ),
        "{planned}"
    );
    assert!(
        make(&["-n", "certs", "WEBHOOK_CERT_PATH=/elsewhere"]).ends_with("-- certs /elsewhere\n")
    );
    let help = make(&["help"]);
    assert!(
        help.lines()
            .any(|line| line.contains("certs") && line.contains("webhook server")),
        "{help}"
    );
    // The example's command line, as the project's copy of the envtest crate has it.
    let cli = read(d, "rustbuilder/envtest/src/cli.rs");
    assert!(
        cli.contains("[\"certs\", dir]"),
        "the envtest example has no `certs`"
    );
}

/// The `kubectl` whose kustomize renders config/: `KUBEBUILDER_ASSETS`'s, else the envtest cache's
/// (`rustbuilder envtest use`), else the one on PATH.
fn kubectl() -> PathBuf {
    let assets = std::env::var_os("KUBEBUILDER_ASSETS")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            rustbuilder_envtest::assets::default_bin_dir()
                .ok()
                .map(|dir| {
                    dir.join("k8s")
                        .join(rustbuilder_envtest::assets::platform_dir(
                            rustbuilder_envtest::assets::DEFAULT_KUBERNETES_VERSION,
                        ))
                }),
        );
    for dir in assets {
        if dir.join("kubectl").is_file() {
            return dir.join("kubectl");
        }
    }
    PathBuf::from("kubectl")
}

/// `kubectl kustomize <dir>`, as objects.
fn kustomize(dir: &Path) -> Vec<serde_yaml::Value> {
    use serde::Deserialize as _;
    let output = Command::new(kubectl())
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl runs (`rustbuilder envtest use` downloads one)");
    assert!(
        output.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        stderr(&output)
    );
    serde_yaml::Deserializer::from_str(&String::from_utf8_lossy(&output.stdout))
        .map(|doc| serde_yaml::Value::deserialize(doc).unwrap())
        .collect()
}

/// The object of `kind` named `name` among `objects`.
fn object<'a>(objects: &'a [serde_yaml::Value], kind: &str, name: &str) -> &'a serde_yaml::Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {objects:#?}"))
}

/// Turns on the commented-out entries of `config/<path>` (lines `#-` and `#  `), except those in
/// `keep`; returns how many.
fn uncomment(config: &Path, path: &str, keep: &[&str]) -> usize {
    let file = config.join(path);
    let text = std::fs::read_to_string(&file).unwrap();
    let mut changed = 0;
    let lines: Vec<&str> = text
        .lines()
        .map(|line| match line.strip_prefix('#') {
            Some(rest)
                if (rest.starts_with("- ")
                    || rest.starts_with("  ")
                    || rest == "patches:"
                    || rest == "replacements:")
                    && !keep.contains(&line) =>
            {
                changed += 1;
                rest
            }
            _ => line,
        })
        .collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    changed
}

/// A copy of the project's config/ in a new directory.
fn config_copy(project: &Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    for (path, bytes) in tree(project) {
        if let Ok(rest) = path.strip_prefix("config")
            && project.join(&path).is_file()
        {
            let to = copy.path().join(rest);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::write(to, bytes).unwrap();
        }
    }
    copy
}

/// The manager's container of the Deployment in `objects`.
fn manager_container(objects: &[serde_yaml::Value]) -> &serde_yaml::Value {
    &object(
        objects,
        "Deployment",
        "memcached-operator-controller-manager",
    )["spec"]["template"]["spec"]["containers"][0]
}

/// The metrics certificate, as Kubebuilder scaffolds it: off in `config/default` (the manager makes a
/// self-signed one), and once its entries are uncommented, a cert-manager Certificate for the metrics
/// Service whose Secret the manager reads through `--metrics-cert-path` and the ServiceMonitor verifies
/// with.
#[test]
fn the_metrics_certificate_is_off_and_turns_on_in_config_default() {
    let dir = memcached_project();
    let d = dir.path();
    fake_manifests(d, "ClusterRole");
    for file in [
        "config/certmanager/kustomization.yaml",
        "config/certmanager/kustomizeconfig.yaml",
        "config/certmanager/issuer.yaml",
        "config/certmanager/certificate-metrics.yaml",
        "config/default/cert_metrics_manager_patch.yaml",
        "config/prometheus/monitor_tls_patch.yaml",
        "config/prometheus/kustomization.yaml",
        "config/default/kustomization.yaml",
    ] {
        let text = read(d, file);
        serde_yaml::from_str::<serde_yaml::Value>(&text)
            .unwrap_or_else(|e| panic!("{file} is not YAML: {e}\n{text}"));
    }

    // As scaffolded: no certificate, and the manager makes its own.
    let off = kustomize(&d.join("config/default"));
    assert!(!off.iter().any(|o| o["kind"] == "Certificate"), "{off:#?}");
    let args = format!("{:?}", manager_container(&off)["args"]);
    assert!(!args.contains("--metrics-cert-path"), "{args}");

    // Turned on as the comments say, the ServiceMonitor with it.
    let on = config_copy(d);
    let config = on.path();
    assert!(
        uncomment(
            config,
            "default/kustomization.yaml",
            &["#- ../network-policy"]
        ) > 40
    );
    assert_eq!(uncomment(config, "prometheus/kustomization.yaml", &[]), 4);
    let objects = kustomize(&config.join("default"));
    let container = manager_container(&objects);
    let dir_arg = "--metrics-cert-path=/tmp/k8s-metrics-server/metrics-certs";
    assert!(
        container["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|a| a == dir_arg),
        "{container:#?}"
    );
    let mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/tmp/k8s-metrics-server/metrics-certs")
        .unwrap_or_else(|| panic!("{container:#?}"));
    let spec = &object(
        &objects,
        "Deployment",
        "memcached-operator-controller-manager",
    )["spec"]["template"]["spec"];
    let volume = spec["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap_or_else(|| panic!("{spec:#?}"));
    assert_eq!(volume["secret"]["secretName"], "metrics-server-cert");
    // The files the manager reads by default (--metrics-cert-name, --metrics-cert-key).
    let items = format!("{:?}", volume["secret"]["items"]);
    assert!(
        items.contains("tls.crt") && items.contains("tls.key"),
        "{items}"
    );

    let service =
        "memcached-operator-controller-manager-metrics-service.memcached-operator-system.svc";
    let certificate = object(&objects, "Certificate", "memcached-operator-metrics-certs");
    assert_eq!(certificate["spec"]["secretName"], "metrics-server-cert");
    assert_eq!(certificate["spec"]["dnsNames"][0], service);
    assert_eq!(
        certificate["spec"]["dnsNames"][1],
        format!("{service}.cluster.local").as_str()
    );
    let issuer = certificate["spec"]["issuerRef"]["name"].as_str().unwrap();
    object(&objects, "Issuer", issuer);
    let tls = &object(
        &objects,
        "ServiceMonitor",
        "memcached-operator-controller-manager-metrics-monitor",
    )["spec"]["endpoints"][0]["tlsConfig"];
    assert_eq!(tls["insecureSkipVerify"], false, "{tls:#?}");
    assert_eq!(tls["serverName"], service, "{tls:#?}");
    assert_eq!(
        tls["ca"]["secret"]["name"], "metrics-server-cert",
        "{tls:#?}"
    );

    // `create webhook` turns config/certmanager on, once, with the webhook's certificate beside the
    // metrics one; the metrics entries still turn on.
    ok(
        d,
        &[
            "create",
            "webhook",
            "--group",
            "cache",
            "--version",
            "v1alpha1",
            "--kind",
            "Memcached",
            "--defaulting",
        ],
    );
    let default = read(d, "config/default/kustomization.yaml");
    assert_eq!(
        default.matches("- ../certmanager\n").count(),
        1,
        "{default}"
    );
    assert_eq!(default.matches("\nreplacements:\n").count(), 1, "{default}");
    std::fs::write(
        d.join("config/webhook/manifests.yaml"),
        "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: mutating-webhook-configuration\nwebhooks:\n- admissionReviewVersions:\n  - v1\n  clientConfig:\n    service:\n      name: webhook-service\n      namespace: system\n      path: /mutate-cache-example-com-v1alpha1-memcached\n  failurePolicy: Fail\n  name: mmemcached-v1alpha1.kb.io\n  sideEffects: None\n",
    )
    .unwrap();
    let objects = kustomize(&d.join("config/default"));
    let serving = object(&objects, "Certificate", "memcached-operator-serving-cert");
    assert_eq!(
        serving["spec"]["dnsNames"][0],
        "memcached-operator-webhook-service.memcached-operator-system.svc"
    );
    object(&objects, "Certificate", "memcached-operator-metrics-certs");
    let on = config_copy(d);
    assert!(
        uncomment(
            on.path(),
            "default/kustomization.yaml",
            &["#- ../network-policy"]
        ) > 40
    );
    let objects = kustomize(&on.path().join("default"));
    let certificate = object(&objects, "Certificate", "memcached-operator-metrics-certs");
    assert_eq!(certificate["spec"]["dnsNames"][0], service);
    let args = format!("{:?}", manager_container(&objects)["args"]);
    assert!(
        args.contains(dir_arg) && args.contains("--webhook-cert-path="),
        "{args}"
    );
}

#[test]
fn output_is_deterministic() {
    let first = memcached_project();
    let second = memcached_project();
    assert_eq!(tree(first.path()), tree(second.path()));
}

#[test]
fn a_second_kind_joins_the_first() {
    let dir = memcached_project();
    ok(
        dir.path(),
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--version",
            "v1beta1",
            "--kind",
            "MemcachedBackup",
        ],
    );
    let main = std::fs::read_to_string(dir.path().join("src/main.rs")).unwrap();
    assert!(
        main.contains("controller::memcached::run")
            && main.contains("controller::memcached_backup::run")
    );
    let api = std::fs::read_to_string(dir.path().join("src/api/mod.rs")).unwrap();
    assert!(api.contains("pub mod v1alpha1;\npub mod v1beta1;"), "{api}");
    let project = std::fs::read_to_string(dir.path().join("PROJECT")).unwrap();
    assert_eq!(project.matches("kind: ").count(), 2, "{project}");
}

#[test]
fn bad_names_are_refused_with_rule_and_fix() {
    let empty = tempfile::tempdir().unwrap();
    refused(
        empty.path(),
        &["init", "--domain", "Example.COM"],
        &["invalid domain `Example.COM`", "DNS-1123", "help:"],
    );
    refused(
        empty.path(),
        &[
            "init",
            "--domain",
            "example.com",
            "--project-name",
            "My_Project",
        ],
        &["invalid project name"],
    );
    refused(
        empty.path(),
        &["init", "--domain=-x"],
        &["looks like another flag"],
    );

    let dir = memcached_project();
    let api = |extra: &[&'static str]| {
        let mut args = vec![
            "create",
            "api",
            "--group",
            "cache",
            "--version",
            "v1",
            "--kind",
            "Other",
        ];
        args.extend_from_slice(extra);
        args
    };
    refused(
        dir.path(),
        &["create", "api", "--group", "Cache", "--kind", "Other"],
        &["invalid group `Cache`", "DNS-1123"],
    );
    refused(
        dir.path(),
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--version",
            "1alpha",
            "--kind",
            "Other",
        ],
        &["invalid version"],
    );
    refused(
        dir.path(),
        &["create", "api", "--group", "cache", "--kind", "other"],
        &["invalid kind `other`", "uppercase", "--kind Other"],
    );
    refused(
        dir.path(),
        &["create", "api", "--group", "cache", "--kind", "Mem_cached"],
        &["invalid kind"],
    );
    refused(
        dir.path(),
        &api(&["--plural", "Others"]),
        &["invalid plural `Others`"],
    );
    refused(
        dir.path(),
        &["create", "api", "--group=-v1", "--kind", "Other"],
        &["invalid group `-v1`", "looks like another flag"],
    );
    refused(
        dir.path(),
        &[
            "create",
            "api",
            "--group",
            "--version",
            "v1",
            "--kind",
            "Other",
        ],
        &["--group <GROUP>"],
    );
}

#[test]
fn init_refuses_an_initialized_directory() {
    let dir = memcached_project();
    refused(
        dir.path(),
        &["init", "--domain", "example.org"],
        &["already initialized", "PROJECT"],
    );
}

#[test]
fn create_api_needs_a_project() {
    let dir = tempfile::tempdir().unwrap();
    refused(
        dir.path(),
        &["create", "api", "--group", "cache", "--kind", "Memcached"],
        &["no `PROJECT` file", "rustbuilder init"],
    );
}

#[test]
fn the_same_kind_twice_needs_force() {
    let dir = memcached_project();
    let args = [
        "create",
        "api",
        "--group",
        "cache",
        "--version",
        "v1alpha1",
        "--kind",
        "Memcached",
    ];
    refused(
        dir.path(),
        &args,
        &["API resource already exists", "--force"],
    );

    // With --force the user's edits to the type are replaced, and nothing else changes.
    let type_file = dir.path().join("src/api/v1alpha1/memcached.rs");
    let generated = std::fs::read_to_string(&type_file).unwrap();
    std::fs::write(&type_file, "// edited\n").unwrap();
    let before = tree(dir.path());
    ok(dir.path(), &[&args[..], &["--force"]].concat());
    assert_eq!(std::fs::read_to_string(&type_file).unwrap(), generated);
    let after = tree(dir.path());
    let changed: Vec<_> = after
        .keys()
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    assert_eq!(changed, vec![Path::new("src/api/v1alpha1/memcached.rs")]);
}

#[test]
fn a_second_group_is_refused() {
    let dir = memcached_project();
    refused(
        dir.path(),
        &["create", "api", "--group", "web", "--kind", "Site"],
        &[
            "multiple groups are not allowed",
            "`cache`",
            "help: run `rustbuilder edit --multigroup`",
        ],
    );
}

fn read(dir: &Path, path: &str) -> String {
    std::fs::read_to_string(dir.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every file of a project but the vendored runtime, for comparing two projects.
fn sources(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    tree(dir)
        .into_iter()
        .filter(|(path, _)| !path.starts_with("rustbuilder"))
        .collect()
}

/// Each file's lines, sorted: for comparing projects whose lists may come in another order.
fn sorted_lines(files: &BTreeMap<PathBuf, Vec<u8>>) -> BTreeMap<PathBuf, Vec<String>> {
    files
        .iter()
        .map(|(path, bytes)| {
            let mut lines: Vec<String> = String::from_utf8_lossy(bytes)
                .lines()
                .map(String::from)
                .collect();
            lines.sort();
            (path.clone(), lines)
        })
        .collect()
}

/// The project at `dir` rebuilt from its PROJECT file by `alpha generate` into a fresh directory
/// (returned with the temporary directory that holds it, which must outlive its use).
#[test]
fn a_controller_for_a_built_in_kind_uses_the_k8s_openapi_type() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &[
            "init",
            "--domain",
            "example.com",
            "--project-name",
            "watcher",
        ],
    );
    let api = ["create", "api", "--group"];
    // In PROJECT's order (group, version, kind), so that `alpha generate` replays the same steps. Groups
    // other than the project's `cache`: a built-in kind adds no API module, so it is no second group.
    let deployment = [
        "apps",
        "--version",
        "v1",
        "--kind",
        "Deployment",
        "--resource=false",
    ];
    ok(d, &[&api[..], &deployment].concat());
    ok(d, &[&api[..], &["cache", "--kind", "Memcached"]].concat());
    let cluster_role = [
        "rbac.authorization",
        "--version",
        "v1",
        "--kind",
        "ClusterRole",
        "--resource=false",
    ];
    ok(d, &[&api[..], &cluster_role].concat());

    let controller = read(d, "src/controller/deployment.rs");
    for line in [
        "use k8s_openapi::api::apps::v1::Deployment;",
        "// +rustbuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch",
        "namespace = %object.namespace()",
    ] {
        assert!(controller.contains(line), "{line:?} missing:\n{controller}");
    }
    let cluster_role = read(d, "src/controller/cluster_role.rs");
    assert!(
        cluster_role.contains("groups=rbac.authorization.k8s.io,resources=clusterroles,"),
        "{cluster_role}"
    );
    assert!(
        !cluster_role.contains("namespace ="),
        "a cluster-scoped kind has no namespace:\n{cluster_role}"
    );
    let main = read(d, "src/main.rs");
    assert!(
        main.contains("controllers.add(controller::deployment::run(manager.clone()));"),
        "{main}"
    );
    let test = read(d, "tests/controllers/deployment.rs");
    assert!(
        test.contains("async fn controller_watches_deployments()"),
        "{test}"
    );
    for absent in [
        "src/api/v1",
        "config/samples/apps_v1_deployment.yaml",
        "config/rbac/deployment_editor_role.yaml",
    ] {
        assert!(
            !d.join(absent).exists(),
            "{absent} should not exist for a built-in kind"
        );
    }
    // Recorded as Kubebuilder records core types: no `api`, `core: true`, no domain for `apps`.
    let project = read(d, "PROJECT");
    for entry in [
        "- controller: true\n  core: true\n  group: apps\n  kind: Deployment\n  path: k8s_openapi::api::apps::v1::Deployment\n  version: v1\n",
        "  core: true\n  domain: k8s.io\n  group: rbac.authorization\n",
    ] {
        assert!(project.contains(entry), "{entry:?} missing:\n{project}");
    }

    // `alpha generate` rebuilds the same controllers from PROJECT alone.
    let (_out, again) = regenerated(d);
    assert!(
        sources(&again) == sources(d),
        "alpha generate made another project"
    );

    refused(
        d,
        &[
            &api[..],
            &[
                "apps",
                "--version",
                "v1beta1",
                "--kind",
                "Deployment",
                "--resource=false",
            ],
        ]
        .concat(),
        &[
            "`apps/v1beta1, Kind=Deployment` is neither in PROJECT, nor a Kubernetes built-in kind",
            "help: the built-in `apps` `Deployment` is at `--version v1`",
        ],
    );
    refused(
        d,
        &[&api[..], &["cache", "--kind", "Widget", "--resource=false"]].concat(),
        &[
            "`cache.example.com/v1alpha1, Kind=Widget` is neither in PROJECT, nor a Kubernetes built-in kind",
        ],
    );
    refused(
        d,
        &[&api[..], &deployment].concat(),
        &[
            "and its controller are in PROJECT",
            "help: pass `--controller-name <name>`",
        ],
    );
}

#[test]
fn a_namespaced_project_gets_a_role_and_watches_its_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let init = [
        "init",
        "--domain",
        "example.com",
        "--project-name",
        "tenant",
        "--namespaced",
    ];
    ok(d, &init);
    ok(
        d,
        &["create", "api", "--group", "cache", "--kind", "Memcached"],
    );
    ok(
        d,
        &[
            "create",
            "api",
            "--group",
            "apps",
            "--version",
            "v1",
            "--kind",
            "Deployment",
            "--resource=false",
        ],
    );

    let project = read(d, "PROJECT");
    assert!(project.contains("\nnamespaced: true\n"), "{project}");
    let binding = read(d, "config/rbac/role_binding.yaml");
    assert!(binding.contains("kind: RoleBinding\n"), "{binding}");
    assert!(
        binding.contains("  kind: Role\n  name: manager-role\n"),
        "{binding}"
    );
    let manager = read(d, "config/manager/manager.yaml");
    assert!(
        manager.contains("- name: WATCH_NAMESPACE\n          valueFrom:\n            fieldRef:\n              fieldPath: metadata.namespace\n"),
        "{manager}"
    );
    let e2e = read(d, "tests/e2e/main.rs");
    assert!(e2e.contains("    watch_namespace: true,\n"), "{e2e}");
    let controller = read(d, "src/controller/memcached.rs");
    assert!(
        controller.contains(".controller(manager.api::<Memcached>(), \"memcached\")"),
        "{controller}"
    );

    // The manager's Role grants nothing outside its namespace, so a cluster-scoped kind is refused.
    refused(
        d,
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--kind",
            "Shard",
            "--namespaced=false",
        ],
        &[
            "is cluster-scoped, and this project's manager watches its own namespace only",
            "help: scaffold a namespaced kind",
        ],
    );
    refused(
        d,
        &[
            "create",
            "api",
            "--group",
            "core",
            "--version",
            "v1",
            "--kind",
            "Node",
            "--resource=false",
        ],
        &["`core/v1, Kind=Node` is cluster-scoped"],
    );

    // A project without `--namespaced` keeps cluster-wide RBAC and no WATCH_NAMESPACE.
    let plain = memcached_project();
    let binding = read(plain.path(), "config/rbac/role_binding.yaml");
    assert!(
        binding.starts_with("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n"),
        "{binding}"
    );
    assert!(!read(plain.path(), "config/manager/manager.yaml").contains("WATCH_NAMESPACE"));
    assert!(!read(plain.path(), "tests/e2e/main.rs").contains("WATCH_NAMESPACE"));
}

/// `init --multicluster` + `create api`: the project's controllers in every cluster of a fleet.
fn multicluster_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let init = ["init", "--domain", "example.com", "--project-name"];
    ok(
        d,
        &[&init[..], &["fleet-operator", "--multicluster"]].concat(),
    );
    let api = ["create", "api", "--group", "fleet", "--version", "v1alpha1"];
    ok(d, &[&api[..], &["--kind", "Widget"]].concat());
    dir
}

/// `init` + `create api` + `edit --multicluster`: the project [`multicluster_project`] makes, by
/// another way.
fn edited_multicluster_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let init = ["init", "--domain", "example.com", "--project-name"];
    ok(d, &[&init[..], &["fleet-operator"]].concat());
    let api = ["create", "api", "--group", "fleet", "--version", "v1alpha1"];
    ok(d, &[&api[..], &["--kind", "Widget"]].concat());
    let edited = ok(d, &["edit", "--multicluster"]);
    let message = stderr(&edited);
    for expected in [
        "Updating src/main.rs",
        "Updating src/controller/widget.rs",
        "Creating config/samples/cluster_kubeconfig_secret.yaml",
        "make manifests",
    ] {
        assert!(message.contains(expected), "{expected:?} in:\n{message}");
    }
    dir
}

#[test]
fn edit_multicluster_gives_what_init_multicluster_gives() {
    let made = multicluster_project();
    let edited = edited_multicluster_project();
    let (made, edited) = (tree(made.path()), tree(edited.path()));
    let differing: Vec<&PathBuf> = made
        .keys()
        .chain(edited.keys())
        .filter(|path| made.get(*path) != edited.get(*path))
        .collect();
    assert!(
        differing.is_empty(),
        "edit --multicluster differs from init --multicluster in {differing:?}"
    );

    // A single-cluster project whose controller the user has written, or whose controllers
    // multi-cluster projects do not take yet, is refused, and left as it was.
    let single = |extra: &[&[&str]]| {
        let dir = tempfile::tempdir().unwrap();
        let init = ["init", "--domain", "example.com", "--project-name", "one"];
        ok(dir.path(), &init);
        for args in extra {
            ok(dir.path(), args);
        }
        dir
    };
    let widget = [
        "create",
        "api",
        "--group",
        "fleet",
        "--version",
        "v1alpha1",
        "--kind",
        "Widget",
    ];
    let written = single(&[&widget]);
    let controller = written.path().join("src/controller/widget.rs");
    let mut text = std::fs::read_to_string(&controller).unwrap();
    text.push_str("\n// Mine.\n");
    std::fs::write(&controller, text).unwrap();
    refused(
        written.path(),
        &["edit", "--multicluster"],
        &[
            "`src/controller/widget.rs` differs from what rustbuilder scaffolded",
            "\nhelp: ",
        ],
    );
    let deployment = [
        "create",
        "api",
        "--group",
        "apps",
        "--version",
        "v1",
        "--kind",
        "Deployment",
        "--resource=false",
    ];
    refused(
        single(&[&deployment]).path(),
        &["edit", "--multicluster"],
        &[
            "a controller of apps/v1 Deployment, not one of its own kinds",
            "\nhelp: ",
        ],
    );
    let memcached = [
        "create",
        "api",
        "--group",
        "cache",
        "--version",
        "v1alpha1",
        "--kind",
        "Memcached",
        "--plugins",
        "deploy-image/v1-alpha",
        "--image",
        "memcached:1.6.26-alpine3.19",
    ];
    refused(
        single(&[&memcached]).path(),
        &["edit", "--multicluster"],
        &[
            "the deploy-image plugin does not scaffold controllers",
            "\nhelp: ",
        ],
    );
}

#[test]
fn a_multicluster_project_runs_its_controllers_in_every_cluster_of_a_fleet() {
    let dir = multicluster_project();
    let d = dir.path();
    let project = read(d, "PROJECT");
    assert!(
        project.contains(
            "  rust.rustbuilder.dev/v1-alpha:\n    license: apache2\n    multicluster: true\n"
        ),
        "{project}"
    );
    // The manager's flags choose the provider; the fleet engages each cluster with `engage`, which
    // adds the controller there; the manager may read the kubeconfig Secrets.
    let main = read(d, "src/main.rs");
    for expected in [
        "    #[command(flatten)]\n    fleet: FleetArgs,\n",
        "let fleet = Fleet::new(&manager, args.fleet.provider(&manager)?, engage);",
        "    controllers.add(fleet.run());\n    controllers.run().await\n",
        "// +rustbuilder:rbac:groups=core,resources=secrets,verbs=get;list;watch\n",
        "// +rustbuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch\n",
    ] {
        assert!(main.contains(expected), "{expected:?} in:\n{main}");
    }
    let (_, engage) = main
        .split_once("fn engage(cluster: &Cluster) {")
        .expect("{main}");
    assert!(
        engage.starts_with(
            "\n    let controllers = cluster.manager().controllers();\n    controllers.add(controller::widget::run(cluster.clone()));\n    // +rustbuilder:scaffold:clusters\n"
        ),
        "{engage}"
    );
    let controller = read(d, "src/controller/widget.rs");
    for expected in [
        "pub async fn run(cluster: Cluster) {",
        "        cluster: cluster.name().to_string(),",
        "tracing::debug!(cluster = %ctx.cluster, name = %object.name_any(), \"reconciling\");",
        "reconciled in cluster {cluster}",
    ] {
        assert!(
            controller.contains(expected),
            "{expected:?} in:\n{controller}"
        );
    }
    assert!(read(d, "tests/controllers/widget.rs").contains("KubeconfigDir::new(&dir)"));
    // A sample kubeconfig Secret, in the form the default provider reads, left out of the samples
    // kustomize applies.
    let sample = read(d, "config/samples/cluster_kubeconfig_secret.yaml");
    let secret: serde_yaml::Value = serde_yaml::from_str(&sample).unwrap();
    assert_eq!(secret["metadata"]["namespace"], "fleet-operator-system");
    assert_eq!(
        secret["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
        "east"
    );
    let kubeconfig = secret["stringData"]["value"].as_str().expect("{sample}");
    let kubeconfig: serde_yaml::Value = serde_yaml::from_str(kubeconfig).unwrap();
    assert_eq!(kubeconfig["current-context"], "east");
    assert!(!read(d, "config/samples/kustomization.yaml").contains("kubeconfig"));

    // `alpha generate` makes it again from PROJECT.
    let (_out, again) = regenerated(d);
    assert_eq!(tree(&again), tree(d));

    // Controllers that do not yet know about clusters are refused.
    let api = ["create", "api", "--group", "fleet", "--version", "v1alpha1"];
    refused(
        d,
        &[
            &api[..],
            &[
                "--kind",
                "Gadget",
                "--plugins",
                "deploy-image/v1-alpha",
                "--image",
                "nginx",
            ],
        ]
        .concat(),
        &[
            "the deploy-image/v1-alpha plugin does not scaffold controllers for a multi-cluster project yet",
            "\nhelp: ",
        ],
    );
    refused(
        d,
        &[
            "create",
            "api",
            "--group",
            "apps",
            "--version",
            "v1",
            "--kind",
            "Deployment",
            "--resource=false",
        ],
        &["not scaffolded for a multi-cluster project yet", "\nhelp: "],
    );
}

/// The multi-cluster project builds clean, its RBAC has the Secrets, and its controller's test
/// passes: a fleet of one cluster, the test's own API server found in a kubeconfig directory,
/// reconciles a Widget there. Made by `edit --multicluster`, which makes the same files as
/// `init --multicluster` (`edit_multicluster_gives_what_init_multicluster_gives`): one build
/// covers both.
#[test]
fn a_multicluster_project_builds_and_reconciles_in_its_fleet() {
    let dir = edited_multicluster_project();
    let d = dir.path();
    let cargo = |args: &[&str]| cargo(d, args);
    cargo(&["fmt", "--check"]);
    cargo(&["clippy", "--all-targets", "--", "-D", "warnings"]);
    let tested = cargo(&["test", "--test", "controllers"]);
    assert!(
        tested.contains("test widget::reconcile_marks_widget_ready ... ok"),
        "{tested}"
    );
    cargo(&["run", "--quiet", "--bin", "crdgen", "--", "--write"]);
    let role = read(d, "config/rbac/role.yaml");
    assert!(
        role.contains("- apiGroups:\n  - \"\"\n  resources:\n  - secrets\n  verbs:\n  - get\n  - list\n  - watch\n"),
        "{role}"
    );
    assert!(
        role.contains("- apiGroups:\n  - cluster.x-k8s.io\n  resources:\n  - clusters\n  verbs:\n  - get\n  - list\n  - watch\n"),
        "{role}"
    );
}

#[test]
fn edit_namespaced_gives_what_init_namespaced_gives_and_back() {
    let deploy_image = [
        "create",
        "api",
        "--group",
        "cache",
        "--kind",
        "Memcached",
        "--plugins",
        "deploy-image/v1-alpha",
        "--image",
        "memcached:1.6.26-alpine3.19",
        "--image-container-port",
        "11211",
    ];
    let project = |extra: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        let init = [
            "init",
            "--domain",
            "example.com",
            "--project-name",
            "tenant",
        ];
        ok(dir.path(), &[&init[..], extra].concat());
        ok(dir.path(), &deploy_image);
        dir
    };
    let plain = project(&[]);
    let namespaced = project(&["--namespaced"]);
    assert!(tree(plain.path()) != tree(namespaced.path()));

    let edited = project(&[]);
    ok(edited.path(), &["edit", "--namespaced"]);
    assert!(
        tree(edited.path()) == tree(namespaced.path()),
        "edit --namespaced differs from init --namespaced"
    );
    let again = rustbuilder(edited.path(), &["edit", "--namespaced"]);
    assert!(again.status.success() && stderr(&again).contains("already watches its own namespace"));
    ok(edited.path(), &["edit", "--namespaced=false"]);
    assert!(
        tree(edited.path()) == tree(plain.path()),
        "edit --namespaced=false differs from init"
    );

    // A file that no longer reads as scaffolded stops the edit; nothing changes.
    let manager = edited.path().join("config/manager/manager.yaml");
    let text = std::fs::read_to_string(&manager).unwrap();
    std::fs::write(
        &manager,
        text.replace("- name: LOG_FORMAT", "- name: LOGGING"),
    )
    .unwrap();
    refused(
        edited.path(),
        &["edit", "--namespaced"],
        &[
            "`config/manager/manager.yaml` does not read as rustbuilder wrote it",
            "- name: LOG_FORMAT",
        ],
    );
    // A cluster-scoped kind's controller cannot run in a namespace-confined manager.
    let shards = [
        "create",
        "api",
        "--group",
        "cache",
        "--kind",
        "Shard",
        "--namespaced=false",
    ];
    ok(plain.path(), &shards);
    refused(
        plain.path(),
        &["edit", "--namespaced"],
        &["the controller of `Shard` watches a cluster-scoped kind"],
    );
    refused(
        plain.path(),
        &["edit", "--namespaced", "--multigroup"],
        &["one edit at a time"],
    );
}

/// A trimmed cert-manager Certificate CRD, as `kubectl get crd -o yaml` prints an installed one.
const CERTIFICATE_CRD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/certificate-crd.yaml"
);

#[test]
fn kubebuilders_external_api_flags_find_the_crd_in_gos_module_cache() {
    // Kubebuilder's command: a Go import path and the module that holds it. The module is in Go's
    // module cache (after `go mod download`), with the CRD among its files.
    let cache = tempfile::tempdir().unwrap();
    let crds = cache
        .path()
        .join("github.com/cert-manager/cert-manager@v1.20.2/deploy/crds");
    std::fs::create_dir_all(&crds).unwrap();
    std::fs::copy(CERTIFICATE_CRD, crds.join("crd-certificates.yaml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &["init", "--domain", "example.com", "--project-name", "certs"],
    );
    let args = [
        "create",
        "api",
        "--group",
        "cert-manager",
        "--version",
        "v1",
        "--kind",
        "Certificate",
        "--resource=false",
        "--external-api-path",
        "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1",
        "--external-api-domain",
        "io",
        "--external-api-module",
        "github.com/cert-manager/cert-manager@v1.20.2",
    ];
    let run = |cache: &Path| {
        Command::new(env!("CARGO_BIN_EXE_rustbuilder"))
            .args(args)
            .current_dir(d)
            .env("NO_COLOR", "1")
            .env("GOMODCACHE", cache)
            .output()
            .unwrap()
    };
    // Without the module in the cache: refused, nothing written, and the error says what to do.
    let empty = tempfile::tempdir().unwrap();
    let before = tree(d);
    let refused = run(empty.path());
    assert!(!refused.status.success());
    assert!(
        stderr(&refused)
            .contains("run `go mod download github.com/cert-manager/cert-manager@v1.20.2` first"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(tree(d), before);
    let made = run(cache.path());
    assert!(made.status.success(), "{}", stderr(&made));
    let project = read(d, "PROJECT");
    assert!(
        project.contains("  module: github.com/cert-manager/cert-manager@v1.20.2\n  path: config/crd/external/cert-manager.io_certificates.yaml\n"),
        "{project}"
    );
    assert!(
        d.join("src/external/cert_manager/v1/certificate.rs")
            .is_file()
    );
}

#[test]
fn a_controller_for_another_operators_kind_gets_types_from_its_crd() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &["init", "--domain", "example.com", "--project-name", "certs"],
    );
    ok(
        d,
        &["create", "api", "--group", "cache", "--kind", "Memcached"],
    );
    let certificate = [
        "create",
        "api",
        "--group",
        "cert-manager",
        "--version",
        "v1",
        "--kind",
        "Certificate",
        "--resource=false",
        "--external-api-path",
        CERTIFICATE_CRD,
    ];
    ok(d, &certificate);

    // The types: generated from the CRD's schema, in their own module tree.
    let types = read(d, "src/external/cert_manager/v1/certificate.rs");
    for line in [
        "//! `Certificate` (cert-manager.io/v1), a kind another operator owns",
        "//! `config/crd/external/cert-manager.io_certificates.yaml`.",
        "#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]",
        "    group = \"cert-manager.io\",",
        "    status = \"CertificateStatus\"",
        "    pub issuer_ref: CertificateSpecIssuerRef,",
        "    pub secret_name: String,",
        "    pub dns_names: Option<Vec<String>>,",
        "pub enum CertificateSpecPrivateKeyAlgorithm {",
    ] {
        assert!(types.contains(line), "{line:?} missing:\n{types}");
    }
    assert!(read(d, "src/lib.rs").contains("pub mod external;"));
    assert!(read(d, "src/external/mod.rs").contains("pub mod cert_manager;"));
    assert!(read(d, "src/external/cert_manager/mod.rs").contains("pub mod v1;"));
    assert!(read(d, "src/external/cert_manager/v1/mod.rs").contains("pub use certificate::*;"));

    // The controller uses them; RBAC is for the other operator's group.
    let controller = read(d, "src/controller/certificate.rs");
    for line in [
        "use crate::external::cert_manager::v1::Certificate;",
        "// +rustbuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch",
        "namespace = %object.namespace()",
    ] {
        assert!(controller.contains(line), "{line:?} missing:\n{controller}");
    }
    // The test installs the CRD from the project's copy, which has nothing of an installed object.
    let test = read(d, "tests/controllers/certificate.rs");
    assert!(
        test.contains(".crd_dir(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/config/crd/external\"))"),
        "{test}"
    );
    let copy = read(d, "config/crd/external/cert-manager.io_certificates.yaml");
    assert!(
        copy.contains("name: certificates.cert-manager.io"),
        "{copy}"
    );
    assert!(
        !copy.contains("resourceVersion") && !copy.contains("storedVersions"),
        "{copy}"
    );

    // The project does not own the kind: no CRD from crdgen, no sample, no editor roles.
    let crdgen = read(d, "src/bin/crdgen.rs");
    assert!(
        !crdgen.contains("Certificate") && !crdgen.contains("external"),
        "{crdgen}"
    );
    assert!(!read(d, "config/crd/kustomization.yaml").contains("certificates"));
    for absent in [
        "src/api/v1",
        "config/samples/cert_manager_v1_certificate.yaml",
        "config/rbac/certificate_editor_role.yaml",
    ] {
        assert!(
            !d.join(absent).exists(),
            "{absent} should not exist for an external kind"
        );
    }
    // Recorded as Kubebuilder records external types, with the project's copy of the CRD as the path.
    let project = read(d, "PROJECT");
    let entry = "- controller: true\n  domain: io\n  external: true\n  group: cert-manager\n  kind: Certificate\n  path: config/crd/external/cert-manager.io_certificates.yaml\n  version: v1\n";
    assert!(project.contains(entry), "{entry:?} missing:\n{project}");

    // `alpha generate` rebuilds it all from PROJECT and the copy of the CRD.
    let (_out, again) = regenerated(d);
    assert!(
        sources(&again) == sources(d),
        "alpha generate made another project"
    );

    // Regenerating the types from the copy (what their header says) changes nothing.
    let before = tree(d);
    let copy_path = "config/crd/external/cert-manager.io_certificates.yaml";
    ok(
        d,
        &[
            &certificate[..8],
            &[
                "--resource=false",
                "--controller=false",
                "--external-api-path",
                copy_path,
            ],
        ]
        .concat(),
    );
    assert!(
        tree(d) == before,
        "regenerating the types from the copy changed the project"
    );

    // A second controller for the kind finds the type through PROJECT.
    ok(
        d,
        &[
            &certificate[..8],
            &["--resource=false", "--controller-name", "certificate-audit"],
        ]
        .concat(),
    );
    assert!(
        read(d, "src/controller/certificate_audit.rs")
            .contains("use crate::external::cert_manager::v1::Certificate;")
    );
    let (_out, again) = regenerated(d);
    assert!(
        sources(&again) == sources(d),
        "alpha generate made another project"
    );

    refused(
        d,
        &certificate,
        &[
            "and its controller are in PROJECT",
            "help: pass `--controller-name <name>`",
        ],
    );
    refused(
        d,
        &["edit", "--multigroup"],
        &[
            "cannot move a project with external kinds to the multigroup layout yet",
            "help: run `rustbuilder edit --multigroup` before `create api --external-api-path`",
        ],
    );
    // An external group is not a second group of the project's own.
    ok(d, &["create", "api", "--group", "cache", "--kind", "Redis"]);
}

/// An Elasticsearch CRD in ECK's shape: a Pod template that keeps the keys its schema does not list,
/// and `nullable` fields.
const ELASTICSEARCH_CRD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/elasticsearch-crd.yaml"
);

/// What an operator that reads another operator's object and writes it back must not lose, proved in
/// the generated project itself (its types compiled, its own test run): the keys a schema with
/// `x-kubernetes-preserve-unknown-fields` keeps beside its `properties`, and an explicit `null` in a
/// `nullable` field. The generated code passes the project's lint.
#[test]
fn another_operators_types_keep_unknown_keys_and_explicit_nulls() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &[
            "init",
            "--domain",
            "example.com",
            "--project-name",
            "search",
        ],
    );
    ok(
        d,
        &[
            "create",
            "api",
            "--group",
            "elasticsearch",
            "--version",
            "v1",
            "--kind",
            "Elasticsearch",
            "--resource=false",
            "--external-api-path",
            ELASTICSEARCH_CRD,
        ],
    );
    std::fs::write(
        d.join("tests/round_trip.rs"),
        r#"//! An Elasticsearch object, read into the generated types and written back.

use search::external::elasticsearch::v1::Elasticsearch;
use serde_json::json;

fn round_trip(object: serde_json::Value) -> serde_json::Value {
    let typed: Elasticsearch = serde_json::from_value(object).unwrap();
    serde_json::to_value(&typed).unwrap()
}

#[test]
fn unlisted_keys_and_explicit_nulls_are_written_back() {
    let object = json!({
        "apiVersion": "elasticsearch.k8s.elastic.co/v1",
        "kind": "Elasticsearch",
        "metadata": { "name": "quickstart", "namespace": "search" },
        "spec": {
            "version": "9.1.0",
            "nodeSets": [{
                "name": "default",
                "count": 3,
                "config": { "node.store.allow_mmap": false },
                "podTemplate": {
                    "metadata": { "labels": { "app": "search" } },
                    "spec": {
                        "containers": [{ "name": "elasticsearch", "resources": { "limits": { "memory": "4Gi" } } }],
                        "initContainers": [{ "name": "sysctl", "command": ["sysctl", "-w", "vm.max_map_count=262144"] }]
                    }
                }
            }],
            "updateStrategy": { "changeBudget": { "maxSurge": 1, "maxUnavailable": null } }
        }
    });
    assert_eq!(round_trip(object.clone()), object);
}

#[test]
fn absent_fields_stay_absent() {
    let object = json!({
        "apiVersion": "elasticsearch.k8s.elastic.co/v1",
        "kind": "Elasticsearch",
        "metadata": { "name": "quickstart" },
        "spec": {
            "version": "9.1.0",
            "nodeSets": [{ "name": "default", "podTemplate": {} }],
            "updateStrategy": { "changeBudget": {} }
        }
    });
    assert_eq!(round_trip(object.clone()), object);
}
"#,
    )
    .unwrap();
    let cargo = |args: &[&str]| cargo(d, args);
    let tested = cargo(&["test", "--test", "round_trip"]);
    assert!(tested.contains("test result: ok. 2 passed"), "{tested}");
    cargo(&["fmt", "--check"]);
    cargo(&["clippy", "--lib", "--tests", "--", "-D", "warnings"]);
}

#[test]
fn bad_external_apis_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &["init", "--domain", "example.com", "--project-name", "certs"],
    );
    ok(
        d,
        &["create", "api", "--group", "cache", "--kind", "Memcached"],
    );
    std::fs::write(
        d.join("configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
    )
    .unwrap();
    let api = |group: &str, version: &str, kind: &str, rest: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "create",
            "api",
            "--group",
            group,
            "--version",
            version,
            "--kind",
            kind,
        ]
        .map(String::from)
        .to_vec();
        args.extend(rest.iter().map(|s| s.to_string()));
        args
    };
    let check = |args: Vec<String>, expected: &[&str]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(d, &args, expected);
    };
    let external = ["--resource=false", "--external-api-path"];
    check(
        api(
            "cert-manager",
            "v1",
            "Certificate",
            &[&external[..], &["missing.yaml"]].concat(),
        ),
        &[
            "error: cannot read the CRD file `missing.yaml`",
            "help: pass the YAML of the CRD",
        ],
    );
    check(
        api(
            "cert-manager",
            "v1",
            "Certificate",
            &[&external[..], &["configmap.yaml"]].concat(),
        ),
        &[
            "holds no CustomResourceDefinition, only kind `ConfigMap`",
            "help:",
        ],
    );
    check(
        api(
            "cert-manager",
            "v2",
            "Certificate",
            &[&external[..], &[CERTIFICATE_CRD]].concat(),
        ),
        &[
            "does not serve version `v2`: it serves `v1`",
            "help: pass `--version v1`",
        ],
    );
    check(
        api(
            "certmanager",
            "v1",
            "Certificate",
            &[&external[..], &[CERTIFICATE_CRD]].concat(),
        ),
        &[
            "has no CRD of kind `Certificate` in API group `certmanager`",
            "help: its group is `cert-manager.io`: pass `--group cert-manager --external-api-domain io`",
        ],
    );
    check(
        api(
            "cert-manager",
            "v1",
            "Issuer",
            &[&external[..], &[CERTIFICATE_CRD]].concat(),
        ),
        &[
            "has no CRD of kind `Issuer`",
            "it has `Certificate` in `cert-manager.io`",
        ],
    );
    check(
        api(
            "cert-manager",
            "v1",
            "Certificate",
            &[
                "--resource=false",
                "--external-api-domain",
                "com",
                "--external-api-path",
                CERTIFICATE_CRD,
            ],
        ),
        &["in API group `cert-manager.com`"],
    );
    check(
        api(
            "cert-manager",
            "v1",
            "Certificate",
            &["--external-api-path", CERTIFICATE_CRD],
        ),
        &[
            "`--external-api-path` is for a kind another operator owns",
            "help: add `--resource=false`",
        ],
    );
    check(
        api(
            "cert-manager",
            "v1",
            "Certificate",
            &["--resource=false", "--external-api-domain", "io"],
        ),
        &["--external-api-path"],
    );
    check(
        api(
            "cert-manager",
            "v1",
            "Certificate",
            &[&external[..], &[CERTIFICATE_CRD, "--plural", "certs"]].concat(),
        ),
        &[
            "`--plural certs` is not the plural of the CRD `certificates.cert-manager.io`",
            "help: drop `--plural`",
        ],
    );
    // A built-in kind, or one the project owns, is not another operator's.
    check(
        api(
            "apps",
            "v1",
            "Deployment",
            &[&external[..], &[CERTIFICATE_CRD]].concat(),
        ),
        &[
            "`apps/v1, Kind=Deployment` is a Kubernetes built-in kind",
            "help: drop `--external-api-path`",
        ],
    );
    check(
        api(
            "cache",
            "v1alpha1",
            "Memcached",
            &[&external[..], &[CERTIFICATE_CRD]].concat(),
        ),
        &[
            "is an API of this project",
            "help: drop `--external-api-path`",
        ],
    );
    // Nobody owns it: not in PROJECT, not built in, no CRD given.
    check(
        api("cert-manager", "v1", "Certificate", &["--resource=false"]),
        &[
            "`cert-manager.example.com/v1, Kind=Certificate` is neither in PROJECT, nor a Kubernetes built-in kind, nor given by `--external-api-path`",
            "--external-api-path <CRD file>",
        ],
    );

    // A kind's controller and tests are named after the kind alone: one group per kind.
    ok(
        d,
        &["create", "api", "--group", "cache", "--kind", "Certificate"],
    );
    check(
        api(
            "cert-manager",
            "v1",
            "Certificate",
            &[&external[..], &[CERTIFICATE_CRD]].concat(),
        ),
        &["kind `Certificate` is already in group `cache`"],
    );
    // Two external API groups cannot share a `--group`: their types would share a module.
    let other = std::fs::read_to_string(CERTIFICATE_CRD)
        .unwrap()
        .replace("cert-manager.io", "cert-manager.example.org")
        .replace("kind: Certificate\n", "kind: Issuer\n")
        .replace("plural: certificates", "plural: issuers");
    std::fs::write(d.join("issuer.yaml"), other).unwrap();
    let args = api(
        "cert-manager",
        "v1",
        "Issuer",
        &[&external[..], &["issuer.yaml"]].concat(),
    );
    ok(d, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let widget = std::fs::read_to_string(CERTIFICATE_CRD)
        .unwrap()
        .replace("kind: Certificate\n", "kind: Widget\n")
        .replace("plural: certificates", "plural: widgets");
    std::fs::write(d.join("widget.yaml"), widget).unwrap();
    check(
        api(
            "cert-manager",
            "v1",
            "Widget",
            &[&external[..], &["widget.yaml"]].concat(),
        ),
        &[
            "`--group cert-manager` is already the external API group `cert-manager.example.org`",
            "help: pass the whole API group as `--group cert-manager.io`",
        ],
    );

    // A namespace-scoped manager cannot watch a cluster-scoped external kind.
    let cluster = std::fs::read_to_string(CERTIFICATE_CRD)
        .unwrap()
        .replace("scope: Namespaced", "scope: Cluster");
    let namespaced = tempfile::tempdir().unwrap();
    let n = namespaced.path();
    ok(
        n,
        &[
            "init",
            "--domain",
            "example.com",
            "--project-name",
            "certs",
            "--namespaced",
        ],
    );
    std::fs::write(n.join("crd.yaml"), &cluster).unwrap();
    refused(
        n,
        &[
            "create",
            "api",
            "--group",
            "cert-manager",
            "--version",
            "v1",
            "--kind",
            "Certificate",
            "--resource=false",
            "--external-api-path",
            "crd.yaml",
        ],
        &[
            "`cert-manager.io/v1, Kind=Certificate` is cluster-scoped, and this project's manager watches its own namespace only",
        ],
    );
    // ...which a cluster-wide manager can, with `Api::all`.
    let wide = tempfile::tempdir().unwrap();
    let w = wide.path();
    ok(
        w,
        &["init", "--domain", "example.com", "--project-name", "certs"],
    );
    std::fs::write(w.join("crd.yaml"), &cluster).unwrap();
    let args = api(
        "cert-manager",
        "v1",
        "Certificate",
        &[&external[..], &["crd.yaml"]].concat(),
    );
    ok(w, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let controller = read(w, "src/controller/certificate.rs");
    assert!(!controller.contains("namespace ="), "{controller}");
    assert!(!read(w, "src/external/cert_manager/v1/certificate.rs").contains("namespaced"));
}

fn regenerated(dir: &Path) -> (tempfile::TempDir, PathBuf) {
    let out = tempfile::tempdir().unwrap();
    let output = out.path().join("again");
    let output_arg = output.to_str().unwrap();
    let args = [
        "alpha",
        "generate",
        "--skip-manifests",
        "--output-dir",
        output_arg,
    ];
    ok(dir, &args);
    (out, output)
}

fn multigroup_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let args = ["init", "--domain", "example.com", "--project-name", "fleet"];
    ok(dir.path(), &[&args[..], &["--multigroup"]].concat());
    for (group, version, kind) in [
        ("cache", "v1alpha1", "Memcached"),
        ("ship", "v1beta1", "Frigate"),
    ] {
        let args = [
            "create",
            "api",
            "--group",
            group,
            "--version",
            version,
            "--kind",
            kind,
        ];
        ok(dir.path(), &args);
    }
    dir
}

#[test]
fn a_multigroup_project_holds_each_group_in_its_own_modules() {
    let dir = multigroup_project();
    let dir = dir.path();
    for path in [
        "src/api/cache/mod.rs",
        "src/api/cache/v1alpha1/memcached.rs",
        "src/api/ship/v1beta1/frigate.rs",
        "src/controller/cache/memcached.rs",
        "src/controller/ship/frigate.rs",
        "tests/controllers/ship_frigate.rs",
    ] {
        assert!(dir.join(path).is_file(), "{path} is missing");
    }
    assert!(!dir.join("src/api/v1alpha1").exists());
    let project = read(dir, "PROJECT");
    assert!(project.contains("multigroup: true"), "{project}");
    assert!(
        project.contains("path: fleet::api::ship::v1beta1::Frigate"),
        "{project}"
    );
    let api = read(dir, "src/api/mod.rs");
    assert!(
        api.contains("pub mod cache;\npub mod ship;\n// +rustbuilder:scaffold:groups"),
        "{api}"
    );
    let main = read(dir, "src/main.rs");
    assert!(
        main.contains("controller::ship::frigate::run(manager.clone())"),
        "{main}"
    );
    let crdgen = read(dir, "src/bin/crdgen.rs");
    assert!(
        crdgen.contains("crd::<api::ship::v1beta1::Frigate>(),"),
        "{crdgen}"
    );
    let controller = read(dir, "src/controller/ship/frigate.rs");
    assert!(
        controller.contains("use crate::api::ship::v1beta1::{Frigate, FrigateStatus};"),
        "{controller}"
    );
    assert!(
        controller.contains("use crate::controller::MANAGER_NAME;"),
        "{controller}"
    );
    // The group prefixes the controller's name in metrics and logs, as Kubebuilder names it.
    assert!(controller.contains("\"ship-frigate\")"), "{controller}");
    let test = read(dir, "tests/controllers/ship_frigate.rs");
    assert!(
        test.contains("use fleet::controller::{MANAGER_NAME, ship::frigate};"),
        "{test}"
    );
    // One kind in two groups: its files outside its module are named after the group too.
    ok(
        dir,
        &["create", "api", "--group", "cache", "--kind", "Frigate"],
    );
    for path in [
        "src/controller/cache/frigate.rs",
        "tests/controllers/cache_frigate.rs",
        "config/rbac/cache_frigate_admin_role.yaml",
        "config/rbac/ship_frigate_admin_role.yaml",
    ] {
        assert!(dir.join(path).is_file(), "{path} is missing");
    }
    let role = read(dir, "config/rbac/cache_frigate_admin_role.yaml");
    assert!(role.contains("name: cache-frigate-admin-role"), "{role}");
    // alpha generate rebuilds the same project from PROJECT (the new kind's lines then come in
    // PROJECT's order).
    let (_out, output) = regenerated(dir);
    assert_eq!(sorted_lines(&sources(&output)), sorted_lines(&sources(dir)));
    ok(
        dir,
        &[
            "create",
            "api",
            "--group",
            "sea-creatures",
            "--kind",
            "Kraken",
        ],
    );
    assert!(
        dir.join("src/api/sea_creatures/v1alpha1/kraken.rs")
            .is_file()
    );
    refused(
        dir,
        &[
            "create",
            "api",
            "--group",
            "sea.creatures",
            "--kind",
            "Leviathan",
        ],
        &["groups `sea-creatures` and `sea.creatures` would share the Rust module `sea_creatures`"],
    );
    refused(
        dir,
        &["create", "api", "--group", "type", "--kind", "Dock"],
        &[
            "group `type` cannot be a Rust module",
            "help: choose a group that starts with a letter",
        ],
    );
}

#[test]
fn edit_multigroup_moves_a_single_group_project() {
    let dir = memcached_project();
    let dir = dir.path();
    ok(
        dir,
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--version",
            "v1beta1",
            "--kind",
            "Deployer",
            "--plugins",
            "deploy-image/v1-alpha",
            "--image",
            "busybox:1.36",
        ],
    );
    // The user's own code in a controller, and a test of theirs that names the API.
    let controller = dir.join("src/controller/memcached.rs");
    let mine = read(dir, "src/controller/memcached.rs").replace(
        "/// What every reconcile shares.",
        "/// My note.\n/// What every reconcile shares.",
    );
    std::fs::write(&controller, &mine).unwrap();
    std::fs::write(
        dir.join("tests/mine.rs"),
        "use memcached_operator::api::{self, v1alpha1::Memcached};\n\n#[test]\nfn named() {\n    let _ = std::any::type_name::<Memcached>();\n    let _ = api::v1beta1::Deployer::new;\n    let _ = include_str!(\"../src/controller/deployer.rs\");\n}\n",
    )
    .unwrap();
    let output = ok(dir, &["edit", "--multigroup"]);
    assert!(stderr(&output).contains("Updated the project to the multigroup layout"));
    assert!(
        !dir.join("src/api/v1alpha1").exists() && !dir.join("src/controller/memcached.rs").exists()
    );
    let moved = read(dir, "src/controller/cache/memcached.rs");
    assert!(moved.contains("/// My note."), "{moved}");
    assert!(
        moved.contains("use crate::api::cache::v1alpha1::{Memcached, MemcachedStatus};"),
        "{moved}"
    );
    assert!(
        moved.contains("use crate::controller::MANAGER_NAME;"),
        "{moved}"
    );
    // Its name in metrics stays what it was: dashboards and alerts keep working.
    assert!(moved.contains("\"memcached\")"), "{moved}");
    assert_eq!(
        read(dir, "tests/mine.rs").lines().next().unwrap(),
        "use memcached_operator::api::{self, cache::v1alpha1::Memcached};"
    );
    // A path to a moved file, in a string, follows it.
    let mine = read(dir, "tests/mine.rs");
    assert!(
        mine.contains("include_str!(\"../src/controller/cache/deployer.rs\")"),
        "{mine}"
    );
    assert!(dir.join("tests/controllers/cache_deployer.rs").is_file());
    let controller_tests = read(dir, "tests/controllers/main.rs");
    assert!(
        controller_tests.contains("mod cache_deployer;\nmod cache_memcached;\n"),
        "{controller_tests}"
    );
    let project = read(dir, "PROJECT");
    assert!(project.contains("multigroup: true"), "{project}");
    assert!(
        project.contains("path: memcached_operator::api::cache::v1beta1::Deployer"),
        "{project}"
    );
    // Apart from the user's edits, the result is what a multigroup project gets from the start.
    let (_fresh, output) = regenerated(dir);
    let again = sources(&output);
    let now = sources(dir);
    let differ: Vec<_> = now
        .keys()
        .filter(|k| again.get(*k) != now.get(*k))
        .collect();
    // The moved controllers keep their names, and the test counts the reconciles by that name.
    assert_eq!(
        differ,
        vec![
            Path::new("src/controller/cache/deployer.rs"),
            Path::new("src/controller/cache/memcached.rs"),
            Path::new("tests/controllers/cache_deployer.rs"),
            Path::new("tests/mine.rs"),
        ]
    );
    let test = read(dir, "tests/controllers/cache_deployer.rs");
    assert!(
        test.contains(r#"testing::reconciles(manager, "deployer", "success")"#),
        "{test}"
    );
    // Again: nothing to do. Then a second group is welcome.
    let output = ok(dir, &["edit", "--multigroup"]);
    assert!(stderr(&output).contains("already has the multigroup layout"));
    ok(dir, &["create", "api", "--group", "web", "--kind", "Site"]);
    assert!(dir.join("src/controller/web/site.rs").is_file());
    refused(
        dir,
        &["edit", "--multigroup=false"],
        &["cannot move a multigroup project that has APIs back"],
    );
}

#[test]
fn edit_multigroup_refuses_what_it_cannot_follow() {
    let dir = memcached_project();
    let dir = dir.path();
    let module_list = dir.join("src/controller/mod.rs");
    let original = read(dir, "src/controller/mod.rs");
    std::fs::write(&module_list, format!("{original}\npub fn helper() {{}}\n")).unwrap();
    refused(
        dir,
        &["edit", "--multigroup"],
        &[
            "`src/controller/mod.rs` holds code rustbuilder does not know how to move (`pub fn helper() {}`)",
            "help: keep only the `pub mod` lines and `MANAGER_NAME`",
        ],
    );
    std::fs::write(&module_list, &original).unwrap();
    let controller = dir.join("src/controller/memcached.rs");
    let text = read(dir, "src/controller/memcached.rs");
    std::fs::write(
        &controller,
        text.replace(
            "use crate::{Error, Result};",
            "use super::super::{Error, Result};",
        ),
    )
    .unwrap();
    refused(
        dir,
        &["edit", "--multigroup"],
        &[
            "cannot move `src/controller/memcached.rs` one directory down",
            "`super::super`",
        ],
    );
    std::fs::write(&controller, &text).unwrap();
    std::fs::create_dir_all(dir.join("src/api/cache")).unwrap();
    refused(
        dir,
        &["edit", "--multigroup"],
        &["`src/api/cache` already exists"],
    );
    std::fs::remove_dir(dir.join("src/api/cache")).unwrap();
    refused(
        dir,
        &["edit"],
        &[
            "nothing to edit",
            "help: e.g. `rustbuilder edit --multigroup`",
        ],
    );
    // Without APIs, the layout goes either way.
    let empty = tempfile::tempdir().unwrap();
    ok(empty.path(), &["init", "--project-name", "empty"]);
    let before = sources(empty.path());
    ok(empty.path(), &["edit", "--multigroup"]);
    assert!(read(empty.path(), "src/api/mod.rs").contains("+rustbuilder:scaffold:groups"));
    ok(empty.path(), &["edit", "--multigroup=false"]);
    assert_eq!(sources(empty.path()), before);
}

#[test]
fn controller_name_adds_another_controller_for_a_kind() {
    let dir = memcached_project();
    let dir = dir.path();
    let backup = [
        "create",
        "api",
        "--group",
        "cache",
        "--version",
        "v1alpha1",
        "--kind",
        "Memcached",
        "--resource=false",
        "--controller-name",
        "memcached-backup",
    ];
    ok(dir, &backup);
    let controller = read(dir, "src/controller/memcached_backup.rs");
    assert!(controller.contains("\"memcached-backup\")"), "{controller}");
    assert!(
        controller.contains("use crate::api::v1alpha1::{Memcached, MemcachedStatus};"),
        "{controller}"
    );
    let test = read(dir, "tests/controllers/memcached_backup.rs");
    assert!(
        test.contains("tokio::spawn(memcached_backup::run(manager.clone()))"),
        "{test}"
    );
    let main = read(dir, "src/main.rs");
    assert!(
        main.contains("controller::memcached::run(manager.clone())"),
        "{main}"
    );
    assert!(
        main.contains("controller::memcached_backup::run(manager.clone())"),
        "{main}"
    );
    let project = read(dir, "PROJECT");
    assert!(
        project.contains("  controllers:\n  - name: memcached\n  - name: memcached-backup\n"),
        "{project}"
    );
    assert!(!project.contains("controller: true"), "{project}");
    // The same name twice, a name taken by a kind's module, the type scaffolded again, a bad name.
    refused(
        dir,
        &backup,
        &["its controller `memcached-backup` are in PROJECT"],
    );
    ok(
        dir,
        &["create", "api", "--group", "cache", "--kind", "Other"],
    );
    let mut clash = backup;
    clash[10] = "other";
    refused(
        dir,
        &clash,
        &[
            "the controller module `other`",
            "help: choose another `--controller-name`",
        ],
    );
    // And the other way round: a kind whose controller would take the named one's module.
    refused(
        dir,
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--kind",
            "MemcachedBackup",
        ],
        &[
            "the controller module `memcached_backup` (and its test `tests/controllers/memcached_backup.rs`)",
            "help: choose another kind",
        ],
    );
    refused(
        dir,
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--kind",
            "Memcached",
            "--controller-name",
            "audit",
        ],
        &[
            "API resource already exists",
            "help: pass `--resource=false` to add only the controller",
        ],
    );
    refused(
        dir,
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--kind",
            "Memcached",
            "--resource=false",
            "--controller-name",
            "Audit",
        ],
        &["invalid controller name `Audit`", "DNS-1035"],
    );
    refused(
        dir,
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--kind",
            "Memcached",
            "--resource=false",
            "--controller-name",
            "audit",
            "--plugins",
            "deploy-image/v1-alpha",
            "--image",
            "busybox:1",
        ],
        &["scaffolds the kind's own controller, not a named one"],
    );
    // alpha generate replays it; edit --multigroup moves it with the others.
    let (_out, output) = regenerated(dir);
    assert_eq!(sources(&output), sources(dir));
    ok(dir, &["edit", "--multigroup"]);
    let main = read(dir, "src/main.rs");
    assert!(
        main.contains("controller::cache::memcached_backup::run(manager.clone())"),
        "{main}"
    );
    assert!(!dir.join("tests/controllers/memcached_backup.rs").exists());
    let test = read(dir, "tests/controllers/cache_memcached_backup.rs");
    assert!(
        test.contains("controller::{MANAGER_NAME, cache::memcached_backup}"),
        "{test}"
    );
}

#[test]
fn an_unwritable_target_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    // `src` is a file, so no file can be written below it; init must fail before writing anything else.
    std::fs::write(dir.path().join("src"), "not a directory").unwrap();
    refused(
        dir.path(),
        &["init", "--domain", "example.com", "--project-name", "demo"],
        &["failed to"],
    );

    let project = memcached_project();
    std::fs::remove_dir_all(project.path().join("config/samples")).unwrap();
    std::fs::write(project.path().join("config/samples"), "in the way").unwrap();
    refused(
        project.path(),
        &["create", "api", "--group", "cache", "--kind", "Other"],
        &["config/samples"],
    );
}

#[test]
fn user_code_outside_markers_is_kept() {
    let dir = memcached_project();
    let main = dir.path().join("src/main.rs");
    let edited = std::fs::read_to_string(&main)
        .unwrap()
        .replace("    let manager =", "    // user code\n    let manager =");
    std::fs::write(&main, &edited).unwrap();
    ok(
        dir.path(),
        &["create", "api", "--group", "cache", "--kind", "Other"],
    );
    let after = std::fs::read_to_string(&main).unwrap();
    assert!(after.contains("// user code"));
    assert!(after.contains("controller::other::run"));
}

#[test]
fn a_removed_marker_is_an_error_not_a_silent_skip() {
    let dir = memcached_project();
    let main = dir.path().join("src/main.rs");
    let text = std::fs::read_to_string(&main)
        .unwrap()
        .replace("    // +rustbuilder:scaffold:controllers\n", "");
    std::fs::write(&main, text).unwrap();
    refused(
        dir.path(),
        &["create", "api", "--group", "cache", "--kind", "Other"],
        &["src/main.rs", "+rustbuilder:scaffold:controllers"],
    );
}

#[test]
fn every_command_has_help_with_an_example() {
    for command in [
        &["init"][..],
        &["create", "api"],
        &["create", "webhook"],
        &["edit"],
        &["manifests"],
        &["alpha", "generate"],
        &["alpha", "update"],
        &["alpha", "update-runtime"],
        &["envtest", "use"],
        &["envtest", "list"],
        &["version"],
        &["completion"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let output = ok(dir.path(), &[command, &["--help"]].concat());
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(
            help.contains("Example"),
            "`{} --help` has no example:\n{help}",
            command.join(" ")
        );
    }
}

#[test]
fn version_and_completion() {
    let dir = tempfile::tempdir().unwrap();
    let version = ok(dir.path(), &["version"]);
    assert!(String::from_utf8_lossy(&version.stdout).contains(env!("CARGO_PKG_VERSION")));
    let completion = ok(dir.path(), &["completion", "bash"]);
    assert!(String::from_utf8_lossy(&completion.stdout).contains("rustbuilder"));
    refused(dir.path(), &["completion", "tcsh"], &["invalid value"]);
}

#[test]
fn alpha_generate_rebuilds_the_project_from_project_file() {
    let original = memcached_project();
    let (_out, target) = regenerated(original.path());
    assert_eq!(tree(&target), tree(original.path()));

    // In place: user edits are replaced by the scaffold, `.git` is kept.
    std::fs::create_dir(original.path().join(".git")).unwrap();
    std::fs::write(original.path().join(".git/HEAD"), "ref").unwrap();
    std::fs::write(original.path().join("src/lib.rs"), "// edited").unwrap();
    ok(original.path(), &["alpha", "generate", "--skip-manifests"]);
    let mut regenerated = tree(original.path());
    regenerated.retain(|k, _| !k.starts_with(".git"));
    assert_eq!(regenerated, tree(&target));
    assert!(original.path().join(".git/HEAD").exists());
}

/// A copy of the Kubebuilder project fixture `name` (a PROJECT in Kubebuilder's go/v4 format) in a
/// fresh directory, as `<tmp>/<name>`.
fn kubebuilder_fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join(name);
    std::fs::create_dir(&input).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubebuilder");
    std::fs::copy(fixture.join(name).join("PROJECT"), input.join("PROJECT")).unwrap();
    (dir, input)
}

#[test]
fn the_cronjob_tutorial_starts_as_the_book_writes_it() {
    // `batch` is the project's own `batch.tutorial.kubebuilder.io`, not Kubernetes' `batch` group.
    let dir = tempfile::tempdir().unwrap();
    let d = &dir.path().join("project");
    std::fs::create_dir(d).unwrap();
    ok(
        d,
        &[
            "init",
            "--domain",
            "tutorial.kubebuilder.io",
            "--repo",
            "tutorial.kubebuilder.io/project",
        ],
    );
    ok(
        d,
        &[
            "create",
            "api",
            "--group",
            "batch",
            "--version",
            "v1",
            "--kind",
            "CronJob",
        ],
    );
    let project = read(d, "PROJECT");
    for entry in [
        "  domain: tutorial.kubebuilder.io\n  group: batch\n  kind: CronJob\n",
        "  crdVersion: v1\n",
    ] {
        assert!(project.contains(entry), "{entry:?} missing:\n{project}");
    }
    assert!(!project.contains("core: true"), "{project}");
    let types = read(d, "src/api/v1/cron_job.rs");
    assert!(
        types.contains("group = \"batch.tutorial.kubebuilder.io\""),
        "{types}"
    );
    // The same for a `Deployment` of the project's own `apps` group.
    ok(
        d,
        &[
            "create",
            "api",
            "--group",
            "batch",
            "--version",
            "v1",
            "--kind",
            "Job",
            "--controller=false",
        ],
    );
    assert!(read(d, "src/api/v1/job.rs").contains("kind = \"Job\""));
}

#[test]
fn alpha_generate_makes_the_rust_project_of_a_kubebuilder_project() {
    let (_dir, input) = kubebuilder_fixture("fleet");
    let before = tree(&input);
    let out = input.with_file_name("fleet-rs");
    let output = ok(
        &input,
        &[
            "alpha",
            "generate",
            "--skip-manifests",
            "--output-dir",
            out.to_str().unwrap(),
        ],
    );
    // The Go project is left as it was; every translation is said.
    assert_eq!(tree(&input), before);
    let notes = stderr(&output);
    for note in [
        "`cliVersion: 4.15.0` is Kubebuilder's version",
        "becomes Cargo's `repository = \"https://github.com/example/fleet\"`",
        "`resources[3].api.ssa: true` is kept",
        "`github.com/example/fleet/api/harbor/v1` becomes `fleet::api::harbor::v1::Vessel` (and 5 more)",
        "no CRD at hand",
        "replace `config/crd/external/tides.example.org_forecasts.yaml`",
    ] {
        assert!(notes.contains(note), "{note:?} missing:\n{notes}");
    }
    let project = read(&out, "PROJECT");
    for entry in [
        "layout:\n- rust.rustbuilder.dev/v1-alpha\n",
        "multigroup: true\n",
        "  autoupdate.rustbuilder.dev/v1-alpha: {}\n",
        "  grafana.rustbuilder.dev/v1-alpha: {}\n",
        "  helm.rustbuilder.dev/v2-alpha:\n    manifests: dist/install.yaml\n    output: dist\n",
        "      group: harbor\n      kind: Lighthouse\n      options:\n        containerPort: '8080'\n",
        "  path: fleet::api::harbor::v1::Lighthouse\n  version: v1\n",
        "    ssa: true\n",
        "  plural: berthen\n",
        "  - name: vessel\n  - name: vessel-audit\n",
        "  core: true\n  group: apps\n  kind: StatefulSet\n",
        "  external: true\n  group: tides\n  kind: Forecast\n  module: github.com/example/tides@v0.3.1\n  path: config/crd/external/tides.example.org_forecasts.yaml\n",
        "repo: https://github.com/example/fleet\n",
    ] {
        assert!(project.contains(entry), "{entry:?} missing:\n{project}");
    }
    // One kind in two groups, each with its own files.
    for path in [
        "src/api/harbor/v1/vessel.rs",
        "src/api/dock/v1/vessel.rs",
        "tests/controllers/harbor_vessel.rs",
        "tests/controllers/harbor_vessel_audit.rs",
        "tests/controllers/dock_vessel.rs",
        "config/rbac/dock_vessel_admin_role.yaml",
        "config/rbac/harbor_vessel_admin_role.yaml",
        "src/controller/harbor/lighthouse.rs",
        "tests/e2e/harbor_lighthouse.rs",
        "src/external/tides/v1/forecast.rs",
    ] {
        assert!(out.join(path).is_file(), "{path} is missing");
    }
    let forecast = read(&out, "config/crd/external/tides.example.org_forecasts.yaml");
    assert!(
        forecast.contains("x-kubernetes-preserve-unknown-fields: true"),
        "{forecast}"
    );
    // The Rust project is a rustbuilder project: it regenerates from its own PROJECT.
    let (_again, regenerated) = regenerated(&out);
    assert_eq!(
        sorted_lines(&sources(&regenerated)),
        sorted_lines(&sources(&out))
    );
    // In place, the Go project would be lost: refused.
    refused(
        &input,
        &["alpha", "generate", "--skip-manifests"],
        &["is a Kubebuilder project", "help: pass `--output-dir"],
    );
    // Other commands say what to do with it.
    refused(
        &input,
        &["create", "api", "--group", "harbor", "--kind", "Dock"],
        &[
            "this is a Kubebuilder project",
            "rustbuilder alpha generate --input-dir",
        ],
    );
}

#[test]
fn alpha_generate_refuses_what_it_cannot_read_in_a_kubebuilder_project() {
    let (dir, input) = kubebuilder_fixture("fleet");
    let out = dir.path().join("out");
    let text = read(&input, "PROJECT");
    for (edit, expected) in [
        (
            ("  group: dock\n", "  group: dock\n  shiny: true\n"),
            "PROJECT's `resources[1].shiny` is not a key",
        ),
        (
            (
                "  grafana.kubebuilder.io/v1-alpha: {}\n",
                "  grafana.kubebuilder.io/v1-alpha: {}\n  sparkle.example.com/v1: {}\n",
            ),
            "the plugin `sparkle.example.com/v1`",
        ),
        (
            ("  group: apps\n", "  group: apps\n  external: true\n"),
            "is both `core` and `external`",
        ),
        (
            ("multigroup: true\n", "multigroup: false\n"),
            "multiple groups are not allowed",
        ),
        (
            ("go.kubebuilder.io/v4", "go.kubebuilder.io/v3"),
            "not Kubebuilder's go/v4 scaffold",
        ),
    ] {
        std::fs::write(input.join("PROJECT"), text.replace(edit.0, edit.1)).unwrap();
        let before = tree(dir.path());
        let output = rustbuilder(
            &input,
            &[
                "alpha",
                "generate",
                "--skip-manifests",
                "--output-dir",
                out.to_str().unwrap(),
            ],
        );
        assert!(!output.status.success(), "{edit:?} was accepted");
        assert!(
            stderr(&output).contains(expected),
            "{expected:?} missing:\n{}",
            stderr(&output)
        );
        assert_eq!(tree(dir.path()), before, "{edit:?} left files behind");
    }
}

/// Kubebuilder's own PROJECT files, where this machine has them (`../shared/kubebuilder/` next to the
/// repository, or `KUBEBUILDER_PROJECT_FILES`): each must make a Rust project.
#[test]
fn kubebuilders_own_project_files_make_rust_projects() {
    let candidates = [
        std::env::var_os("KUBEBUILDER_PROJECT_FILES").map(PathBuf::from),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/kubebuilder")),
        Some(PathBuf::from("/work/shared/kubebuilder")),
    ];
    let Some(root) = candidates.into_iter().flatten().find(|p| p.is_dir()) else {
        assert!(
            std::env::var_os("RUSTBUILDER_NO_KUBEBUILDER_FILES").is_some(),
            "Kubebuilder's PROJECT files are not here: set KUBEBUILDER_PROJECT_FILES to a directory holding `<name>/PROJECT` files (Kubebuilder's testdata), or RUSTBUILDER_NO_KUBEBUILDER_FILES=1 to run without them"
        );
        return;
    };
    let mut made = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let project = entry.unwrap().path().join("PROJECT");
        if !project.is_file() {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in");
        std::fs::create_dir(&input).unwrap();
        std::fs::copy(&project, input.join("PROJECT")).unwrap();
        // The Go project's licence header becomes the Rust project's.
        let boilerplate = "/*\nCopyright 2026 The Kubernetes authors.\n\nLicensed under the Apache License, Version 2.0.\n*/";
        std::fs::create_dir(input.join("hack")).unwrap();
        std::fs::write(input.join("hack/boilerplate.go.txt"), boilerplate).unwrap();
        ok(
            dir.path(),
            &[
                "alpha",
                "generate",
                "--input-dir",
                "in",
                "--output-dir",
                "out",
                "--skip-manifests",
            ],
        );
        let out = dir.path().join("out");
        let written = read(&out, "PROJECT");
        assert!(
            written.contains("- rust.rustbuilder.dev/v1-alpha"),
            "{written}"
        );
        assert_eq!(
            read(&out, "hack/boilerplate.rs.txt"),
            format!("{boilerplate}\n")
        );
        assert!(read(&out, "src/main.rs").starts_with(&format!("{boilerplate}\n\n//!")));
        made += 1;
    }
    assert!(made > 0, "no `<name>/PROJECT` file in {}", root.display());
}

#[test]
fn generated_rust_is_rustfmt_clean_for_short_and_long_names() {
    let rustfmt = Command::new("rustfmt").arg("--version").output();
    assert!(
        rustfmt.is_ok_and(|o| o.status.success()),
        "rustfmt is missing: install it with `rustup component add rustfmt`"
    );
    let deploy_image: &[&str] = &[
        "--plugins",
        "deploy-image/v1-alpha",
        "--image",
        "memcached:1.6.26-alpine3.19",
        "--image-container-command",
        "memcached,--memory-limit=64,-o,modern,-v",
        "--image-container-port",
        "11211",
        "--run-as-user",
        "1001",
    ];
    let long_name = "a-rather-long-operator-project-name";
    for (kind, project, plugin) in [
        ("Db", long_name, &[][..]),
        ("Memcached", long_name, &[][..]),
        ("MemcachedClusterBackup", long_name, &[][..]),
        ("Memcached", "project", deploy_image),
        ("Db", long_name, deploy_image),
        ("MemcachedClusterBackup", "op", deploy_image),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let init = ["init", "--domain", "example.com", "--project-name", project];
        ok(dir.path(), &init);
        let api = ["create", "api", "--group", "cache", "--kind", kind];
        ok(dir.path(), &[&api[..], plugin].concat());
        let mut files = Vec::new();
        for (path, _) in tree(dir.path()) {
            // The vendored crates are checked where they are developed.
            if path.extension().is_some_and(|e| e == "rs") && !path.starts_with("rustbuilder") {
                files.push(dir.path().join(path));
            }
        }
        let output = Command::new("rustfmt")
            .args(["--edition", "2024", "--check"])
            .args(&files)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "generated code for kind {kind} is not rustfmt-clean:\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
    }
}

/// A directory that looks like a complete asset set (empty files are enough for discovery).
fn fake_assets(dir: &Path) {
    std::fs::create_dir_all(dir.join("kwok-stages")).unwrap();
    for binary in rustbuilder_envtest::assets::BINARIES {
        std::fs::write(dir.join(binary), "").unwrap();
    }
}

#[test]
fn envtest_use_prefers_kubebuilder_assets_then_the_cache() {
    let home = tempfile::tempdir().unwrap();
    let assets = home.path().join("assets");
    fake_assets(&assets);
    let output = Command::new(env!("CARGO_BIN_EXE_rustbuilder"))
        .args(["envtest", "use", "1.36.3", "-p", "path", "--bin-dir"])
        .arg(home.path().join("cache"))
        .env("KUBEBUILDER_ASSETS", &assets)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        assets.to_str().unwrap()
    );

    let cached = home
        .path()
        .join("cache/k8s")
        .join(rustbuilder_envtest::assets::platform_dir("1.36.3"));
    fake_assets(&cached);
    let output = Command::new(env!("CARGO_BIN_EXE_rustbuilder"))
        .args(["envtest", "use", "1.36.3", "-p", "env", "--bin-dir"])
        .arg(home.path().join("cache"))
        .env_remove("KUBEBUILDER_ASSETS")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("export KUBEBUILDER_ASSETS='{}'", cached.display())
    );

    let list = Command::new(env!("CARGO_BIN_EXE_rustbuilder"))
        .args(["envtest", "list", "--bin-dir"])
        .arg(home.path().join("cache"))
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        listed.contains("1.36.3-") && listed.contains("complete"),
        "{listed}"
    );
}

/// Serves `routes` (path → body) over HTTP/1.1 on a free port until the test ends; returns the base URL
/// and how many requests each path got.
fn serve(
    routes: BTreeMap<String, Vec<u8>>,
) -> (
    String,
    std::sync::Arc<std::sync::Mutex<BTreeMap<String, usize>>>,
) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let counts = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let counted = counts.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap_or_default();
            let mut header = String::new();
            while reader.read_line(&mut header).unwrap_or(0) > 2 {
                header.clear();
            }
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            *counted.lock().unwrap().entry(path.clone()).or_insert(0) += 1;
            let (status, body) = match routes.get(&path) {
                Some(body) => ("200 OK", body.as_slice()),
                None => ("404 Not Found", &b""[..]),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body);
        }
    });
    (base, counts)
}

#[test]
fn envtest_use_downloads_the_newest_release_of_a_minor_from_a_mirror() {
    use sha2::Digest;
    let (os, arch) = rustbuilder_envtest::assets::platform();
    let name = format!("envtest-v1.36.7-{os}-{arch}.tar.gz");
    // The archive as controller-tools packs it, with stand-ins for the binaries.
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for binary in rustbuilder_envtest::assets::CONTROL_PLANE {
        let script = format!("#!/bin/sh\necho {binary}\n");
        let mut header = tar::Header::new_gnu();
        header.set_size(script.len() as u64);
        header.set_mode(0o755);
        let path = format!("controller-tools/envtest/{binary}");
        tar.append_data(&mut header, path, script.as_bytes())
            .unwrap();
    }
    let archive = tar.into_inner().unwrap().finish().unwrap();
    let sha512: String = sha2::Sha512::digest(&archive)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // The index links to a host that does not exist: `--download-url` must be what is followed.
    let mut index = String::from("releases:\n");
    for version in ["1.36.2", "1.36.7", "1.37.0"] {
        let file = format!("envtest-v{version}-{os}-{arch}.tar.gz");
        let hash = if version == "1.36.7" {
            sha512.clone()
        } else {
            "0".repeat(128)
        };
        index.push_str(&format!(
            "  v{version}:\n    {file}:\n      hash: {hash}\n      selfLink: http://127.0.0.1:9/{file}\n"
        ));
    }
    let archive_path = format!("/mirror/envtest-v1.36.7/{name}");
    let (base, counts) = serve(BTreeMap::from([
        ("/index.yaml".to_string(), index.into_bytes()),
        (archive_path.clone(), archive),
    ]));
    let home = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_rustbuilder"))
        .args(["envtest", "use", "1.36", "--bin-dir"])
        .arg(home.path())
        .args(["--index-url", &format!("{base}/index.yaml")])
        .args(["--download-url", &format!("{base}/mirror")])
        .env_remove("KUBEBUILDER_ASSETS")
        .env_remove("ENVTEST_FROM_SOURCE")
        .env("PATH", home.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let dir = home
        .path()
        .join("k8s")
        .join(rustbuilder_envtest::assets::platform_dir("1.36.7"));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!(
            "Version: 1.36.7\nOS/Arch: {os}/{arch}\nSource:  downloaded now\nPath:    {}\n",
            dir.display()
        )
    );
    assert_eq!(counts.lock().unwrap().get(&archive_path), Some(&1));
    let listed = ok(
        home.path(),
        &[
            "envtest",
            "list",
            "--bin-dir",
            home.path().to_str().unwrap(),
        ],
    );
    assert!(
        String::from_utf8_lossy(&listed.stdout).starts_with("1.36.7-")
            && String::from_utf8_lossy(&listed.stdout).contains("\tcontrol-plane\t"),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
}

#[test]
fn envtest_use_without_assets_network_or_go_says_what_to_do() {
    let home = tempfile::tempdir().unwrap();
    // No network: the release index on a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let output = Command::new(env!("CARGO_BIN_EXE_rustbuilder"))
        .args(["envtest", "use", "1.36.3", "--bin-dir"])
        .arg(home.path())
        .args([
            "--index-url",
            &format!("http://127.0.0.1:{port}/index.yaml"),
        ])
        .env_remove("KUBEBUILDER_ASSETS")
        .env_remove("GO")
        .env_remove("ENVTEST_FROM_SOURCE")
        .env_remove("ENVTEST_DOWNLOAD_URL")
        .env("PATH", home.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("Skipping download: cannot fetch the index"),
        "{message}"
    );
    assert!(
        message.contains("could not be downloaded")
            && message.contains("is not installed")
            && message.contains("install Go"),
        "{message}"
    );
    assert!(
        rustbuilder_envtest::assets::list(home.path())
            .unwrap()
            .is_empty(),
        "a failed build left a cache entry"
    );
}

#[test]
fn force_with_another_image_replaces_the_image_setting() {
    let dir = tempfile::tempdir().unwrap();
    ok(
        dir.path(),
        &["init", "--domain", "example.com", "--project-name", "demo"],
    );
    let api = [
        "create",
        "api",
        "--group",
        "cache",
        "--kind",
        "Memcached",
        "--plugins",
        "deploy-image/v1-alpha",
    ];
    ok(
        dir.path(),
        &[&api[..], &["--image", "memcached:1.6"]].concat(),
    );
    ok(
        dir.path(),
        &[&api[..], &["--image", "memcached:1.7", "--force"]].concat(),
    );
    let manager = std::fs::read_to_string(dir.path().join("config/manager/manager.yaml")).unwrap();
    assert_eq!(manager.matches("MEMCACHED_IMAGE").count(), 1, "{manager}");
    assert!(manager.contains("value: \"memcached:1.7\""), "{manager}");
    let project = std::fs::read_to_string(dir.path().join("PROJECT")).unwrap();
    assert!(
        project.contains("image: memcached:1.7") && !project.contains("memcached:1.6"),
        "{project}"
    );
}

/// The files of `dir`, relative to it, that a project carries of a runtime crate.
fn crate_sources(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    tree(dir)
        .into_iter()
        .filter(|(path, bytes)| {
            bytes != b"<dir>"
                && (path.starts_with("src")
                    || path == Path::new("Cargo.toml")
                    || path == Path::new("README.md"))
        })
        .collect()
}

#[test]
fn init_vendors_the_runtime_crates_as_they_are() {
    let dir = memcached_project();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (vendored, source) in [
        ("rustbuilder/runtime", "crates/rustbuilder-runtime"),
        ("rustbuilder/envtest", "crates/rustbuilder-envtest"),
    ] {
        let copy = tree(&dir.path().join(vendored));
        let copy: BTreeMap<_, _> = copy.into_iter().filter(|(_, b)| b != b"<dir>").collect();
        let original = crate_sources(&repo.join(source));
        assert!(original.contains_key(Path::new("src/lib.rs")));
        assert_eq!(
            copy.keys().collect::<Vec<_>>(),
            original.keys().collect::<Vec<_>>(),
            "{vendored} holds other files than {source}"
        );
        assert!(copy == original, "{vendored} differs from {source}");
    }
    let readme = std::fs::read_to_string(dir.path().join("rustbuilder/README.md")).unwrap();
    assert!(
        readme.contains("rustbuilder alpha update-runtime") && readme.contains("Do not edit"),
        "{readme}"
    );
}

#[test]
fn update_runtime_restores_the_vendored_crates() {
    let dir = memcached_project();
    let pristine = tree(dir.path());
    let root = dir.path();
    let lib = root.join("rustbuilder/runtime/src/lib.rs");
    std::fs::write(&lib, "// edited\n").unwrap();
    std::fs::remove_file(root.join("rustbuilder/envtest/Cargo.toml")).unwrap();
    std::fs::create_dir_all(root.join("rustbuilder/runtime/src/gone")).unwrap();
    std::fs::write(root.join("rustbuilder/runtime/src/gone/old.rs"), "").unwrap();
    let cargo_toml = root.join("Cargo.toml");
    let text = std::fs::read_to_string(&cargo_toml).unwrap();
    let req = format!("version = \"{}\"", rustbuilder::vendored::version_req());
    assert!(text.contains(&req), "{text}");
    std::fs::write(&cargo_toml, text.replace(&req, "version = \"0.0\"")).unwrap();
    // Files outside rustbuilder/ and the version requirements are the user's.
    std::fs::write(root.join("src/lib.rs"), "// mine\n").unwrap();

    let output = ok(root, &["alpha", "update-runtime"]);
    let report = stderr(&output);
    for line in [
        "Updating rustbuilder/runtime/src/lib.rs",
        "Creating rustbuilder/envtest/Cargo.toml",
        "Removing rustbuilder/runtime/src/gone/old.rs",
        "Updating Cargo.toml",
    ] {
        assert!(report.contains(line), "expected {line:?} in:\n{report}");
    }
    let mut after = tree(root);
    assert_eq!(after.remove(Path::new("src/lib.rs")).unwrap(), b"// mine\n");
    let mut expected = pristine.clone();
    expected.remove(Path::new("src/lib.rs"));
    assert_eq!(after, expected);

    let again = ok(root, &["alpha", "update-runtime"]);
    assert!(
        stderr(&again).contains("already holds the runtime"),
        "{}",
        stderr(&again)
    );

    let empty = tempfile::tempdir().unwrap();
    refused(
        empty.path(),
        &["alpha", "update-runtime"],
        &["no `PROJECT` file", "help:"],
    );
}

#[test]
fn the_packages_copy_of_the_runtime_crates_is_the_repositorys() {
    // The CLI's package carries what `init` copies through `vendored/` (see build.rs): links to
    // exactly the files a project gets, which `make test-package` checks end to end.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (vendored, source) in [
        ("vendored/runtime", "crates/rustbuilder-runtime"),
        ("vendored/envtest", "crates/rustbuilder-envtest"),
    ] {
        for (link, target) in [
            ("Cargo.toml.in", "Cargo.toml"),
            ("README.md", "README.md"),
            ("src", "src"),
        ] {
            let link = repo.join(vendored).join(link);
            assert!(
                std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()),
                "{} is not a symlink",
                link.display()
            );
            assert_eq!(
                link.canonicalize().unwrap(),
                repo.join(source).join(target).canonicalize().unwrap(),
                "{} points elsewhere",
                link.display()
            );
        }
    }
}

/// The tutorial's project (`init` + `create api`) with the runtime crates from crates.io.
fn registry_project() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("memcached-operator")
        .tempdir()
        .unwrap();
    ok(
        dir.path(),
        &[
            "init",
            "--domain",
            "example.com",
            "--project-name",
            "memcached-operator",
            "--runtime-source",
            "registry",
        ],
    );
    ok(
        dir.path(),
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--version",
            "v1alpha1",
            "--kind",
            "Memcached",
        ],
    );
    dir
}

#[test]
fn runtime_source_registry_depends_on_crates_io_and_copies_nothing() {
    let registry = registry_project();
    let vendored = memcached_project();
    let root = registry.path();
    let version = env!("CARGO_PKG_VERSION");

    // The vendored runtime is the default, and PROJECT records only the other choice.
    assert!(!read(vendored.path(), "PROJECT").contains("runtimeSource"));
    assert!(
        read(root, "PROJECT").contains("\n    runtimeSource: registry\n"),
        "{}",
        read(root, "PROJECT")
    );
    assert!(!root.join("rustbuilder").exists());
    let cargo_toml = read(root, "Cargo.toml");
    for line in [
        format!(
            "\nrustbuilder-runtime = {{ version = \"{version}\", features = [\"manifests\"] }}\n"
        ),
        format!("\nrustbuilder-envtest = \"{version}\"\n"),
    ] {
        assert!(cargo_toml.contains(&line), "no {line:?} in:\n{cargo_toml}");
    }
    assert!(
        !cargo_toml.contains("path = \"rustbuilder/"),
        "{cargo_toml}"
    );
    assert!(!read(root, "Dockerfile").contains("rustbuilder/"));
    assert!(!read(root, "README.md").contains("`rustbuilder/`"));
    assert!(read(vendored.path(), "Dockerfile").contains("COPY rustbuilder/ rustbuilder/"));
    assert!(read(vendored.path(), "README.md").contains("`rustbuilder/`"));

    // Everything else is the same project.
    let differs = ["Cargo.toml", "Dockerfile", "README.md", "PROJECT"];
    let others = |dir: &Path| {
        let mut files = tree(dir);
        files.retain(|path, _| {
            !path.starts_with("rustbuilder") && !differs.iter().any(|d| path == Path::new(d))
        });
        files
    };
    assert!(others(root) == others(vendored.path()));

    // Commands after `init` keep to it: PROJECT's record survives `create api`, and `alpha generate`
    // rebuilds the same project from it.
    let (_out, again) = regenerated(root);
    assert_eq!(tree(&again), tree(root));
}

#[test]
fn update_runtime_moves_a_registry_projects_requirements() {
    let dir = registry_project();
    let root = dir.path();
    let pristine = tree(root);
    let version = env!("CARGO_PKG_VERSION");
    let mut text = read(root, "Cargo.toml");
    for name in [
        "rustbuilder-runtime = { version = ",
        "rustbuilder-envtest = ",
    ] {
        text = text.replace(&format!("{name}\"{version}\""), &format!("{name}\"0.0.1\""));
    }
    std::fs::write(root.join("Cargo.toml"), text).unwrap();
    // The runtime twice (a dependency, and a dev-dependency with its test helpers), and envtest.
    assert_eq!(read(root, "Cargo.toml").matches("\"0.0.1\"").count(), 3);

    let output = ok(root, &["alpha", "update-runtime"]);
    let report = stderr(&output);
    assert!(report.contains("Updating Cargo.toml"), "{report}");
    assert!(
        report.contains(&format!(
            "Cargo.toml to the runtime of rustbuilder {version}"
        )),
        "{report}"
    );
    // Only the requirements moved; nothing was copied in.
    assert_eq!(tree(root), pristine);

    let again = ok(root, &["alpha", "update-runtime"]);
    assert!(
        stderr(&again).contains("Cargo.toml already asks for the runtime"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn bad_runtime_sources_are_refused() {
    let empty = tempfile::tempdir().unwrap();
    refused(
        empty.path(),
        &["init", "--runtime-source", "git"],
        &["invalid value 'git'", "vendored", "registry"],
    );
    let dir = memcached_project();
    let project = read(dir.path(), "PROJECT");
    std::fs::write(
        dir.path().join("PROJECT"),
        project.replace(
            "    license: apache2\n",
            "    license: apache2\n    runtimeSource: git\n",
        ),
    )
    .unwrap();
    for args in [
        &["alpha", "update-runtime"][..],
        &["alpha", "generate", "--skip-manifests"],
    ] {
        refused(
            dir.path(),
            args,
            &[
                "unknown runtimeSource `git` in PROJECT",
                "`vendored` or `registry`",
            ],
        );
    }
}

/// `init` + `create api` with `PATH` holding no rustfmt.
fn scaffold_without_rustfmt(dir: &Path, args: &[&[&str]]) -> Vec<String> {
    let no_tools = tempfile::tempdir().unwrap();
    let mut warnings = Vec::new();
    for args in args {
        let output = Command::new(env!("CARGO_BIN_EXE_rustbuilder"))
            .args(*args)
            .current_dir(dir)
            .env("NO_COLOR", "1")
            .env("PATH", no_tools.path())
            .env_remove("RUSTFMT")
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        warnings.extend(
            stderr(&output)
                .lines()
                .filter(|l| l.starts_with("warning:"))
                .map(str::to_string),
        );
    }
    warnings
}

#[test]
fn generated_rust_goes_through_rustfmt() {
    let api: &[&str] = &[
        "create",
        "api",
        "--group",
        "cache",
        "--kind",
        "MemcachedClusterBackupScheduleConfiguration",
    ];
    let init: &[&str] = &["init", "--domain", "example.com", "--project-name", "demo"];
    let formatted = tempfile::tempdir().unwrap();
    ok(formatted.path(), init);
    ok(formatted.path(), api);
    // The inserted line is longer than rustfmt's 100 columns: rustfmt wrapped it.
    let long_line = "    controllers.add(controller::memcached_cluster_backup_schedule_configuration::run(manager.clone()));\n";
    let main = formatted.path().join("src/main.rs");
    let text = std::fs::read_to_string(&main).unwrap();
    assert!(
        !text.contains(long_line)
            && text.contains("controller::memcached_cluster_backup_schedule_configuration::run"),
        "{text}"
    );
    let check = Command::new("rustfmt")
        .args(["--edition", "2024", "--check"])
        .arg(&main)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );

    let unformatted = tempfile::tempdir().unwrap();
    let warnings = scaffold_without_rustfmt(unformatted.path(), &[init, api]);
    let expected = "warning: rustfmt not found: the generated Rust is unformatted; install it with `rustup component add rustfmt`";
    assert_eq!(warnings, [expected, expected], "one line per command");
    let main = std::fs::read_to_string(unformatted.path().join("src/main.rs")).unwrap();
    assert!(main.contains(long_line), "{main}");
    // The same files, only formatted differently.
    assert_eq!(
        tree(unformatted.path()).keys().collect::<Vec<_>>(),
        tree(formatted.path()).keys().collect::<Vec<_>>()
    );
}

#[test]
fn a_users_own_formatting_is_kept() {
    let dir = memcached_project();
    let main = dir.path().join("src/main.rs");
    // Not rustfmt-clean: rustfmt would join these lines.
    let edited = std::fs::read_to_string(&main).unwrap().replace(
        "const LEADER_ELECTION_ID",
        "#[allow(dead_code)]\nconst MY_FLAGS: [&str; 2] = [\n    \"a\",\n    \"b\",\n];\n\nconst LEADER_ELECTION_ID",
    );
    std::fs::write(&main, &edited).unwrap();
    // A clean file is formatted after the insertion.
    let lib = dir.path().join("src/controller/mod.rs");
    ok(
        dir.path(),
        &["create", "api", "--group", "cache", "--kind", "Other"],
    );
    let after = std::fs::read_to_string(&main).unwrap();
    assert!(
        after.contains("const MY_FLAGS: [&str; 2] = [\n    \"a\",\n    \"b\",\n];"),
        "{after}"
    );
    assert!(after.contains("    controllers.add(controller::other::run(manager.clone()));\n"));
    let check = Command::new("rustfmt")
        .args(["--edition", "2024", "--check"])
        .arg(&lib)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

#[test]
fn deploy_image_replaces_the_base_controller_by_declaration() {
    let dir = tempfile::tempdir().unwrap();
    ok(
        dir.path(),
        &["init", "--domain", "example.com", "--project-name", "demo"],
    );
    ok(
        dir.path(),
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--kind",
            "Memcached",
            "--plugins",
            "deploy-image/v1-alpha",
            "--image",
            "memcached:1.6",
        ],
    );
    let controller =
        std::fs::read_to_string(dir.path().join("src/controller/memcached.rs")).unwrap();
    assert!(controller.contains("Deployment"), "{controller}");
    let tests = std::fs::read_to_string(dir.path().join("tests/controllers/memcached.rs")).unwrap();
    assert!(tests.contains("Deployment"), "{tests}");

    // The replaced file keeps the base's policy (refuse): a file of the user's in its place is kept.
    let other = tempfile::tempdir().unwrap();
    ok(
        other.path(),
        &["init", "--domain", "example.com", "--project-name", "demo"],
    );
    std::fs::create_dir_all(other.path().join("src/controller")).unwrap();
    std::fs::write(other.path().join("src/controller/cache.rs"), "// mine\n").unwrap();
    refused(
        other.path(),
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--kind",
            "Cache",
            "--plugins",
            "deploy-image/v1-alpha",
            "--image",
            "memcached:1.6",
        ],
        &["`src/controller/cache.rs` already exists", "--force"],
    );
}

#[test]
fn deploy_image_rules_are_checked_before_rendering() {
    let dir = memcached_project();
    let api = |kind: &'static str, extra: &[&'static str]| {
        let mut args = vec![
            "create",
            "api",
            "--group",
            "cache",
            "--kind",
            kind,
            "--plugins",
            "deploy-image/v1-alpha",
            "--image",
            "memcached:1.6",
        ];
        args.extend_from_slice(extra);
        args
    };
    refused(
        dir.path(),
        &api("Cache", &["--namespaced=false"]),
        &["needs a namespaced kind", "help: drop `--namespaced=false`"],
    );
    refused(
        dir.path(),
        &api("Deployment", &[]),
        &[
            "cannot scaffold kind `Deployment`",
            "help: choose another kind",
        ],
    );
    refused(
        dir.path(),
        &api("Tokio", &[]),
        &["cannot scaffold kind `Tokio`", "(or `tokio`)"],
    );
    refused(
        dir.path(),
        &api("Cache", &["--run-as-user", "0"]),
        &["`--run-as-user 0`", "help: choose a non-zero user ID"],
    );
}

#[test]
fn alpha_generate_ends_with_the_manifests() {
    let original = memcached_project();
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("copy");
    // No cargo here: the project is regenerated, then the manifest step fails and says so.
    let output = Command::new(env!("CARGO_BIN_EXE_rustbuilder"))
        .args(["alpha", "generate", "--output-dir"])
        .arg(&target)
        .current_dir(original.path())
        .env("NO_COLOR", "1")
        .env("CARGO", out.path().join("no-cargo"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("Running cargo run --quiet --bin crdgen -- --write")
            && message.contains("manifests were not written")
            && message.contains("failed to run `cargo`"),
        "{message}"
    );
    assert!(target.join("PROJECT").exists());
}

#[test]
fn manifests_needs_a_project_and_says_when_cargo_fails() {
    let empty = tempfile::tempdir().unwrap();
    refused(empty.path(), &["manifests"], &["no `PROJECT` file"]);
    let dir = memcached_project();
    let output = Command::new(env!("CARGO_BIN_EXE_rustbuilder"))
        .args(["manifests", "--check"])
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env("CARGO", "false")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("`cargo run --quiet --bin crdgen -- --check` failed")
            && message.contains("help: run `make manifests`"),
        "{message}"
    );
}

/// `--help` of every command, compared with `tests/snapshots/help/<command>.txt`. Run with
/// `RUSTBUILDER_BLESS=1` to rewrite the snapshots after a deliberate change.
#[test]
fn help_matches_the_snapshots() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/help");
    let bless = std::env::var_os("RUSTBUILDER_BLESS").is_some();
    let mut failures = Vec::new();
    for command in [
        &[][..],
        &["init"],
        &["create"],
        &["create", "api"],
        &["create", "webhook"],
        &["edit"],
        &["manifests"],
        &["alpha"],
        &["alpha", "generate"],
        &["alpha", "update"],
        &["alpha", "update-runtime"],
        &["envtest"],
        &["envtest", "use"],
        &["envtest", "list"],
        &["version"],
        &["completion"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_rustbuilder"))
            .args(command)
            .arg("--help")
            .env("NO_COLOR", "1")
            .env("COLUMNS", "100")
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        let help = String::from_utf8(output.stdout).unwrap();
        let name = if command.is_empty() {
            "rustbuilder".to_string()
        } else {
            command.join("-")
        };
        let file = dir.join(format!("{name}.txt"));
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&file, &help).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&file).unwrap_or_default();
        if help != expected {
            failures.push(format!(
                "`rustbuilder {} --help` differs from {}:\n{help}",
                command.join(" "),
                file.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\nhelp: RUSTBUILDER_BLESS=1 cargo test --test cli help_matches_the_snapshots",
        failures.join("\n")
    );
    let top = std::fs::read_to_string(dir.join("rustbuilder.txt")).unwrap();
    for command in ["create", "alpha", "envtest"] {
        let line = top
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{command} ")))
            .unwrap_or_else(|| panic!("`{command}` is not listed:\n{top}"));
        assert!(
            line.split_whitespace().count() > 2,
            "`{command}` has no description: {line}"
        );
    }
}

fn create_webhook(dir: &Path, version: &str, flags: &[&str]) -> Output {
    let mut args = vec![
        "create",
        "webhook",
        "--group",
        "cache",
        "--version",
        version,
        "--kind",
        "Memcached",
    ];
    args.extend(flags);
    ok(dir, &args)
}

/// The tutorial's kind with webhooks added one by one, and a second version converted by a webhook.
fn webhook_project() -> tempfile::TempDir {
    let dir = memcached_project();
    create_webhook(dir.path(), "v1alpha1", &["--defaulting"]);
    // The user's own code in the webhook file, which the second webhook must keep.
    let file = dir.path().join("src/webhook/v1alpha1/memcached.rs");
    let text = read(dir.path(), "src/webhook/v1alpha1/memcached.rs").replace(
        "// TODO(user): set your defaults.",
        "// Mine: the team's defaults.",
    );
    std::fs::write(&file, text).unwrap();
    create_webhook(dir.path(), "v1alpha1", &["--programmatic-validation"]);
    ok(
        dir.path(),
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--version",
            "v1",
            "--kind",
            "Memcached",
            "--controller=false",
        ],
    );
    create_webhook(dir.path(), "v1", &["--conversion", "--spoke", "v1alpha1"]);
    dir
}

/// Admission and conversion webhooks of one version in one command (the CronJob tutorials' v1 has
/// both): the webhooks' test crate is planned once, and `alpha generate` rebuilds the same project.
#[test]
fn one_create_webhook_adds_admission_and_conversion_webhooks_together() {
    let dir = memcached_project();
    let api = [
        "create",
        "api",
        "--group",
        "cache",
        "--version",
        "v1",
        "--kind",
        "Memcached",
        "--controller=false",
    ];
    ok(dir.path(), &api);
    let flags = [
        "--defaulting",
        "--programmatic-validation",
        "--conversion",
        "--spoke",
        "v1alpha1",
    ];
    create_webhook(dir.path(), "v1", &flags);
    let modules = read(dir.path(), "tests/webhooks/main.rs");
    for module in ["mod memcached_v1;", "mod memcached_conversion;"] {
        assert!(modules.contains(module), "{module} missing:\n{modules}");
    }
    // Regenerated from PROJECT, the webhooks come out the same (the order of the versions in the
    // CRD and sample lists may differ: PROJECT lists the resources sorted).
    let (_out, target) = regenerated(dir.path());
    for file in [
        "PROJECT",
        "src/main.rs",
        "tests/webhooks/main.rs",
        "tests/webhooks/memcached_v1.rs",
        "tests/webhooks/memcached_conversion.rs",
        "src/api/v1alpha1/memcached_conversion.rs",
    ] {
        assert_eq!(read(&target, file), read(dir.path(), file), "{file}");
    }
}

#[test]
fn create_webhook_adds_each_webhook_type_next_to_the_users_code() {
    let dir = webhook_project();
    let path = dir.path();
    let webhook = read(path, "src/webhook/v1alpha1/memcached.rs");
    assert!(
        webhook.contains("// Mine: the team's defaults."),
        "{webhook}"
    );
    assert!(webhook.contains("impl Defaulter for MemcachedWebhook"));
    assert!(webhook.contains("impl Validator for MemcachedWebhook"));
    assert!(
        webhook.contains(
            "use rustbuilder_runtime::webhook::{AdmissionRequest, Defaulter, Denied, Validation, Validator};"
        )
    );
    for marker in [
        "// +rustbuilder:webhook:path=/mutate-cache-example-com-v1alpha1-memcached,mutating=true,",
        "// +rustbuilder:webhook:path=/validate-cache-example-com-v1alpha1-memcached,mutating=false,",
    ] {
        assert!(webhook.contains(marker), "{marker} missing:\n{webhook}");
    }
    let main = read(path, "src/main.rs");
    for registration in [
        ".defaulter(webhook::v1alpha1::memcached::MemcachedWebhook)",
        ".validator(webhook::v1alpha1::memcached::MemcachedWebhook)",
        ".conversion::<api::v1alpha1::Memcached, api::v1::Memcached>()",
    ] {
        assert!(main.contains(registration), "{registration}:\n{main}");
    }
    // The e2e journey checks both webhooks (the second went in at the marker) and the conversion.
    let e2e = read(path, "tests/e2e/memcached_v1alpha1_webhook.rs");
    let defaulting = e2e.find("// Defaulting:").expect("the defaulting check");
    let validation = e2e.find("// Validation:").expect("the validation check");
    let marker = e2e
        .find("+rustbuilder:scaffold:e2e-webhook-checks")
        .unwrap();
    assert!(defaulting < validation && validation < marker, "{e2e}");
    let e2e_main = read(path, "tests/e2e/main.rs");
    for module in [
        "mod memcached_v1alpha1_webhook;",
        "mod memcached_conversion;",
    ] {
        assert_eq!(e2e_main.matches(module).count(), 1, "{module}:\n{e2e_main}");
    }
    // The webhooks' tests are modules of one test crate.
    let webhook_tests = read(path, "tests/webhooks/main.rs");
    for module in ["mod memcached_v1alpha1;", "mod memcached_conversion;"] {
        assert_eq!(
            webhook_tests.matches(module).count(),
            1,
            "{module}:\n{webhook_tests}"
        );
    }
    let crdgen = read(path, "src/bin/crdgen.rs");
    assert!(
        crdgen.contains("crds.storage_version::<api::v1::Memcached>()"),
        "{crdgen}"
    );
    assert!(
        crdgen.contains("crds.conversion_webhook::<api::v1::Memcached>()"),
        "{crdgen}"
    );
    for file in [
        "src/api/v1alpha1/memcached_conversion.rs",
        "tests/webhooks/memcached_v1alpha1.rs",
        "tests/webhooks/memcached_conversion.rs",
        "tests/e2e/memcached_v1alpha1_webhook.rs",
        "tests/e2e/memcached_conversion.rs",
        "config/webhook/kustomization.yaml",
        "config/webhook/service.yaml",
        "config/certmanager/certificate.yaml",
        "config/certmanager/issuer.yaml",
        "config/default/manager_webhook_patch.yaml",
        "config/crd/kustomizeconfig.yaml",
    ] {
        assert!(path.join(file).exists(), "{file} missing");
    }
    let project = read(path, "PROJECT");
    assert!(
        project.contains(
            "  version: v1\n  webhooks:\n    conversion: true\n    spoke:\n    - v1alpha1\n    webhookVersion: v1\n"
        ),
        "{project}"
    );
    assert!(
        project.contains(
            "  webhooks:\n    defaulting: true\n    validation: true\n    webhookVersion: v1\n"
        ),
        "{project}"
    );
    let kustomization = read(path, "config/default/kustomization.yaml");
    assert_eq!(kustomization.matches("replacements:").count(), 1);
    assert!(kustomization.contains("name: memcacheds.cache.example.com"));

    // PROJECT alone rebuilds the same project (but for the user's own line). Lines may come in
    // another order: `alpha generate` adds the versions in PROJECT's order (v1 before v1alpha1).
    let (_out, again) = regenerated(path);
    let mut expected = sources(path);
    expected.insert(
        PathBuf::from("src/webhook/v1alpha1/memcached.rs"),
        webhook
            .replace(
                "// Mine: the team's defaults.",
                "// TODO(user): set your defaults.",
            )
            .into_bytes(),
    );
    let actual = sources(&again);
    assert_eq!(
        actual.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    let lines = |bytes: &[u8]| {
        let mut lines: Vec<String> = String::from_utf8_lossy(bytes)
            .lines()
            .map(String::from)
            .collect();
        lines.sort();
        lines
    };
    for (file, bytes) in &expected {
        assert_eq!(
            lines(bytes),
            lines(&actual[file]),
            "{} differs after alpha generate",
            file.display()
        );
    }
}

#[test]
fn create_webhook_refuses_bad_input_and_changes_nothing() {
    let dir = memcached_project();
    let path = dir.path();
    let webhook = |version: &str, kind: &str, flags: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "create",
            "webhook",
            "--group",
            "cache",
            "--version",
            version,
            "--kind",
            kind,
        ]
        .map(String::from)
        .to_vec();
        args.extend(flags.iter().map(|f| f.to_string()));
        args
    };
    let refused_with = |args: Vec<String>, expected: &[&str]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(path, &args, expected);
    };
    refused_with(
        webhook("v1alpha1", "Memcached", &[]),
        &["error: nothing to scaffold", "--defaulting", "help:"],
    );
    refused_with(
        webhook("v1alpha1", "Redis", &["--defaulting"]),
        &[
            "no API for `cache.example.com/v1alpha1, Kind=Redis` in PROJECT",
            "help: run `rustbuilder create api --group cache --version v1alpha1 --kind Redis` first",
        ],
    );
    refused_with(
        webhook("v1alpha1", "Memcached", &["--conversion", "--spoke", "v1"]),
        &[
            "the only version of `Memcached`",
            "help: add another version first",
        ],
    );
    refused_with(
        webhook("v1alpha1", "Memcached", &["--defaulting", "--spoke", "v1"]),
        &["`--conversion` is not given"],
    );
    create_webhook(path, "v1alpha1", &["--defaulting"]);
    refused_with(
        webhook("v1alpha1", "Memcached", &["--defaulting"]),
        &[
            "the defaulting webhook of `cache.example.com/v1alpha1, Kind=Memcached` already exists",
            "help: pass `--force`",
        ],
    );
    ok(
        path,
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--version",
            "v1",
            "--kind",
            "Memcached",
            "--controller=false",
        ],
    );
    refused_with(
        webhook("v1", "Memcached", &["--conversion"]),
        &[
            "it needs the versions that convert to and from it",
            "help: pass `--spoke v1alpha1`",
        ],
    );
    refused_with(
        webhook("v1", "Memcached", &["--conversion", "--spoke", "v2"]),
        &[
            "unknown spoke version `v2`",
            "help: pass `--spoke v1alpha1`",
        ],
    );
    refused_with(
        webhook("v1", "Memcached", &["--conversion", "--spoke", "v1"]),
        &["is the hub itself"],
    );
    // A second controller for the kind at the new version would clash with the first.
    refused(
        path,
        &[
            "create",
            "api",
            "--group",
            "cache",
            "--version",
            "v2",
            "--kind",
            "Memcached",
        ],
        &[
            "has a controller already, at version v1alpha1",
            "help: pass `--controller=false`",
        ],
    );
    // `--force` scaffolds an existing webhook again.
    create_webhook(path, "v1alpha1", &["--defaulting", "--force"]);
}

#[test]
fn edit_multigroup_moves_the_webhooks_too() {
    let dir = webhook_project();
    let dir = dir.path();
    let output = ok(dir, &["edit", "--multigroup"]);
    assert!(stderr(&output).contains("Updated the project to the multigroup layout"));
    assert!(!dir.join("src/webhook/v1alpha1").exists());
    let moved = read(dir, "src/webhook/cache/v1alpha1/memcached.rs");
    assert!(moved.contains("// Mine: the team's defaults."), "{moved}");
    // The tests' modules take the group too, in their crates' module lists.
    for (main, modules) in [
        ("tests/controllers/main.rs", &["mod cache_memcached;"][..]),
        (
            "tests/webhooks/main.rs",
            &[
                "mod cache_memcached_v1alpha1;",
                "mod cache_memcached_conversion;",
            ][..],
        ),
    ] {
        let text = read(dir, main);
        for module in modules {
            assert!(text.contains(module), "{module} in {main}:\n{text}");
        }
    }
    assert!(
        moved.contains("use crate::api::cache::v1alpha1::Memcached;"),
        "{moved}"
    );
    let main = read(dir, "src/main.rs");
    for registration in [
        ".defaulter(webhook::cache::v1alpha1::memcached::MemcachedWebhook)",
        ".conversion::<api::cache::v1alpha1::Memcached, api::cache::v1::Memcached>()",
    ] {
        assert!(main.contains(registration), "{registration}:\n{main}");
    }
    // Apart from the user's line and the controller's name in metrics (kept, as in a move without
    // webhooks), the result is what a multigroup project gets from the start. Lines may come in
    // another order: `alpha generate` adds the versions in PROJECT's order.
    let (_fresh, output) = regenerated(dir);
    let again = sources(&output);
    let now = sources(dir);
    let lines = |bytes: Option<&Vec<u8>>| {
        let text = String::from_utf8_lossy(bytes.map_or(&[][..], |b| b.as_slice())).into_owned();
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        lines.sort();
        lines
    };
    let differ: Vec<_> = now
        .keys()
        .filter(|k| lines(again.get(*k)) != lines(now.get(*k)))
        .collect();
    assert_eq!(
        differ,
        vec![
            Path::new("src/controller/cache/memcached.rs"),
            Path::new("src/webhook/cache/v1alpha1/memcached.rs"),
        ]
    );
    assert_eq!(
        again.keys().collect::<Vec<_>>(),
        now.keys().collect::<Vec<_>>()
    );
    // The next webhook goes in next to the moved ones.
    ok(dir, &["create", "api", "--group", "web", "--kind", "Site"]);
    ok(
        dir,
        &[
            "create",
            "webhook",
            "--group",
            "web",
            "--version",
            "v1alpha1",
            "--kind",
            "Site",
            "--defaulting",
        ],
    );
    assert!(dir.join("src/webhook/web/v1alpha1/site.rs").is_file());
    assert!(read(dir, "src/webhook/mod.rs").contains("pub mod cache;\npub mod web;\n"));
}

/// What `make manifests` writes, faked so the chart tests need no build of the project.
fn fake_manifests(dir: &Path, role_kind: &str) {
    let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: memcacheds.cache.example.com\nspec:\n  group: cache.example.com\n  names:\n    kind: Memcached\n    plural: memcacheds\n  scope: Namespaced\n  versions: []\n";
    std::fs::create_dir_all(dir.join("config/crd/bases")).unwrap();
    std::fs::write(
        dir.join("config/crd/bases/cache.example.com_memcacheds.yaml"),
        crd,
    )
    .unwrap();
    let namespace = if role_kind == "Role" {
        "  namespace: system\n"
    } else {
        ""
    };
    std::fs::write(
        dir.join("config/rbac/role.yaml"),
        format!("# Generated.\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: {role_kind}\nmetadata:\n  name: manager-role\n{namespace}rules:\n- apiGroups:\n  - cache.example.com\n  resources:\n  - memcacheds\n  verbs:\n  - list\n  - watch\n"),
    )
    .unwrap();
}

const HELM: &[&str] = &["edit", "--plugins", "helm/v2-alpha"];

#[test]
fn edit_plugins_helm_writes_a_chart_from_config() {
    let dir = memcached_project();
    let d = dir.path();
    // The chart is built from the manifests: without them, nothing is written.
    refused(
        d,
        HELM,
        &["config/crd/bases holds no CRD", "make manifests"],
    );
    fake_manifests(d, "ClusterRole");
    ok(d, HELM);

    let project = read(d, "PROJECT");
    assert!(
        project.contains("  helm.rustbuilder.dev/v2-alpha: {}\n"),
        "{project}"
    );
    let gitignore = read(d, ".gitignore");
    assert!(
        gitignore.contains("/dist/*\n") && gitignore.contains("!/dist/chart/\n"),
        "{gitignore}"
    );
    assert!(read(d, "dist/chart/Chart.yaml").contains("name: memcached-operator\n"));
    let values = read(d, "dist/chart/values.yaml");
    for line in [
        "  replicas: 1\n",
        "    repository: controller\n    tag: latest\n",
        "leaderElection:\n  enable: true\n",
        "rbac:\n  enable: true\n  helpers: false\n",
        "crd:\n  enable: true\n  keep: true\n",
        "metrics:\n  enable: true\n  port: 8443\n",
        "networkPolicy:\n  enable: false\n",
        "prometheus:\n  enable: false\n",
    ] {
        assert!(values.contains(line), "{line:?} in:\n{values}");
    }
    // No webhook in config/: no webhook or cert-manager switches.
    assert!(!values.contains("webhook:") && !values.contains("certManager:"));
    let manager = read(d, "dist/chart/templates/manager/manager.yaml");
    for line in [
        "  name: memcached-operator-controller-manager\n",
        "  namespace: {{ .Release.Namespace }}\n",
        "  replicas: {{ .Values.manager.replicas }}\n",
        "        - --metrics-bind-address=:{{ .Values.metrics.port }}\n",
        "        image: \"{{ .Values.manager.image.repository }}:{{ .Values.manager.image.tag }}\"\n",
        "          {{- toYaml .Values.manager.resources | nindent 10 }}\n",
        "      serviceAccountName: memcached-operator-controller-manager\n",
    ] {
        assert!(manager.contains(line), "{line:?} in:\n{manager}");
    }
    let binding = read(d, "dist/chart/templates/rbac/role_binding.yaml");
    assert!(
        binding.starts_with("{{/* Generated by `rustbuilder edit --plugins helm/v2-alpha` from config/rbac/role_binding.yaml"),
        "{binding}"
    );
    assert!(
        binding.contains("{{- if .Values.rbac.enable }}\n"),
        "{binding}"
    );
    assert!(
        binding.contains("  name: memcached-operator-manager-role\n"),
        "{binding}"
    );
    let crd = read(
        d,
        "dist/chart/templates/crd/cache.example.com_memcacheds.yaml",
    );
    assert!(crd.contains("    helm.sh/resource-policy: keep\n"), "{crd}");

    // Deterministic, and a second run changes nothing.
    let first = tree(d);
    ok(d, HELM);
    assert_eq!(tree(d), first);

    // The user's values are kept; a section they lack comes back; their own templates stay; a template
    // the command wrote and no longer needs goes.
    let mine = values
        .replace("  replicas: 1\n", "  replicas: 3 # ours\n")
        .replace("prometheus:\n  enable: false\n", "");
    std::fs::write(d.join("dist/chart/values.yaml"), &mine).unwrap();
    std::fs::write(d.join("dist/chart/templates/extra.yaml"), "# ours\n").unwrap();
    std::fs::write(d.join("dist/chart/templates/rbac/gone.yaml"), &binding).unwrap();
    ok(d, HELM);
    let kept = read(d, "dist/chart/values.yaml");
    assert!(kept.starts_with(&mine), "{kept}");
    assert!(kept.ends_with("prometheus:\n  enable: false\n"), "{kept}");
    assert_eq!(read(d, "dist/chart/templates/extra.yaml"), "# ours\n");
    assert!(!d.join("dist/chart/templates/rbac/gone.yaml").exists());

    // `--force` rewrites the values.
    ok(d, &["edit", "--plugins", "helm/v2-alpha", "--force"]);
    assert_eq!(read(d, "dist/chart/values.yaml"), values);
}

/// The `helm` that renders charts: `HELM`'s (`make test-cli` passes the one `make helm` builds), else
/// the repository's cache of it, else the one on PATH.
fn helm() -> PathBuf {
    if let Some(helm) = std::env::var_os("HELM") {
        return PathBuf::from(helm);
    }
    let cache = std::env::var_os("HOME")
        .map(|home| Path::new(&home).join(".cache/rustbuilder/helm"))
        .and_then(|dir| std::fs::read_dir(dir).ok())
        .into_iter()
        .flatten()
        .filter_map(|entry| Some(entry.ok()?.path().join("helm")))
        .filter(|helm| helm.is_file())
        .max();
    cache.unwrap_or_else(|| PathBuf::from("helm"))
}

/// `helm <args>` in `dir`, its output.
fn run_helm(dir: &Path, args: &[&str]) -> String {
    let output = Command::new(helm())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("helm runs (`make helm` builds one; HELM names it)");
    assert!(
        output.status.success(),
        "helm {}: {}",
        args.join(" "),
        stderr(&output)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The chart's workflow, as GitHub reads it: its one job's environment and its steps.
fn chart_workflow(dir: &Path) -> (serde_yaml::Value, Vec<serde_yaml::Value>) {
    let workflow: serde_yaml::Value =
        serde_yaml::from_str(&read(dir, ".github/workflows/test-chart.yml")).unwrap();
    let jobs = workflow["jobs"].as_mapping().unwrap();
    assert_eq!(
        jobs.keys().map(|k| k.as_str().unwrap()).collect::<Vec<_>>(),
        ["test-chart"]
    );
    assert_eq!(workflow["permissions"]["contents"], "read");
    let job = &workflow["jobs"]["test-chart"];
    (
        job["env"].clone(),
        job["steps"].as_sequence().unwrap().clone(),
    )
}

#[test]
fn edit_plugins_helm_writes_helpers_and_a_workflow_that_installs_the_chart() {
    let dir = memcached_project();
    let d = dir.path();
    fake_manifests(d, "ClusterRole");
    ok(d, HELM);

    // The templates take their labels and the chart's name from _helpers.tpl.
    let helpers = read(d, "dist/chart/templates/_helpers.tpl");
    for define in [
        "{{- define \"memcached-operator.name\" -}}\n",
        "{{- define \"memcached-operator.labels\" -}}\n",
    ] {
        assert!(helpers.contains(define), "{define:?} in:\n{helpers}");
    }
    let manager = read(d, "dist/chart/templates/manager/manager.yaml");
    assert!(
        manager.contains("  labels:\n    control-plane: controller-manager\n    {{- include \"memcached-operator.labels\" . | nindent 4 }}\n"),
        "{manager}"
    );
    assert!(
        manager.contains("    matchLabels:\n      control-plane: controller-manager\n      app.kubernetes.io/name: {{ include \"memcached-operator.name\" . }}\n"),
        "{manager}"
    );
    let role = read(d, "dist/chart/templates/rbac/role.yaml");
    assert!(
        role.contains("    {{- include \"memcached-operator.labels\" . | nindent 4 }}\n")
            || !role.contains("app.kubernetes.io/name"),
        "{role}"
    );

    // They render: every object labelled by the release, selectors as config/ has them.
    run_helm(d, &["lint", "--strict", "dist/chart"]);
    let rendered = run_helm(
        d,
        &[
            "template",
            "memcached-operator",
            "dist/chart",
            "--namespace",
            "memcached-operator-system",
        ],
    );
    for line in [
        "    helm.sh/chart: memcached-operator-0.1.0\n",
        "    app.kubernetes.io/instance: \"memcached-operator\"\n",
        "    app.kubernetes.io/managed-by: Helm\n",
        "      app.kubernetes.io/name: memcached-operator\n",
    ] {
        assert!(rendered.contains(line), "{line:?} in:\n{rendered}");
    }
    assert!(!rendered.contains("kustomize"), "{rendered}");
    {
        use serde::Deserialize as _;
        for doc in serde_yaml::Deserializer::from_str(&rendered) {
            let doc = serde_yaml::Value::deserialize(doc).unwrap();
            if doc.is_null() || doc["kind"] == "CustomResourceDefinition" {
                continue;
            }
            assert_eq!(
                doc["metadata"]["labels"]["helm.sh/chart"], "memcached-operator-0.1.0",
                "{doc:?}"
            );
        }
    }

    // The workflow lints the chart and installs it on a local cluster, as the e2e workflow runs its
    // cluster: no Kind, no Docker.
    let (env, steps) = chart_workflow(d);
    assert_eq!(env["CHART"], "dist/chart");
    assert_eq!(env["NAMESPACE"], "memcached-operator-system");
    let runs: Vec<&str> = steps.iter().filter_map(|s| s["run"].as_str()).collect();
    let uses: Vec<&str> = steps.iter().filter_map(|s| s["uses"].as_str()).collect();
    let step = |needle: &str| runs.iter().any(|run| run.contains(needle));
    assert!(step("helm lint --strict \"$CHART\""), "{runs:?}");
    assert!(step("helm template"), "{runs:?}");
    assert!(step("--example envtest -- local-cluster"), "{runs:?}");
    assert!(
        step(
            "helm install \"$RELEASE\" \"$CHART\" --namespace \"$NAMESPACE\" --create-namespace --wait"
        ),
        "{runs:?}"
    );
    assert!(
        step("wait --for=condition=Available deployment/memcached-operator-controller-manager"),
        "{runs:?}"
    );
    assert!(
        !step("certManager"),
        "no webhooks, no cert-manager: {runs:?}"
    );
    assert!(uses.contains(&"azure/setup-helm@v4"), "{uses:?}");
    for docker in ["docker", "kind ", "kind/", "buildx"] {
        assert!(
            runs.iter().chain(&uses).all(|text| !text.contains(docker)),
            "{docker}: {runs:?} {uses:?}"
        );
    }

    // Both files are the user's once written; `--force` writes them again.
    std::fs::write(
        d.join("dist/chart/templates/_helpers.tpl"),
        format!("{helpers}{{{{/* ours */}}}}\n"),
    )
    .unwrap();
    let workflow = read(d, ".github/workflows/test-chart.yml");
    std::fs::write(
        d.join(".github/workflows/test-chart.yml"),
        format!("{workflow}# ours\n"),
    )
    .unwrap();
    ok(d, HELM);
    assert!(read(d, "dist/chart/templates/_helpers.tpl").ends_with("{{/* ours */}}\n"));
    assert!(read(d, ".github/workflows/test-chart.yml").ends_with("# ours\n"));
    ok(d, &["edit", "--plugins", "helm/v2-alpha", "--force"]);
    assert_eq!(read(d, "dist/chart/templates/_helpers.tpl"), helpers);
    assert_eq!(read(d, ".github/workflows/test-chart.yml"), workflow);
}

#[test]
fn the_chart_of_a_project_with_webhooks_renders_and_its_workflow_installs_it_without_cert_manager()
{
    let dir = helm_webhook_project();
    let d = dir.path();
    ok(
        d,
        &[
            "edit",
            "--plugins",
            "helm/v2-alpha",
            "--output-dir",
            "deploy",
        ],
    );
    run_helm(d, &["lint", "--strict", "deploy/chart"]);
    let rendered = run_helm(d, &["template", "memcached-operator", "deploy/chart"]);
    assert!(
        rendered.contains("kind: MutatingWebhookConfiguration\n"),
        "{rendered}"
    );
    assert!(rendered.contains("kind: Certificate\n"), "{rendered}");
    let (env, steps) = chart_workflow(d);
    assert_eq!(env["CHART"], "deploy/chart");
    let install = steps
        .iter()
        .filter_map(|s| s["run"].as_str())
        .find(|run| run.contains("helm install"))
        .unwrap();
    assert!(
        install.contains("--set certManager.enable=false"),
        "{install}"
    );
    // Without cert-manager's kinds, as on the workflow's cluster.
    let rendered = run_helm(
        d,
        &[
            "template",
            "memcached-operator",
            "deploy/chart",
            "--set",
            "certManager.enable=false",
        ],
    );
    assert!(!rendered.contains("kind: Certificate\n"), "{rendered}");
}

#[test]
fn alpha_generate_skip_manifests_keeps_the_helm_plugin_and_its_chart() {
    let dir = memcached_project();
    let d = dir.path();
    fake_manifests(d, "ClusterRole");
    ok(d, HELM);
    // The user's values survive too: the chart is theirs to edit.
    let values = read(d, "dist/chart/values.yaml").replace("  replicas: 1\n", "  replicas: 2\n");
    std::fs::write(d.join("dist/chart/values.yaml"), &values).unwrap();
    let workflow = format!("{}# ours\n", read(d, ".github/workflows/test-chart.yml"));
    std::fs::write(d.join(".github/workflows/test-chart.yml"), &workflow).unwrap();
    let chart: BTreeMap<PathBuf, Vec<u8>> = tree(d)
        .into_iter()
        .filter(|(path, _)| path.starts_with("dist"))
        .collect();
    assert!(chart.contains_key(Path::new("dist/chart/Chart.yaml")));
    let project = read(d, "PROJECT");
    let gitignore = read(d, ".gitignore");

    // Into another directory: the record, the chart and the `.gitignore` lines that keep it in git.
    let (_out, target) = regenerated(d);
    assert_eq!(read(&target, "PROJECT"), project);
    assert_eq!(read(&target, ".gitignore"), gitignore);
    let copied: BTreeMap<PathBuf, Vec<u8>> = tree(&target)
        .into_iter()
        .filter(|(path, _)| path.starts_with("dist"))
        .collect();
    assert_eq!(copied, chart);
    assert_eq!(read(&target, ".github/workflows/test-chart.yml"), workflow);

    // In place, the same.
    let output = ok(d, &["alpha", "generate", "--skip-manifests"]);
    assert_eq!(read(d, "PROJECT"), project);
    assert_eq!(read(d, ".gitignore"), gitignore);
    let kept: BTreeMap<PathBuf, Vec<u8>> = tree(d)
        .into_iter()
        .filter(|(path, _)| path.starts_with("dist"))
        .collect();
    assert_eq!(kept, chart);
    assert_eq!(read(d, ".github/workflows/test-chart.yml"), workflow);
    let message = stderr(&output);
    assert!(
        message.contains("make manifests && rustbuilder edit --plugins helm/v2-alpha"),
        "{message}"
    );
}

#[test]
fn the_chart_of_a_namespaced_project_has_a_role_in_the_release_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &[
            "init",
            "--domain",
            "example.com",
            "--project-name",
            "tenant",
            "--namespaced",
        ],
    );
    ok(
        d,
        &["create", "api", "--group", "cache", "--kind", "Memcached"],
    );
    fake_manifests(d, "Role");
    ok(d, HELM);
    let role = read(d, "dist/chart/templates/rbac/role.yaml");
    assert!(
        role.contains("kind: Role\nmetadata:\n  name: tenant-manager-role\n  namespace: {{ .Release.Namespace }}\n"),
        "{role}"
    );
    let binding = read(d, "dist/chart/templates/rbac/role_binding.yaml");
    assert!(binding.contains("kind: RoleBinding\n"), "{binding}");
    assert!(
        binding.contains("  kind: Role\n  name: tenant-manager-role\n"),
        "{binding}"
    );
    let manager = read(d, "dist/chart/values.yaml");
    assert!(
        manager.contains("    - name: WATCH_NAMESPACE\n"),
        "{manager}"
    );
}

#[test]
fn edit_plugins_refuses_bad_input() {
    let empty = tempfile::tempdir().unwrap();
    refused(
        empty.path(),
        HELM,
        &["no `PROJECT` file", "rustbuilder init"],
    );

    let dir = memcached_project();
    let d = dir.path();
    fake_manifests(d, "ClusterRole");
    refused(
        d,
        &["edit", "--plugins", "helm/v1-alpha"],
        &["unknown plugin `helm/v1-alpha`", "helm/v2-alpha"],
    );
    refused(
        d,
        &["edit", "--plugins", "helm/v2-alpha", "--namespaced"],
        &["one edit at a time"],
    );
    refused(
        d,
        &["edit", "--force"],
        &["`--force` belongs to `--plugins helm/v2-alpha`"],
    );
    std::fs::remove_file(d.join("config/rbac/role.yaml")).unwrap();
    refused(d, HELM, &["config/rbac/role.yaml", "make manifests"]);

    fake_manifests(d, "ClusterRole");
    ok(d, HELM);
    std::fs::write(d.join("dist/chart/values.yaml"), "manager: [unclosed\n").unwrap();
    refused(
        d,
        HELM,
        &["cannot keep `dist/chart/values.yaml`", "--force"],
    );
}

#[test]
fn the_chart_of_a_project_with_webhooks_switches_them_and_cert_manager() {
    let dir = memcached_project();
    let d = dir.path();
    fake_manifests(d, "ClusterRole");
    // config/webhook and config/certmanager as `create webhook` lays them out, and the manager's patch.
    let files = [
        (
            "config/webhook/kustomization.yaml",
            "resources:\n- manifests.yaml\n- service.yaml\n",
        ),
        (
            "config/webhook/manifests.yaml",
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: validating-webhook-configuration\nwebhooks:\n- name: vmemcached.kb.io\n  clientConfig:\n    service:\n      name: webhook-service\n      namespace: system\n      path: /validate\n",
        ),
        (
            "config/webhook/service.yaml",
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: webhook-service\n  namespace: system\nspec:\n  ports:\n  - port: 443\n    targetPort: 9443\n",
        ),
        (
            "config/certmanager/kustomization.yaml",
            "resources:\n- issuer.yaml\n- certificate.yaml\n",
        ),
        (
            "config/certmanager/issuer.yaml",
            "apiVersion: cert-manager.io/v1\nkind: Issuer\nmetadata:\n  name: selfsigned-issuer\n  namespace: system\nspec:\n  selfSigned: {}\n",
        ),
        (
            "config/certmanager/certificate.yaml",
            "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata:\n  name: serving-cert\n  namespace: system\nspec:\n  dnsNames:\n  - SERVICE_NAME.SERVICE_NAMESPACE.svc\n  issuerRef:\n    kind: Issuer\n    name: selfsigned-issuer\n  secretName: webhook-server-cert\n",
        ),
        (
            "config/default/manager_webhook_patch.yaml",
            "- op: add\n  path: /spec/template/spec/containers/0/volumeMounts/-\n  value:\n    mountPath: /tmp/k8s-webhook-server/serving-certs\n    name: webhook-certs\n",
        ),
    ];
    for (path, text) in files {
        std::fs::create_dir_all(d.join(path).parent().unwrap()).unwrap();
        std::fs::write(d.join(path), text).unwrap();
    }
    let kustomization = read(d, "config/default/kustomization.yaml");
    std::fs::write(
        d.join("config/default/kustomization.yaml"),
        kustomization.replace(
            "# +rustbuilder:scaffold:webhookpatches\n",
            "- path: manager_webhook_patch.yaml\n  target:\n    kind: Deployment\n# +rustbuilder:scaffold:webhookpatches\n",
        ),
    )
    .unwrap();
    ok(d, HELM);

    let values = read(d, "dist/chart/values.yaml");
    assert!(values.contains("\nwebhook:\n  enable: true\n"), "{values}");
    assert!(
        values.contains("\ncertManager:\n  enable: true\n"),
        "{values}"
    );
    let webhooks = read(d, "dist/chart/templates/webhook/manifests.yaml");
    for line in [
        "{{- if .Values.webhook.enable }}\n",
        "      name: memcached-operator-webhook-service\n      namespace: {{ .Release.Namespace }}\n",
        "  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/memcached-operator-serving-cert\n",
    ] {
        assert!(webhooks.contains(line), "{line:?} in:\n{webhooks}");
    }
    let certificate = read(d, "dist/chart/templates/certmanager/certificate.yaml");
    assert!(
        certificate.contains("{{- if .Values.certManager.enable }}\n"),
        "{certificate}"
    );
    assert!(
        certificate
            .contains("  - memcached-operator-webhook-service.{{ .Release.Namespace }}.svc\n"),
        "{certificate}"
    );
    assert!(
        certificate.contains("    name: memcached-operator-selfsigned-issuer\n"),
        "{certificate}"
    );
    let manager = read(d, "dist/chart/templates/manager/manager.yaml");
    assert!(
        manager.contains(
            "        volumeMounts:\n        - mountPath: /tmp/k8s-webhook-server/serving-certs\n"
        ),
        "{manager}"
    );
}

/// `create webhook` with the flags after `--group <group> --version <version> --kind <kind>`.
fn webhook_args<'a>(
    group: &'a str,
    version: &'a str,
    kind: &'a str,
    flags: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "create",
        "webhook",
        "--group",
        group,
        "--version",
        version,
        "--kind",
        kind,
    ];
    args.extend(flags);
    args
}

fn issuer_crd() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/issuer-crd.yaml")
        .display()
        .to_string()
}

#[test]
fn create_webhook_for_built_in_and_external_kinds_and_at_custom_paths() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // In PROJECT's order (group, version, kind), so that `alpha generate` replays the same steps.
    let init = [
        "init",
        "--domain",
        "example.com",
        "--project-name",
        "memcached-operator",
    ];
    ok(d, &init);
    // Deployment has a controller already (`core: true` in PROJECT); Pod has nothing.
    let deployment_controller = ["create", "api", "--group", "apps", "--version", "v1"];
    ok(
        d,
        &[
            &deployment_controller[..],
            &["--kind", "Deployment", "--resource=false"],
        ]
        .concat(),
    );
    let memcached_api = ["create", "api", "--group", "cache", "--version", "v1alpha1"];
    ok(d, &[&memcached_api[..], &["--kind", "Memcached"]].concat());

    let both = ["--defaulting", "--programmatic-validation"];
    ok(d, &webhook_args("apps", "v1", "Deployment", &both));
    let custom = [
        "--defaulting",
        "--programmatic-validation",
        "--defaulting-path",
        "/custom-mutate-memcached",
        "--validation-path",
        "/custom-validate-memcached",
    ];
    ok(d, &webhook_args("cache", "v1alpha1", "Memcached", &custom));
    let crd = issuer_crd();
    let external = [
        "--defaulting",
        "--external-api-path",
        &crd,
        "--external-api-domain",
        "io",
    ];
    ok(d, &webhook_args("cert-manager", "v1", "Issuer", &external));
    // The external kind is in PROJECT now: another webhook for it needs no flag.
    let validation = ["--programmatic-validation"];
    ok(
        d,
        &webhook_args("cert-manager", "v1", "Issuer", &validation),
    );
    ok(d, &webhook_args("core", "v1", "Pod", &validation));

    // Built-in kinds: the k8s-openapi type, the API server's group (empty for core) and Kubebuilder's
    // routes.
    let deployment = read(d, "src/webhook/v1/deployment.rs");
    for expected in [
        "use k8s_openapi::api::apps::v1::Deployment;",
        "// +rustbuilder:webhook:path=/mutate-apps-v1-deployment,mutating=true,failurePolicy=fail,sideEffects=None,groups=apps,resources=deployments,verbs=create;update,versions=v1,name=mdeployment-v1.kb.io,",
        "path=/validate-apps-v1-deployment,mutating=false",
        "use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;",
    ] {
        assert!(
            deployment.contains(expected),
            "{expected:?} missing:\n{deployment}"
        );
    }
    assert!(!deployment.contains("crate::api"), "{deployment}");
    let pod = read(d, "src/webhook/v1/pod.rs");
    assert!(
        pod.contains("path=/validate--v1-pod,mutating=false,failurePolicy=fail,sideEffects=None,groups=\"\",resources=pods,"),
        "{pod}"
    );
    let pod_test = read(d, "tests/webhooks/pod_v1.rs");
    assert!(pod_test.contains("\"containers\": [{"), "{pod_test}");
    assert!(!pod_test.contains("CustomResourceExt"), "{pod_test}");
    // Another operator's kind: its types in src/external/, its CRD installed by the test.
    let issuer = read(d, "src/webhook/v1/issuer.rs");
    assert!(
        issuer.contains("use crate::external::cert_manager::v1::Issuer;"),
        "{issuer}"
    );
    assert!(
        issuer.contains("groups=cert-manager.io,resources=issuers,"),
        "{issuer}"
    );
    assert!(
        issuer.contains("path=/mutate-cert-manager-io-v1-issuer,"),
        "{issuer}"
    );
    assert!(read(d, "src/external/cert_manager/v1/issuer.rs").contains("pub struct IssuerSpec"));
    assert!(
        d.join("config/crd/external/cert-manager.io_issuers.yaml")
            .exists()
    );
    let issuer_test = read(d, "tests/webhooks/issuer_v1.rs");
    assert!(
        issuer_test
            .contains(".crd_dir(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/config/crd/external\"))"),
        "{issuer_test}"
    );
    // The e2e journey is for the project's own kinds, whose samples it creates.
    let e2e = read(d, "tests/e2e/main.rs");
    assert!(e2e.contains("mod memcached_v1alpha1_webhook;"), "{e2e}");
    for kind in ["deployment", "pod", "issuer"] {
        assert!(!d.join(format!("tests/e2e/{kind}_v1_webhook.rs")).exists());
        assert!(!e2e.contains(&format!("mod {kind}_v1_webhook;")), "{e2e}");
    }
    // Custom paths: in the markers, and where the manager and the test serve the webhooks.
    let memcached = read(d, "src/webhook/v1alpha1/memcached.rs");
    assert!(
        memcached.contains("webhook:path=/custom-mutate-memcached,mutating=true"),
        "{memcached}"
    );
    assert!(
        memcached.contains("webhook:path=/custom-validate-memcached,mutating=false"),
        "{memcached}"
    );
    let main = read(d, "src/main.rs");
    let main_flat: String = main.split_whitespace().collect();
    for expected in [
        "manager.webhooks().defaulter(webhook::v1::deployment::DeploymentWebhook);",
        "manager.webhooks().validator(webhook::v1::pod::PodWebhook);",
        "manager.webhooks().defaulter(webhook::v1::issuer::IssuerWebhook);",
        "manager.webhooks().defaulter_at(\"/custom-mutate-memcached\",webhook::v1alpha1::memcached::MemcachedWebhook,);",
        "manager.webhooks().validator_at(\"/custom-validate-memcached\",webhook::v1alpha1::memcached::MemcachedWebhook,);",
    ] {
        let expected: String = expected.split_whitespace().collect();
        assert!(
            main_flat.contains(&expected),
            "{expected:?} missing:\n{main}"
        );
    }
    let memcached_test = read(d, "tests/webhooks/memcached_v1alpha1.rs");
    assert!(
        memcached_test
            .contains("webhooks.defaulter_at(\"/custom-mutate-memcached\", MemcachedWebhook);"),
        "{memcached_test}"
    );

    // PROJECT records them as Kubebuilder does, with the Rust type (or the CRD copy) as the path.
    let project = read(d, "PROJECT");
    for entry in [
        "- controller: true\n  core: true\n  group: apps\n  kind: Deployment\n  path: k8s_openapi::api::apps::v1::Deployment\n  version: v1\n  webhooks:\n    defaulting: true\n    validation: true\n    webhookVersion: v1\n",
        "- core: true\n  group: core\n  kind: Pod\n  path: k8s_openapi::api::core::v1::Pod\n  version: v1\n  webhooks:\n    validation: true\n    webhookVersion: v1\n",
        "- domain: io\n  external: true\n  group: cert-manager\n  kind: Issuer\n  path: config/crd/external/cert-manager.io_issuers.yaml\n  version: v1\n  webhooks:\n    defaulting: true\n    validation: true\n    webhookVersion: v1\n",
        "  webhooks:\n    defaulting: true\n    defaultingPath: /custom-mutate-memcached\n    validation: true\n    validationPath: /custom-validate-memcached\n    webhookVersion: v1\n",
    ] {
        assert!(project.contains(entry), "{entry:?} missing:\n{project}");
    }

    // `--force` at another path moves the registration: one line per webhook.
    ok(
        d,
        &webhook_args(
            "core",
            "v1",
            "Pod",
            &[
                "--programmatic-validation",
                "--validation-path",
                "/check-pods",
                "--force",
            ],
        ),
    );
    let main = read(d, "src/main.rs");
    assert!(
        main.contains("validator_at(\"/check-pods\", webhook::v1::pod::PodWebhook)"),
        "{main}"
    );
    assert!(
        !main.contains("validator(webhook::v1::pod::PodWebhook)"),
        "{main}"
    );
    assert!(read(d, "src/webhook/v1/pod.rs").contains("webhook:path=/check-pods,"));

    // `alpha generate` replays it all from PROJECT (and the CRD copy).
    let (_out, again) = regenerated(d);
    assert!(
        sources(&again) == sources(d),
        "alpha generate made another project"
    );
}

#[test]
fn create_webhook_refuses_bad_paths_and_kinds_and_changes_nothing() {
    let dir = memcached_project();
    let d = dir.path();
    let memcached = |flags: &[&'static str]| webhook_args("cache", "v1alpha1", "Memcached", flags);
    for (path, why) in [
        ("custom-mutate", "starts with `/`"),
        ("/custom mutate", "whitespace"),
        ("/custom?x=1", "query"),
        ("/custom#top", "fragment"),
        ("/a/../b", "`..`"),
        ("", "it is empty"),
    ] {
        let mut args = memcached(&["--defaulting", "--defaulting-path"]);
        args.push(path);
        refused(d, &args, &["invalid webhook path", why, "help:"]);
    }
    refused(
        d,
        &memcached(&[
            "--programmatic-validation",
            "--defaulting-path",
            "/custom-mutate",
        ]),
        &["`--defaulting` is not given", "help: add `--defaulting`"],
    );
    refused(
        d,
        &memcached(&["--defaulting", "--validation-path", "/custom-validate"]),
        &["`--programmatic-validation` is not given", "help:"],
    );
    refused(
        d,
        &memcached(&[
            "--defaulting",
            "--programmatic-validation",
            "--defaulting-path",
            "/same",
            "--validation-path",
            "/same",
        ]),
        &["are both `/same`", "each webhook needs its own", "help:"],
    );
    ok(
        d,
        &webhook_args("apps", "v1", "Deployment", &["--defaulting"]),
    );
    refused(
        d,
        &memcached(&[
            "--defaulting",
            "--defaulting-path",
            "/mutate-apps-v1-deployment",
        ]),
        &[
            "`/mutate-apps-v1-deployment` is already the route of a webhook of `apps/v1, Kind=Deployment`",
            "help: choose another path with `--defaulting-path`",
        ],
    );
    // Kinds that are neither the project's, nor built-in, nor given by their CRD.
    refused(
        d,
        &webhook_args("apps", "v1beta1", "Deployment", &["--defaulting"]),
        &[
            "not a Kubernetes built-in kind",
            "help: the built-in `apps` `Deployment` is at `--version v1`",
        ],
    );
    refused(
        d,
        &webhook_args("cache", "v1alpha1", "Redis", &["--defaulting"]),
        &[
            "no API for `cache.example.com/v1alpha1, Kind=Redis`",
            "`--external-api-path <CRD file>`",
        ],
    );
    refused(
        d,
        &webhook_args(
            "apps",
            "v1",
            "Deployment",
            &["--conversion", "--spoke", "v1beta1"],
        ),
        &["is not an API of this project", "help: drop `--conversion`"],
    );
    let crd = issuer_crd();
    refused(
        d,
        &webhook_args(
            "cert-manager",
            "v1",
            "Issuer",
            &["--defaulting", "--external-api-path", "missing.yaml"],
        ),
        &["cannot read the CRD file `missing.yaml`"],
    );
    refused(
        d,
        &webhook_args(
            "apps",
            "v1",
            "Deployment",
            &["--programmatic-validation", "--external-api-path", &crd],
        ),
        &["is a Kubernetes built-in kind"],
    );
    ok(
        d,
        &webhook_args(
            "cert-manager",
            "v1",
            "Issuer",
            &["--defaulting", "--external-api-path", &crd],
        ),
    );
    refused(
        d,
        &webhook_args(
            "cert-manager",
            "v1",
            "Issuer",
            &["--programmatic-validation", "--external-api-path", &crd],
        ),
        &[
            "is in PROJECT already as another operator's kind",
            "help: drop `--external-api-path`",
        ],
    );
}

#[test]
fn webhook_tests_are_named_after_the_group_in_a_multigroup_project() {
    let dir = multigroup_project();
    let d = dir.path();
    // In PROJECT's order, as `alpha generate` replays them.
    let validation = ["--programmatic-validation"];
    ok(d, &webhook_args("apps", "v1", "Deployment", &validation));
    ok(
        d,
        &webhook_args("ship", "v1beta1", "Frigate", &["--defaulting"]),
    );
    for path in [
        "src/webhook/ship/v1beta1/frigate.rs",
        "tests/webhooks/ship_frigate_v1beta1.rs",
        "tests/e2e/ship_frigate_v1beta1_webhook.rs",
        "src/webhook/apps/v1/deployment.rs",
        "tests/webhooks/apps_deployment_v1.rs",
    ] {
        assert!(d.join(path).exists(), "{path} missing");
    }
    assert!(read(d, "tests/e2e/main.rs").contains("mod ship_frigate_v1beta1_webhook;"));
    let webhook_tests = read(d, "tests/webhooks/main.rs");
    for module in ["mod apps_deployment_v1;", "mod ship_frigate_v1beta1;"] {
        assert!(webhook_tests.contains(module), "{module}:\n{webhook_tests}");
    }
    let (_out, again) = regenerated(d);
    assert!(
        sources(&again) == sources(d),
        "alpha generate made another project"
    );
}

/// A project with a defaulting and validating webhook and its manifests (faked: no build), for the
/// Helm chart built from an install manifest.
fn helm_webhook_project() -> tempfile::TempDir {
    let dir = memcached_project();
    let d = dir.path();
    ok(
        d,
        &[
            "create",
            "webhook",
            "--group",
            "cache",
            "--version",
            "v1alpha1",
            "--kind",
            "Memcached",
            "--defaulting",
            "--programmatic-validation",
        ],
    );
    fake_manifests(d, "ClusterRole");
    std::fs::write(
        d.join("config/webhook/manifests.yaml"),
        "---\napiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: mutating-webhook-configuration\nwebhooks:\n- admissionReviewVersions:\n  - v1\n  clientConfig:\n    service:\n      name: webhook-service\n      namespace: system\n      path: /mutate-cache-example-com-v1alpha1-memcached\n  failurePolicy: Fail\n  name: mmemcached-v1alpha1.kb.io\n  sideEffects: None\n",
    )
    .unwrap();
    dir
}

/// A chart's templates by path, each as its YAML documents with the Helm expressions masked, without
/// the first line (which names the source): two charts that install the same objects compare equal
/// whatever the order of keys.
fn chart_objects(chart: &Path) -> BTreeMap<PathBuf, Vec<serde_yaml::Value>> {
    use serde::Deserialize as _;
    tree(chart)
        .into_iter()
        .filter(|(path, bytes)| path.starts_with("templates") && bytes != b"<dir>")
        .filter(|(path, _)| path.extension().is_some_and(|e| e == "yaml"))
        .map(|(path, bytes)| {
            let text = String::from_utf8(bytes).unwrap();
            let masked: String = text
                .lines()
                .skip(1)
                .map(|line| {
                    let trimmed = line.trim_start();
                    if trimmed.starts_with("{{-") {
                        // A directive line (`{{- if ... }}`, `{{- toYaml ... }}`): a comment.
                        format!("{}# {trimmed}\n", &line[..line.len() - trimmed.len()])
                    } else {
                        let mut out = String::new();
                        let mut rest = line;
                        while let Some(start) = rest.find("{{") {
                            out.push_str(&rest[..start]);
                            out.push_str("EXPR");
                            let end = rest[start..].find("}}").unwrap() + start + 2;
                            rest = &rest[end..];
                        }
                        format!("{out}{rest}\n")
                    }
                })
                .collect();
            let docs = serde_yaml::Deserializer::from_str(&masked)
                .map(|doc| serde_yaml::Value::deserialize(doc).unwrap())
                .collect();
            (path, docs)
        })
        .collect()
}

/// The install manifest of [`helm_webhook_project`], as `kubectl kustomize config/default` renders it
/// (`make build-installer`). When the scaffold's config/ changes, rewrite it with
/// `RUSTBUILDER_BLESS=1 KUBEBUILDER_ASSETS=<envtest dir> cargo test --test cli helm_from_an_install_manifest`.
const INSTALL_FIXTURE: &str = "tests/fixtures/helm/install.yaml";

#[test]
fn edit_plugins_helm_from_an_install_manifest_is_the_chart_from_config() {
    let dir = helm_webhook_project();
    let d = dir.path();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join(INSTALL_FIXTURE);
    if std::env::var_os("RUSTBUILDER_BLESS").is_some() {
        let assets = std::env::var("KUBEBUILDER_ASSETS").expect("KUBEBUILDER_ASSETS names kubectl");
        let rendered = Command::new(Path::new(&assets).join("kubectl"))
            .args(["kustomize", "config/default"])
            .current_dir(d)
            .output()
            .unwrap();
        assert!(rendered.status.success(), "{}", stderr(&rendered));
        std::fs::create_dir_all(fixture.parent().unwrap()).unwrap();
        std::fs::write(&fixture, &rendered.stdout).unwrap();
    }
    ok(d, HELM);
    let from_config = chart_objects(&d.join("dist/chart"));
    assert!(from_config.contains_key(Path::new("templates/webhook/manifests.yaml")));
    std::fs::remove_dir_all(d.join("dist/chart")).unwrap();

    std::fs::copy(&fixture, d.join("dist/install.yaml")).unwrap();
    let output = ok(
        d,
        &[
            "edit",
            "--plugins",
            "helm.kubebuilder.io/v2-alpha",
            "--manifests",
            "dist/install.yaml",
        ],
    );
    assert!(
        stderr(&output).contains("the Helm chart in dist/chart from dist/install.yaml"),
        "{}",
        stderr(&output)
    );
    let from_manifests = chart_objects(&d.join("dist/chart"));
    // The same objects in the same files; the network policy and the ServiceMonitor, which
    // config/default leaves out, are not in the install manifest, so not in its chart.
    let expected: BTreeMap<_, _> = from_config
        .into_iter()
        .filter(|(path, _)| {
            !path.starts_with("templates/network-policy")
                && !path.starts_with("templates/prometheus")
        })
        .collect();
    assert_eq!(from_manifests, expected);
    let manager = read(d, "dist/chart/templates/manager/manager.yaml");
    assert!(
        manager.starts_with(
            "{{/* Generated by `rustbuilder edit --plugins helm/v2-alpha` from dist/install.yaml: "
        ),
        "{manager}"
    );
    let values = read(d, "dist/chart/values.yaml");
    assert!(!values.contains("networkPolicy:"), "{values}");
    assert!(
        values.contains("\ncertManager:\n  enable: true\n"),
        "{values}"
    );
    let project = read(d, "PROJECT");
    assert!(
        project.contains("  helm.rustbuilder.dev/v2-alpha:\n    manifests: dist/install.yaml\n"),
        "{project}"
    );

    // Run again, the manifests come from PROJECT; `--manifests ""` goes back to config/.
    let first = tree(d);
    ok(d, HELM);
    assert_eq!(tree(d), first);
    ok(
        d,
        &["edit", "--plugins", "helm/v2-alpha", "--manifests", ""],
    );
    assert!(read(d, "PROJECT").contains("  helm.rustbuilder.dev/v2-alpha: {}\n"));
    assert!(d.join("dist/chart/templates/network-policy").is_dir());
}

#[test]
fn edit_plugins_helm_output_dir_moves_the_chart_and_is_replayed() {
    let dir = memcached_project();
    let d = dir.path();
    fake_manifests(d, "ClusterRole");
    ok(
        d,
        &[
            "edit",
            "--plugins",
            "helm/v2-alpha",
            "--output-dir",
            "deploy/helm",
        ],
    );
    assert!(d.join("deploy/helm/chart/Chart.yaml").is_file());
    assert!(!d.join("dist").exists());
    let project = read(d, "PROJECT");
    assert!(
        project.contains("  helm.rustbuilder.dev/v2-alpha:\n    output: deploy/helm\n"),
        "{project}"
    );
    // Again without the flag: PROJECT says where.
    let first = tree(d);
    ok(d, HELM);
    assert_eq!(tree(d), first);
    // alpha generate carries the chart from there.
    let (_out, target) = regenerated(d);
    assert_eq!(read(&target, "PROJECT"), project);
    assert_eq!(
        read(&target, "deploy/helm/chart/values.yaml"),
        read(d, "deploy/helm/chart/values.yaml")
    );

    // Under dist/, which the project ignores, git is told to keep the chart.
    ok(
        d,
        &[
            "edit",
            "--plugins",
            "helm/v2-alpha",
            "--output-dir",
            "dist/helm",
        ],
    );
    let gitignore = read(d, ".gitignore");
    assert!(
        gitignore.contains("/dist/*\n")
            && gitignore.contains("!/dist/helm/\n/dist/helm/*\n!/dist/helm/chart/\n"),
        "{gitignore}"
    );
}

#[test]
fn edit_plugins_helm_refuses_bad_manifests_and_output_dirs() {
    let dir = memcached_project();
    let d = dir.path();
    fake_manifests(d, "ClusterRole");
    let helm = |extra: &[&'static str]| -> Vec<&'static str> { [HELM, extra].concat() };
    refused(
        d,
        &helm(&["--manifests", "dist/install.yaml"]),
        &[
            "the manifests file `dist/install.yaml` does not exist",
            "make build-installer",
        ],
    );
    std::fs::write(d.join("notes.yaml"), "title: not a manifest\n").unwrap();
    refused(
        d,
        &helm(&["--manifests", "notes.yaml"]),
        &["`notes.yaml` is not a Kubernetes manifest", "help:"],
    );
    std::fs::write(d.join("broken.yaml"), "kind: [unclosed\n").unwrap();
    refused(
        d,
        &helm(&["--manifests", "broken.yaml"]),
        &["`broken.yaml` is not a YAML file", "help:"],
    );
    std::fs::write(
        d.join("rbac.yaml"),
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: x\n",
    )
    .unwrap();
    refused(
        d,
        &helm(&["--manifests", "rbac.yaml"]),
        &["holds no Deployment of a manager"],
    );
    std::fs::write(d.join("deploy"), "a file\n").unwrap();
    refused(
        d,
        &helm(&["--output-dir", "deploy"]),
        &[
            "`deploy` is a file, where the chart's directory goes",
            "--output-dir",
        ],
    );
    refused(
        d,
        &helm(&["--output-dir", "../elsewhere"]),
        &["is not a directory inside the project"],
    );
    refused(
        d,
        &["edit", "--plugins", "grafana/v1-alpha", "--output-dir", "x"],
        &["`--output-dir` belongs to `--plugins helm/v2-alpha`"],
    );
    refused(
        d,
        &["edit", "--manifests", "dist/install.yaml"],
        &["`--manifests` belongs to `--plugins helm/v2-alpha`"],
    );
}

#[test]
fn edit_plugins_grafana_writes_dashboards_and_a_custom_metrics_dashboard_from_the_config() {
    let dir = memcached_project();
    let d = dir.path();
    ok(d, &["edit", "--plugins", "grafana/v1-alpha"]);
    assert!(read(d, "PROJECT").contains("  grafana.rustbuilder.dev/v1-alpha: {}\n"));
    for dashboard in [
        "grafana/controller-runtime-metrics.json",
        "grafana/controller-resources-metrics.json",
    ] {
        let json: serde_json::Value = serde_json::from_str(&read(d, dashboard)).unwrap();
        assert!(
            !json["panels"].as_array().unwrap().is_empty(),
            "{dashboard}"
        );
    }
    let config = read(d, "grafana/custom-metrics/config.yaml");
    assert!(config.contains("customMetrics: []\n"), "{config}");
    assert!(
        !d.join("grafana/custom-metrics/custom-metrics-dashboard.json")
            .exists()
    );

    // Kubebuilder's key works too, and the user's list becomes a dashboard; the list is kept.
    let mine = config.replace(
        "customMetrics: []\n",
        "customMetrics:\n  - metric: memcached_cache_misses_total\n    type: counter\n    unit: ops\n",
    );
    std::fs::write(d.join("grafana/custom-metrics/config.yaml"), &mine).unwrap();
    ok(d, &["edit", "--plugins", "grafana.kubebuilder.io/v1-alpha"]);
    assert_eq!(read(d, "grafana/custom-metrics/config.yaml"), mine);
    let custom: serde_json::Value = serde_json::from_str(&read(
        d,
        "grafana/custom-metrics/custom-metrics-dashboard.json",
    ))
    .unwrap();
    assert_eq!(
        custom["panels"][0]["targets"][0]["expr"],
        r#"sum by (pod) (rate(memcached_cache_misses_total{job="$job", namespace="$namespace"}[$__rate_interval]))"#
    );
    let first = tree(d);
    ok(d, &["edit", "--plugins", "grafana/v1-alpha"]);
    assert_eq!(tree(d), first);

    // alpha generate replays the plugin with the user's list.
    let (_out, target) = regenerated(d);
    for file in [
        "PROJECT",
        "grafana/custom-metrics/config.yaml",
        "grafana/custom-metrics/custom-metrics-dashboard.json",
        "grafana/controller-runtime-metrics.json",
    ] {
        assert_eq!(read(&target, file), read(d, file), "{file}");
    }

    // A list it cannot read: nothing written, the line to fix named.
    std::fs::write(
        d.join("grafana/custom-metrics/config.yaml"),
        "customMetrics:\n  - metric: memcached_cache_misses_total\n    type: summary\n",
    )
    .unwrap();
    refused(
        d,
        &["edit", "--plugins", "grafana/v1-alpha"],
        &[
            "has the type `summary`",
            "`counter`, `gauge` or `histogram`",
        ],
    );
}

#[test]
fn edit_plugins_autoupdate_writes_a_workflow_that_runs_alpha_update() {
    let dir = memcached_project();
    let d = dir.path();
    ok(
        d,
        &["edit", "--plugins", "autoupdate.kubebuilder.io/v1-alpha"],
    );
    assert!(read(d, "PROJECT").contains("  autoupdate.rustbuilder.dev/v1-alpha: {}\n"));
    let text = read(d, ".github/workflows/auto_update.yml");
    let workflow: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(workflow["name"], "Auto Update");
    let on = &workflow["on"];
    assert!(on.get("workflow_dispatch").is_some(), "{text}");
    assert!(on["schedule"][0]["cron"].is_string(), "{text}");
    for permission in ["contents", "pull-requests", "issues"] {
        assert_eq!(workflow["permissions"][permission], "write", "{permission}");
    }
    let steps = workflow["jobs"]["auto-update"]["steps"]
        .as_sequence()
        .unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "Clone the code",
            "Set up Rust",
            "Configure Git",
            "Compare the versions",
            "Cache the project's rustbuilder",
            "Install rustbuilder",
            "Run rustbuilder alpha update",
            "Refresh the manifests",
            "Open a pull request or an issue",
        ]
    );
    let run = |name: &str| {
        steps.iter().find(|s| s["name"] == name).unwrap()["run"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(run("Compare the versions").contains("cliVersion"));
    let install = run("Install rustbuilder");
    assert!(
        install.contains("cargo install rustbuilder --version \"$TO\" --locked"),
        "{install}"
    );
    assert!(
        install.contains("--root \"$old\"")
            && install.contains(".cache/rustbuilder/releases/$FROM"),
        "{install}"
    );
    assert!(run("Run rustbuilder alpha update").contains("rustbuilder alpha update"));
    let open = run("Open a pull request or an issue");
    assert!(
        open.contains("gh pr create") && open.contains("gh issue create"),
        "{open}"
    );

    // The workflow is the user's: kept on a second run; alpha generate writes it again.
    std::fs::write(
        d.join(".github/workflows/auto_update.yml"),
        format!("{text}# mine\n"),
    )
    .unwrap();
    ok(d, &["edit", "--plugins", "autoupdate/v1-alpha"]);
    assert!(read(d, ".github/workflows/auto_update.yml").ends_with("# mine\n"));
    let (_out, target) = regenerated(d);
    assert_eq!(read(&target, ".github/workflows/auto_update.yml"), text);
    assert_eq!(read(&target, "PROJECT"), read(d, "PROJECT"));
}

#[test]
fn edit_use_gh_models_adds_a_github_models_summary_to_the_auto_update_workflow() {
    let dir = memcached_project();
    let d = dir.path();
    ok(
        d,
        &[
            "edit",
            "--plugins",
            "autoupdate/v1-alpha",
            "--use-gh-models",
        ],
    );
    assert!(
        read(d, "PROJECT")
            .contains("  autoupdate.rustbuilder.dev/v1-alpha:\n    useGhModels: true\n")
    );
    let text = read(d, ".github/workflows/auto_update.yml");
    let workflow: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(workflow["permissions"]["models"], "read", "{text}");
    let steps = workflow["jobs"]["auto-update"]["steps"]
        .as_sequence()
        .unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names[names.len() - 2..],
        [
            "Open a pull request or an issue",
            "Summarize the update with GitHub Models"
        ]
    );
    let (open, summary) = (&steps[steps.len() - 2], &steps[steps.len() - 1]);
    assert_eq!(open["id"], "open");
    assert!(
        open["run"]
            .as_str()
            .unwrap()
            .contains("echo \"url=$url\" >> \"$GITHUB_OUTPUT\""),
        "{text}"
    );
    assert_eq!(summary["if"], "steps.open.outputs.url != ''");
    assert_eq!(summary["continue-on-error"], true);
    assert_eq!(summary["env"]["URL"], "${{ steps.open.outputs.url }}");
    let run = summary["run"].as_str().unwrap();
    for part in [
        "gh extension install github/gh-models",
        "| gh models run openai/gpt-4o-mini",
        "gh pr comment \"$URL\" --body-file",
        "gh issue comment \"$URL\" --body-file",
    ] {
        assert!(run.contains(part), "{part:?} in:\n{run}");
    }

    // Recorded: alpha generate writes the same workflow again.
    let (_out, target) = regenerated(d);
    assert_eq!(read(&target, ".github/workflows/auto_update.yml"), text);

    // `--use-gh-models=false` records it off; the workflow, the user's, is kept and the note says so.
    let output = ok(
        d,
        &[
            "edit",
            "--plugins",
            "autoupdate/v1-alpha",
            "--use-gh-models=false",
        ],
    );
    assert!(read(d, "PROJECT").contains("  autoupdate.rustbuilder.dev/v1-alpha: {}\n"));
    assert_eq!(read(d, ".github/workflows/auto_update.yml"), text);
    assert!(
        stderr(&output).contains(
            "remove it and run this again for the workflow without the GitHub Models summary"
        ),
        "{}",
        stderr(&output)
    );
    std::fs::remove_file(d.join(".github/workflows/auto_update.yml")).unwrap();
    ok(d, &["edit", "--plugins", "autoupdate/v1-alpha"]);
    let plain = read(d, ".github/workflows/auto_update.yml");
    assert!(
        !plain.contains("models") && !plain.contains("Summarize"),
        "{plain}"
    );

    refused(
        d,
        &["edit", "--plugins", "helm/v2-alpha", "--use-gh-models"],
        &["`--use-gh-models` belongs to `--plugins autoupdate/v1-alpha`"],
    );

    // Kubebuilder's `--delete`: the workflow goes, and the plugin from PROJECT; then nothing to do.
    refused(
        d,
        &["edit", "--plugins", "grafana/v1-alpha", "--delete"],
        &["`--delete` removes the auto-update workflow, alone"],
    );
    let output = ok(
        d,
        &[
            "edit",
            "--plugins",
            "autoupdate.kubebuilder.io/v1-alpha",
            "--delete",
        ],
    );
    assert!(
        stderr(&output).contains("Removing .github/workflows/auto_update.yml"),
        "{}",
        stderr(&output)
    );
    assert!(!d.join(".github/workflows/auto_update.yml").exists());
    assert!(!read(d, "PROJECT").contains("autoupdate"));
    let again = ok(d, &["edit", "--plugins", "autoupdate/v1-alpha", "--delete"]);
    assert!(stderr(&again).contains("the project has no auto-update workflow"));
}

#[test]
fn edit_force_takes_true_and_false() {
    let dir = memcached_project();
    let d = dir.path();
    fake_manifests(d, "ClusterRole");
    ok(d, HELM);
    let values = read(d, "dist/chart/values.yaml");
    let mine = values.replace("  replicas: 1\n", "  replicas: 3\n");
    std::fs::write(d.join("dist/chart/values.yaml"), &mine).unwrap();
    ok(d, &["edit", "--plugins", "helm/v2-alpha", "--force=false"]);
    assert_eq!(read(d, "dist/chart/values.yaml"), mine);
    ok(d, &["edit", "--plugins", "helm/v2-alpha", "--force=true"]);
    assert_eq!(read(d, "dist/chart/values.yaml"), values);
    // `--force=false` asks for nothing, so it needs no plugin.
    refused(
        d,
        &["edit", "--force=true", "--multigroup"],
        &["`--force` belongs to `--plugins helm/v2-alpha`"],
    );
    ok(d, &["edit", "--force=false", "--multigroup=false"]);
}

#[test]
fn a_custom_path_sticks_and_force_moves_its_registration() {
    let dir = memcached_project();
    let d = dir.path();
    let custom = [
        "--defaulting",
        "--defaulting-path",
        "/custom-mutate-memcached",
    ];
    ok(d, &webhook_args("cache", "v1alpha1", "Memcached", &custom));
    let moved = [
        "--defaulting",
        "--defaulting-path",
        "/other-mutate",
        "--force",
    ];
    ok(d, &webhook_args("cache", "v1alpha1", "Memcached", &moved));
    // Scaffolded again without a path: the recorded one stays.
    let again = ["--defaulting", "--force"];
    ok(d, &webhook_args("cache", "v1alpha1", "Memcached", &again));
    // rustfmt wraps the long registration; each run replaced it, whatever its shape.
    let main: String = read(d, "src/main.rs").split_whitespace().collect();
    assert_eq!(main.matches(".defaulter").count(), 1, "{main}");
    assert!(
        main.contains(
            ".defaulter_at(\"/other-mutate\",webhook::v1alpha1::memcached::MemcachedWebhook"
        ),
        "{main}"
    );
    let file = read(d, "src/webhook/v1alpha1/memcached.rs");
    assert!(
        file.contains("webhook:path=/other-mutate,mutating=true"),
        "{file}"
    );
    assert!(read(d, "PROJECT").contains("    defaultingPath: /other-mutate\n"));
}

/// Kubebuilder's commands as its users' scripts write them (plugin keys short and long, chains,
/// `--flag=true|false`, the Go toolchain's flags) run unchanged with `rustbuilder` in its place.
#[test]
fn kubebuilder_commands_run_as_they_are() {
    let dir = tempfile::Builder::new().prefix("crew").tempdir().unwrap();
    let dir = dir.path();
    let init = [
        "init",
        "--plugins",
        "go/v4",
        "--domain",
        "testproject.org",
        "--license",
        "apache2",
        "--owner",
        "The Kubernetes authors",
        "--project-name",
        "crew",
        "--project-version",
        "3",
        "--fetch-deps=false",
        "--skip-go-version-check",
        "--multigroup=false",
    ];
    ok(dir, &init);
    let captain = [
        "create",
        "api",
        "--group",
        "crew",
        "--version",
        "v1",
        "--kind",
        "Captain",
        "--controller=true",
        "--resource=true",
        "--make=false",
        "--ssa",
    ];
    ok(dir, &captain);
    let webhook = [
        "create",
        "webhook",
        "--group",
        "crew",
        "--version",
        "v1",
        "--kind",
        "Captain",
        "--defaulting",
        "--programmatic-validation=true",
        "--conversion=false",
        "--plural",
        "captains",
        "--plugins",
        "go.kubebuilder.io/v4",
    ];
    ok(dir, &webhook);
    let busybox = [
        "create",
        "api",
        "--group",
        "crew",
        "--version",
        "v1alpha1",
        "--kind",
        "Busybox",
        "--plugins",
        "go/v4,deploy-image.go.kubebuilder.io/v1-alpha",
        "--image",
        "busybox:1.37.0",
        "--make=false",
    ];
    ok(dir, &busybox);
    ok(
        dir,
        &["edit", "--plugins", "grafana.kubebuilder.io/v1-alpha"],
    );
    assert!(dir.join("src/controller/busybox.rs").is_file());
    assert!(dir.join("grafana").is_dir());
    let project = read(dir, "PROJECT");
    assert!(project.contains("kind: Captain") && project.contains("defaulting: true"));

    // A plugin on init runs on the new project.
    let other = tempfile::Builder::new().prefix("fleet").tempdir().unwrap();
    let chain = "go/v4,autoupdate.kubebuilder.io/v1-alpha";
    ok(
        other.path(),
        &[
            "init",
            "--plugins",
            chain,
            "--domain",
            "example.com",
            "--use-gh-models",
        ],
    );
    let workflow = read(other.path(), ".github/workflows/auto_update.yml");
    assert!(workflow.contains("models: read"), "{workflow}");

    // What cannot mean anything here is refused by name, with the fix.
    refused(
        dir,
        &[
            "create",
            "webhook",
            "--group",
            "crew",
            "--version",
            "v1",
            "--kind",
            "Captain",
            "--defaulting",
            "--force",
            "--plural",
            "captainz",
        ],
        &["`--plural captainz` is not the plural of Captain, which is `captains`"],
    );
    let empty = tempfile::Builder::new().prefix("empty").tempdir().unwrap();
    refused(
        empty.path(),
        &["init", "--plugins", "go/v3", "--domain", "example.com"],
        &["`go/v3` is an older Kubebuilder layout", "--plugins go/v4"],
    );
    refused(
        empty.path(),
        &["init", "--project-version", "2"],
        &["unsupported `--project-version 2`"],
    );
    refused(
        empty.path(),
        &["init", "--plugins", "go/v4", "--use-gh-models"],
        &["`--use-gh-models` belongs to the autoupdate plugin"],
    );
    refused(
        empty.path(),
        &["init", "--plugins", "deploy-image/v1-alpha"],
        &[
            "does not run on `init`",
            "rustbuilder create api --plugins deploy-image/v1-alpha",
        ],
    );
}

/// Kubebuilder's licence flags: `--license apache2|copyright|none`, `--license-file` (a Go
/// boilerplate's `/* ... */` block works as it is), a header file written before `init`, and `edit
/// --license/--owner/--license-file` for the files written afterwards. Files already written keep
/// their header; `alpha generate` gives every file the current one.
#[test]
fn licence_headers_follow_the_boilerplate() {
    let header = |dir: &Path, path: &str| {
        let text = read(dir, path);
        let end = text.find("//!").unwrap_or(text.len());
        text[..end].to_string()
    };
    let api = [
        "create",
        "api",
        "--group",
        "ship",
        "--version",
        "v1",
        "--kind",
    ];
    let kind = |kind: &'static str| -> Vec<&'static str> {
        api.iter()
            .copied()
            .chain([kind, "--resource", "--controller"])
            .collect()
    };

    let base = tempfile::tempdir().unwrap();
    let file = base.path().join("header.txt");
    let block = "/*\nCopyright 2026 Acme Inc.\n\nLicensed under the MIT License.\n*/\n";
    std::fs::write(&file, block).unwrap();
    let dir = base.path().join("custom");
    std::fs::create_dir(&dir).unwrap();
    let file_arg = file.to_str().unwrap();
    ok(
        &dir,
        &[
            "init",
            "--domain",
            "acme.io",
            "--license-file",
            file_arg,
            "--license",
            "none",
        ],
    );
    assert_eq!(read(&dir, "hack/boilerplate.rs.txt"), block);
    assert_eq!(header(&dir, "src/main.rs"), format!("{block}\n"));
    assert!(
        !read(&dir, "Cargo.toml").contains("license ="),
        "not Apache-2.0 any more"
    );
    assert!(read(&dir, "PROJECT").contains("license: custom"));
    ok(&dir, &kind("Frigate"));
    assert_eq!(header(&dir, "src/api/v1/frigate.rs"), format!("{block}\n"));

    ok(&dir, &["edit", "--license", "copyright", "--owner", "Acme"]);
    assert_eq!(read(&dir, "hack/boilerplate.rs.txt"), "// Copyright Acme\n");
    ok(&dir, &kind("Boat"));
    assert_eq!(header(&dir, "src/api/v1/boat.rs"), "// Copyright Acme\n\n");
    assert_eq!(
        header(&dir, "src/api/v1/frigate.rs"),
        format!("{block}\n"),
        "kept"
    );
    // Plain text becomes `//` lines; the header file edited by hand is what new files get.
    std::fs::write(&file, "Owned by Acme.\n\nAll rights reserved.\n").unwrap();
    ok(&dir, &["edit", "--license-file", file_arg]);
    let plain = "// Owned by Acme.\n//\n// All rights reserved.\n";
    assert_eq!(read(&dir, "hack/boilerplate.rs.txt"), plain);
    std::fs::write(dir.join("hack/boilerplate.rs.txt"), "// By hand\n").unwrap();
    ok(&dir, &["alpha", "generate", "--skip-manifests"]);
    for path in ["src/main.rs", "src/api/v1/frigate.rs", "src/api/v1/boat.rs"] {
        assert_eq!(header(&dir, path), "// By hand\n\n", "{path}");
    }

    // A header written before `init` is the project's.
    let early = base.path().join("early");
    std::fs::create_dir_all(early.join("hack")).unwrap();
    std::fs::write(early.join("hack/boilerplate.rs.txt"), "// MY LICENSE\n").unwrap();
    ok(&early, &["init", "--domain", "acme.io"]);
    assert_eq!(header(&early, "src/main.rs"), "// MY LICENSE\n\n");
    let none = base.path().join("none");
    std::fs::create_dir(&none).unwrap();
    ok(&none, &["init", "--domain", "acme.io", "--license", "none"]);
    assert!(read(&none, "src/main.rs").starts_with("//!"));

    // Refused, changing nothing: a file that is not there, an empty one, an unknown license.
    let missing = base.path().join("missing.txt");
    refused(
        &dir,
        &["edit", "--license-file", missing.to_str().unwrap()],
        &["cannot read the license file"],
    );
    std::fs::write(&file, "\n\n").unwrap();
    refused(&dir, &["edit", "--license-file", file_arg], &["is empty"]);
    refused(
        &dir,
        &["edit", "--license", "mit"],
        &["invalid value 'mit'"],
    );
    refused(
        &dir,
        &["edit", "--license", "none", "--namespaced"],
        &["one edit at a time"],
    );
}
