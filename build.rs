//! Embeds what the CLI writes into projects, and tells cargo when to rebuild because of it.
//!
//! `templates/` is embedded by `include_dir!`, which cargo does not track on its own. The runtime crates are
//! embedded file by file through a generated list (`$OUT_DIR/vendored.rs`) holding only what a project
//! builds on: each crate's `Cargo.toml`, `README.md` and `src/**`, never `tests/`, `examples/` or `target/`.
//!
//! In the repository they are read from `crates/`. The CLI's package (`cargo package`, `cargo install`)
//! cannot hold `crates/`, which are packages of their own, so it carries them in `vendored/`: symlinks into
//! `crates/` that `cargo package` stores as plain files, the manifest as `Cargo.toml.in` (a directory holding
//! a `Cargo.toml` would be a package of its own, and left out).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The crates copied into a generated project: (package name, directory under `vendored/` in the CLI's
/// package and under the project's `rustbuilder/`).
const CRATES: &[(&str, &str)] = &[
    ("rustbuilder-runtime", "runtime"),
    ("rustbuilder-envtest", "envtest"),
];

fn main() {
    println!("cargo:rerun-if-changed=templates");
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for (package, target) in CRATES {
        let (source, manifest) = if root.join("crates").join(package).is_dir() {
            (format!("crates/{package}"), "Cargo.toml")
        } else {
            (format!("vendored/{target}"), "Cargo.toml.in")
        };
        let dir = root.join(&source);
        for (name, as_name) in [(manifest, "Cargo.toml"), ("README.md", "README.md")] {
            let path = dir.join(name);
            if path.is_file() {
                println!("cargo:rerun-if-changed={source}/{name}");
                files.push((format!("{target}/{as_name}"), path));
            } else {
                // Rebuild once the file appears.
                println!("cargo:rerun-if-changed={source}");
            }
        }
        println!("cargo:rerun-if-changed={source}/src");
        assert!(
            dir.join("src/lib.rs").is_file(),
            "{source}/src/lib.rs is missing: the CLI embeds the runtime crates, from `crates/` in the repository or `vendored/` in its package"
        );
        walk(&dir, &dir.join("src"), target, &mut files);
    }
    files.sort();
    let mut out = String::from(
        "/// Every vendored file: its path under the project's `rustbuilder/`, and its bytes.\n\
         pub static FILES: &[(&str, &[u8])] = &[\n",
    );
    // Paths relative to the package, joined at compile time: the build script's output is reused by a
    // checkout elsewhere that shares the target dir (cargo hashes a path package by its path relative to
    // the workspace), and an absolute path would embed the other checkout's files.
    for (relative, path) in &files {
        let from_root = path.strip_prefix(&root).expect("under the package");
        let from_root = from_root.to_string_lossy().replace('\\', "/");
        let _ = writeln!(
            out,
            "    ({relative:?}, include_bytes!(concat!(env!(\"CARGO_MANIFEST_DIR\"), {:?}))),",
            format!("/{from_root}")
        );
    }
    out.push_str("];\n");
    let dest =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo")).join("vendored.rs");
    std::fs::write(dest, out).expect("OUT_DIR is writable");
}

/// Collects the files under `dir` as (`<target>/<path relative to crate>`, absolute path).
fn walk(crate_dir: &Path, dir: &Path, target: &str, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("readable directory").path();
        if path.is_dir() {
            walk(crate_dir, &path, target, out);
        } else {
            let relative = path.strip_prefix(crate_dir).expect("under the crate");
            let relative = relative.to_string_lossy().replace('\\', "/");
            out.push((format!("{target}/{relative}"), path));
        }
    }
}
