//! etcd, kube-apiserver and kubectl from controller-tools' envtest releases, as `setup-envtest` gets them.
//!
//! The index (`envtest-releases.yaml`) maps each release to its archives and their SHA-512:
//!
//! ```yaml
//! releases:
//!   v1.36.3:
//!     envtest-v1.36.3-linux-amd64.tar.gz:
//!       hash: <sha512 in hex>
//!       selfLink: https://github.com/kubernetes-sigs/controller-tools/releases/download/envtest-v1.36.3/envtest-v1.36.3-linux-amd64.tar.gz
//! ```
//!
//! An archive holds `controller-tools/envtest/{etcd,kube-apiserver,kubectl}`. The simulated cluster's
//! kube-controller-manager and kube-scheduler come from the Kubernetes release itself,
//! `<release-url>/v<version>/bin/<os>/<arch>/<name>`, each next to its published `<name>.sha256`.
//!
//! A download is written to a temporary file in the cache directory while its hash is computed,
//! checked, unpacked into a temporary directory and only then moved into place: whatever fails leaves
//! nothing behind.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256, Sha512};

use super::{CONTROL_PLANE, Error, Options, PathContext, Result, install_dir, platform};

/// How long to wait for a name lookup or a connection before deciding there is no network.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a download may stall (no byte received) before it is given up.
const STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a download did not happen.
#[derive(Debug)]
pub(super) enum Failure {
    /// Nothing usable could be fetched (no network, no such release, an HTTP error): building from
    /// source is the way on. The message says what was tried.
    Unavailable(String),
    /// Something was fetched and found wrong (checksum, broken transfer, damaged archive): an error for
    /// the user, never silently papered over.
    Refused(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Refused(e)
    }
}

/// One archive of the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Archive {
    /// The file name, e.g. `envtest-v1.36.3-linux-amd64.tar.gz`.
    pub name: String,
    /// The SHA-512 of the archive, lowercase hex.
    pub sha512: String,
    /// Where the index says it is.
    pub self_link: Option<String>,
}

/// The parsed index: (version without `v`, archive) pairs for this platform.
#[derive(Debug, Default)]
pub(super) struct Index {
    archives: Vec<(String, Archive)>,
}

impl Index {
    /// Fetches and parses the index at `url`.
    pub fn fetch(url: &str) -> Result<Index, Failure> {
        let mut response = agent()
            .get(url)
            .call()
            .map_err(|e| Failure::Unavailable(format!("cannot fetch the index `{url}`: {e}")))?;
        let text = response
            .body_mut()
            .with_config()
            .limit(16 * 1024 * 1024)
            .read_to_string()
            .map_err(|e| Failure::Unavailable(format!("cannot read the index `{url}`: {e}")))?;
        Index::parse(&text).map_err(|e| {
            Failure::Refused(Error::new(format!(
                "`{url}` is not an envtest release index: {e}\nhelp: point ENVTEST_INDEX_URL (or `--index-url`) at a copy of controller-tools' envtest-releases.yaml"
            )))
        })
    }

    /// Reads the archives of this platform out of an index document.
    pub fn parse(text: &str) -> std::result::Result<Index, String> {
        let doc: serde_json::Value = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        let releases = doc
            .get("releases")
            .and_then(|r| r.as_object())
            .ok_or("it has no `releases` map")?;
        let (os, arch) = platform();
        let suffix = format!("-{os}-{arch}.tar.gz");
        let mut archives = Vec::new();
        for (release, files) in releases {
            let version = release.strip_prefix('v').unwrap_or(release);
            let Some(files) = files.as_object() else {
                continue;
            };
            for (name, entry) in files {
                if name != &format!("envtest-v{version}{suffix}") {
                    continue;
                }
                let sha512 = entry
                    .get("hash")
                    .and_then(|h| h.as_str())
                    .ok_or_else(|| format!("`{name}` has no hash"))?
                    .to_ascii_lowercase();
                if sha512.len() != 128 || !sha512.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(format!("the hash of `{name}` is not a SHA-512 in hex"));
                }
                let self_link = entry
                    .get("selfLink")
                    .and_then(|l| l.as_str())
                    .map(str::to_owned);
                archives.push((
                    version.to_string(),
                    Archive {
                        name: name.clone(),
                        sha512,
                        self_link,
                    },
                ));
            }
        }
        Ok(Index { archives })
    }

    /// The newest release `major.minor.*` (given as `1.36`) with an archive for this platform.
    pub fn newest(&self, minor: &str) -> Option<&str> {
        self.archives
            .iter()
            .map(|(v, _)| v.as_str())
            .filter(|v| {
                v.strip_prefix(minor)
                    .and_then(|rest| rest.strip_prefix('.'))
                    .is_some_and(|patch| patch.bytes().all(|b| b.is_ascii_digit()))
            })
            .max_by_key(|v| super::version_key(v))
    }

    /// The archive of release `version` for this platform.
    pub fn archive(&self, version: &str) -> Option<&Archive> {
        self.archives
            .iter()
            .find(|(v, _)| v == version)
            .map(|(_, a)| a)
    }
}

/// The HTTP client: short connect timeouts (no network is decided in seconds), the platform's
/// certificate roots, proxies from `HTTPS_PROXY`/`ALL_PROXY`.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_resolve(Some(CONNECT_TIMEOUT))
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .timeout_recv_response(Some(STALL_TIMEOUT))
        .timeout_per_read(Some(STALL_TIMEOUT))
        .user_agent(concat!("rustbuilder-envtest/", env!("CARGO_PKG_VERSION")))
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::PlatformVerifier)
                .build(),
        )
        .build()
        .into()
}

/// Downloads the envtest archive of `version`, checks it against the index and installs its binaries
/// into `target` (created, or completed when it exists). `k8s` is the cache directory holding `target`;
/// temporary files go there, so the final moves are renames on one file system.
pub(super) fn install(
    version: &str,
    index: &Index,
    k8s: &Path,
    target: &Path,
    options: &Options,
    status: &dyn Fn(&str, &str),
) -> Result<(), Failure> {
    let (os, arch) = platform();
    let archive = index.archive(version).ok_or_else(|| {
        Failure::Unavailable(format!(
            "the index `{}` lists no envtest archive of Kubernetes {version} for {os}/{arch}",
            options.index_url
        ))
    })?;
    let url = match (&options.download_url, &archive.self_link) {
        (Some(base), _) => format!(
            "{}/envtest-v{version}/{}",
            base.trim_end_matches('/'),
            archive.name
        ),
        (None, Some(link)) => link.clone(),
        (None, None) => format!(
            "{}/envtest-v{version}/{}",
            super::DEFAULT_DOWNLOAD_URL,
            archive.name
        ),
    };
    let pid = std::process::id();
    let file = Removed(k8s.join(format!(".{}.{pid}.part", archive.name)));
    status("Downloading", &format!("{} from {url}", archive.name));
    fetch_verified::<Sha512>(&url, &archive.sha512, "the index's SHA-512", &file.0)?;
    let dir = Removed(k8s.join(format!(".{version}-{os}-{arch}-download-{pid}")));
    unpack(&file.0, &dir.0).map_err(|e| {
        Failure::Refused(Error::new(format!(
            "the archive `{url}` matches its checksum but cannot be unpacked: {e}\nhelp: the index and the archive agree, so the release itself is damaged: build from source with `--from-source` or ENVTEST_FROM_SOURCE=1"
        )))
    })?;
    install_dir(&dir.0, target)?;
    Ok(())
}

/// Downloads the Kubernetes release binaries `names` of `version` (kube-controller-manager,
/// kube-scheduler), each checked against its published SHA-256, and moves them into `target`.
pub(super) fn install_release_binaries(
    version: &str,
    names: &[&str],
    k8s: &Path,
    target: &Path,
    options: &Options,
    status: &dyn Fn(&str, &str),
) -> Result<(), Failure> {
    let (os, arch) = platform();
    let base = options.release_url.trim_end_matches('/');
    let dir = Removed(k8s.join(format!(
        ".{version}-{os}-{arch}-release-{}",
        std::process::id()
    )));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).at("create", &dir.0)?;
    for name in names {
        let url = format!("{base}/v{version}/bin/{os}/{arch}/{name}");
        let sum_url = format!("{url}.sha256");
        let mut response = agent()
            .get(&sum_url)
            .call()
            .map_err(|e| Failure::Unavailable(format!("cannot fetch `{sum_url}`: {e}")))?;
        let text = response
            .body_mut()
            .with_config()
            .limit(4096)
            .read_to_string()
            .map_err(|e| Failure::Unavailable(format!("cannot read `{sum_url}`: {e}")))?;
        // The file holds the hash alone; tolerate `<hash>  <name>` too.
        let sha256 = text
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Failure::Refused(Error::new(format!(
                "`{sum_url}` holds no SHA-256\nhelp: point ENVTEST_KUBERNETES_URL (or `--kubernetes-url`) at a mirror of the Kubernetes release files"
            ))));
        }
        status("Downloading", &format!("{name} from {url}"));
        let path = dir.0.join(name);
        fetch_verified::<Sha256>(&url, &sha256, "its published SHA-256", &path)?;
        make_executable(&path).at("make executable", &path)?;
    }
    install_dir(&dir.0, target)?;
    Ok(())
}

/// Streams `url` into `path`, hashing as it goes with `D`, and checks the hash against `expected`
/// (lowercase hex), which is `described` in the error.
fn fetch_verified<D: Digest>(
    url: &str,
    expected: &str,
    described: &str,
    path: &Path,
) -> Result<(), Failure> {
    let help = "help: run the command again to retry; if it keeps failing, point ENVTEST_INDEX_URL, ENVTEST_DOWNLOAD_URL and ENVTEST_KUBERNETES_URL at a mirror you trust, or build from source with `--from-source` or ENVTEST_FROM_SOURCE=1";
    let mut response = agent()
        .get(url)
        .call()
        .map_err(|e| Failure::Unavailable(format!("cannot download `{url}`: {e}")))?;
    let expected_len = response
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut body = response.body_mut().as_reader();
    let out = File::create(path).at("create", path)?;
    let mut out = BufWriter::new(out);
    let mut hasher = D::new();
    let mut buf = vec![0; 64 * 1024];
    let mut received: u64 = 0;
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let of = expected_len.map_or(String::new(), |len| format!(" of {len}"));
                return Err(Failure::Refused(Error::io(
                    format!(
                        "the download of `{url}` broke off after {received}{of} bytes: {e}\n{help}"
                    ),
                    e,
                )));
            }
        };
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).at("write", path)?;
        received += n as u64;
    }
    // A body shorter than its Content-Length ends in a read error above, not here.
    out.flush().at("write", path)?;
    let actual = hex(&hasher.finalize());
    if actual != expected {
        return Err(Failure::Refused(Error::new(format!(
            "the download of `{url}` ({received} bytes) does not match {described}:\n  expected {expected}\n  got      {actual}\n{help}"
        ))));
    }
    Ok(())
}

/// Unpacks the binaries under `controller-tools/envtest/` into `dir` (made fresh) and checks every
/// control-plane binary is there. Other entries are skipped; no entry can write outside `dir`.
fn unpack(archive: &Path, dir: &Path) -> std::result::Result<(), String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    let file = File::open(archive).map_err(|e| e.to_string())?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let entries = tar.entries().map_err(|e| e.to_string())?;
    for entry in entries {
        let mut entry = entry.map_err(|e| e.to_string())?;
        let path = entry.path().map_err(|e| e.to_string())?.into_owned();
        let Ok(name) = path.strip_prefix("controller-tools/envtest") else {
            continue;
        };
        let name = name.to_string_lossy().to_string();
        if !entry.header().entry_type().is_file() || !CONTROL_PLANE.contains(&name.as_str()) {
            continue;
        }
        let dest = dir.join(&name);
        let mut out = File::create(&dest).map_err(|e| format!("cannot create `{name}`: {e}"))?;
        std::io::copy(&mut entry, &mut out).map_err(|e| format!("cannot unpack `{name}`: {e}"))?;
        make_executable(&dest).map_err(|e| format!("cannot make `{name}` executable: {e}"))?;
    }
    // A gzip stream cut short may still yield whole entries; read to its end to notice.
    let mut rest = tar.into_inner();
    std::io::copy(&mut rest, &mut std::io::sink()).map_err(|e| e.to_string())?;
    let absent: Vec<&str> = CONTROL_PLANE
        .iter()
        .copied()
        .filter(|b| !dir.join(b).is_file())
        .collect();
    if !absent.is_empty() {
        return Err(format!(
            "it holds no controller-tools/envtest/{}",
            absent.join(", no controller-tools/envtest/")
        ));
    }
    Ok(())
}

#[cfg(unix)]
fn make_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> std::io::Result<()> {
    Ok(())
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A temporary file or directory, removed when dropped (it was moved away on success, or is left over
/// from a failure).
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        if self.0.is_dir() {
            let _ = std::fs::remove_dir_all(&self.0);
        } else {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(versions: &[&str]) -> String {
        let (os, arch) = platform();
        let mut text = String::from("releases:\n");
        for v in versions {
            text.push_str(&format!(
                "  v{v}:\n    envtest-v{v}-{os}-{arch}.tar.gz:\n      hash: {}\n      selfLink: https://example.test/envtest-v{v}-{os}-{arch}.tar.gz\n    envtest-v{v}-plan9-mips.tar.gz:\n      hash: {}\n",
                "ab".repeat(64),
                "cd".repeat(64),
            ));
        }
        text
    }

    #[test]
    fn the_newest_patch_of_a_minor_is_compared_as_numbers() {
        let index = Index::parse(&index(&["1.36.2", "1.36.10", "1.35.12", "1.3.99"])).unwrap();
        assert_eq!(index.newest("1.36"), Some("1.36.10"));
        assert_eq!(index.newest("1.3"), Some("1.3.99"));
        assert_eq!(index.newest("1.37"), None);
        let archive = index.archive("1.36.2").unwrap();
        assert_eq!(archive.sha512, "ab".repeat(64));
        assert!(archive.name.starts_with("envtest-v1.36.2-"));
    }

    #[test]
    fn a_bad_index_says_what_is_wrong() {
        assert!(Index::parse("foo: bar").unwrap_err().contains("`releases`"));
        let short = "releases:\n  v1.36.3:\n    envtest-v1.36.3-linux-amd64.tar.gz:\n      hash: abc\n    envtest-v1.36.3-darwin-arm64.tar.gz:\n      hash: abc\n";
        assert!(
            Index::parse(short)
                .unwrap_err()
                .contains("not a SHA-512 in hex")
        );
    }
}
