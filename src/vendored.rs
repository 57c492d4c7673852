//! The runtime crates every generated project builds on, carried inside the CLI.
//!
//! `init` writes them into the project's [`DIR`] (`rustbuilder/runtime/`, `rustbuilder/envtest/`), and the
//! project depends on them by `version` + `path`: it builds with only crates.io reachable, and publishing
//! it later drops the path. rustbuilder owns that directory: `rustbuilder alpha update-runtime` makes it
//! exactly the runtime of the installed rustbuilder again. A project made with `init --runtime-source
//! registry` has no copy: it depends on the crates on crates.io, and `update-runtime` moves its version
//! requirements.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::project::{self, Project};
use crate::scaffold::{IfExists, Plan};

mod files {
    include!(concat!(env!("OUT_DIR"), "/vendored.rs"));
}

/// The project directory that holds the vendored crates.
pub const DIR: &str = "rustbuilder";

/// The subdirectories of [`DIR`] that hold one crate each: their contents are replaced as a whole.
pub const CRATE_DIRS: &[&str] = &["runtime", "envtest"];

/// The `README.md` of [`DIR`]: what the directory is, and how to refresh it.
pub fn readme() -> String {
    format!(
        "# rustbuilder/\n\
         \n\
         The runtime this project builds on, as rustbuilder {version} ships it:\n\
         \n\
         - `runtime/`: the `rustbuilder-runtime` crate (the manager, metrics, leader election, server-side\n  \
         apply, conditions, events and the `make manifests` writer), a dependency of the project;\n\
         - `envtest/`: the `rustbuilder-envtest` crate (a real control plane for tests), a dev-dependency.\n\
         \n\
         Cargo.toml depends on both by `version` and `path`, so the project builds with nothing but crates.io.\n\
         \n\
         Do not edit these files: rustbuilder owns them and replaces them. To move the project to the runtime\n\
         of the installed rustbuilder, run\n\
         \n\
         ```sh\n\
         rustbuilder alpha update-runtime\n\
         ```\n\
         \n\
         and review the change with `git diff rustbuilder/`.\n",
        version = env!("CARGO_PKG_VERSION")
    )
}

/// Every vendored file: its path relative to the project root, and its contents.
pub fn files() -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<(PathBuf, Vec<u8>)> = files::FILES
        .iter()
        .map(|(path, bytes)| (Path::new(DIR).join(path), bytes.to_vec()))
        .collect();
    out.push((Path::new(DIR).join("README.md"), readme().into_bytes()));
    out.sort();
    out
}

/// The version requirement a project puts on the runtime crates: `0.1` for rustbuilder 0.1.x, `1` for 1.y.z
/// (the versions cargo treats as compatible).
pub fn version_req() -> String {
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    let minor = env!("CARGO_PKG_VERSION_MINOR");
    if major == "0" {
        format!("0.{minor}")
    } else {
        major.to_string()
    }
}

/// Adds every vendored file to `plan`, replacing what is on disk.
pub fn add_to(plan: &mut Plan) -> Result<()> {
    for (path, bytes) in files() {
        let text = String::from_utf8(bytes)
            .with_context(|| format!("vendored file `{}` is not UTF-8", path.display()))?;
        plan.add(path, text, IfExists::Overwrite);
    }
    Ok(())
}

/// Plans the refresh of an existing project's [`DIR`]: every vendored file as this rustbuilder ships it,
/// the removal of files a crate no longer has, and the version requirements in `Cargo.toml`. For a
/// project on the crates.io runtime, only the requirements.
pub fn update(dir: &Path) -> Result<Plan> {
    let project = crate::project::Project::load(dir)?;
    let mut plan = Plan::new(dir);
    let source = RuntimeSource::of(&project)?;
    if source == RuntimeSource::Registry {
        let req = source.version_req();
        plan.edit("Cargo.toml", |text| set_version_req(text, &req))?;
        return Ok(plan);
    }
    add_to(&mut plan)?;
    let shipped: std::collections::BTreeSet<PathBuf> =
        files().into_iter().map(|(path, _)| path).collect();
    for crate_dir in CRATE_DIRS {
        let relative = Path::new(DIR).join(crate_dir);
        let mut found = Vec::new();
        list_files(dir, &dir.join(&relative), &mut found)?;
        for path in found {
            if !shipped.contains(&path) {
                plan.remove(path);
            }
        }
    }
    let req = version_req();
    plan.edit("Cargo.toml", |text| set_version_req(text, &req))?;
    Ok(plan)
}

/// Files under `dir`, relative to `root`; nothing when `dir` is missing.
fn list_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("failed to read `{}`", dir.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("failed to read `{}`", dir.display()))?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            list_files(root, &path, out)?;
        } else {
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

/// Sets the version requirement in the `rustbuilder-runtime` and `rustbuilder-envtest` dependency lines:
/// `version = "..."` in a table, or the string of `name = "..."`.
fn set_version_req(cargo_toml: &str, req: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for line in cargo_toml.lines() {
        let value = ["rustbuilder-runtime", "rustbuilder-envtest"]
            .iter()
            .find_map(|name| line.trim_start().strip_prefix(&format!("{name} = ")));
        let updated = value.and_then(|value| {
            let start = if value.starts_with('{') {
                line.find("version = \"")? + "version = \"".len()
            } else if value.starts_with('"') {
                line.len() - value.len() + 1
            } else {
                return None;
            };
            let end = start + line[start..].find('"')?;
            Some(format!("{}{req}{}", &line[..start], &line[end..]))
        });
        let updated = updated.unwrap_or_else(|| line.to_string());
        out.push(with_manifests_feature(&updated));
    }
    let mut text = out.join("\n");
    if cargo_toml.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// The runtime's dependency line with its `manifests` feature, which `crdgen` needs (projects made
/// before the feature existed lack it); any other line as it is.
fn with_manifests_feature(line: &str) -> String {
    let Some(value) = line.trim_start().strip_prefix("rustbuilder-runtime = ") else {
        return line.to_string();
    };
    if value.starts_with('"') {
        let indent = &line[..line.len() - line.trim_start().len()];
        let value = value.trim_end();
        return format!(
            "{indent}rustbuilder-runtime = {{ version = {value}, features = [\"manifests\"] }}"
        );
    }
    if line.contains("features") {
        return line.to_string();
    }
    match line.rfind('}') {
        Some(end) => format!(
            "{}, features = [\"manifests\"] {}",
            line[..end].trim_end(),
            &line[end..]
        ),
        None => line.to_string(),
    }
}

/// Where a project gets rustbuilder's runtime crates (rustbuilder-runtime, and rustbuilder-envtest for its
/// tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeSource {
    /// A copy in the project's `rustbuilder/`, depended on by `version` and `path`: builds with crates.io
    /// alone, before any rustbuilder release is published.
    Vendored,
    /// crates.io, by version: `rustbuilder-runtime = "<version>"`, no copy in the project.
    Registry,
}

impl RuntimeSource {
    /// The value PROJECT records, `None` for the default.
    pub(crate) fn key(self) -> Option<&'static str> {
        match self {
            RuntimeSource::Vendored => None,
            RuntimeSource::Registry => Some("registry"),
        }
    }

    /// The runtime source PROJECT records (`vendored` when it records none).
    pub fn from_key(key: Option<&str>) -> Result<Self> {
        match key.unwrap_or("vendored") {
            "vendored" => Ok(RuntimeSource::Vendored),
            "registry" => Ok(RuntimeSource::Registry),
            other => {
                bail!("unknown runtimeSource `{other}` in PROJECT: use `vendored` or `registry`")
            }
        }
    }

    /// The runtime source of `project`.
    pub fn of(project: &Project) -> Result<Self> {
        Self::from_key(
            project
                .plugins
                .get(project::RUST_PLUGIN)
                .and_then(|p| p.runtime_source.as_deref()),
        )
    }

    /// The requirement `Cargo.toml` puts on the runtime crates: `0.1` for the vendored copy (which is
    /// exactly this rustbuilder's), this rustbuilder's version for crates.io (the oldest release with
    /// everything its scaffold uses).
    pub fn version_req(self) -> String {
        match self {
            RuntimeSource::Vendored => crate::vendored::version_req(),
            RuntimeSource::Registry => env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_manifests_readmes_and_sources_are_vendored() {
        let files = files();
        assert!(
            files
                .iter()
                .any(|(p, _)| p == Path::new("rustbuilder/runtime/Cargo.toml"))
        );
        assert!(
            files
                .iter()
                .any(|(p, _)| p == Path::new("rustbuilder/envtest/src/lib.rs"))
        );
        for (path, _) in &files {
            let mut parts = path.iter().map(|p| p.to_str().unwrap());
            assert_eq!(parts.next(), Some(DIR));
            let rest: Vec<&str> = parts.collect();
            assert!(
                matches!(
                    rest.as_slice(),
                    ["README.md"]
                        | ["runtime" | "envtest", "Cargo.toml" | "README.md"]
                        | ["runtime" | "envtest", "src", ..]
                ),
                "{} should not be vendored",
                path.display()
            );
        }
    }

    #[test]
    fn the_runtime_version_matches_the_requirement() {
        let req = version_req();
        for name in ["runtime", "envtest"] {
            let (_, toml) = files()
                .into_iter()
                .find(|(p, _)| *p == Path::new(DIR).join(name).join("Cargo.toml"))
                .unwrap();
            let toml = String::from_utf8(toml).unwrap();
            let version = toml
                .lines()
                .find_map(|l| l.strip_prefix("version = \""))
                .and_then(|v| v.strip_suffix('"'))
                .unwrap();
            assert!(
                version == req || version.starts_with(&format!("{req}.")),
                "rustbuilder-{name} {version} does not satisfy `{req}`"
            );
        }
    }

    #[test]
    fn version_requirements_are_rewritten_in_place() {
        let toml = "[dependencies]\nrustbuilder-runtime = { version = \"0.0\", path = \"rustbuilder/runtime\" }\nkube = { version = \"5\" }\n\n[dev-dependencies]\nrustbuilder-envtest = { version = \"0.0\", path = \"rustbuilder/envtest\" }\n";
        let updated = set_version_req(toml, "0.7");
        // A project made before the runtime's `manifests` feature gets it: its crdgen needs it.
        let expected = toml.replace("\"0.0\"", "\"0.7\"").replace(
            "path = \"rustbuilder/runtime\" }",
            "path = \"rustbuilder/runtime\", features = [\"manifests\"] }",
        );
        assert_eq!(updated, expected);
        assert!(updated.contains("kube = { version = \"5\" }"));
        assert_eq!(set_version_req(&updated, "0.7"), updated, "added twice");
    }

    #[test]
    fn registry_requirements_are_rewritten_in_place() {
        let toml = "[dependencies]\nrustbuilder-runtime = { version = \"0.0.3\", features = [\"manifests\"] }\nkube = \"5\"\n\n[dev-dependencies]\nrustbuilder-envtest = \"0.0.3\"\n";
        let updated = set_version_req(toml, "0.7.1");
        assert_eq!(updated, toml.replace("\"0.0.3\"", "\"0.7.1\""));
        // Written before the runtime's `manifests` feature: it gets the feature.
        let plain = set_version_req("rustbuilder-runtime = \"0.0.3\"\n", "0.7.1");
        assert_eq!(
            plain,
            "rustbuilder-runtime = { version = \"0.7.1\", features = [\"manifests\"] }\n"
        );
    }
}
