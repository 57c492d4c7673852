//! Control-plane binaries for tests, found or built: rustbuilder's setup-envtest.
//!
//! Assets live where setup-envtest keeps them, `<bin-dir>/k8s/<version>-<os>-<arch>/`, and tests find them
//! through `KUBEBUILDER_ASSETS`, so existing envtest users need nothing new. Nothing is downloaded from
//! release pages: when the assets are missing they are built from Go modules with the local Go toolchain.
//! A build writes into a temporary directory renamed into place at the end, so an interrupted build leaves
//! no half-filled asset directory and simply starts over (Go's build cache keeps finished work).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, Result, anyhow, bail};
use serde::Serialize;

use crate::{scaffold, shell, versions};

/// Binaries every asset directory holds.
pub const BINARIES: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kubectl",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
];

/// kwok stage files copied next to the binaries (kwok has no built-in stages since v0.8.0).
const KWOK_STAGES: &[&str] = &[
    "node/fast/node-initialize.yaml",
    "node/heartbeat/node-heartbeat.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
];
pub const KWOK_STAGES_DIR: &str = "kwok-stages";

/// The default `--bin-dir`: `$XDG_DATA_HOME/kubebuilder-envtest`, as setup-envtest uses.
pub fn default_bin_dir() -> Result<PathBuf> {
    if let Some(data) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(data).join("kubebuilder-envtest"));
    }
    let home = std::env::var_os("HOME")
        .ok_or_else(|| anyhow!("HOME is not set\nhelp: pass `--bin-dir DIR`"))?;
    Ok(PathBuf::from(home).join(".local/share/kubebuilder-envtest"))
}

/// `linux/amd64`: the platform in Go's words, as setup-envtest names it.
pub fn platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    (std::env::consts::OS, arch)
}

/// `1.36.3-linux-amd64`, the directory name setup-envtest uses.
pub fn platform_dir(version: &str) -> String {
    let (os, arch) = platform();
    format!("{version}-{os}-{arch}")
}

/// Checks `1.36.3`-style versions (a leading `v` is accepted and dropped).
pub fn parse_version(version: &str) -> Result<String> {
    let version = version.strip_prefix('v').unwrap_or(version);
    let parts: Vec<&str> = version.split('.').collect();
    if parts.len() != 3
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
        || parts[0] != "1"
    {
        bail!(
            "invalid Kubernetes version `{version}`: expected a full release like `{}`\nhelp: give major.minor.patch",
            versions::KUBERNETES
        );
    }
    Ok(version.to_string())
}

/// What is missing from an asset directory, if anything.
pub fn missing(dir: &Path) -> Vec<String> {
    let mut missing: Vec<String> = BINARIES
        .iter()
        .filter(|b| !dir.join(b).is_file())
        .map(|b| b.to_string())
        .collect();
    if !dir.join(KWOK_STAGES_DIR).is_dir() {
        missing.push(format!("{KWOK_STAGES_DIR}/"));
    }
    missing
}

/// Cached versions under `bin_dir`, sorted.
pub fn list(bin_dir: &Path) -> Result<Vec<(String, PathBuf, bool)>> {
    let k8s = bin_dir.join("k8s");
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(&k8s) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e).with_context(|| format!("failed to read `{}`", k8s.display())),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with('.') || !entry.file_type()?.is_dir() {
            continue;
        }
        let path = entry.path();
        let complete = missing(&path).is_empty();
        found.push((name, path, complete));
    }
    found.sort();
    Ok(found)
}

/// Where the assets came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Environment,
    Cache,
    Built,
}

/// Returns a complete asset directory for `version`: `KUBEBUILDER_ASSETS` when it is complete, else the
/// cache, else a fresh build with Go.
pub fn provide(version: &str, bin_dir: &Path, use_env: bool) -> Result<(PathBuf, Source)> {
    if use_env
        && let Some(dir) = std::env::var_os("KUBEBUILDER_ASSETS")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
        && missing(&dir).is_empty()
    {
        return Ok((dir, Source::Environment));
    }
    let target = bin_dir.join("k8s").join(platform_dir(version));
    if missing(&target).is_empty() {
        return Ok((target, Source::Cache));
    }
    build(version, bin_dir, &target)?;
    Ok((target, Source::Built))
}

#[derive(Serialize)]
struct ModuleContext {
    version: String,
    minor_patch: String,
    staging: Vec<String>,
    etcd_version: &'static str,
    kwok_version: &'static str,
}

/// Builds every binary into a temporary directory next to `target`, then renames it into place.
fn build(version: &str, bin_dir: &Path, target: &Path) -> Result<()> {
    let go = which_go()?;
    let started = Instant::now();
    let work = bin_dir.join("k8s").join(format!(".build-{version}"));
    let partial = bin_dir.join("k8s").join(format!(
        ".{}-partial-{}",
        platform_dir(version),
        std::process::id()
    ));
    std::fs::create_dir_all(&partial)
        .with_context(|| format!("failed to create `{}`", partial.display()))?;
    let result = (|| -> Result<()> {
        shell::status(
            "Building",
            format!(
                "Kubernetes {version} control plane with {} (cold builds take a while; Go's cache makes later ones fast)",
                go.display()
            ),
        );
        let context = ModuleContext {
            minor_patch: version
                .split_once('.')
                .map(|(_, rest)| rest.to_string())
                .unwrap_or_default(),
            staging: staging_modules(&go, version)?,
            version: version.to_string(),
            etcd_version: versions::ETCD,
            kwok_version: versions::KWOK,
        };
        let context = tera::Context::from_serialize(&context)?;
        let (major_minor, _) = version.rsplit_once('.').unwrap_or((version, ""));
        let minor = major_minor.split('.').nth(1).unwrap_or_default();
        let mut ldflags = String::from("-s -w");
        for package in [
            "k8s.io/component-base/version",
            "k8s.io/client-go/pkg/version",
        ] {
            ldflags.push_str(&format!(
                " -X {package}.gitVersion=v{version} -X {package}.gitMajor=1 -X {package}.gitMinor={minor} -X {package}.gitTreeState=clean"
            ));
        }
        let modules: [(&str, &[&str], &str); 3] = [
            (
                "kubernetes",
                &[
                    "k8s.io/kubernetes/cmd/kube-apiserver",
                    "k8s.io/kubernetes/cmd/kube-controller-manager",
                    "k8s.io/kubernetes/cmd/kube-scheduler",
                    "k8s.io/kubernetes/cmd/kubectl",
                ],
                &ldflags,
            ),
            ("etcd", &["go.etcd.io/etcd/server/v3"], "-s -w"),
            ("kwok", &["sigs.k8s.io/kwok/cmd/kwok"], "-s -w"),
        ];
        for (module, packages, flags) in modules {
            let dir = work.join(module);
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("failed to create `{}`", dir.display()))?;
            let go_mod = scaffold::render(&format!("envtest/{module}/go.mod.tera"), &context)?;
            if std::fs::read_to_string(dir.join("go.mod")).ok().as_deref() != Some(go_mod.as_str())
            {
                std::fs::write(dir.join("go.mod"), &go_mod)?;
                let _ = std::fs::remove_file(dir.join("go.sum"));
            }
            if !dir.join("go.sum").exists() {
                shell::status("Resolving", format!("{module} modules (go mod tidy)"));
                run_go(&go, &dir, &["mod", "tidy"], None)?;
            }
            let out = if module == "etcd" {
                partial.join("etcd")
            } else {
                partial.clone()
            };
            let mut args = vec![
                "build".to_string(),
                "-v".into(),
                "-trimpath".into(),
                "-ldflags".into(),
                flags.to_string(),
            ];
            args.push("-o".into());
            args.push(format!(
                "{}{}",
                out.display(),
                if module == "etcd" { "" } else { "/" }
            ));
            args.extend(packages.iter().map(|p| p.to_string()));
            let names: Vec<&str> = packages
                .iter()
                .map(|p| p.rsplit('/').next().unwrap_or(p))
                .collect();
            shell::status(
                "Compiling",
                if module == "etcd" {
                    "etcd".to_string()
                } else {
                    names.join(", ")
                },
            );
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_go(&go, &dir, &args, Some(module))?;
        }
        copy_kwok_stages(&go, &partial)?;
        let still_missing = missing(&partial);
        if !still_missing.is_empty() {
            bail!("the build finished without {}", still_missing.join(", "));
        }
        if target.exists() {
            std::fs::remove_dir_all(target)
                .with_context(|| format!("failed to replace `{}`", target.display()))?;
        }
        std::fs::rename(&partial, target)
            .with_context(|| format!("failed to move the assets to `{}`", target.display()))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&partial);
    }
    result?;
    shell::status(
        "Finished",
        format!(
            "control plane {version} in {:.0?} → {}",
            started.elapsed(),
            target.display()
        ),
    );
    Ok(())
}

fn which_go() -> Result<PathBuf> {
    let go = std::env::var_os("GO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("go"));
    match Command::new(&go)
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => Ok(go),
        _ => bail!(
            "the control-plane assets are missing and Go is not installed, so they cannot be built\nhelp: install Go 1.26 or newer (https://go.dev/doc/install, or your package manager), or point KUBEBUILDER_ASSETS at a directory holding {}",
            BINARIES.join(", ")
        ),
    }
}

/// The staging modules `k8s.io/kubernetes` requires as `v0.0.0`, read from its own go.mod.
fn staging_modules(go: &Path, version: &str) -> Result<Vec<String>> {
    let output = Command::new(go)
        .args([
            "mod",
            "download",
            "-json",
            &format!("k8s.io/kubernetes@v{version}"),
        ])
        .env("GOFLAGS", "-mod=mod")
        .stderr(Stdio::inherit())
        .output()
        .context("failed to run `go mod download`")?;
    if !output.status.success() {
        bail!(
            "`go mod download k8s.io/kubernetes@v{version}` failed\nhelp: check the version exists and the Go module proxy is reachable (GOPROXY={})",
            std::env::var("GOPROXY").unwrap_or_else(|_| "default".into())
        );
    }
    let info: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let go_mod = info["GoMod"]
        .as_str()
        .ok_or_else(|| anyhow!("`go mod download` gave no GoMod path"))?;
    let text =
        std::fs::read_to_string(go_mod).with_context(|| format!("failed to read `{go_mod}`"))?;
    let mut modules: Vec<String> = text
        .lines()
        .map(|l| {
            l.split("//")
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .collect::<Vec<_>>()
        })
        .filter(|words| matches!(words.as_slice(), [m, "v0.0.0"] if m.starts_with("k8s.io/")))
        .map(|words| words[0].to_string())
        .collect();
    modules.sort();
    modules.dedup();
    if modules.is_empty() {
        bail!("found no staging modules in k8s.io/kubernetes v{version}'s go.mod");
    }
    Ok(modules)
}

/// Runs a go command in `dir`; with `progress`, counts the packages `go build -v` reports.
fn run_go(go: &Path, dir: &Path, args: &[&str], progress: Option<&str>) -> Result<()> {
    let mut child = Command::new(go)
        .args(args)
        .current_dir(dir)
        .env("CGO_ENABLED", "0")
        .env("GOFLAGS", "-mod=mod")
        .env("GOWORK", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("failed to run `go {}`", args.join(" ")))?;
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut tail: Vec<String> = Vec::new();
    let mut packages = 0usize;
    let started = Instant::now();
    for line in BufReader::new(stderr).lines() {
        let line = line?;
        if progress.is_some() && !line.contains(' ') && !line.starts_with('#') {
            packages += 1;
            if packages.is_multiple_of(250) {
                shell::status(
                    "Progress",
                    format!("{packages} packages compiled ({:.0?})", started.elapsed()),
                );
            }
        } else {
            tail.push(line);
        }
    }
    let status = child.wait()?;
    if !status.success() {
        let shown = tail.len().saturating_sub(30);
        bail!(
            "`go {}` failed ({status}):\n{}",
            args.join(" "),
            tail[shown..].join("\n")
        );
    }
    Ok(())
}

/// Copies kwok's stage files out of the module cache into `<assets>/kwok-stages/`.
fn copy_kwok_stages(go: &Path, assets: &Path) -> Result<()> {
    let output = Command::new(go)
        .args([
            "mod",
            "download",
            "-json",
            &format!("sigs.k8s.io/kwok@v{}", versions::KWOK),
        ])
        .env("GOFLAGS", "-mod=mod")
        .output()
        .context("failed to run `go mod download`")?;
    let info: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("`go mod download` gave no JSON")?;
    let source = PathBuf::from(
        info["Dir"]
            .as_str()
            .ok_or_else(|| anyhow!("`go mod download` gave no Dir for kwok"))?,
    );
    let stages = assets.join(KWOK_STAGES_DIR);
    std::fs::create_dir_all(&stages)?;
    for stage in KWOK_STAGES {
        let from = source.join("kustomize/stage").join(stage);
        let name = stage.rsplit('/').next().unwrap_or(stage);
        std::fs::copy(&from, stages.join(name))
            .with_context(|| format!("failed to copy `{}`", from.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_layout() {
        assert_eq!(parse_version("v1.36.3").unwrap(), "1.36.3");
        assert!(parse_version("1.36").is_err());
        assert!(parse_version("latest").is_err());
        assert!(platform_dir("1.36.3").starts_with("1.36.3-"));
    }

    #[test]
    fn an_empty_dir_misses_everything() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(missing(dir.path()).len(), BINARIES.len() + 1);
        assert!(list(dir.path()).unwrap().is_empty());
    }
}
