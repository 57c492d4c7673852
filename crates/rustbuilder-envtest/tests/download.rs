//! The control plane downloaded from envtest releases, against a local HTTP server serving an index and
//! archives in the real formats (`envtest-releases.yaml`, `controller-tools/envtest/*` in a `.tar.gz`),
//! with small stand-in executables for the binaries. No network is used.
#![cfg(all(unix, feature = "download"))]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustbuilder_envtest::assets::{
    self, CONTROL_PLANE, Components, Options, Provided, Source, platform, platform_dir,
};
use sha2::{Digest, Sha512};

/// What the server answers for one path.
#[derive(Clone)]
struct Reply {
    body: Vec<u8>,
    /// Send only this many bytes of `body` (its full length is announced), then hang up.
    cut_at: Option<usize>,
    /// Wait this long before answering, so concurrent clients overlap.
    delay: Duration,
}

impl Reply {
    fn new(body: impl Into<Vec<u8>>) -> Self {
        Reply {
            body: body.into(),
            cut_at: None,
            delay: Duration::ZERO,
        }
    }
}

type Routes = Arc<Mutex<HashMap<String, Reply>>>;

/// A one-thread-per-connection HTTP/1.1 server that counts requests by path.
struct Server {
    base: String,
    routes: Routes,
    requests: Arc<Mutex<HashMap<String, usize>>>,
}

impl Server {
    /// Starts serving nothing (404s): add routes with [`Server::route`].
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(HashMap::new()));
        let routes: Routes = Arc::default();
        let (served, counts) = (routes.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (routes, counts) = (served.clone(), counts.clone());
                std::thread::spawn(move || serve(stream, &routes, &counts));
            }
        });
        Server {
            base,
            routes,
            requests,
        }
    }

    fn route(&self, path: impl Into<String>, reply: Reply) {
        self.routes.lock().unwrap().insert(path.into(), reply);
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn count(&self, path: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    fn total(&self) -> usize {
        self.requests.lock().unwrap().values().sum()
    }
}

fn serve(mut stream: TcpStream, routes: &Routes, counts: &Mutex<HashMap<String, usize>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
            break;
        }
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_string();
    *counts.lock().unwrap().entry(path.clone()).or_default() += 1;
    let reply = routes.lock().unwrap().get(&path).cloned();
    let Some(reply) = reply else {
        let _ = stream
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
    };
    std::thread::sleep(reply.delay);
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reply.body.len()
    );
    let sent = reply.cut_at.unwrap_or(reply.body.len());
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&reply.body[..sent]);
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// A `.tar.gz` laid out like controller-tools' envtest archives: each binary a small shell script
/// printing `<name> <version>`.
fn archive(version: &str) -> Vec<u8> {
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for name in CONTROL_PLANE {
        let script = format!("#!/bin/sh\necho {name} {version}\n");
        let mut header = tar::Header::new_gnu();
        header.set_size(script.len() as u64);
        // Archives carry their own modes; the unpacked binaries must run whatever they say.
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(
            &mut header,
            format!("controller-tools/envtest/{name}"),
            script.as_bytes(),
        )
        .unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap()
}

fn sha512(bytes: &[u8]) -> String {
    Sha512::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn archive_name(version: &str) -> String {
    let (os, arch) = platform();
    format!("envtest-v{version}-{os}-{arch}.tar.gz")
}

/// The path the release pages serve an archive at.
fn archive_path(version: &str) -> String {
    format!("/envtest-v{version}/{}", archive_name(version))
}

/// An `envtest-releases.yaml` listing `(version, sha512)` with links under `links`, plus an archive of
/// another platform that must be ignored.
fn index(releases: &[(&str, String)], links: &str) -> String {
    let mut text = String::from("releases:\n");
    for (version, hash) in releases {
        let name = archive_name(version);
        text.push_str(&format!(
            "  v{version}:\n    envtest-v{version}-plan9-mips.tar.gz:\n      hash: {}\n      selfLink: {links}/envtest-v{version}/envtest-v{version}-plan9-mips.tar.gz\n    {name}:\n      hash: {hash}\n      selfLink: {links}/envtest-v{version}/{name}\n",
            "0".repeat(128),
        ));
    }
    text
}

/// A server with an index of `versions` (at `/envtest-releases.yaml`), each archive served honestly
/// after `delay`.
fn honest_server(versions: &[&str], delay: Duration) -> Server {
    let server = Server::start();
    let mut releases = Vec::new();
    for version in versions {
        let bytes = archive(version);
        releases.push((*version, sha512(&bytes)));
        server.route(
            archive_path(version),
            Reply {
                delay,
                ..Reply::new(bytes)
            },
        );
    }
    server.route(
        "/envtest-releases.yaml",
        Reply::new(index(&releases, &server.base)),
    );
    server
}

fn options(index_url: String) -> Options {
    Options {
        index_url,
        go: PathBuf::from("/nonexistent/go"),
        ..Options::default()
    }
}

/// Everything in the cache directory but lock files: what a failure must not leave.
fn cache_contents(bin_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(bin_dir.join("k8s")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".lock"))
        .collect();
    names.sort();
    names
}

/// Runs a binary and returns what it printed.
fn run(path: &Path) -> String {
    let out = std::process::Command::new(path).output().unwrap();
    assert!(out.status.success(), "{} failed", path.display());
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn quiet(_: &str, _: &str) {}

#[test]
fn a_minor_is_downloaded_as_its_newest_release_checked_and_cached() {
    let server = honest_server(&["1.35.4", "1.36.2", "1.36.10", "1.37.0"], Duration::ZERO);
    let bin = tempfile::tempdir().unwrap();
    let options = options(server.url("/envtest-releases.yaml"));

    let Provided {
        dir,
        version,
        source,
    } = assets::provide("1.36", bin.path(), &options, &quiet).unwrap();
    assert_eq!(version, "1.36.10");
    assert_eq!(source, Source::Downloaded);
    assert_eq!(dir, bin.path().join("k8s").join(platform_dir("1.36.10")));
    for name in CONTROL_PLANE {
        let binary = dir.join(name);
        let mode = std::fs::metadata(&binary).unwrap().permissions().mode();
        assert_eq!(mode & 0o111, 0o111, "{name} is not executable");
        assert_eq!(run(&binary), format!("{name} 1.36.10"));
    }
    assert_eq!(server.count("/envtest-releases.yaml"), 1);
    assert_eq!(server.count(&archive_path("1.36.10")), 1);
    assert_eq!(
        server.total(),
        2,
        "fetched more than the index and one archive"
    );
    assert_eq!(cache_contents(bin.path()), [platform_dir("1.36.10")]);
    assert!(Components::ControlPlane.missing(&dir).is_empty());
    assert!(!Components::Cluster.missing(&dir).is_empty());

    // Again: from the cache, without asking the server anything.
    let again = assets::provide("1.36", bin.path(), &options, &quiet).unwrap();
    assert_eq!((again.source, again.version), (Source::Cache, version));
    let listed = assets::list(bin.path()).unwrap();
    assert!(listed[0].control_plane && !listed[0].complete);
    assert_eq!(server.total(), 2);
}

#[test]
fn a_download_url_replaces_the_index_links() {
    let version = "1.36.3";
    let bytes = archive(version);
    // The index links to a server that does not exist; the mirror serves the archive.
    let index = index(&[(version, sha512(&bytes))], "http://127.0.0.1:9");
    let server = Server::start();
    server.route("/envtest-releases.yaml", Reply::new(index));
    server.route(
        format!("/mirror{}", archive_path(version)),
        Reply::new(bytes),
    );
    let bin = tempfile::tempdir().unwrap();
    let options = Options {
        download_url: Some(server.url("/mirror/")),
        ..options(server.url("/envtest-releases.yaml"))
    };
    let provided = assets::provide(version, bin.path(), &options, &quiet).unwrap();
    assert_eq!(provided.source, Source::Downloaded);
    assert_eq!(run(&provided.dir.join("etcd")), "etcd 1.36.3");
}

/// Serves an index claiming `hash` for the archive of 1.36.3 and `body` as that archive.
fn provide_with(hash: String, reply: Reply) -> (Server, tempfile::TempDir, assets::Error) {
    let version = "1.36.3";
    let server = Server::start();
    server.route(archive_path(version), reply);
    server.route(
        "/envtest-releases.yaml",
        Reply::new(index(&[(version, hash)], &server.base)),
    );
    let bin = tempfile::tempdir().unwrap();
    let lines = Mutex::new(Vec::new());
    let record =
        |verb: &str, message: &str| lines.lock().unwrap().push(format!("{verb} {message}"));
    let err = assets::provide(
        version,
        bin.path(),
        &options(server.url("/envtest-releases.yaml")),
        &record,
    )
    .unwrap_err();
    assert_eq!(server.count(&archive_path(version)), 1);
    let lines = lines.into_inner().unwrap();
    assert!(
        lines.iter().all(|l| !l.starts_with("Building")),
        "a refused download fell back to a build: {lines:?}"
    );
    (server, bin, err)
}

#[test]
fn an_archive_not_matching_the_index_hash_is_refused_and_leaves_nothing() {
    let bytes = archive("1.36.3");
    let (_server, bin, err) = provide_with(sha512(b"another archive"), Reply::new(bytes));
    let message = err.to_string();
    assert!(
        message.contains("does not match the index's SHA-512"),
        "{message}"
    );
    assert!(message.contains(&sha512(b"another archive")), "{message}");
    assert!(
        message.contains("\nhelp: run the command again"),
        "{message}"
    );
    assert!(
        cache_contents(bin.path()).is_empty(),
        "{:?}",
        cache_contents(bin.path())
    );
}

#[test]
fn a_download_cut_short_is_refused_and_leaves_nothing() {
    let bytes = archive("1.36.3");
    let hash = sha512(&bytes);
    let half = bytes.len() / 2;
    let (_server, bin, err) = provide_with(
        hash,
        Reply {
            cut_at: Some(half),
            ..Reply::new(bytes)
        },
    );
    let message = err.to_string();
    assert!(message.contains("broke off after"), "{message}");
    assert!(message.contains("\nhelp: "), "{message}");
    assert!(
        cache_contents(bin.path()).is_empty(),
        "{:?}",
        cache_contents(bin.path())
    );
}

#[test]
fn a_truncated_archive_matching_its_hash_is_refused_and_leaves_nothing() {
    // The index vouches for a damaged archive: the checksum passes, unpacking must not. Cut into the
    // compressed data, and cut only gzip's trailer (its length and CRC of the data).
    let bytes = archive("1.36.3");
    for cut in [40, 4] {
        let damaged = bytes[..bytes.len() - cut].to_vec();
        let (_server, bin, err) = provide_with(sha512(&damaged), Reply::new(damaged));
        let message = err.to_string();
        assert!(
            message.contains("cannot be unpacked"),
            "cut {cut}: {message}"
        );
        assert!(message.contains("--from-source"), "{message}");
        assert!(
            cache_contents(bin.path()).is_empty(),
            "{:?}",
            cache_contents(bin.path())
        );
    }
}

#[test]
fn concurrent_first_runs_share_one_download() {
    let server = honest_server(&["1.36.3"], Duration::from_millis(500));
    let bin = tempfile::tempdir().unwrap();
    let options = options(server.url("/envtest-releases.yaml"));
    let results: Vec<Provided> = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| assets::provide("1.36.3", bin.path(), &options, &quiet)))
            .collect();
        runs.into_iter()
            .map(|r| r.join().unwrap().unwrap())
            .collect()
    });
    assert_eq!(server.count(&archive_path("1.36.3")), 1);
    assert_eq!(server.count("/envtest-releases.yaml"), 1);
    let mut sources: Vec<String> = results.iter().map(|p| format!("{:?}", p.source)).collect();
    sources.sort();
    assert_eq!(sources, ["Cache", "Downloaded"]);
    assert_eq!(results[0].dir, results[1].dir);
    assert_eq!(cache_contents(bin.path()), [platform_dir("1.36.3")]);
}

/// A stand-in `go` that answers `go version` and records every other call (`<dir>: <args>`), then
/// fails it.
fn fake_go(dir: &Path) -> (PathBuf, PathBuf) {
    let log = dir.join("go.log");
    let go = dir.join("go");
    std::fs::write(
        &go,
        format!(
            "#!/bin/sh\n[ \"$1\" = version ] && exit 0\necho \"$(basename \"$PWD\"): $*\" >> '{}'\necho 'no module proxy here' >&2\nexit 1\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&go, std::fs::Permissions::from_mode(0o755)).unwrap();
    (go, log)
}

/// Provides 1.36.3 with a stand-in Go; returns the error, the status lines and what Go was asked.
fn provide_with_fake_go(options: Options) -> (String, Vec<String>, String, Duration) {
    let tools = tempfile::tempdir().unwrap();
    let (go, log) = fake_go(tools.path());
    let bin = tempfile::tempdir().unwrap();
    let lines = Mutex::new(Vec::new());
    let record =
        |verb: &str, message: &str| lines.lock().unwrap().push(format!("{verb} {message}"));
    let started = Instant::now();
    let err = assets::provide("1.36.3", bin.path(), &Options { go, ..options }, &record)
        .unwrap_err()
        .to_string();
    let elapsed = started.elapsed();
    assert!(
        cache_contents(bin.path()).is_empty(),
        "{:?}",
        cache_contents(bin.path())
    );
    let asked = std::fs::read_to_string(log).unwrap_or_default();
    (err, lines.into_inner().unwrap(), asked, elapsed)
}

fn closed_port_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/envtest-releases.yaml")
}

#[test]
fn without_network_it_builds_with_go_at_once() {
    let (err, lines, asked, elapsed) = provide_with_fake_go(options(closed_port_url()));
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("Skipping download: cannot fetch the index")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.starts_with("Building")), "{lines:?}");
    assert!(
        asked
            .lines()
            .next()
            .is_some_and(|l| l.ends_with(": mod download -json k8s.io/kubernetes@v1.36.3")),
        "{asked}"
    );
    assert!(
        err.contains("`go mod download k8s.io/kubernetes@v1.36.3` failed"),
        "{err}"
    );
    assert!(
        elapsed < Duration::from_secs(5),
        "took {elapsed:?} to give up on the network"
    );
}

#[test]
fn a_release_missing_from_the_index_is_built_with_go() {
    let server = honest_server(&["1.36.2"], Duration::ZERO);
    let (_, lines, asked, _) = provide_with_fake_go(options(server.url("/envtest-releases.yaml")));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("lists no envtest archive of Kubernetes 1.36.3")),
        "{lines:?}"
    );
    assert!(asked.contains("k8s.io/kubernetes@v1.36.3"), "{asked}");
    assert_eq!(server.count(&archive_path("1.36.2")), 0);
}

#[test]
fn from_source_asks_no_server() {
    let server = honest_server(&["1.36.3"], Duration::ZERO);
    let (_, _, asked, _) = provide_with_fake_go(Options {
        from_source: true,
        ..options(server.url("/envtest-releases.yaml"))
    });
    assert_eq!(server.total(), 0);
    assert!(asked.contains("k8s.io/kubernetes@v1.36.3"), "{asked}");
}

#[test]
fn without_network_or_go_the_error_says_both() {
    let bin = tempfile::tempdir().unwrap();
    let err = assets::provide("1.36.3", bin.path(), &options(closed_port_url()), &quiet)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "etcd, kube-apiserver, kubectl could not be downloaded (cannot fetch the index"
        ),
        "{err}"
    );
    assert!(
        err.contains("Go (`/nonexistent/go`) is not installed"),
        "{err}"
    );
    assert!(err.contains("\nhelp: check the network"), "{err}");
    assert!(cache_contents(bin.path()).is_empty());

    // A minor cannot even be resolved to a release without the index.
    let err = assets::provide("1.36", bin.path(), &options(closed_port_url()), &quiet)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "cannot tell the newest release of Kubernetes 1.36: cannot fetch the index"
        ),
        "{err}"
    );
    assert!(err.contains("help: give a full release"), "{err}");
}

/// Serves kube-controller-manager and kube-scheduler of `version` under `/release`, as dl.k8s.io lays
/// them out, each with a `.sha256` holding `hash(name, bytes)`.
fn serve_release_binaries(server: &Server, version: &str, hash: impl Fn(&str, &[u8]) -> String) {
    let (os, arch) = platform();
    for name in ["kube-controller-manager", "kube-scheduler"] {
        let bytes = format!("#!/bin/sh\necho {name} {version}\n").into_bytes();
        let path = format!("/release/v{version}/bin/{os}/{arch}/{name}");
        server.route(
            format!("{path}.sha256"),
            Reply::new(hash(name, &bytes) + "\n"),
        );
        server.route(path, Reply::new(bytes));
    }
}

fn sha256(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Options for the cluster with release binaries from `server` and a stand-in Go logging to the
/// returned file.
fn cluster_options(server: &Server, tools: &Path) -> (Options, PathBuf) {
    let (go, log) = fake_go(tools);
    let options = Options {
        components: Components::Cluster,
        release_url: server.url("/release"),
        go,
        ..options(server.url("/envtest-releases.yaml"))
    };
    (options, log)
}

#[test]
fn the_cluster_downloads_the_release_binaries_and_builds_only_kwok() {
    let server = honest_server(&["1.36.3"], Duration::ZERO);
    serve_release_binaries(&server, "1.36.3", |_, bytes| sha256(bytes));
    let tools = tempfile::tempdir().unwrap();
    let (options, log) = cluster_options(&server, tools.path());
    let bin = tempfile::tempdir().unwrap();
    // The stand-in Go cannot build kwok, so the call fails after the downloads.
    let err = assets::provide("1.36.3", bin.path(), &options, &quiet)
        .unwrap_err()
        .to_string();
    assert!(err.contains("`go mod tidy` failed"), "{err}");
    let asked = std::fs::read_to_string(log).unwrap();
    assert_eq!(asked, "kwok: mod tidy\n", "Go was asked for more than kwok");
    let dir = bin.path().join("k8s").join(platform_dir("1.36.3"));
    for name in [
        "etcd",
        "kube-apiserver",
        "kubectl",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        assert_eq!(run(&dir.join(name)), format!("{name} 1.36.3"));
    }
    assert_eq!(Components::Cluster.missing(&dir), ["kwok", "kwok-stages/"]);
    // Beside the binaries only the Go build's work directory (its go.mod files, kept for the next try).
    assert_eq!(
        cache_contents(bin.path()),
        [".build-1.36.3".to_string(), platform_dir("1.36.3")]
    );
}

#[test]
fn a_release_binary_not_matching_its_sha256_is_refused() {
    let server = honest_server(&["1.36.3"], Duration::ZERO);
    serve_release_binaries(&server, "1.36.3", |name, bytes| {
        if name == "kube-scheduler" {
            sha256(b"something else")
        } else {
            sha256(bytes)
        }
    });
    let tools = tempfile::tempdir().unwrap();
    let (options, log) = cluster_options(&server, tools.path());
    let bin = tempfile::tempdir().unwrap();
    let err = assets::provide("1.36.3", bin.path(), &options, &quiet)
        .unwrap_err()
        .to_string();
    assert!(err.contains("/kube-scheduler` ("), "{err}");
    assert!(
        err.contains("does not match its published SHA-256"),
        "{err}"
    );
    assert!(!log.exists(), "a refused download fell back to a build");
    // The control plane, downloaded and checked first, stays; nothing of the refused download does.
    let dir = bin.path().join("k8s").join(platform_dir("1.36.3"));
    assert!(Components::ControlPlane.missing(&dir).is_empty());
    assert!(!dir.join("kube-controller-manager").exists());
    assert_eq!(cache_contents(bin.path()), [platform_dir("1.36.3")]);
}
