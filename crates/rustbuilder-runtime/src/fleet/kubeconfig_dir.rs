//! [`KubeconfigDir`]: one cluster per kubeconfig file in a directory.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use tracing::{info, warn};

use super::provider::{Announcement, Provider, Seen};

/// How often [`KubeconfigDir`] reads its directory by default.
pub const DEFAULT_SCAN_INTERVAL: Duration = Duration::from_secs(5);

/// The clusters of the kubeconfig files in a directory: one cluster per file, named by the file's
/// stem (`east.yaml` is `east`), reached through the file's current context.
///
/// The directory is read again every [`KubeconfigDir::interval`]: a new file engages its cluster,
/// a changed one engages it again with the new kubeconfig, a removed one disengages it. Files whose
/// names start with `.` are skipped, so a mounted Secret or ConfigMap (whose `..data` links Kubernetes
/// swaps on each update) works as such a directory. Of two files with the same stem, the first by
/// name counts. A file that is not a usable kubeconfig is reported and ignored (its cluster stays as
/// it was), and so is a directory that cannot be read. Paths in a kubeconfig (certificate files)
/// are taken as they are written: make them absolute, or embed the data.
#[derive(Clone, Debug)]
pub struct KubeconfigDir {
    dir: PathBuf,
    interval: Duration,
}

impl KubeconfigDir {
    /// The clusters of the kubeconfig files in `dir`, read every [`DEFAULT_SCAN_INTERVAL`].
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        KubeconfigDir {
            dir: dir.into(),
            interval: DEFAULT_SCAN_INTERVAL,
        }
    }

    /// How often to read the directory again.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }
}

impl Provider for KubeconfigDir {
    fn clusters(self) -> BoxStream<'static, Announcement> {
        let state = (self, Seen::default(), Scan::First);
        let rounds = futures::stream::unfold(state, |(dir, mut seen, scan)| async move {
            if scan != Scan::First {
                tokio::time::sleep(dir.interval).await;
            }
            let path = dir.dir.clone();
            let files = tokio::task::spawn_blocking(move || read_dir(&path)).await;
            let files = files.unwrap_or_else(|panic| Err(io::Error::other(panic.to_string())));
            let (announced, scan) = match files {
                Ok(files) => (changes(&mut seen, files).await, Scan::Read),
                Err(error) => {
                    // Reported when it starts failing, not at every round.
                    if scan != Scan::Failing {
                        warn!(dir = %dir.dir.display(), %error, "cannot read the kubeconfig directory: its clusters stay as they are");
                    }
                    (Vec::new(), Scan::Failing)
                }
            };
            if scan == Scan::Read && !announced.is_empty() {
                info!(dir = %dir.dir.display(), changes = announced.len(), "kubeconfig files changed");
            }
            Some((futures::stream::iter(announced), (dir, seen, scan)))
        });
        rounds.flatten().boxed()
    }
}

/// How the last reading of the directory went.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scan {
    First,
    Read,
    Failing,
}

/// What changed between the files seen before and `files`.
async fn changes(
    seen: &mut Seen,
    files: BTreeMap<String, (PathBuf, Vec<u8>)>,
) -> Vec<Announcement> {
    let mut announced = Vec::new();
    let gone: Vec<String> = seen
        .names()
        .filter(|name| !files.contains_key(*name))
        .map(String::from)
        .collect();
    announced.extend(gone.iter().filter_map(|name| seen.gone(name)));
    for (name, (path, text)) in files {
        let source = path.display().to_string();
        announced.extend(seen.read(&name, text, &source).await);
    }
    announced
}

/// The kubeconfig files of `dir` by cluster name, with their paths and contents.
fn read_dir(dir: &Path) -> io::Result<BTreeMap<String, (PathBuf, Vec<u8>)>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .collect();
    paths.sort();
    let mut files = BTreeMap::new();
    for path in paths {
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        // Hidden files, and (following links) anything that is not a file.
        if stem.starts_with('.') || stem.is_empty() || !path.is_file() {
            continue;
        }
        if files.contains_key(stem) {
            continue;
        }
        // A file removed since the listing is simply not there.
        match std::fs::read(&path) {
            Ok(text) => {
                files.insert(stem.to_string(), (path, text));
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_named_by_stem_and_hidden_ones_skipped() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "east.yaml",
            "east.json",
            "west",
            ".hidden",
            "north.kube.yaml",
        ] {
            std::fs::write(dir.path().join(name), name).unwrap();
        }
        std::fs::create_dir(dir.path().join("south")).unwrap();
        let files = read_dir(dir.path()).unwrap();
        let names: Vec<_> = files.keys().map(String::as_str).collect();
        assert_eq!(names, ["east", "north.kube", "west"]);
        assert_eq!(files["east"].1, b"east.json", "the first by name");
        assert!(read_dir(&dir.path().join("absent")).is_err());
    }
}
