//! `rustbuilder alpha update` on a project scaffolded by an older rustbuilder.
//!
//! The older rustbuilder is `testdata/alpha-update/rustbuilder-older`, a stand-in that answers
//! `--version` with 0.0.9 and makes the older scaffold from this one (see `testdata/README.md`). These
//! tests need `git`; without it they fail, saying so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const OLD_VERSION: &str = "0.0.9";
const NEW_VERSION: &str = env!("CARGO_PKG_VERSION");

fn older() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/alpha-update/rustbuilder-older")
}

/// Git and rustbuilder see neither the user's git configuration nor repositories around the test's.
fn isolated(command: &mut Command, dir: &Path) {
    command
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .env("RUSTBUILDER_FIXTURE_BIN", env!("CARGO_BIN_EXE_rustbuilder"));
    if let Some(parent) = dir.parent() {
        command.env("GIT_CEILING_DIRECTORIES", parent);
    }
}

fn rustbuilder_with(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rustbuilder"));
    command.args(args);
    isolated(&mut command, dir);
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("rustbuilder runs")
}

fn ok(dir: &Path, args: &[&str]) -> Output {
    let output = rustbuilder_with(dir, args, &[]);
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

fn git(dir: &Path, args: &[&str]) -> String {
    let mut command = Command::new("git");
    command.args(args);
    isolated(&mut command, dir);
    let output = command
        .output()
        .expect("these tests need `git` on PATH: install git");
    assert!(
        output.status.success(),
        "`git {}` failed:\n{}",
        args.join(" "),
        stderr(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn commit(dir: &Path, message: &str) {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", message]);
}

fn read(dir: &Path, path: &str) -> String {
    std::fs::read_to_string(dir.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn edit(dir: &Path, path: &str, from: &str, to: &str) {
    let text = read(dir, path);
    assert!(text.contains(from), "{from:?} is not in {path}:\n{text}");
    std::fs::write(dir.join(path), text.replacen(from, to, 1)).unwrap();
}

/// Every file under `dir` with its bytes, `.git` included.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(root).unwrap().to_path_buf();
            if path.is_dir() {
                out.insert(relative, b"<dir>".to_vec());
                walk(root, &path, out);
            } else {
                out.insert(relative, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The project's files but `.git`.
fn sources(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    tree(dir)
        .into_iter()
        .filter(|(path, _)| !path.starts_with(".git/") && path != Path::new(".git"))
        .collect()
}

/// The tutorial's project as rustbuilder 0.0.9 scaffolded it, committed in its own repository.
fn old_project() -> tempfile::TempDir {
    old_project_with(&[])
}

/// [`old_project`], with more `init` flags.
fn old_project_with(init_flags: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("memcached-operator")
        .tempdir()
        .unwrap();
    let d = dir.path();
    let mut init = vec![
        "init",
        "--domain",
        "example.com",
        "--project-name",
        "memcached-operator",
    ];
    init.extend_from_slice(init_flags);
    ok(d, &init);
    ok(
        d,
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
    // The older rustbuilder's scaffold of the same PROJECT.
    let older = older();
    let mut command = Command::new(&older);
    command.args(["alpha", "generate", "--skip-manifests"]);
    isolated(&mut command, d);
    let output = command.output().expect("the stand-in runs");
    assert!(output.status.success(), "{}", stderr(&output));
    // The fixture really is an older scaffold.
    assert!(read(d, "PROJECT").contains(&format!("cliVersion: {OLD_VERSION}\n")));
    assert!(d.join("hack/boilerplate.txt").exists());
    assert!(!d.join(".github/workflows/test-e2e.yml").exists());
    assert!(!read(d, "Makefile").contains("--all-features"));
    // The layout before one test crate per kind of test: the controller's test is a crate of its own.
    assert!(d.join(OLD_TEST).is_file());
    assert!(!d.join("tests/controllers").exists());
    git(d, &["init", "-q"]);
    commit(d, "Scaffold with rustbuilder 0.0.9");
    dir
}

/// The project's PROJECT file re-scaffolded by this rustbuilder into a fresh directory.
fn new_scaffold(dir: &Path) -> (tempfile::TempDir, PathBuf) {
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("new");
    let target_arg = target.to_str().unwrap().to_string();
    ok(
        dir,
        &[
            "alpha",
            "generate",
            "--skip-manifests",
            "--output-dir",
            &target_arg,
        ],
    );
    (out, target)
}

// The user's edits, each away from the lines the upgrade changes.
const CONTROLLER: &str = "src/controller/memcached.rs";
const CONTROLLER_EDIT: (&str, &str) = (
    "    // TODO(user): create or update what the Memcached describes here, then report it in the status.\n",
    "    // Ours: the status is all this operator reports.\n",
);
const CONTROLLER_ADDITION: &str = "\n/// Ours: a helper of the user's own.\npub fn label(object: &Memcached) -> String {\n    object.name_any()\n}\n";
const MAIN_EDIT: (&str, &str) = (
    "    manager: ManagerArgs,\n",
    "    manager: ManagerArgs,\n    /// Ours: log every reconcile.\n    #[arg(long)]\n    verbose: bool,\n",
);
const MAKEFILE_EDIT: (&str, &str) = (
    "IMG ?= controller:latest\n",
    "IMG ?= example.com/memcached-operator:v0.1.0\n",
);
// The controller's test, a crate of its own in the old layout, a module of the controllers' test crate
// in the new one.
const OLD_TEST: &str = "tests/memcached_controller.rs";
const TEST: &str = "tests/controllers/memcached.rs";
const TEST_EDIT: (&str, &str) = (
    "    let name = \"test-memcached\";\n",
    "    let name = \"ours\";\n",
);
const TEST_ADDITION: &str = "\n/// Ours: a test of the user's own.\n#[test]\nfn ours() {}\n";
const MAKEFILE_ADDITION: &str =
    "\n.PHONY: ours\nours: ## A target of the user's own.\n\t@echo ours\n";

fn append(dir: &Path, path: &str, text: &str) {
    let before = read(dir, path);
    std::fs::write(dir.join(path), before + text).unwrap();
}

#[test]
fn an_update_brings_the_new_scaffold_and_keeps_every_user_edit() {
    let dir = old_project();
    let d = dir.path();
    edit(d, CONTROLLER, CONTROLLER_EDIT.0, CONTROLLER_EDIT.1);
    append(d, CONTROLLER, CONTROLLER_ADDITION);
    edit(d, "src/main.rs", MAIN_EDIT.0, MAIN_EDIT.1);
    edit(d, "Makefile", MAKEFILE_EDIT.0, MAKEFILE_EDIT.1);
    append(d, "Makefile", MAKEFILE_ADDITION);
    edit(d, OLD_TEST, TEST_EDIT.0, TEST_EDIT.1);
    append(d, OLD_TEST, TEST_ADDITION);
    std::fs::write(d.join("NOTES.md"), "# Ours\n").unwrap();
    commit(d, "Our operator");

    let older = older();
    let output = ok(
        d,
        &["alpha", "update", "--from-binary", older.to_str().unwrap()],
    );
    let message = stderr(&output);
    for line in [
        "Creating .github/workflows/test-e2e.yml",
        "Updating PROJECT",
        "Removing hack/boilerplate.txt",
        "Merged Makefile",
        "Merged src/controller/memcached.rs",
        "Merged src/main.rs",
        "Creating tests/controllers/main.rs",
        &format!("Moving {OLD_TEST} to {TEST}"),
        &format!("Updated the project from rustbuilder {OLD_VERSION} to {NEW_VERSION}"),
        "git diff",
    ] {
        assert!(message.contains(line), "{line:?} in:\n{message}");
    }

    // Exactly the new scaffold, with the user's edits made to it.
    let (_out, new) = new_scaffold(d);
    let mut expected = sources(&new);
    let mut with_edits = |path: &str, edits: &[(&str, &str)], addition: &str| {
        let mut text = read(&new, path);
        for (from, to) in edits {
            assert!(text.contains(from), "{from:?} in the new {path}");
            text = text.replacen(from, to, 1);
        }
        expected.insert(PathBuf::from(path), (text + addition).into_bytes());
    };
    with_edits(CONTROLLER, &[CONTROLLER_EDIT], CONTROLLER_ADDITION);
    with_edits("src/main.rs", &[MAIN_EDIT], "");
    with_edits("Makefile", &[MAKEFILE_EDIT], MAKEFILE_ADDITION);
    // The test moved into the controllers' crate with the user's edits.
    with_edits(TEST, &[TEST_EDIT], TEST_ADDITION);
    expected.insert(PathBuf::from("NOTES.md"), b"# Ours\n".to_vec());
    let updated = sources(d);
    assert_eq!(
        updated.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (path, bytes) in &expected {
        assert!(
            updated[path] == *bytes,
            "{} differs from the new scaffold with the user's edits:\n{}",
            path.display(),
            String::from_utf8_lossy(&updated[path])
        );
    }
    // The template changes arrived, so did the version.
    assert!(read(d, "Makefile").contains("clippy --all-targets --all-features"));
    assert!(read(d, "src/main.rs").contains("// Waits for leadership when"));
    assert!(
        read(d, TEST).contains("// The controller reports Ready=True for the generation it saw.")
    );
    assert!(read(d, "tests/controllers/main.rs").contains("\nmod memcached;\n"));
    assert!(!d.join(OLD_TEST).exists());
    assert!(read(d, "PROJECT").contains(&format!("cliVersion: {NEW_VERSION}\n")));

    // Committed, a second run has nothing to do.
    commit(d, "Update the scaffold");
    let before = tree(d);
    let output = ok(d, &["alpha", "update"]);
    assert!(
        stderr(&output).contains("nothing to update"),
        "{}",
        stderr(&output)
    );
    assert_eq!(tree(d), before);
}

#[test]
fn an_update_keeps_a_project_on_the_crates_io_runtime() {
    let dir = old_project_with(&["--runtime-source", "registry"]);
    let d = dir.path();
    let cargo_toml = read(d, "Cargo.toml");
    let older = older();
    ok(
        d,
        &["alpha", "update", "--from-binary", older.to_str().unwrap()],
    );
    // The update came, and brought no copy of the runtime.
    assert!(read(d, "PROJECT").contains(&format!("cliVersion: {NEW_VERSION}\n")));
    assert!(read(d, "PROJECT").contains("    runtimeSource: registry\n"));
    assert!(!d.join("rustbuilder").exists());
    assert_eq!(read(d, "Cargo.toml"), cargo_toml);
    let runtime = format!(
        "\nrustbuilder-runtime = {{ version = \"{NEW_VERSION}\", features = [\"manifests\"] }}\n"
    );
    assert!(cargo_toml.contains(&runtime), "{cargo_toml}");
    let (_out, new) = new_scaffold(d);
    assert_eq!(sources(d), sources(&new));
}

#[test]
fn an_edit_on_the_lines_the_update_changes_is_a_conflict_left_in_the_file() {
    let dir = old_project();
    let d = dir.path();
    edit(
        d,
        "src/main.rs",
        "    // Runs the controllers until SIGTERM.\n",
        "    // Ours: runs until SIGTERM, then exits.\n",
    );
    edit(d, "Makefile", MAKEFILE_EDIT.0, MAKEFILE_EDIT.1);
    append(d, "hack/boilerplate.txt", "Ours too.\n");
    // The line of the controller's test the new scaffold changes too, in the file it moves.
    edit(
        d,
        OLD_TEST,
        "    // Ready=True for the generation the controller saw.\n",
        "    // Ours: Ready=True, eventually.\n",
    );
    commit(d, "Our operator");
    let committed = tree(d);

    // Found in the release cache, without `--from-binary`.
    let cache = tempfile::tempdir().unwrap();
    let bin = cache
        .path()
        .join(format!("rustbuilder/releases/{OLD_VERSION}/bin"));
    std::fs::create_dir_all(&bin).unwrap();
    let cached = bin.join("rustbuilder");
    std::fs::write(
        &cached,
        format!("#!/bin/sh\nexec '{}' \"$@\"\n", older().display()),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cached, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let output = rustbuilder_with(d, &["alpha", "update"], &[("XDG_CACHE_HOME", cache.path())]);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{message}");
    for text in [
        "warning: conflicts in `src/main.rs`",
        &format!(
            "the update from rustbuilder {OLD_VERSION} to {NEW_VERSION} left conflicts in 2 files:\n"
        ),
        "  src/main.rs\n",
        &format!("warning: conflicts in `{TEST}`"),
        &format!("Moving {OLD_TEST} to {TEST}"),
        &format!("  {TEST}\n"),
        "then `git add -A` and commit",
        "`git restore . && git clean -fd`",
        "Merged Makefile",
        "Updating src/controller/memcached.rs",
        "Kept: hack/boilerplate.txt: the new scaffold no longer has it, but you changed it",
    ] {
        assert!(message.contains(text), "{text:?} in:\n{message}");
    }
    let main = read(d, "src/main.rs");
    assert!(
        main.contains(&format!(
            "<<<<<<< ours\n    // Ours: runs until SIGTERM, then exits.\n\
             ||||||| ancestor (rustbuilder {OLD_VERSION})\n    // Runs the controllers until SIGTERM.\n\
             =======\n    // Waits for leadership when `--leader-elect` is on, then runs until SIGTERM.\n\
             >>>>>>> rustbuilder {NEW_VERSION}\n"
        )),
        "{main}"
    );
    // The moved test holds the conflict; the old place is gone.
    let test = read(d, TEST);
    assert!(
        test.contains(&format!(
            "<<<<<<< ours\n    // Ours: Ready=True, eventually.\n\
             ||||||| ancestor (rustbuilder {OLD_VERSION})\n    // Ready=True for the generation the controller saw.\n\
             =======\n    // The controller reports Ready=True for the generation it saw.\n\
             >>>>>>> rustbuilder {NEW_VERSION}\n"
        )),
        "{test}"
    );
    assert!(!d.join(OLD_TEST).exists());
    // The rest merged: the Makefile has both sides, the controller the new comment.
    let makefile = read(d, "Makefile");
    assert!(makefile.contains(MAKEFILE_EDIT.1) && makefile.contains("--all-features"));
    assert!(read(d, CONTROLLER).contains("// Writes the status only when it differs"));
    assert!(!read(d, CONTROLLER).contains("<<<<<<<") && !makefile.contains("<<<<<<<"));
    assert!(read(d, "hack/boilerplate.txt").ends_with("Ours too.\n"));
    assert!(d.join(".github/workflows/test-e2e.yml").exists());
    assert!(read(d, "PROJECT").contains(&format!("cliVersion: {NEW_VERSION}\n")));

    // The way back the message gives restores the commit exactly.
    git(d, &["restore", "."]);
    git(d, &["clean", "-fdq"]);
    assert_eq!(sources(d), {
        let mut c = committed;
        c.retain(|path, _| !path.starts_with(".git/") && path != Path::new(".git"));
        c
    });
}

/// Runs `alpha update` expecting a refusal: non-zero, the expected messages, the directory unchanged.
fn refused(dir: &Path, args: &[&str], env: &[(&str, &Path)], expected: &[&str]) {
    let before = tree(dir);
    let output = rustbuilder_with(dir, args, env);
    let message = stderr(&output);
    assert_eq!(
        output.status.code(),
        Some(1),
        "`rustbuilder {}` should fail:\n{message}",
        args.join(" ")
    );
    for text in expected {
        assert!(
            message.contains(text),
            "`rustbuilder {}`: expected {text:?} in:\n{message}",
            args.join(" ")
        );
    }
    assert!(
        tree(dir) == before,
        "`rustbuilder {}` changed the directory",
        args.join(" ")
    );
}

#[test]
fn alpha_update_refuses_bad_input_and_changes_nothing() {
    let dir = old_project();
    let d = dir.path();
    let older = older();
    let older_arg = older.to_str().unwrap();
    let update = ["alpha", "update", "--from-binary", older_arg];
    let empty = tempfile::tempdir().unwrap();
    let no_cache = [("XDG_CACHE_HOME", empty.path())];

    // Uncommitted changes: an edit, or a new file.
    let main = read(d, "src/main.rs");
    std::fs::write(d.join("src/main.rs"), main.clone() + "// wip\n").unwrap();
    refused(
        d,
        &update,
        &[],
        &[
            "the project has uncommitted changes:",
            " M src/main.rs",
            "help: commit or stash them first",
        ],
    );
    std::fs::write(d.join("src/main.rs"), &main).unwrap();
    std::fs::write(d.join("wip.txt"), "wip\n").unwrap();
    refused(d, &update, &[], &["uncommitted changes", "?? wip.txt"]);
    std::fs::remove_file(d.join("wip.txt")).unwrap();

    // The old rustbuilder is nowhere: the message says how to provide it.
    refused(
        d,
        &["alpha", "update"],
        &no_cache,
        &[
            &format!("rustbuilder {OLD_VERSION}, which scaffolded this project, was not found"),
            &format!("`rustbuilder-{OLD_VERSION}` on PATH"),
            &format!(
                "help: install it: `cargo install rustbuilder --version {OLD_VERSION} --root "
            ),
            "help: or pass its executable: `rustbuilder alpha update --from-binary PATH`",
        ],
    );
    refused(
        d,
        &[
            "alpha",
            "update",
            "--from-binary",
            "/nonexistent/rustbuilder",
        ],
        &[],
        &["failed to run `/nonexistent/rustbuilder`", "help:"],
    );
    // A rustbuilder of another version than the project's.
    refused(
        d,
        &[
            "alpha",
            "update",
            "--from-binary",
            env!("CARGO_BIN_EXE_rustbuilder"),
        ],
        &[],
        &[
            &format!(
                "is rustbuilder {NEW_VERSION}, but the project was scaffolded by rustbuilder {OLD_VERSION}"
            ),
            &format!("`--from-version {NEW_VERSION}`"),
        ],
    );
    refused(
        d,
        &[
            "alpha",
            "update",
            "--from-version",
            "0.0.8",
            "--from-binary",
            older_arg,
        ],
        &[],
        &[&format!(
            "is rustbuilder {OLD_VERSION}, but the project was scaffolded by rustbuilder 0.0.8"
        )],
    );
    refused(
        d,
        &["alpha", "update", "--from-version", "../0.0.9"],
        &no_cache,
        &["`../0.0.9` is not a rustbuilder version"],
    );
    // Kubebuilder's branch flags, checked before anything is touched.
    let branch_refusals: [(&[&str], &str); 6] = [
        (
            &["--to-version", "9.9.9"],
            "it updates a project to its own scaffold, not to 9.9.9",
        ),
        (&["--open-gh-issue"], "help: add `--push`"),
        (&["--use-gh-models"], "help: add `--open-gh-issue --push`"),
        (
            &["--from-branch", "nowhere"],
            "there is no branch `nowhere`",
        ),
        (
            &["--output-branch", "no..dots"],
            "`no..dots` is not a valid branch name",
        ),
        (
            &["--git-config", "oops"],
            "`--git-config oops` is not `key=value`",
        ),
    ];
    for (flags, expected) in branch_refusals {
        let mut args = update.to_vec();
        args.extend_from_slice(flags);
        refused(d, &args, &[], &[expected]);
    }

    // Not a git repository.
    std::fs::remove_dir_all(d.join(".git")).unwrap();
    refused(
        d,
        &update,
        &[],
        &[
            "is not in a git repository",
            "help: put the project under git first",
        ],
    );

    // No PROJECT.
    let bare = tempfile::tempdir().unwrap();
    git(bare.path(), &["init", "-q"]);
    refused(bare.path(), &update, &[], &["no `PROJECT` file", "help:"]);

    // A project of this rustbuilder: nothing to update, and nothing changes.
    let current = tempfile::tempdir().unwrap();
    let c = current.path();
    ok(
        c,
        &[
            "init",
            "--domain",
            "example.com",
            "--project-name",
            "current",
        ],
    );
    git(c, &["init", "-q"]);
    commit(c, "Scaffold");
    let before = tree(c);
    let output = ok(c, &["alpha", "update"]);
    assert!(
        stderr(&output).contains(&format!(
            "the project was scaffolded by rustbuilder {NEW_VERSION}: nothing to update"
        )),
        "{}",
        stderr(&output)
    );
    assert!(tree(c) == before);
}

#[test]
fn a_helm_chart_goes_through_an_update_as_it_is() {
    let dir = old_project();
    let d = dir.path();
    // The chart is built from the manifests; stand-ins do here.
    std::fs::create_dir_all(d.join("config/crd/bases")).unwrap();
    std::fs::write(
        d.join("config/crd/bases/cache.example.com_memcacheds.yaml"),
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: memcacheds.cache.example.com\nspec:\n  group: cache.example.com\n  names:\n    kind: Memcached\n    plural: memcacheds\n  scope: Namespaced\n  versions: []\n",
    )
    .unwrap();
    std::fs::write(
        d.join("config/rbac/role.yaml"),
        "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: manager-role\nrules:\n- apiGroups:\n  - cache.example.com\n  resources:\n  - memcacheds\n  verbs:\n  - list\n",
    )
    .unwrap();
    ok(d, &["edit", "--plugins", "helm/v2-alpha"]);
    edit(
        d,
        "dist/chart/values.yaml",
        "  replicas: 1\n",
        "  replicas: 2\n",
    );
    commit(d, "A chart");
    let chart = |d: &Path| -> BTreeMap<PathBuf, Vec<u8>> {
        tree(d)
            .into_iter()
            .filter(|(path, _)| path.starts_with("dist") || path.starts_with("config"))
            .collect()
    };
    let before = chart(d);

    let older = older();
    let output = ok(
        d,
        &["alpha", "update", "--from-binary", older.to_str().unwrap()],
    );
    let message = stderr(&output);
    assert!(
        message
            .contains("$ make manifests lint test\n$ rustbuilder edit --plugins helm/v2-alpha\n"),
        "{message}"
    );
    assert!(chart(d) == before, "the chart or the manifests changed");
    let project = read(d, "PROJECT");
    assert!(
        project.contains("  helm.rustbuilder.dev/v2-alpha: {}\n")
            && project.contains(&format!("cliVersion: {NEW_VERSION}\n")),
        "{project}"
    );
    assert!(read(d, ".gitignore").contains("!/dist/chart/\n"));
    assert!(read(d, "Makefile").contains("--all-features"));
}

/// A step of a workflow run: its name, and whether it succeeded (`None`: skipped).
type StepOutcome = (String, Option<bool>);

/// A local stand-in for a GitHub Actions runner of `.github/workflows/auto_update.yml`: it runs the
/// `run` steps of the workflow's job in order, in bash as Actions does (`-eo pipefail`), with the step
/// outputs, `if:` conditions and `${{ ... }}` expressions the workflow uses. `uses:` steps (checkout,
/// toolchain, cache) are skipped: the project is already checked out. `cargo`, `gh` and `make` are
/// stubs that log their arguments: `cargo search` answers with `newest`, `cargo install` puts this
/// rustbuilder (the newest) on PATH or the 0.0.9 stand-in in the `--root` it is given. Git is real,
/// with a bare repository as `origin`.
struct Runner {
    home: tempfile::TempDir,
    newest: String,
    base: String,
}

impl Runner {
    fn new(newest: &str, base: &str) -> Self {
        let home = tempfile::tempdir().unwrap();
        let stubs = home.path().join("stubs");
        std::fs::create_dir_all(&stubs).unwrap();
        let scripts = [
            (
                "cargo",
                r#"echo "cargo $*" >> "$STUB_LOG"
case "$1" in
search)
  echo "rustbuilder-runtime = \"9.9.9\"    # another crate"
  echo "rustbuilder = \"$STUB_NEWEST\"    # Kubebuilder for Rust"
  echo "... and 2 crates more" ;;
install)
  version=; root=
  while [ $# -gt 0 ]; do
    case "$1" in --version) version=$2; shift ;; --root) root=$2; shift ;; esac
    shift
  done
  if [ -n "$root" ]; then
    [ "$version" = "$STUB_OLD_VERSION" ] || { echo "no rustbuilder $version here" >&2; exit 101; }
    mkdir -p "$root/bin"
    printf '#!/bin/sh\nexec "%s" "$@"\n' "$STUB_OLD" > "$root/bin/rustbuilder"
    chmod +x "$root/bin/rustbuilder"
  else
    [ "$version" = "$STUB_NEWEST" ] || { echo "no rustbuilder $version here" >&2; exit 101; }
    mkdir -p "$HOME/.cargo/bin"
    ln -sf "$STUB_NEW" "$HOME/.cargo/bin/rustbuilder"
  fi ;;
*) echo "unexpected cargo $*" >&2; exit 101 ;;
esac
"#,
            ),
            (
                "gh",
                r#"echo "gh $*" >> "$STUB_LOG"
previous=
for arg in "$@"; do
  [ "$previous" = --body-file ] && { echo "--- body"; cat "$arg"; echo "---"; } >> "$STUB_LOG"
  previous=$arg
done
"#,
            ),
            ("make", "echo \"make $*\" >> \"$STUB_LOG\"\n"),
        ];
        for (name, body) in scripts {
            let path = stubs.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Runner {
            home,
            newest: newest.to_string(),
            base: base.to_string(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("stub.log")).unwrap_or_default()
    }

    /// Runs the workflow in `dir`: each step's name with its outcome (`None`: skipped), and the outputs.
    fn run(&self, dir: &Path) -> (Vec<StepOutcome>, BTreeMap<String, String>) {
        let text = read(dir, ".github/workflows/auto_update.yml");
        let workflow: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let job = &workflow["jobs"]["auto-update"];
        let mut state: BTreeMap<String, String> = BTreeMap::new();
        let mut steps = Vec::new();
        let home = self.home.path();
        let temp = home.join("runner-temp");
        std::fs::create_dir_all(&temp).unwrap();
        let path = format!(
            "{}:{}:{}",
            home.join("stubs").display(),
            home.join(".cargo/bin").display(),
            std::env::var("PATH").unwrap()
        );
        for step in job["steps"].as_sequence().unwrap() {
            let name = step["name"].as_str().unwrap().to_string();
            let enabled = step["if"]
                .as_str()
                .is_none_or(|c| self.condition(c, &state));
            let Some(script) = step["run"].as_str().filter(|_| enabled) else {
                steps.push((name, None));
                continue;
            };
            let id = step["id"].as_str().map(str::to_string);
            let outputs = temp.join("output");
            std::fs::write(&outputs, "").unwrap();
            let mut command = Command::new("bash");
            command
                .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", script])
                .current_dir(dir)
                .env_clear()
                .env("PATH", &path)
                .env("HOME", home)
                .env("GIT_CONFIG_GLOBAL", home.join("gitconfig"))
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap())
                .env("GITHUB_OUTPUT", &outputs)
                .env("RUNNER_TEMP", &temp)
                .env("GITHUB_SERVER_URL", "https://github.com")
                .env("GITHUB_REPOSITORY", "example/memcached-operator")
                .env("STUB_LOG", home.join("stub.log"))
                .env("STUB_NEWEST", &self.newest)
                .env("STUB_NEW", env!("CARGO_BIN_EXE_rustbuilder"))
                .env("STUB_OLD", older())
                .env("STUB_OLD_VERSION", OLD_VERSION)
                .env("RUSTBUILDER_FIXTURE_BIN", env!("CARGO_BIN_EXE_rustbuilder"))
                .env("NO_COLOR", "1");
            for scope in [&job["env"], &step["env"]] {
                for (key, value) in scope.as_mapping().into_iter().flatten() {
                    let value = self.expand(value.as_str().unwrap(), &state);
                    command.env(key.as_str().unwrap(), value);
                }
            }
            let output = command.output().unwrap();
            let success = output.status.success();
            if let Some(id) = &id {
                for line in std::fs::read_to_string(&outputs).unwrap().lines() {
                    let (key, value) = line.split_once('=').unwrap();
                    state.insert(format!("steps.{id}.outputs.{key}"), value.to_string());
                }
                let outcome = if success { "success" } else { "failure" };
                state.insert(format!("steps.{id}.outcome"), outcome.to_string());
            }
            steps.push((name.clone(), Some(success)));
            let tolerated = step["continue-on-error"].as_bool() == Some(true);
            assert!(
                success || tolerated,
                "step `{name}` failed:\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                stderr(&output)
            );
        }
        (steps, state)
    }

    /// `a == 'x' || b == 'y'`, the only form of the workflow's conditions.
    fn condition(&self, condition: &str, state: &BTreeMap<String, String>) -> bool {
        condition.split("||").any(|part| {
            let (left, right) = part.split_once("==").expect("a comparison");
            let value = state.get(left.trim()).map(String::as_str).unwrap_or("");
            value == right.trim().trim_matches('\'')
        })
    }

    /// A value with its `${{ expression }}`s replaced.
    fn expand(&self, value: &str, state: &BTreeMap<String, String>) -> String {
        let mut out = String::new();
        let mut rest = value;
        while let Some(start) = rest.find("${{") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find("}}").unwrap() + start;
            let expression = rest[start + 3..end].trim();
            out.push_str(match expression {
                "secrets.GITHUB_TOKEN" => "a-token",
                "github.ref_name" => &self.base,
                other => state.get(other).map(String::as_str).unwrap_or(""),
            });
            rest = &rest[end + 2..];
        }
        out.push_str(rest);
        out
    }
}

/// The project with the auto-update workflow committed, and a bare repository as its `origin`.
fn with_workflow_and_origin(d: &Path) -> (tempfile::TempDir, String) {
    ok(d, &["edit", "--plugins", "autoupdate/v1-alpha"]);
    commit(d, "Add the auto-update workflow");
    with_origin(d)
}

/// A bare repository as `origin`, holding the current branch; returns it and the branch's name.
fn with_origin(d: &Path) -> (tempfile::TempDir, String) {
    let origin = tempfile::tempdir().unwrap();
    git(origin.path(), &["init", "-q", "--bare"]);
    git(
        d,
        &["remote", "add", "origin", origin.path().to_str().unwrap()],
    );
    git(d, &["push", "-q", "origin", "HEAD"]);
    let base = git(d, &["rev-parse", "--abbrev-ref", "HEAD"])
        .trim()
        .to_string();
    (origin, base)
}

#[test]
fn the_auto_update_workflow_pushes_the_update_and_opens_a_pull_request() {
    let dir = old_project();
    let d = dir.path();
    let (origin, base) = with_workflow_and_origin(d);
    let runner = Runner::new(NEW_VERSION, &base);
    let (steps, outputs) = runner.run(d);
    let branch = format!("rustbuilder-update-from-{OLD_VERSION}-to-{NEW_VERSION}");
    assert_eq!(outputs["steps.versions.outputs.update"], "true");
    assert_eq!(outputs["steps.versions.outputs.branch"], branch);
    assert_eq!(outputs["steps.update.outputs.result"], "updated");
    let ran: Vec<&str> = steps
        .iter()
        .filter(|(_, outcome)| *outcome == Some(true))
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(
        ran,
        [
            "Configure Git",
            "Compare the versions",
            "Install rustbuilder",
            "Run rustbuilder alpha update",
            "Refresh the manifests",
            "Open a pull request or an issue",
        ]
    );
    let log = runner.log();
    let old_root = runner
        .home
        .path()
        .join(format!(".cache/rustbuilder/releases/{OLD_VERSION}"));
    for line in [
        format!("cargo install rustbuilder --version {NEW_VERSION} --locked\n"),
        format!(
            "cargo install rustbuilder --version {OLD_VERSION} --locked --root {}\n",
            old_root.display()
        ),
        "make manifests\n".to_string(),
        format!(
            "gh pr create --base {base} --head {branch} --title Update the scaffold to rustbuilder {NEW_VERSION} --body-file "
        ),
        format!("moved the project from rustbuilder {OLD_VERSION} to {NEW_VERSION}."),
        // The 0.0.9 scaffold has no e2e workflow: the update adds it, the token could not push it.
        "- .github/workflows/test-e2e.yml\n".to_string(),
    ] {
        assert!(log.contains(&line), "{line:?} in:\n{log}");
    }
    // The branch on origin holds the update, committed, without the workflow file.
    let pushed = |args: &[&str]| git(origin.path(), args);
    let project = pushed(&["show", &format!("{branch}:PROJECT")]);
    assert!(
        project.contains(&format!("cliVersion: {NEW_VERSION}\n")),
        "{project}"
    );
    let files = pushed(&["ls-tree", "-r", "--name-only", &branch]);
    assert!(
        files.contains("Makefile\n") && !files.contains("test-e2e.yml"),
        "{files}"
    );
    let message = pushed(&["log", "-1", "--format=%s", &branch]);
    assert_eq!(
        message.trim(),
        format!("Update the scaffold to rustbuilder {NEW_VERSION}")
    );

    // The next run finds the branch and does nothing; so does a run on the newest version.
    git(d, &["switch", "-q", &base]);
    let (steps, outputs) = runner.run(d);
    assert_eq!(outputs["steps.versions.outputs.update"], "false");
    assert!(
        steps.iter().filter(|(_, o)| o.is_some()).count() == 2,
        "{steps:?}"
    );
    for release in [OLD_VERSION, "0.0.1"] {
        let (_, outputs) = Runner::new(release, &base).run(d);
        assert_eq!(
            outputs["steps.versions.outputs.update"], "false",
            "{release}"
        );
    }
}

#[test]
fn the_auto_update_workflow_opens_an_issue_when_the_update_conflicts() {
    let dir = old_project();
    let d = dir.path();
    edit(
        d,
        "src/main.rs",
        "    // Runs the controllers until SIGTERM.\n",
        "    // Ours: runs until SIGTERM, then exits.\n",
    );
    commit(d, "Our operator");
    let (origin, base) = with_workflow_and_origin(d);
    let runner = Runner::new(NEW_VERSION, &base);
    let (steps, outputs) = runner.run(d);
    assert_eq!(outputs["steps.update.outputs.result"], "conflicts");
    // No manifests on a tree with conflict markers.
    assert!(
        steps.contains(&("Refresh the manifests".to_string(), None)),
        "{steps:?}"
    );
    let log = runner.log();
    let branch = format!("rustbuilder-update-from-{OLD_VERSION}-to-{NEW_VERSION}");
    for line in [
        format!(
            "gh issue create --title Update to rustbuilder {NEW_VERSION}: conflicts to resolve --body-file "
        ),
        format!(
            "https://github.com/example/memcached-operator/compare/{base}...{branch}?expand=1\n"
        ),
        "- src/main.rs\n".to_string(),
    ] {
        assert!(log.contains(&line), "{line:?} in:\n{log}");
    }
    assert!(!log.contains("gh pr create"), "{log}");
    let main = git(origin.path(), &["show", &format!("{branch}:src/main.rs")]);
    assert!(main.contains("<<<<<<< ours\n"), "{main}");
}

/// A fake `gh` for a test: records its arguments in `gh.log` (and what `gh models` reads in
/// `models.stdin`) and prints an issue's address.
fn fake_gh(bin: &Path) {
    let gh = bin.join("gh");
    let log = bin.join("gh.log");
    let stdin = bin.join("models.stdin");
    std::fs::write(
        &gh,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" >> '{}'\n[ \"$1\" = models ] && cat > '{}'\necho https://github.com/example/memcached-operator/issues/7\n",
            log.display(),
            stdin.display()
        ),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&gh, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
fn an_update_on_a_branch_is_committed_there_pushed_and_opened_for_review() {
    let dir = old_project();
    let d = dir.path();
    edit(d, "Makefile", MAKEFILE_EDIT.0, MAKEFILE_EDIT.1);
    commit(d, "Our operator");
    let (origin, base) = with_origin(d);
    let base_commit = git(d, &["rev-parse", "HEAD"]);
    let bin = tempfile::tempdir().unwrap();
    fake_gh(bin.path());
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let older = older();
    let update = [
        "alpha",
        "update",
        "--from-binary",
        older.to_str().unwrap(),
        "--to-version",
        NEW_VERSION,
        "--push",
        "--open-gh-issue",
        "--use-gh-models",
        "--show-commits",
        "--restore-path",
        ".github/workflows",
        "--git-config",
        "merge.renameLimit=999999",
    ];
    let mut command = Command::new(env!("CARGO_BIN_EXE_rustbuilder"));
    command.args(update);
    isolated(&mut command, d);
    let output = command.env("PATH", &path).output().unwrap();
    let message = stderr(&output);
    assert!(output.status.success(), "{message}");
    let branch = format!("rustbuilder-update-from-{OLD_VERSION}-to-{NEW_VERSION}");
    for text in [
        format!(
            "Committed the update from rustbuilder {OLD_VERSION} to {NEW_VERSION} on the branch `{branch}` (2 commits on `{base}`)"
        ),
        format!("Pushed `{branch}` to origin"),
        "Opened the review issue https://github.com/example/memcached-operator/issues/7"
            .to_string(),
        "Commented a summary of the update by GitHub Models".to_string(),
    ] {
        assert!(message.contains(&text), "{text:?} in:\n{message}");
    }
    // On the new branch, committed and clean; the base branch as it was.
    assert_eq!(git(d, &["branch", "--show-current"]).trim(), branch);
    assert_eq!(git(d, &["status", "--porcelain"]), "");
    assert_eq!(git(d, &["rev-parse", &base]), base_commit);
    // Two commits: the scaffold's own changes, then the Makefile merged with our edit.
    let log = git(d, &["log", "--format=%s", &format!("{base}..{branch}")]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            format!("Update the scaffold to rustbuilder {NEW_VERSION}"),
            format!(
                "The scaffold of rustbuilder {NEW_VERSION}, where it differs from {OLD_VERSION} only"
            ),
        ],
        "{log}"
    );
    let last = git(d, &["show", "--name-only", "--format=", "HEAD"]);
    assert!(last.lines().any(|file| file == "Makefile"), "{last}");
    let makefile = read(d, "Makefile");
    assert!(makefile.contains(MAKEFILE_EDIT.1) && makefile.contains("--all-features"));
    assert!(read(d, "PROJECT").contains(&format!("cliVersion: {NEW_VERSION}\n")));
    // The restored path: the workflow the new scaffold adds is not on the branch.
    assert!(!d.join(".github/workflows/test-e2e.yml").exists());
    // Pushed, and the issue names the branch.
    let pushed = git(origin.path(), &["rev-parse", &branch]);
    assert_eq!(pushed, git(d, &["rev-parse", "HEAD"]));
    let gh = std::fs::read_to_string(bin.path().join("gh.log")).unwrap();
    for text in [
        "issue\ncreate\n--title\n".to_string(),
        format!("Update the scaffold to rustbuilder {NEW_VERSION}\n"),
        format!("on the branch `{branch}` (base `{base}`)"),
        // GitHub Models read the update's commit, and its summary went to the issue.
        "models\nrun\nopenai/gpt-4o-mini\n".to_string(),
        "issue\ncomment\nhttps://github.com/example/memcached-operator/issues/7\n--body\n"
            .to_string(),
        "_Written by GitHub Models".to_string(),
    ] {
        assert!(gh.contains(&text), "{text:?} in:\n{gh}");
    }
    let read_by_the_model = std::fs::read_to_string(bin.path().join("models.stdin")).unwrap();
    assert!(
        read_by_the_model.contains("Makefile"),
        "{read_by_the_model}"
    );

    // Again from the base branch: the branch exists, so nothing changes and we stay on the base.
    git(d, &["switch", "-q", &base]);
    let before = tree(d);
    refused(
        d,
        &[
            "alpha",
            "update",
            "--from-binary",
            older.to_str().unwrap(),
            "--push",
        ],
        &[],
        &[&format!("the branch `{branch}` exists already")],
    );
    assert!(tree(d) == before);
}

#[test]
fn conflicts_stop_an_update_on_a_branch_unless_forced() {
    let dir = old_project();
    let d = dir.path();
    edit(
        d,
        "src/main.rs",
        "    // Runs the controllers until SIGTERM.\n",
        "    // Ours: runs until SIGTERM, then exits.\n",
    );
    commit(d, "Our operator");
    let base = git(d, &["branch", "--show-current"]).trim().to_string();
    let older = older();
    let from = ["alpha", "update", "--from-binary", older.to_str().unwrap()];

    // Stopped: the branch made, the markers left uncommitted on it.
    let mut args = from.to_vec();
    args.extend(["--output-branch", "update"]);
    let output = rustbuilder_with(d, &args, &[]);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{message}");
    assert!(
        message.contains("on the branch `update`, not committed:"),
        "{message}"
    );
    assert!(message.contains("pass `--force`"), "{message}");
    assert_eq!(git(d, &["branch", "--show-current"]).trim(), "update");
    assert_eq!(
        git(d, &["rev-parse", "update"]),
        git(d, &["rev-parse", &base])
    );
    assert!(read(d, "src/main.rs").contains("<<<<<<< ours\n"));

    // The way back the message gives, then forced: committed, markers and all, with our message.
    git(d, &["restore", "."]);
    git(d, &["clean", "-fdq"]);
    git(d, &["switch", "-q", &base]);
    git(d, &["branch", "-D", "update"]);
    let mut args = from.to_vec();
    args.extend([
        "--output-branch",
        "update",
        "--force",
        "--conflict-message",
        "Resolve me",
    ]);
    let output = ok(d, &args);
    assert!(
        stderr(&output).contains("committed with conflict markers"),
        "{}",
        stderr(&output)
    );
    assert_eq!(git(d, &["status", "--porcelain"]), "");
    assert_eq!(git(d, &["log", "-1", "--format=%s"]).trim(), "Resolve me");
    let committed = git(d, &["show", "HEAD:src/main.rs"]);
    assert!(committed.contains("<<<<<<< ours\n"), "{committed}");
}
