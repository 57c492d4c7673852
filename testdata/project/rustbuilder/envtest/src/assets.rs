//! Control-plane binaries for tests, found or built: a `setup-envtest` that compiles instead of downloading.
//!
//! Assets live where `setup-envtest` keeps them, `<bin-dir>/k8s/<version>-<os>-<arch>/`, and tests find
//! them through `KUBEBUILDER_ASSETS`, so existing envtest users need nothing new. Nothing is downloaded
//! from release pages: missing assets are built from Go modules with the local Go toolchain. A build
//! writes into a temporary directory renamed into place at the end, so an interrupted build leaves no
//! half-filled asset directory and simply starts over (Go's build cache keeps finished work). A lock file
//! makes concurrent callers (several test binaries, say) wait for one build instead of racing.
//!
//! This module uses only the standard library and `serde_json`, so command-line tools can use it without
//! the test harness (`default-features = false`).
//!
//! ```no_run
//! use rustbuilder_envtest::assets;
//!
//! let bin_dir = assets::default_bin_dir()?;
//! let (dir, _source) = assets::provide(
//!     assets::DEFAULT_KUBERNETES_VERSION,
//!     &bin_dir,
//!     true,
//!     &assets::print_status,
//! )?;
//! println!("export KUBEBUILDER_ASSETS={}", dir.display());
//! # Ok::<(), assets::Error>(())
//! ```

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The Kubernetes release built when none is asked for.
pub const DEFAULT_KUBERNETES_VERSION: &str = "1.36.3";
/// The etcd release built next to Kubernetes [`DEFAULT_KUBERNETES_VERSION`].
pub const ETCD_VERSION: &str = "3.6.16";
/// The kwok release that runs fake nodes and pods in cluster mode.
pub const KWOK_VERSION: &str = "0.8.0";

/// Binaries every complete asset directory holds.
pub const BINARIES: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kubectl",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
];

/// The directory, next to the binaries, holding kwok's Stage files (kwok has no built-in stages since
/// v0.8.0: Stage objects drive nodes and pods).
pub const KWOK_STAGES_DIR: &str = "kwok-stages";

/// kwok stage files copied out of its module into [`KWOK_STAGES_DIR`].
const KWOK_STAGES: &[&str] = &[
    "node/fast/node-initialize.yaml",
    "node/heartbeat/node-heartbeat.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
];

/// A failure to find or build assets. Its message is lowercase, names paths in backticks and may end
/// with `help: …` lines saying how to fix it.
#[derive(Debug)]
pub struct Error {
    message: String,
    source: Option<std::io::Error>,
}

impl Error {
    fn new(message: impl Into<String>) -> Self {
        Error {
            message: message.into(),
            source: None,
        }
    }

    fn io(message: impl Into<String>, source: std::io::Error) -> Self {
        Error {
            message: message.into(),
            source: Some(source),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}

/// The result of this module's fallible functions.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Receives progress lines: a verb and a message.
type Report<'a> = dyn Fn(&str, &str) + 'a;

/// Adds the path to an IO error, as every IO error here should say which file it is about.
trait PathContext<T> {
    fn at(self, what: &str, path: &Path) -> Result<T>;
}

impl<T> PathContext<T> for std::io::Result<T> {
    fn at(self, what: &str, path: &Path) -> Result<T> {
        self.map_err(|e| Error::io(format!("failed to {what} `{}`", path.display()), e))
    }
}

/// The default cache directory: `$XDG_DATA_HOME/kubebuilder-envtest`, else
/// `~/.local/share/kubebuilder-envtest`, as `setup-envtest` uses.
pub fn default_bin_dir() -> Result<PathBuf> {
    if let Some(data) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(data).join("kubebuilder-envtest"));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or_else(|| Error::new("HOME is not set\nhelp: pass `--bin-dir DIR`"))?;
    Ok(PathBuf::from(home).join(".local/share/kubebuilder-envtest"))
}

/// This machine's platform in Go's words, e.g. `("linux", "amd64")`.
pub fn platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    (std::env::consts::OS, arch)
}

/// The cache directory name of a version on this platform, e.g. `1.36.3-linux-amd64`.
pub fn platform_dir(version: &str) -> String {
    let (os, arch) = platform();
    format!("{version}-{os}-{arch}")
}

/// Checks a full Kubernetes release such as `1.36.3` (a leading `v` is accepted and dropped).
pub fn parse_version(version: &str) -> Result<String> {
    let version = version.strip_prefix('v').unwrap_or(version);
    let parts: Vec<&str> = version.split('.').collect();
    if parts.len() != 3
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
        || parts[0] != "1"
    {
        return Err(Error::new(format!(
            "invalid Kubernetes version `{version}`: expected a full release like `{DEFAULT_KUBERNETES_VERSION}`\nhelp: give major.minor.patch"
        )));
    }
    Ok(version.to_string())
}

/// What an asset directory lacks: binary names, and `kwok-stages/` when the stage files are missing.
/// Empty for a complete directory.
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

/// One version found in the cache.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cached {
    /// The directory name, e.g. `1.36.3-linux-amd64`.
    pub name: String,
    /// The directory itself.
    pub path: PathBuf,
    /// Whether it holds every binary (see [`missing`]).
    pub complete: bool,
}

/// The versions cached under `bin_dir`, sorted by name. A missing cache is empty, not an error.
pub fn list(bin_dir: &Path) -> Result<Vec<Cached>> {
    let k8s = bin_dir.join("k8s");
    let entries = match std::fs::read_dir(&k8s) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).at("read", &k8s),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.at("read", &k8s)?;
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with('.') || !entry.path().is_dir() {
            continue;
        }
        let path = entry.path();
        let complete = missing(&path).is_empty();
        found.push(Cached {
            name,
            path,
            complete,
        });
    }
    found.sort();
    Ok(found)
}

/// Where [`provide`] found the assets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `KUBEBUILDER_ASSETS` pointed at a complete directory.
    Environment,
    /// The cache already held them.
    Cache,
    /// They were built just now.
    Built,
}

/// Prints a progress line on stderr, cargo style (`   Compiling etcd`). The default reporter for
/// [`provide`]; it writes to the stderr handle directly, so it shows even inside `cargo test`.
pub fn print_status(verb: &str, message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{verb:>12} {message}");
}

/// Returns a complete asset directory for `version`: `KUBEBUILDER_ASSETS` when `use_env` is set and it
/// points at a complete directory, else the cache `<bin_dir>/k8s/<version>-<os>-<arch>`, else a fresh
/// build into that cache with Go (minutes when cold). `status` receives progress lines (a verb and a
/// message), e.g. [`print_status`].
///
/// Only one process builds at a time; the others wait for its lock and then use its result.
pub fn provide(
    version: &str,
    bin_dir: &Path,
    use_env: bool,
    status: &dyn Fn(&str, &str),
) -> Result<(PathBuf, Source)> {
    if use_env
        && let Some(dir) = std::env::var_os("KUBEBUILDER_ASSETS")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
        && missing(&dir).is_empty()
    {
        return Ok((dir, Source::Environment));
    }
    let k8s = bin_dir.join("k8s");
    let target = k8s.join(platform_dir(version));
    if missing(&target).is_empty() {
        return Ok((target, Source::Cache));
    }
    std::fs::create_dir_all(&k8s).at("create", &k8s)?;
    let lock_path = k8s.join(format!(".{}.lock", platform_dir(version)));
    let lock = File::create(&lock_path).at("create", &lock_path)?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            status(
                "Waiting",
                &format!(
                    "for another process building Kubernetes {version} (lock `{}`)",
                    lock_path.display()
                ),
            );
            lock.lock().at("lock", &lock_path)?;
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(e).at("lock", &lock_path),
    }
    // Whoever held the lock may have finished the build meanwhile.
    if missing(&target).is_empty() {
        return Ok((target, Source::Cache));
    }
    build(version, bin_dir, &target, status)?;
    Ok((target, Source::Built))
    // `lock` is released when dropped here.
}

/// Builds every binary into a temporary directory next to `target`, then renames it into place.
fn build(version: &str, bin_dir: &Path, target: &Path, status: &dyn Fn(&str, &str)) -> Result<()> {
    let go = which_go()?;
    let started = Instant::now();
    let work = bin_dir.join("k8s").join(format!(".build-{version}"));
    let partial = bin_dir.join("k8s").join(format!(
        ".{}-partial-{}",
        platform_dir(version),
        std::process::id()
    ));
    std::fs::create_dir_all(&partial).at("create", &partial)?;
    let result = build_into(&go, version, &work, &partial, target, status);
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&partial);
    }
    result?;
    status(
        "Finished",
        &format!(
            "control plane {version} in {:.0?} → {}",
            started.elapsed(),
            target.display()
        ),
    );
    Ok(())
}

fn build_into(
    go: &Path,
    version: &str,
    work: &Path,
    partial: &Path,
    target: &Path,
    status: &dyn Fn(&str, &str),
) -> Result<()> {
    status(
        "Building",
        &format!(
            "Kubernetes {version} control plane with {} (cold builds take a while; Go's cache makes later ones fast)",
            go.display()
        ),
    );
    let staging = staging_modules(go, version)?;
    let minor = version.split('.').nth(1).unwrap_or_default();
    let mut ldflags = String::from("-s -w");
    for package in [
        "k8s.io/component-base/version",
        "k8s.io/client-go/pkg/version",
    ] {
        ldflags.push_str(&format!(
            " -X {package}.gitVersion=v{version} -X {package}.gitMajor=1 -X {package}.gitMinor={minor} -X {package}.gitTreeState=clean"
        ));
    }
    let modules: [(&str, String, &[&str], &str); 3] = [
        (
            "kubernetes",
            kubernetes_go_mod(version, &staging),
            &[
                "k8s.io/kubernetes/cmd/kube-apiserver",
                "k8s.io/kubernetes/cmd/kube-controller-manager",
                "k8s.io/kubernetes/cmd/kube-scheduler",
                "k8s.io/kubernetes/cmd/kubectl",
            ],
            &ldflags,
        ),
        (
            "etcd",
            etcd_go_mod(ETCD_VERSION),
            &["go.etcd.io/etcd/server/v3"],
            "-s -w",
        ),
        (
            "kwok",
            kwok_go_mod(KWOK_VERSION),
            &["sigs.k8s.io/kwok/cmd/kwok"],
            "-s -w",
        ),
    ];
    for (module, go_mod, packages, flags) in modules {
        let dir = work.join(module);
        std::fs::create_dir_all(&dir).at("create", &dir)?;
        let go_mod_path = dir.join("go.mod");
        if std::fs::read_to_string(&go_mod_path).ok().as_deref() != Some(go_mod.as_str()) {
            std::fs::write(&go_mod_path, &go_mod).at("write", &go_mod_path)?;
            let _ = std::fs::remove_file(dir.join("go.sum"));
        }
        if !dir.join("go.sum").exists() {
            status("Resolving", &format!("{module} modules (go mod tidy)"));
            run_go(go, &dir, &["mod", "tidy"], None)?;
        }
        // etcd's main package is named `v3`: give its binary a name.
        let out = if module == "etcd" {
            partial.join("etcd").display().to_string()
        } else {
            format!("{}/", partial.display())
        };
        let mut args = vec!["build", "-v", "-trimpath", "-ldflags", flags, "-o", &out];
        args.extend(packages);
        let names: Vec<&str> = if module == "etcd" {
            vec!["etcd"]
        } else {
            packages
                .iter()
                .map(|p| p.rsplit('/').next().unwrap_or(p))
                .collect()
        };
        status("Compiling", &names.join(", "));
        run_go(go, &dir, &args, Some(status))?;
    }
    copy_kwok_stages(go, partial)?;
    let still_missing = missing(partial);
    if !still_missing.is_empty() {
        return Err(Error::new(format!(
            "the build finished without {}",
            still_missing.join(", ")
        )));
    }
    if target.exists() {
        std::fs::remove_dir_all(target).at("replace", target)?;
    }
    std::fs::rename(partial, target).at("move the assets to", target)
}

/// The go.mod that builds kube-apiserver, kube-controller-manager, kube-scheduler and kubectl.
/// `staging` lists the modules `k8s.io/kubernetes` requires as `v0.0.0`.
fn kubernetes_go_mod(version: &str, staging: &[String]) -> String {
    let minor_patch = version.split_once('.').map_or("", |(_, rest)| rest);
    let replace: String = staging
        .iter()
        .map(|module| format!("\t{module} => {module} v0.{minor_patch}\n"))
        .collect();
    format!(
        "// Builds kube-apiserver, kube-controller-manager, kube-scheduler and kubectl {version} from the Go
// module proxy. Written by rustbuilder-envtest; safe to delete.
module rustbuilder.local/envtest/kubernetes

go 1.26.0

require k8s.io/kubernetes v{version}

// k8s.io/kubernetes refers to its staging repositories as v0.0.0; point each at its published twin.
replace (
{replace})

tool (
\tk8s.io/kubernetes/cmd/kube-apiserver
\tk8s.io/kubernetes/cmd/kube-controller-manager
\tk8s.io/kubernetes/cmd/kube-scheduler
\tk8s.io/kubernetes/cmd/kubectl
)
"
    )
}

/// The go.mod that builds etcd.
fn etcd_go_mod(etcd: &str) -> String {
    format!(
        "// Builds etcd {etcd} from the Go module proxy. Written by rustbuilder-envtest; safe to delete.
module rustbuilder.local/envtest/etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 v{etcd}

tool go.etcd.io/etcd/server/v3
"
    )
}

/// The go.mod that builds kwok.
fn kwok_go_mod(kwok: &str) -> String {
    format!(
        "// Builds kwok {kwok} (fake nodes and pods) from the Go module proxy. Written by rustbuilder-envtest;
// safe to delete.
module rustbuilder.local/envtest/kwok

go 1.26.0

require sigs.k8s.io/kwok v{kwok}

tool sigs.k8s.io/kwok/cmd/kwok
"
    )
}

/// `$GO`, else `go` from `PATH`, if it runs.
fn which_go() -> Result<PathBuf> {
    let go = std::env::var_os("GO")
        .filter(|g| !g.is_empty())
        .map_or_else(|| PathBuf::from("go"), PathBuf::from);
    match Command::new(&go)
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => Ok(go),
        _ => Err(Error::new(format!(
            "the control-plane assets are missing and Go is not installed, so they cannot be built\nhelp: install Go 1.26 or newer (https://go.dev/doc/install, or your package manager), or point KUBEBUILDER_ASSETS at a directory holding {}",
            BINARIES.join(", ")
        ))),
    }
}

/// Downloads a module with `go mod download -json` and returns the JSON Go prints about it.
fn download(go: &Path, module: &str) -> Result<serde_json::Value> {
    let output = Command::new(go)
        .args(["mod", "download", "-json", module])
        .env("GOFLAGS", "-mod=mod")
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::io("failed to run `go mod download`", e))?;
    if !output.status.success() {
        return Err(Error::new(format!(
            "`go mod download {module}` failed\nhelp: check the version exists and the Go module proxy is reachable (GOPROXY={})",
            std::env::var("GOPROXY").unwrap_or_else(|_| "default".into())
        )));
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|e| Error::new(format!("`go mod download {module}` gave no JSON: {e}")))
}

/// The staging modules `k8s.io/kubernetes` requires as `v0.0.0`, read from its own go.mod.
fn staging_modules(go: &Path, version: &str) -> Result<Vec<String>> {
    let info = download(go, &format!("k8s.io/kubernetes@v{version}"))?;
    let go_mod = info["GoMod"]
        .as_str()
        .ok_or_else(|| Error::new("`go mod download` gave no GoMod path"))?;
    let text = std::fs::read_to_string(go_mod).at("read", Path::new(go_mod))?;
    let modules = staging_in(&text);
    if modules.is_empty() {
        return Err(Error::new(format!(
            "found no staging modules in k8s.io/kubernetes v{version}'s go.mod"
        )));
    }
    Ok(modules)
}

/// The `k8s.io/*` modules a go.mod requires at `v0.0.0`, sorted.
fn staging_in(go_mod: &str) -> Vec<String> {
    let mut modules: Vec<String> = go_mod
        .lines()
        .map(|l| {
            l.split("//")
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .collect::<Vec<_>>()
        })
        .filter_map(|words| match words.as_slice() {
            [m, "v0.0.0"] | ["require", m, "v0.0.0"] if m.starts_with("k8s.io/") => {
                Some(m.to_string())
            }
            _ => None,
        })
        .collect();
    modules.sort();
    modules.dedup();
    modules
}

/// Runs a go command in `dir`. With `progress`, counts the packages `go build -v` reports.
fn run_go(go: &Path, dir: &Path, args: &[&str], progress: Option<&Report>) -> Result<()> {
    let command = format!("go {}", args.join(" "));
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
        .map_err(|e| Error::io(format!("failed to run `{command}`"), e))?;
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut tail: Vec<String> = Vec::new();
    let mut packages = 0usize;
    let started = Instant::now();
    for line in BufReader::new(stderr).lines() {
        let line = line.map_err(|e| Error::io(format!("failed to read from `{command}`"), e))?;
        match progress {
            // `go build -v` names each package it compiles on a line of its own.
            Some(status) if !line.contains(' ') && !line.starts_with('#') => {
                packages += 1;
                if packages.is_multiple_of(250) {
                    status(
                        "Progress",
                        &format!("{packages} packages compiled ({:.0?})", started.elapsed()),
                    );
                }
            }
            _ => tail.push(line),
        }
    }
    let exit = child
        .wait()
        .map_err(|e| Error::io(format!("failed to wait for `{command}`"), e))?;
    if !exit.success() {
        let shown = tail.len().saturating_sub(30);
        return Err(Error::new(format!(
            "`{command}` failed ({exit}):\n{}",
            tail[shown..].join("\n")
        )));
    }
    Ok(())
}

/// Copies kwok's stage files out of the module cache into `<assets>/kwok-stages/`.
fn copy_kwok_stages(go: &Path, assets: &Path) -> Result<()> {
    let info = download(go, &format!("sigs.k8s.io/kwok@v{KWOK_VERSION}"))?;
    let source = PathBuf::from(
        info["Dir"]
            .as_str()
            .ok_or_else(|| Error::new("`go mod download` gave no Dir for kwok"))?,
    );
    let stages = assets.join(KWOK_STAGES_DIR);
    std::fs::create_dir_all(&stages).at("create", &stages)?;
    for stage in KWOK_STAGES {
        let from = source.join("kustomize/stage").join(stage);
        let name = stage.rsplit('/').next().unwrap_or(stage);
        std::fs::copy(&from, stages.join(name)).at("copy", &from)?;
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
        assert!(parse_version("2.0.0").is_err());
        let err = parse_version("latest").unwrap_err().to_string();
        assert!(err.contains("\nhelp: "), "{err}");
        assert!(platform_dir("1.36.3").starts_with("1.36.3-"));
    }

    #[test]
    fn an_empty_dir_misses_everything() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(missing(dir.path()).len(), BINARIES.len() + 1);
        assert!(list(dir.path()).unwrap().is_empty());
    }

    /// Fills `dir` like a complete asset directory (empty files are enough for [`missing`]).
    fn fake_assets(dir: &Path) {
        std::fs::create_dir_all(dir.join(KWOK_STAGES_DIR)).unwrap();
        for binary in BINARIES {
            std::fs::write(dir.join(binary), "").unwrap();
        }
    }

    #[test]
    fn a_caller_waits_for_the_build_lock_then_uses_what_the_builder_left() {
        let bin_dir = tempfile::tempdir().unwrap();
        let k8s = bin_dir.path().join("k8s");
        std::fs::create_dir_all(&k8s).unwrap();
        let version = "1.36.3";
        // Another process is building: it holds the lock.
        let lock = File::create(k8s.join(format!(".{}.lock", platform_dir(version)))).unwrap();
        lock.lock().unwrap();

        let (tx, rx) = std::sync::mpsc::channel();
        let bin = bin_dir.path().to_owned();
        let waiter = std::thread::spawn(move || {
            let report = move |verb: &str, _: &str| tx.send(verb.to_string()).unwrap();
            provide(version, &bin, false, &report)
        });
        let first = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        assert_eq!(first, "Waiting");
        // The build finishes and releases the lock: the waiter must not build again (no Go needed).
        fake_assets(&k8s.join(platform_dir(version)));
        drop(lock);
        let (dir, source) = waiter.join().unwrap().unwrap();
        assert_eq!(source, Source::Cache);
        assert_eq!(dir, k8s.join(platform_dir(version)));
        assert!(rx.try_recv().is_err(), "the waiter reported more progress");
    }

    #[test]
    fn staging_modules_are_the_v0_0_0_requirements() {
        let go_mod = "module k8s.io/kubernetes\n\nrequire (\n\tk8s.io/api v0.0.0\n\tk8s.io/utils v0.0.0-2024 // indirect\n\tgithub.com/x/y v0.0.0\n)\n\nrequire k8s.io/apimachinery v0.0.0\n";
        assert_eq!(staging_in(go_mod), ["k8s.io/api", "k8s.io/apimachinery"]);
    }

    #[test]
    fn kubernetes_go_mod_points_staging_modules_at_their_releases() {
        let go_mod = kubernetes_go_mod(
            "1.36.3",
            &["k8s.io/api".into(), "k8s.io/apimachinery".into()],
        );
        assert!(go_mod.contains("require k8s.io/kubernetes v1.36.3\n"));
        assert!(go_mod.contains(
            "replace (\n\tk8s.io/api => k8s.io/api v0.36.3\n\tk8s.io/apimachinery => k8s.io/apimachinery v0.36.3\n)\n"
        ));
        assert!(etcd_go_mod(ETCD_VERSION).contains("require go.etcd.io/etcd/server/v3 v3.6.16\n"));
        assert!(kwok_go_mod(KWOK_VERSION).contains("require sigs.k8s.io/kwok v0.8.0\n"));
    }
}
