//! Control-plane binaries for tests, found, downloaded or built: `setup-envtest`, with a source build
//! when there is nothing to download.
//!
//! Assets live where `setup-envtest` keeps them, `<bin-dir>/k8s/<version>-<os>-<arch>/`, and tests find
//! them through `KUBEBUILDER_ASSETS`, so existing envtest users need nothing new. Missing etcd,
//! kube-apiserver and kubectl are downloaded from controller-tools' envtest releases and checked against
//! the SHA-512 its index publishes (feature `download`, on by default); when that is impossible (no
//! network, a release without an archive) or not wanted ([`Options::from_source`]), they are built from
//! Go modules with the local Go toolchain, as are the simulated cluster's kube-controller-manager,
//! kube-scheduler and kwok. Downloads and builds write into temporary directories renamed into place at
//! the end, so an interrupted run leaves no half-filled asset directory and simply starts over (Go's
//! build cache keeps finished work). A lock file makes concurrent callers (several test binaries, say)
//! wait for one download or build instead of racing.
//!
//! This module needs neither kube nor tokio, so command-line tools can use it without the test harness
//! (`default-features = false, features = ["download"]`).
//!
//! ```no_run
//! use rustbuilder_envtest::assets;
//!
//! let bin_dir = assets::default_bin_dir()?;
//! let provided = assets::provide(
//!     assets::DEFAULT_KUBERNETES_VERSION,
//!     &bin_dir,
//!     &assets::Options::from_env(),
//!     &assets::print_status,
//! )?;
//! println!("export KUBEBUILDER_ASSETS={}", provided.dir.display());
//! # Ok::<(), assets::Error>(())
//! ```

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[cfg(feature = "download")]
mod download;

/// The Kubernetes release built when none is asked for.
pub const DEFAULT_KUBERNETES_VERSION: &str = "1.36.3";
/// The etcd release built next to Kubernetes [`DEFAULT_KUBERNETES_VERSION`].
pub const ETCD_VERSION: &str = "3.6.16";
/// The kwok release that runs fake nodes and pods in cluster mode.
pub const KWOK_VERSION: &str = "0.8.0";

/// Where the index of controller-tools' envtest releases is fetched from, unless `ENVTEST_INDEX_URL`
/// says otherwise (the index `setup-envtest` reads).
pub const DEFAULT_INDEX_URL: &str =
    "https://raw.githubusercontent.com/kubernetes-sigs/controller-tools/HEAD/envtest-releases.yaml";
/// The release pages archives are downloaded from when `ENVTEST_DOWNLOAD_URL` is set to a mirror of
/// them: `<url>/envtest-v<version>/envtest-v<version>-<os>-<arch>.tar.gz`. Otherwise the index's own
/// links are followed (they point here).
pub const DEFAULT_DOWNLOAD_URL: &str =
    "https://github.com/kubernetes-sigs/controller-tools/releases/download";

/// Where the Kubernetes release binaries (kube-controller-manager, kube-scheduler) are downloaded
/// from, unless `ENVTEST_KUBERNETES_URL` says otherwise: `<url>/v<version>/bin/<os>/<arch>/<name>`
/// and its `.sha256`.
pub const DEFAULT_RELEASE_URL: &str = "https://dl.k8s.io/release";

/// The simulated cluster's binaries published with each Kubernetes release.
const RELEASE_BINARIES: &[&str] = &["kube-controller-manager", "kube-scheduler"];

/// The binaries of a plain control plane (`TestEnv::start`): what an envtest release archive holds.
pub const CONTROL_PLANE: &[&str] = &["etcd", "kube-apiserver", "kubectl"];

/// Binaries every complete asset directory holds: the control plane and the simulated cluster's.
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

/// Checks a Kubernetes release such as `1.36.3`, or a minor such as `1.36` that stands for its newest
/// release (a leading `v` is accepted and dropped).
pub fn parse_version(version: &str) -> Result<String> {
    let version = version.strip_prefix('v').unwrap_or(version);
    let parts: Vec<&str> = version.split('.').collect();
    if !(2..=3).contains(&parts.len())
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
        || parts[0] != "1"
    {
        return Err(Error::new(format!(
            "invalid Kubernetes version `{version}`: expected a release like `{DEFAULT_KUBERNETES_VERSION}` or a minor like `1.36`\nhelp: give major.minor.patch, or major.minor for its newest release"
        )));
    }
    Ok(version.to_string())
}

/// Whether `version` names one release (`1.36.3`) rather than a minor (`1.36`).
fn is_release(version: &str) -> bool {
    version.split('.').count() == 3
}

/// A version's numbers, to sort releases (`1.36.10` after `1.36.9`).
fn version_key(version: &str) -> Vec<u64> {
    version.split('.').map(|p| p.parse().unwrap_or(0)).collect()
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

/// Which binaries a caller needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Components {
    /// etcd, kube-apiserver and kubectl ([`CONTROL_PLANE`]): downloadable.
    #[default]
    ControlPlane,
    /// Every binary and kwok's stage files ([`BINARIES`], [`KWOK_STAGES_DIR`]): the simulated cluster.
    Cluster,
}

impl Components {
    /// What `dir` lacks of these components (see [`missing`]); empty when it has them all.
    pub fn missing(self, dir: &Path) -> Vec<String> {
        let all = missing(dir);
        match self {
            Components::Cluster => all,
            Components::ControlPlane => all
                .into_iter()
                .filter(|m| CONTROL_PLANE.contains(&m.as_str()))
                .collect(),
        }
    }
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
    /// Whether it holds the control plane ([`CONTROL_PLANE`]), as a downloaded release does.
    pub control_plane: bool,
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
        let control_plane = Components::ControlPlane.missing(&path).is_empty();
        found.push(Cached {
            name,
            path,
            complete,
            control_plane,
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
    /// They were downloaded just now (and built, when the cluster's binaries were missing too).
    Downloaded,
    /// They were built just now.
    Built,
}

/// What [`provide`] provided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provided {
    /// The directory holding the binaries: a `KUBEBUILDER_ASSETS` value.
    pub dir: PathBuf,
    /// The Kubernetes release, `1.36` resolved to its newest patch (as asked when the binaries came
    /// from `KUBEBUILDER_ASSETS`, which does not say).
    pub version: String,
    /// Where they came from.
    pub source: Source,
}

/// How [`provide`] finds, downloads or builds the binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The binaries needed.
    pub components: Components,
    /// Use `KUBEBUILDER_ASSETS` when it points at a directory holding them.
    pub use_env: bool,
    /// Build from Go modules even when a download is possible (`ENVTEST_FROM_SOURCE`).
    pub from_source: bool,
    /// The index of envtest releases and their SHA-512 (`ENVTEST_INDEX_URL`, default
    /// [`DEFAULT_INDEX_URL`]).
    pub index_url: String,
    /// The base of the archive URLs (`ENVTEST_DOWNLOAD_URL`); `None` follows the index's links.
    pub download_url: Option<String>,
    /// The base of the Kubernetes release binaries' URLs (`ENVTEST_KUBERNETES_URL`, default
    /// [`DEFAULT_RELEASE_URL`]).
    pub release_url: String,
    /// The Go command for source builds (`GO`, default `go` from `PATH`).
    pub go: PathBuf,
}

impl Default for Options {
    /// The control plane, `KUBEBUILDER_ASSETS` ignored, downloaded from the default index, built with
    /// `go` as a fallback. Reads no environment variable.
    fn default() -> Self {
        Options {
            components: Components::ControlPlane,
            use_env: false,
            from_source: false,
            index_url: DEFAULT_INDEX_URL.to_string(),
            download_url: None,
            release_url: DEFAULT_RELEASE_URL.to_string(),
            go: PathBuf::from("go"),
        }
    }
}

impl Options {
    /// The defaults changed by the environment: `ENVTEST_FROM_SOURCE` (`1` or `true`),
    /// `ENVTEST_INDEX_URL`, `ENVTEST_DOWNLOAD_URL`, `ENVTEST_KUBERNETES_URL` and `GO`.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let defaults = Options::default();
        Options {
            from_source: var("ENVTEST_FROM_SOURCE").is_some_and(|v| is_true(&v)),
            index_url: var("ENVTEST_INDEX_URL").unwrap_or(defaults.index_url),
            download_url: var("ENVTEST_DOWNLOAD_URL"),
            release_url: var("ENVTEST_KUBERNETES_URL").unwrap_or(defaults.release_url),
            go: var("GO").map_or(defaults.go, PathBuf::from),
            ..defaults
        }
    }
}

/// Whether an environment variable's value means yes (anything but empty, `0`, `false`, `no`, `off`).
fn is_true(value: &str) -> bool {
    !matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "" | "0" | "false" | "no" | "off"
    )
}

/// Prints a progress line on stderr, cargo style (`   Compiling etcd`). The default reporter for
/// [`provide`]; it writes to the stderr handle directly, so it shows even inside `cargo test`.
pub fn print_status(verb: &str, message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{verb:>12} {message}");
}

/// Returns a directory holding `options.components` of `version` (`1.36.3`, or `1.36` for its newest
/// release): `KUBEBUILDER_ASSETS` when `options.use_env` is set and it holds them; else the cache
/// `<bin_dir>/k8s/<version>-<os>-<arch>`; else the cache filled now. The control plane is downloaded
/// from the envtest release and checked against the index's SHA-512; what cannot be downloaded (no
/// network, no archive for the release, the cluster's binaries, `options.from_source`) is built with Go
/// (minutes when cold). A download that arrives damaged is an error, not a reason to build. `status`
/// receives progress lines (a verb and a message), e.g. [`print_status`].
///
/// Only one process downloads or builds a release at a time; the others wait for its lock and then use
/// its result.
pub fn provide(
    version: &str,
    bin_dir: &Path,
    options: &Options,
    status: &dyn Fn(&str, &str),
) -> Result<Provided> {
    let components = options.components;
    if options.use_env
        && let Some(dir) = std::env::var_os("KUBEBUILDER_ASSETS")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
        && components.missing(&dir).is_empty()
    {
        return Ok(Provided {
            dir,
            version: version.to_string(),
            source: Source::Environment,
        });
    }
    let k8s = bin_dir.join("k8s");
    let mut index = Fetched::default();
    let version = if is_release(version) {
        version.to_string()
    } else if let Some(cached) = newest_cached(bin_dir, version, components)? {
        return Ok(cached);
    } else {
        newest_release(version, options, &mut index)?
    };
    let target = k8s.join(platform_dir(&version));
    let cached = |target: PathBuf| Provided {
        dir: target,
        version: version.clone(),
        source: Source::Cache,
    };
    if components.missing(&target).is_empty() {
        return Ok(cached(target));
    }
    std::fs::create_dir_all(&k8s).at("create", &k8s)?;
    let lock_path = k8s.join(format!(".{}.lock", platform_dir(&version)));
    let lock = File::create(&lock_path).at("create", &lock_path)?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            status(
                "Waiting",
                &format!(
                    "for another process providing Kubernetes {version} (lock `{}`)",
                    lock_path.display()
                ),
            );
            lock.lock().at("lock", &lock_path)?;
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(e).at("lock", &lock_path),
    }
    // Whoever held the lock may have filled the cache meanwhile.
    if components.missing(&target).is_empty() {
        return Ok(cached(target));
    }
    let mut source = Source::Built;
    // Why downloads did not happen, for the error when the build cannot happen either.
    let mut skipped: Vec<String> = Vec::new();
    if !options.from_source && !Components::ControlPlane.missing(&target).is_empty() {
        match download(&version, &k8s, &target, options, &mut index, status) {
            Ok(()) => source = Source::Downloaded,
            Err(Some(e)) => return Err(e),
            Err(None) => {
                let reason = index.unavailable.clone().unwrap_or_default();
                status("Skipping", &format!("download: {reason}"));
                skipped.push(reason);
            }
        }
    }
    let release_binaries: Vec<&str> = RELEASE_BINARIES
        .iter()
        .copied()
        .filter(|b| components == Components::Cluster && !target.join(b).is_file())
        .collect();
    if !options.from_source && !release_binaries.is_empty() {
        match download_release_binaries(
            &version,
            &release_binaries,
            &k8s,
            &target,
            options,
            &mut index,
            status,
        ) {
            Ok(()) => source = Source::Downloaded,
            Err(Some(e)) => return Err(e),
            Err(None) => {
                let reason = index.unavailable.clone().unwrap_or_default();
                status("Skipping", &format!("download: {reason}"));
                skipped.push(reason);
            }
        }
    }
    let still_missing = components.missing(&target);
    if !still_missing.is_empty() {
        build(
            &version,
            bin_dir,
            &target,
            &still_missing,
            options,
            &skipped,
            status,
        )?;
    }
    Ok(Provided {
        dir: target,
        version,
        source,
    })
    // `lock` is released when dropped here.
}

/// The index, fetched at most once per [`provide`] call.
#[derive(Default)]
struct Fetched {
    #[cfg(feature = "download")]
    index: Option<download::Index>,
    /// Why there is no index, or no archive: the reason to build instead.
    unavailable: Option<String>,
}

#[cfg(feature = "download")]
impl Fetched {
    /// The index; `Ok(None)` when it cannot be fetched (the reason is kept in `unavailable`).
    fn get(&mut self, options: &Options) -> Result<Option<&download::Index>> {
        if self.index.is_none() && self.unavailable.is_none() {
            match download::Index::fetch(&options.index_url) {
                Ok(index) => self.index = Some(index),
                Err(download::Failure::Unavailable(reason)) => self.unavailable = Some(reason),
                Err(download::Failure::Refused(e)) => return Err(e),
            }
        }
        Ok(self.index.as_ref())
    }

    /// What a download came to: `Ok` after `done` on success; `Err(None)` when it was impossible
    /// (build instead, the reason kept in `unavailable`); `Err(Some(_))` for a failure to report.
    fn outcome(
        &mut self,
        installed: std::result::Result<(), download::Failure>,
        done: impl FnOnce(),
    ) -> std::result::Result<(), Option<Error>> {
        match installed {
            Ok(()) => {
                done();
                Ok(())
            }
            Err(download::Failure::Unavailable(reason)) => {
                self.unavailable = Some(reason);
                Err(None)
            }
            Err(download::Failure::Refused(e)) => Err(Some(e)),
        }
    }
}

/// The newest cached release of `minor` (`1.36`) holding `components`.
fn newest_cached(bin_dir: &Path, minor: &str, components: Components) -> Result<Option<Provided>> {
    let suffix = platform_dir("");
    let newest = list(bin_dir)?
        .into_iter()
        .filter_map(|c| {
            let version = c.name.strip_suffix(&suffix)?.to_string();
            let patch = version.strip_prefix(minor)?.strip_prefix('.')?;
            (patch.bytes().all(|b| b.is_ascii_digit())
                && !patch.is_empty()
                && components.missing(&c.path).is_empty())
            .then_some((version, c.path))
        })
        .max_by_key(|(version, _)| version_key(version));
    Ok(newest.map(|(version, dir)| Provided {
        dir,
        version,
        source: Source::Cache,
    }))
}

/// The newest release of `minor` (`1.36`) in the index.
fn newest_release(minor: &str, options: &Options, fetched: &mut Fetched) -> Result<String> {
    let help = format!(
        "help: give a full release such as `{minor}.0` (source builds need one), or check the index is reachable"
    );
    if options.from_source {
        return Err(Error::new(format!(
            "Kubernetes {minor} is a minor, and building from source needs a release\n{help}"
        )));
    }
    #[cfg(feature = "download")]
    {
        let Some(index) = fetched.get(options)? else {
            let reason = fetched.unavailable.clone().unwrap_or_default();
            return Err(Error::new(format!(
                "cannot tell the newest release of Kubernetes {minor}: {reason}\n{help}"
            )));
        };
        index.newest(minor).map(str::to_owned).ok_or_else(|| {
            Error::new(format!(
                "the index `{}` lists no release of Kubernetes {minor} for {}\n{help}",
                options.index_url,
                platform_dir("").trim_start_matches('-').replace('-', "/")
            ))
        })
    }
    #[cfg(not(feature = "download"))]
    {
        let _ = fetched;
        Err(Error::new(format!(
            "Kubernetes {minor} is a minor, and this build of rustbuilder-envtest cannot read the release index (feature `download`)\n{help}"
        )))
    }
}

/// Downloads the control plane into `target`. `Err(None)`: impossible, build instead (the reason is in
/// `fetched.unavailable`); `Err(Some(_))`: a failure to report.
#[cfg(feature = "download")]
fn download(
    version: &str,
    k8s: &Path,
    target: &Path,
    options: &Options,
    fetched: &mut Fetched,
    status: &dyn Fn(&str, &str),
) -> Result<(), Option<Error>> {
    let started = Instant::now();
    let Some(index) = fetched.get(options).map_err(Some)? else {
        return Err(None);
    };
    let installed = download::install(version, index, k8s, target, options, status);
    fetched.outcome(installed, || {
        status(
            "Downloaded",
            &format!(
                "Kubernetes {version} control plane in {:.1?} → {}",
                started.elapsed(),
                target.display()
            ),
        )
    })
}

/// Downloads kube-controller-manager and kube-scheduler into `target`. `Err(None)`: impossible, build
/// instead (the reason is in `fetched.unavailable`); `Err(Some(_))`: a failure to report.
#[cfg(feature = "download")]
fn download_release_binaries(
    version: &str,
    names: &[&str],
    k8s: &Path,
    target: &Path,
    options: &Options,
    fetched: &mut Fetched,
    status: &dyn Fn(&str, &str),
) -> Result<(), Option<Error>> {
    let started = Instant::now();
    let installed =
        download::install_release_binaries(version, names, k8s, target, options, status);
    fetched.outcome(installed, || {
        status(
            "Downloaded",
            &format!(
                "{} {version} in {:.1?}",
                names.join(", "),
                started.elapsed()
            ),
        )
    })
}

#[cfg(not(feature = "download"))]
fn download_release_binaries(
    _: &str,
    _: &[&str],
    _: &Path,
    _: &Path,
    _: &Options,
    fetched: &mut Fetched,
    _: &dyn Fn(&str, &str),
) -> Result<(), Option<Error>> {
    fetched.unavailable =
        Some("this build of rustbuilder-envtest cannot download (feature `download`)".into());
    Err(None)
}

#[cfg(not(feature = "download"))]
fn download(
    _: &str,
    _: &Path,
    _: &Path,
    _: &Options,
    fetched: &mut Fetched,
    _: &dyn Fn(&str, &str),
) -> Result<(), Option<Error>> {
    fetched.unavailable =
        Some("this build of rustbuilder-envtest cannot download (feature `download`)".into());
    Err(None)
}

/// Moves the contents of `from` into `target`: `from` itself when `target` does not exist yet, else entry
/// by entry (each a rename, replacing what is there), so readers never see a half-written binary.
fn install_dir(from: &Path, target: &Path) -> Result<()> {
    if !target.exists() {
        return std::fs::rename(from, target).at("move the assets to", target);
    }
    for entry in std::fs::read_dir(from).at("read", from)? {
        let entry = entry.at("read", from)?;
        let dest = target.join(entry.file_name());
        if dest.is_dir() {
            std::fs::remove_dir_all(&dest).at("replace", &dest)?;
        }
        std::fs::rename(entry.path(), &dest).at("move the assets to", &dest)?;
    }
    std::fs::remove_dir_all(from).at("remove", from)
}

/// Builds the `wanted` binaries (names as [`missing`] gives them) into a temporary directory next to
/// `target`, then moves them into place.
fn build(
    version: &str,
    bin_dir: &Path,
    target: &Path,
    wanted: &[String],
    options: &Options,
    skipped: &[String],
    status: &dyn Fn(&str, &str),
) -> Result<()> {
    let go = which_go(&options.go, wanted, options.from_source, skipped)?;
    let started = Instant::now();
    let work = bin_dir.join("k8s").join(format!(".build-{version}"));
    let partial = bin_dir.join("k8s").join(format!(
        ".{}-partial-{}",
        platform_dir(version),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial).at("create", &partial)?;
    let result = build_into(&go, version, &work, &partial, target, wanted, status);
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&partial);
    }
    result?;
    status(
        "Finished",
        &format!(
            "{} {version} in {:.0?} → {}",
            wanted.join(", "),
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
    wanted: &[String],
    status: &dyn Fn(&str, &str),
) -> Result<()> {
    let wants = |name: &str| wanted.iter().any(|w| w == name);
    status(
        "Building",
        &format!(
            "Kubernetes {version} {} with {} (cold builds take a while; Go's cache makes later ones fast)",
            wanted.join(", "),
            go.display()
        ),
    );
    let kubernetes_packages: Vec<&str> = [
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-scheduler",
        "k8s.io/kubernetes/cmd/kubectl",
    ]
    .into_iter()
    .filter(|p| wants(p.rsplit('/').next().unwrap_or(p)))
    .collect();
    let staging = if kubernetes_packages.is_empty() {
        Vec::new()
    } else {
        staging_modules(go, version)?
    };
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
    let etcd_packages: &[&str] = if wants("etcd") {
        &["go.etcd.io/etcd/server/v3"]
    } else {
        &[]
    };
    let kwok_packages: &[&str] = if wants("kwok") {
        &["sigs.k8s.io/kwok/cmd/kwok"]
    } else {
        &[]
    };
    let modules: [(&str, String, &[&str], &str); 3] = [
        (
            "kubernetes",
            kubernetes_go_mod(version, &staging),
            &kubernetes_packages,
            &ldflags,
        ),
        ("etcd", etcd_go_mod(ETCD_VERSION), etcd_packages, "-s -w"),
        ("kwok", kwok_go_mod(KWOK_VERSION), kwok_packages, "-s -w"),
    ];
    for (module, go_mod, packages, flags) in modules {
        if packages.is_empty() {
            continue;
        }
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
    if wants(&format!("{KWOK_STAGES_DIR}/")) {
        copy_kwok_stages(go, partial)?;
    }
    let absent: Vec<&str> = missing(partial)
        .into_iter()
        .filter_map(|m| wanted.iter().find(|w| **w == m).map(String::as_str))
        .collect();
    if !absent.is_empty() {
        return Err(Error::new(format!(
            "the build finished without {}",
            absent.join(", ")
        )));
    }
    install_dir(partial, target)
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

/// `go` if it runs. `skipped` says why downloads did not happen, for the error.
fn which_go(
    go: &Path,
    wanted: &[String],
    from_source: bool,
    skipped: &[String],
) -> Result<PathBuf> {
    match Command::new(go)
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => Ok(go.to_owned()),
        _ => {
            let why = if from_source {
                "are to be built from source, as asked".to_string()
            } else if skipped.is_empty() {
                "have no checksummed download and are built from source".to_string()
            } else {
                format!("could not be downloaded ({})", skipped.join("; "))
            };
            let retry = if skipped.is_empty() {
                ""
            } else {
                "check the network (HTTPS_PROXY for a proxy) or point ENVTEST_INDEX_URL, ENVTEST_DOWNLOAD_URL and ENVTEST_KUBERNETES_URL at a mirror; or "
            };
            Err(Error::new(format!(
                "{} {why}, and Go (`{}`) is not installed to build them\nhelp: {retry}install Go 1.26 or newer (https://go.dev/doc/install, or your package manager); or point KUBEBUILDER_ASSETS at a directory holding them",
                wanted.join(", "),
                go.display()
            )))
        }
    }
}

/// Downloads a module with `go mod download -json` and returns the JSON Go prints about it.
fn go_mod_download(go: &Path, module: &str) -> Result<serde_json::Value> {
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
    let info = go_mod_download(go, &format!("k8s.io/kubernetes@v{version}"))?;
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
    let info = go_mod_download(go, &format!("sigs.k8s.io/kwok@v{KWOK_VERSION}"))?;
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
        assert_eq!(parse_version("1.36").unwrap(), "1.36");
        assert!(parse_version("1").is_err());
        assert!(parse_version("1.36.3.1").is_err());
        assert!(parse_version("2.0.0").is_err());
        let err = parse_version("latest").unwrap_err().to_string();
        assert!(err.contains("\nhelp: "), "{err}");
        assert!(platform_dir("1.36.3").starts_with("1.36.3-"));
    }

    #[test]
    fn a_minor_stands_for_its_newest_complete_cached_release() {
        let bin_dir = tempfile::tempdir().unwrap();
        let k8s = bin_dir.path().join("k8s");
        for version in ["1.36.9", "1.36.10", "1.37.0"] {
            let dir = k8s.join(platform_dir(version));
            std::fs::create_dir_all(&dir).unwrap();
            for binary in CONTROL_PLANE {
                std::fs::write(dir.join(binary), "").unwrap();
            }
        }
        std::fs::create_dir_all(k8s.join(platform_dir("1.36.11"))).unwrap();
        let found = newest_cached(bin_dir.path(), "1.36", Components::ControlPlane)
            .unwrap()
            .unwrap();
        assert_eq!(found.version, "1.36.10");
        assert_eq!(found.source, Source::Cache);
        assert!(
            newest_cached(bin_dir.path(), "1.36", Components::Cluster)
                .unwrap()
                .is_none()
        );
        assert!(
            newest_cached(bin_dir.path(), "1.3", Components::ControlPlane)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn environment_switches() {
        for yes in ["1", "true", "TRUE", "yes"] {
            assert!(is_true(yes), "{yes}");
        }
        for no in ["", "0", "false", "no", "off"] {
            assert!(!is_true(no), "{no}");
        }
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
            let options = Options {
                components: Components::Cluster,
                ..Options::default()
            };
            provide(version, &bin, &options, &report)
        });
        let first = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        assert_eq!(first, "Waiting");
        // The build finishes and releases the lock: the waiter must not build again (no Go needed).
        fake_assets(&k8s.join(platform_dir(version)));
        drop(lock);
        let provided = waiter.join().unwrap().unwrap();
        assert_eq!(provided.source, Source::Cache);
        assert_eq!(provided.dir, k8s.join(platform_dir(version)));
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
