//! `alpha generate` on a project whose own kinds have CRDs in `config/crd/bases/` (what controller-gen
//! wrote for a Kubebuilder project): the Rust types come from the CRDs, and the CRDs the generated
//! project writes again (`make manifests`, which `alpha generate` runs) must be the same, semantically.
//!
//! One test, because it builds generated projects (their `crdgen`): our fixture
//! (`tests/fixtures/migrate/`, every schema feature the migration handles), and when Kubebuilder's
//! files are there (`KUBEBUILDER_PROJECT_FILES`, `../shared/kubebuilder/` or
//! `/work/shared/kubebuilder/`), the CRDs of Kubebuilder's CronJob tutorials. What kube-rs and schemars cannot express is in [`GAPS`]; each case lists the gaps it
//! shows, and the test checks the list is exact.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

mod common;
use common::{vendored_runtime_times, with_shared_build_dir};

/// A known difference between a CRD controller-gen wrote and the one kube's derive writes from the
/// generated types.
struct Gap {
    id: &'static str,
    why: &'static str,
    matches: fn(&Difference) -> bool,
}

const GAPS: &[Gap] = &[
    Gap {
        id: "nullable",
        why: "kube marks every `Option` field `nullable: true`, and adds `null` to an optional enum's values",
        matches: |d| {
            (d.key() == "nullable" && d.expected.is_none() && d.actual == Some(Value::Bool(true)))
                || (d.key() == "enum"
                    && matches!((&d.expected, &d.actual), (Some(Value::Array(e)), Some(Value::Array(a)))
                        if a.len() == e.len() + 1 && a.starts_with(e) && a.last() == Some(&Value::Null)))
        },
    },
    Gap {
        id: "root-properties",
        why: "kube's root schema leaves out `apiVersion`, `kind` and `metadata`, which the API server checks itself",
        matches: |d| {
            d.expected.is_some()
                && d.actual.is_none()
                && ["apiVersion", "kind", "metadata"]
                    .iter()
                    .any(|p| d.path.ends_with(&format!("openAPIV3Schema.properties.{p}")))
        },
    },
    Gap {
        id: "root-title",
        why: "kube titles the root schema with the kind",
        matches: |d| d.path.ends_with("openAPIV3Schema.title") && d.expected.is_none(),
    },
    Gap {
        id: "root-spec-required",
        why: "kube's `CustomResource` requires `spec`",
        matches: |d| {
            d.path.ends_with("openAPIV3Schema.required")
                && d.expected.is_none()
                && d.actual == Some(serde_json::json!(["spec"]))
        },
    },
    Gap {
        id: "root-description",
        why: "with no description of the root schema, kube writes one of its own",
        matches: |d| d.path.ends_with("openAPIV3Schema.description") && d.expected.is_none(),
    },
    Gap {
        id: "conversion-in-base",
        why: "the CRD `make manifests` writes has its `spec.conversion` (the webhook, at the service `config/default` deploys); controller-gen leaves it out and Kubebuilder adds it with a kustomize patch, so both deploy the same CRD",
        matches: |d| d.path == ".spec.conversion" && d.expected.is_none(),
    },
    Gap {
        id: "descriptions",
        why: "the tutorial's doc comments are in its own words, not the book's",
        matches: |d| d.key() == "description",
    },
    Gap {
        id: "beyond-the-book",
        why: "the tutorial's CronJob has what the book's lacks: `timeZone`, as Kubernetes' own CronJob has it, and a maximum on `startingDeadlineSeconds`, past which the controller's time arithmetic would overflow",
        matches: |d| {
            d.expected.is_none()
                && (d.path.ends_with("properties.spec.properties.timeZone")
                    || d.path
                        .ends_with("properties.startingDeadlineSeconds.maximum"))
        },
    },
    Gap {
        id: "api-server-defaults",
        why: "three defaults the API server publishes for Kubernetes types and controller-gen does not write: a Pod's `azureDisk` `cachingMode` and `kind` (their Go markers name a constant) and the empty `status` of a Job's `onPodConditions` pattern; a Job made from the template gets the same values from the API server",
        matches: |d| {
            d.key() == "default"
                && d.expected.is_none()
                && [
                    ".azureDisk.properties.cachingMode.default",
                    ".azureDisk.properties.kind.default",
                    ".onPodConditions.items.properties.status.default",
                ]
                .iter()
                .any(|p| d.path.ends_with(p))
        },
    },
    Gap {
        id: "embedded-metadata",
        why: "the `metadata` of an embedded template (a Job's, a Pod's) keeps the fields of `ObjectMeta`, so the API server keeps a template's labels and annotations; controller-gen writes an object with no properties there, whose fields the API server prunes",
        matches: |d| {
            d.key() == "properties"
                && d.expected.is_none()
                && d.path.ends_with(".metadata.properties")
                && d.path.contains(".spec.properties.jobTemplate.")
        },
    },
];

/// One place where the two CRDs differ: `expected` is the input's value, `actual` the generated
/// project's (`None`: absent).
#[derive(Debug)]
struct Difference {
    path: String,
    expected: Option<Value>,
    actual: Option<Value>,
}

impl Difference {
    fn key(&self) -> &str {
        self.path.rsplit('.').next().unwrap_or_default()
    }
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<Value>| match v {
            Some(v) => {
                let text = v.to_string();
                if text.len() > 120 {
                    format!("{}…", &text[..120])
                } else {
                    text
                }
            }
            None => "(absent)".to_string(),
        };
        write!(
            f,
            "  {}\n    input:     {}\n    generated: {}",
            self.path,
            show(&self.expected),
            show(&self.actual)
        )
    }
}

/// A CRD as the comparison sees it: what the API server would serve the same way is made equal.
/// Descriptions lose their wrapping, `nullable: false` (the default) goes, as does the `anyOf` of
/// integer and string that comes with `x-kubernetes-int-or-string`, and `listKind` when it is the
/// API server's default; of the metadata only the name counts.
fn normalise(mut crd: Value) -> Value {
    let name = crd.pointer("/metadata/name").cloned();
    crd["metadata"] = serde_json::json!({ "name": name });
    let kind = crd.pointer("/spec/names/kind").cloned();
    if let (Some(Value::String(kind)), Some(names)) = (kind, crd.pointer_mut("/spec/names"))
        && names.get("listKind") == Some(&Value::String(format!("{kind}List")))
    {
        names.as_object_mut().unwrap().remove("listKind");
    }
    if let Some(versions) = crd
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    {
        versions.sort_by_key(|v| v["name"].as_str().unwrap_or_default().to_string());
        for version in versions {
            if let Some(schema) = version.pointer_mut("/schema/openAPIV3Schema") {
                normalise_schema(schema);
            }
        }
    }
    crd
}

fn normalise_schema(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::String(text)) = object.get_mut("description") {
        *text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    }
    if object.get("nullable") == Some(&Value::Bool(false)) {
        object.remove("nullable");
    }
    if object.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        let any_of = object.get("anyOf");
        let pair = serde_json::json!([{ "type": "integer" }, { "type": "string" }]);
        let emptied = serde_json::json!([{}, {}]);
        if any_of == Some(&pair) || any_of == Some(&emptied) {
            object.remove("anyOf");
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(sub) = object.get_mut(key) {
            normalise_schema(sub);
        }
    }
    for key in ["properties", "patternProperties"] {
        if let Some(Value::Object(map)) = object.get_mut(key) {
            map.values_mut().for_each(normalise_schema);
        }
    }
    for key in ["anyOf", "allOf", "oneOf"] {
        if let Some(Value::Array(items)) = object.get_mut(key) {
            items.iter_mut().for_each(normalise_schema);
        }
    }
}

/// Where `actual` differs from `expected`, numbers compared by value (`500` is `500.0`).
fn differences(expected: &Value, actual: &Value, path: &str, out: &mut Vec<Difference>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            let keys: BTreeSet<&String> = e.keys().chain(a.keys()).collect();
            for key in keys {
                let at = format!("{path}.{key}");
                match (e.get(key), a.get(key)) {
                    (Some(e), Some(a)) => differences(e, a, &at, out),
                    (e, a) => out.push(Difference {
                        path: at,
                        expected: e.cloned(),
                        actual: a.cloned(),
                    }),
                }
            }
        }
        (Value::Array(e), Value::Array(a)) if e.len() == a.len() => {
            for (i, (e, a)) in e.iter().zip(a).enumerate() {
                differences(e, a, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(e), Value::Number(a)) if e.as_f64() == a.as_f64() => {}
        (e, a) if e == a => {}
        (e, a) => out.push(Difference {
            path: path.to_string(),
            expected: Some(e.clone()),
            actual: Some(a.clone()),
        }),
    }
}

fn read_crd(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let yaml: serde_yaml::Value = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .find(|v: &serde_yaml::Value| !v.is_null())
        .expect("a document");
    serde_json::to_value(yaml).expect("JSON")
}

/// The gaps `input`'s CRD shows against `generated`'s, and the differences no gap explains.
fn compare(input: &Path, generated: &Path) -> (BTreeSet<&'static str>, Vec<Difference>) {
    compare_crds(read_crd(input), read_crd(generated))
}

fn compare_crds(input: Value, generated: Value) -> (BTreeSet<&'static str>, Vec<Difference>) {
    let mut found = Vec::new();
    differences(&normalise(input), &normalise(generated), "", &mut found);
    let mut gaps = BTreeSet::new();
    let mut unexplained = Vec::new();
    for difference in found {
        match GAPS.iter().find(|g| (g.matches)(&difference)) {
            Some(gap) => {
                gaps.insert(gap.id);
            }
            None => unexplained.push(difference),
        }
    }
    (gaps, unexplained)
}

fn shared_kubebuilder() -> Option<PathBuf> {
    let named = std::env::var_os("KUBEBUILDER_PROJECT_FILES").map(PathBuf::from);
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/kubebuilder");
    [
        named,
        Some(beside),
        Some(PathBuf::from("/work/shared/kubebuilder")),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.is_dir())
}

/// A generation input: a PROJECT and the CRDs (`(file name, source)`), and the gaps each CRD shows.
struct Case {
    name: &'static str,
    project: String,
    crds: Vec<(String, PathBuf, &'static [&'static str])>,
}

// Named apart from the golden `project`: `make test` may build both at once in the shared build dir.
const PROJECT_HEAD: &str = "cliVersion: 0.1.0\ndomain: tutorial.kubebuilder.io\nlayout:\n- rust.rustbuilder.dev/v1-alpha\nprojectName: cronjob-migrated\nresources:\n";
const CRONJOB_V1: &str = "- api:\n    crdVersion: v1\n    namespaced: true\n  controller: true\n  domain: tutorial.kubebuilder.io\n  group: batch\n  kind: CronJob\n  path: cronjob_migrated::api::v1::CronJob\n  version: v1\n";
const CRONJOB_V2: &str = "- api:\n    crdVersion: v1\n    namespaced: true\n  domain: tutorial.kubebuilder.io\n  group: batch\n  kind: CronJob\n  path: cronjob_migrated::api::v2::CronJob\n  version: v2\n";
const CRONJOB_FILE: &str = "batch.tutorial.kubebuilder.io_cronjobs.yaml";
// The tutorial's CRD requires `spec` already.
const CRONJOB_GAPS: &[&str] = &[
    "nullable",
    "root-description",
    "root-properties",
    "root-title",
];

fn cases() -> Vec<Case> {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/migrate");
    let bases = fixture.join("config/crd/bases");
    let mut cases = vec![Case {
        name: "fixture",
        project: std::fs::read_to_string(fixture.join("PROJECT")).expect("the fixture's PROJECT"),
        crds: vec![
            (
                "fleet.example.com_frigates.yaml".into(),
                bases.join("fleet.example.com_frigates.yaml"),
                &[
                    "nullable",
                    "root-properties",
                    "root-spec-required",
                    "root-title",
                ],
            ),
            (
                "fleet.example.com_harbors.yaml".into(),
                bases.join("fleet.example.com_harbors.yaml"),
                &[
                    "nullable",
                    "root-properties",
                    "root-spec-required",
                    "root-title",
                ],
            ),
        ],
    }];
    // The book's CronJob tutorial CRD is not a case of its own: its schema is the multi-version CRD's v1
    // (the same text), and one version from a CRD is the fixture's case.
    if let Some(shared) = shared_kubebuilder() {
        cases.push(Case {
            name: "multiversion-tutorial",
            project: format!("{PROJECT_HEAD}{CRONJOB_V1}{CRONJOB_V2}version: '3'\n"),
            crds: vec![(
                CRONJOB_FILE.into(),
                shared.join("multiversion-tutorial").join(CRONJOB_FILE),
                CRONJOB_GAPS,
            )],
        });
    } else {
        eprintln!("no ../shared/kubebuilder: only the fixture is compared");
    }
    cases
}

#[test]
fn generated_projects_write_the_crds_they_came_from() {
    let mut failures = Vec::new();
    for case in cases() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("input");
        let bases = input.join("config/crd/bases");
        std::fs::create_dir_all(&bases).unwrap();
        std::fs::write(input.join("PROJECT"), &case.project).unwrap();
        for (file, source, _) in &case.crds {
            std::fs::copy(source, bases.join(file)).unwrap();
        }
        let output = dir.path().join("output");
        let started = Instant::now();
        // Generated first, then its manifests written, with its vendored runtime as old as its source
        // in between (see `vendored_runtime_times`), so cargo builds that runtime once for all cases.
        let rustbuilder = |args: &[&str]| {
            let run = with_shared_build_dir(env!("CARGO_BIN_EXE_rustbuilder"))
                .args(args)
                .output()
                .unwrap();
            assert!(
                run.status.success(),
                "{}: `rustbuilder {}` failed:\n{}",
                case.name,
                args.join(" "),
                String::from_utf8_lossy(&run.stderr)
            );
        };
        let (input, output_dir) = (input.to_str().unwrap(), output.to_str().unwrap());
        rustbuilder(&[
            "alpha",
            "generate",
            "--skip-manifests",
            "--input-dir",
            input,
            "--output-dir",
            output_dir,
        ]);
        vendored_runtime_times(&output);
        rustbuilder(&["manifests", "--dir", output_dir]);
        eprintln!(
            "{}: generated and wrote its manifests in {:.0?}",
            case.name,
            started.elapsed()
        );
        for (file, _, expected_gaps) in &case.crds {
            let (gaps, unexplained) = compare(
                &bases.join(file),
                &output.join("config/crd/bases").join(file),
            );
            if !unexplained.is_empty() {
                failures.push(format!(
                    "{}: {file}: the generated project's CRD differs:\n{}",
                    case.name,
                    unexplained
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("\n")
                ));
            }
            let expected: BTreeSet<&str> = expected_gaps.iter().copied().collect();
            if gaps != expected {
                let why = |ids: &BTreeSet<&str>| {
                    ids.iter()
                        .map(|id| {
                            let gap = GAPS.iter().find(|g| g.id == *id).expect("a gap");
                            format!("{id} ({})", gap.why)
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                };
                failures.push(format!(
                    "{}: {file}: known gaps shown: {}\n  listed: {}",
                    case.name,
                    why(&gaps),
                    why(&expected)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_comparison_sees_what_differs() {
    // A changed bound, a missing rule, an extra field: each is reported; descriptions that differ
    // only in wrapping, and a `nullable: false`, are not.
    let expected = serde_json::json!({ "spec": { "versions": [{ "name": "v1", "schema": { "openAPIV3Schema": {
        "description": "a\n  b",
        "properties": { "n": { "type": "integer", "minimum": 1, "x-kubernetes-validations": [{ "rule": "self > 1" }] } }
    } } }] } });
    let actual = serde_json::json!({ "spec": { "versions": [{ "name": "v1", "schema": { "openAPIV3Schema": {
        "description": "a b",
        "properties": {
            "n": { "type": "integer", "minimum": 2.0, "nullable": false },
            "m": { "type": "string" }
        }
    } } }] } });
    let mut found = Vec::new();
    differences(&normalise(expected), &normalise(actual), "", &mut found);
    let paths: Vec<&str> = found.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            ".spec.versions[0].schema.openAPIV3Schema.properties.m",
            ".spec.versions[0].schema.openAPIV3Schema.properties.n.minimum",
            ".spec.versions[0].schema.openAPIV3Schema.properties.n.x-kubernetes-validations",
        ]
    );
    assert!(found.iter().all(|d| !GAPS.iter().any(|g| (g.matches)(d))));
}

fn generate_without_manifests(input: &Path, output: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rustbuilder"))
        .args(["alpha", "generate", "--skip-manifests", "--input-dir"])
        .arg(input)
        .arg("--output-dir")
        .arg(output)
        .output()
        .unwrap()
}

#[test]
fn own_kinds_with_a_crd_get_its_types_and_the_others_keep_the_scaffold() {
    // Cheap: no manifests, so nothing is built.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/migrate");
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("fleet");
    let generated = generate_without_manifests(&fixture, &output);
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let read = |path: &str| {
        std::fs::read_to_string(output.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let frigate = read("src/api/v1/frigate.rs");
    assert!(frigate.contains("    pub captain: String,\n"), "{frigate}");
    assert!(
        frigate.contains("include_str!(\"frigate.schemas.json\")"),
        "{frigate}"
    );
    let kept: Value = serde_json::from_str(&read("src/api/v1/frigate.schemas.json")).unwrap();
    assert!(kept.get("status.conditions").is_some(), "{kept}");
    // One file per version; the old one is served, not stored, and deprecated.
    let old = read("src/api/v1beta1/frigate.rs");
    assert!(old.contains("    storage = false,\n"), "{old}");
    assert!(
        old.contains(
            "    deprecated = \"fleet.example.com/v1beta1 Frigate is deprecated; use v1\""
        ),
        "{old}"
    );
    assert!(read("src/api/v1/harbor.rs").contains("pub berths: Option<i32>,"));
    // Dock has no CRD: the scaffolded type and controller.
    assert!(read("src/api/v1/dock.rs").contains("pub foo: Option<String>,"));
    assert!(read("src/controller/dock.rs").contains("fn desired_status"));
    // The migrated kinds' controllers and tests start empty; the sample sets the required fields.
    let controller = read("src/controller/frigate.rs");
    assert!(
        !controller.contains("desired_status") && controller.contains("TODO(user)"),
        "{controller}"
    );
    assert!(
        read("tests/controllers/frigate.rs")
            .contains("async fn the_api_server_serves_frigate_and_the_controller_runs()")
    );
    let sample = read("config/samples/fleet_v1_frigate.yaml");
    assert!(
        sample.contains("spec:\n  captain: ''\n  engine:\n    kind: Sail\n"),
        "{sample}"
    );
    // Stored at the version the CRD stores.
    assert!(read("src/bin/crdgen.rs").contains("crds.storage_version::<api::v1::Frigate>()"));
}

#[test]
fn a_crd_that_cannot_be_read_stops_generate_and_writes_nothing() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/migrate");
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input");
    std::fs::create_dir_all(input.join("config/crd/bases")).unwrap();
    std::fs::copy(fixture.join("PROJECT"), input.join("PROJECT")).unwrap();
    std::fs::write(
        input.join("config/crd/bases/fleet.example.com_frigates.yaml"),
        "spec: [unclosed\n",
    )
    .unwrap();
    let output = dir.path().join("fleet");
    let generated = generate_without_manifests(&input, &output);
    assert!(!generated.status.success());
    let stderr = String::from_utf8_lossy(&generated.stderr);
    assert!(
        stderr.contains("fleet.example.com_frigates.yaml` is not a CRD file"),
        "{stderr}"
    );
    assert!(!output.exists(), "nothing is written");
}

#[test]
fn crds_a_rustbuilder_project_wrote_itself_are_left_alone() {
    // Without controller-gen's annotation, a CRD in config/crd/bases is the project's own output,
    // written from the types it has: they stay.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/migrate");
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input");
    std::fs::create_dir_all(input.join("config/crd/bases")).unwrap();
    std::fs::copy(fixture.join("PROJECT"), input.join("PROJECT")).unwrap();
    let file = "config/crd/bases/fleet.example.com_frigates.yaml";
    let crd = std::fs::read_to_string(fixture.join(file)).unwrap();
    let own = crd.replace("    controller-gen.kubebuilder.io/version: v0.21.0\n", "");
    assert_ne!(own, crd);
    std::fs::write(input.join(file), own).unwrap();
    let output = dir.path().join("fleet");
    let generated = generate_without_manifests(&input, &output);
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let frigate = std::fs::read_to_string(output.join("src/api/v1/frigate.rs")).unwrap();
    assert!(frigate.contains("pub foo: Option<String>,"), "{frigate}");
}

/// The CRD of the CronJob tutorials' golden project (`testdata/project-cronjob`, written by `make
/// manifests` and kept current by `make verify-testdata`).
fn cronjob_tutorial_crd() -> Value {
    read_crd(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/project-cronjob/config/crd/bases")
            .join(CRONJOB_FILE),
    )
}

/// The book's CRD for one of its tutorials (`cronjob-tutorial`, `multiversion-tutorial`).
fn books_crd(tutorial: &str) -> Option<Value> {
    let Some(shared) = shared_kubebuilder() else {
        assert!(
            std::env::var_os("RUSTBUILDER_NO_KUBEBUILDER_FILES").is_some(),
            "Kubebuilder's CRDs are not here: put Kubebuilder's files in ../shared/kubebuilder/ ({tutorial}/{CRONJOB_FILE}), or set RUSTBUILDER_NO_KUBEBUILDER_FILES=1 to run without them"
        );
        return None;
    };
    Some(read_crd(&shared.join(tutorial).join(CRONJOB_FILE)))
}

/// Compares the book's CRD with ours: each difference is either a named gap, or listed as a failure;
/// the gaps shown must be `expected` exactly (one that no longer shows goes from the list and from
/// the tutorial that names it).
fn assert_books_crd(tutorial: &str, book: Value, ours: Value, expected: &[&str]) {
    let (gaps, unexplained) = compare_crds(book, ours);
    assert!(
        unexplained.is_empty(),
        "testdata/project-cronjob's CRD differs from the book's {tutorial} CRD:\n{}",
        unexplained
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let expected: BTreeSet<&str> = expected.iter().copied().collect();
    assert_eq!(gaps, expected, "the known gaps shown changed");
}

/// The gaps of the tutorial's types, named in docs/cronjob-tutorial.md.
const CRONJOB_TUTORIAL_GAPS: [&str; 8] = [
    "api-server-defaults",
    "beyond-the-book",
    "descriptions",
    "embedded-metadata",
    "nullable",
    "root-description",
    "root-properties",
    "root-title",
];

/// The CronJob tutorial's v1 against the CRD controller-gen writes for the book's Go types. The
/// project goes on to the Multi-Version tutorial's v2; this compares the CRD the CronJob tutorial
/// ends with: v1 alone, converting nothing.
#[test]
fn the_cronjob_tutorial_writes_the_books_crd() {
    let Some(book) = books_crd("cronjob-tutorial") else {
        return;
    };
    let mut ours = cronjob_tutorial_crd();
    let spec = ours["spec"].as_object_mut().expect("a CRD has a spec");
    spec.remove("conversion");
    spec["versions"]
        .as_array_mut()
        .expect("a CRD has versions")
        .retain(|version| version["name"] == "v1");
    assert_books_crd("cronjob-tutorial", book, ours, &CRONJOB_TUTORIAL_GAPS);
}

/// The Multi-Version tutorial: v1 (stored) and v2 against the book's CRD of both, named in
/// docs/multiversion-tutorial.md.
#[test]
fn the_multiversion_tutorial_writes_the_books_crd() {
    let Some(book) = books_crd("multiversion-tutorial") else {
        return;
    };
    let mut expected = CRONJOB_TUTORIAL_GAPS.to_vec();
    expected.push("conversion-in-base");
    assert_books_crd(
        "multiversion-tutorial",
        book,
        cronjob_tutorial_crd(),
        &expected,
    );
}
