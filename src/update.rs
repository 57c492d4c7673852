//! `alpha update`: moves a project to the scaffold of this rustbuilder with a three-way merge.
//!
//! The ancestor is the project re-scaffolded from its PROJECT file by the rustbuilder that made it (the
//! version PROJECT records as `cliVersion`, run as a separate executable); theirs is the same re-scaffolded
//! by this rustbuilder; ours is the user's tree. Each file is merged on its own with `git merge-file`, and
//! the result is written into the working tree at once. The tree must be committed first, so `git diff`
//! shows what changed and `git restore` undoes it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};

use crate::project::{self, Project};
use crate::scaffold::{IfExists, Plan};

pub mod branch;

/// The version of this rustbuilder: the scaffold a project moves to.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The project directory.
    pub dir: PathBuf,
    /// The rustbuilder version that scaffolded the project, instead of PROJECT's `cliVersion`.
    pub from_version: Option<String>,
    /// The executable of that rustbuilder, instead of looking it up.
    pub from_binary: Option<PathBuf>,
}

/// What `alpha update` did.
#[derive(Debug)]
pub enum Outcome {
    /// PROJECT already records this rustbuilder: nothing was done.
    UpToDate,
    /// The new scaffold was merged in: what it touched.
    Merged(Box<Report>),
}

/// The files `alpha update` touched, each list sorted by path.
#[derive(Debug, Default)]
pub struct Report {
    pub from: String,
    pub to: String,
    /// Files the new scaffold added.
    pub added: Vec<PathBuf>,
    /// Files you had not changed, now as the new scaffold has them.
    pub updated: Vec<PathBuf>,
    /// Files the new scaffold no longer has, which you had not changed.
    pub removed: Vec<PathBuf>,
    /// Files both you and the new scaffold changed, merged without conflict.
    pub merged: Vec<PathBuf>,
    /// Files left with conflict markers.
    pub conflicts: Vec<PathBuf>,
    /// Files the new scaffold has under another name, moved there with your changes: from, to.
    pub moved: Vec<(PathBuf, PathBuf)>,
    /// Files kept as you have them although the new scaffold differs, with the reason.
    pub kept: Vec<(PathBuf, &'static str)>,
    /// The project has a Helm chart, to refresh once the manifests are.
    pub helm: bool,
}

impl Report {
    /// Whether the merge wrote anything.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.updated.is_empty()
            && self.removed.is_empty()
            && self.merged.is_empty()
            && self.conflicts.is_empty()
            && self.moved.is_empty()
    }
}

pub fn run(options: &Options) -> Result<Outcome> {
    let dir = &options.dir;
    check_repository(dir)?;
    let project = Project::load(dir)?;
    check_clean(dir)?;

    let recorded = options
        .from_version
        .clone()
        .or_else(|| project.cli_version.clone());
    if let Some(version) = &recorded {
        check_version(version)?;
    }
    if options.from_binary.is_none() && recorded.as_deref() == Some(VERSION) {
        return Ok(Outcome::UpToDate);
    }
    let (binary, from) = match (&options.from_binary, recorded) {
        (Some(binary), recorded) => {
            let reported = binary_version(binary)?;
            if let Some(recorded) = recorded
                && recorded != reported
            {
                bail!(
                    "`{}` is rustbuilder {reported}, but the project was scaffolded by rustbuilder {recorded}\n\
                     help: pass the executable of rustbuilder {recorded}, or `--from-version {reported}` if rustbuilder {reported} scaffolded the project",
                    binary.display()
                );
            }
            (binary.clone(), reported)
        }
        (None, Some(version)) => {
            let binary = find_binary(&version)?;
            let reported = binary_version(&binary)?;
            if reported != version {
                bail!(
                    "`{}` is rustbuilder {reported}, not {version}\n\
                     help: reinstall rustbuilder {version} there, or pass its executable with `--from-binary PATH`",
                    binary.display()
                );
            }
            (binary, version)
        }
        (None, None) => bail!(
            "PROJECT records no `cliVersion`: the rustbuilder version that scaffolded the project is unknown\n\
             help: pass it with `--from-version VERSION`, or its executable with `--from-binary PATH`"
        ),
    };

    let work = tempfile::Builder::new()
        .prefix("rustbuilder-update-")
        .tempdir()
        .context("failed to create a temporary directory")?;
    let ancestor = work.path().join("ancestor");
    let theirs = work.path().join("theirs");
    scaffold_with(&binary, &from, dir, &ancestor)?;
    crate::shell::set_quiet_scoped(|| crate::generate::scaffold(dir, &theirs))
        .with_context(|| format!("rustbuilder {VERSION} could not re-scaffold the project"))?;

    let mut report = Report {
        from,
        to: VERSION.to_string(),
        helm: project.plugins.contains_key(project::HELM_PLUGIN),
        ..Report::default()
    };
    let mut plan = Plan::new(dir);
    let merge_dir = work.path().join("merge");
    std::fs::create_dir(&merge_dir)?;
    let before = files(&ancestor)?;
    let after = files(&theirs)?;
    let merger = Merger {
        dir: &merge_dir,
        from: &report.from,
    };
    // Files the new scaffold moved: the user's version is merged into the new one, at its new place.
    let moves = moves(&before, &after, dir);
    for (from, to) in &moves {
        let base = read(&ancestor.join(from))?;
        let new = read(&theirs.join(to))?;
        let current = read(&dir.join(from))?;
        let texts = (
            base.map(String::from_utf8),
            new.map(String::from_utf8),
            current.map(String::from_utf8),
        );
        let (Some(Ok(base)), Some(Ok(new)), Some(Ok(current))) = texts else {
            report.kept.push((
                from.clone(),
                "the new scaffold moved it, but it is not text: it stays",
            ));
            continue;
        };
        let (contents, clean) = if current == base || current == new {
            (new, true)
        } else if base == new {
            (current, true)
        } else {
            merger.merge(to, &base, &current, &new)?
        };
        plan.add(to, contents, IfExists::Overwrite);
        plan.remove(from);
        report.moved.push((from.clone(), to.clone()));
        if !clean {
            report.conflicts.push(to.clone());
        }
    }
    let mut paths = before;
    paths.extend(after);
    for path in &paths {
        if moves.iter().any(|(from, to)| from == path || to == path) {
            continue;
        }
        let base = read(&ancestor.join(path))?;
        let new = read(&theirs.join(path))?;
        let current = read(&dir.join(path))?;
        match decide(path, base, new, current, &merger)? {
            Step::Keep => {}
            Step::Write(contents, kind) => {
                plan.add(path, contents, IfExists::Overwrite);
                match kind {
                    Written::Added => report.added.push(path.clone()),
                    Written::Updated => report.updated.push(path.clone()),
                    Written::Merged => report.merged.push(path.clone()),
                    Written::Conflict => report.conflicts.push(path.clone()),
                }
            }
            Step::Remove => {
                plan.remove(path);
                report.removed.push(path.clone());
            }
            Step::Report(reason) => report.kept.push((path.clone(), reason)),
        }
    }

    // PROJECT ends recording this rustbuilder, unless it has conflicts to resolve first.
    let project_path = PathBuf::from(project::FILE_NAME);
    if !report.conflicts.contains(&project_path) {
        let text = plan
            .contents(project::FILE_NAME)?
            .context("the merge lost the PROJECT file")?;
        let mut merged = Project::parse(&text).context("the merged PROJECT file is not valid")?;
        if merged.cli_version.as_deref() != Some(VERSION) {
            merged.cli_version = Some(VERSION.to_string());
            plan.add(project::FILE_NAME, merged.render(), IfExists::Overwrite);
            if !report.updated.contains(&project_path) && !report.merged.contains(&project_path) {
                report.updated.push(project_path);
            }
        }
    }
    report.moved.sort();
    for list in [
        &mut report.added,
        &mut report.updated,
        &mut report.merged,
        &mut report.conflicts,
    ] {
        list.sort();
    }
    plan.apply()?;
    Ok(Outcome::Merged(Box::new(report)))
}

/// Where this scaffold has a file an older one had under another name: the generated tests, once a
/// crate each (`tests/<name>_controller.rs`, `tests/<kind>_<version>_webhook.rs`,
/// `tests/<kind>_conversion.rs`), are modules of one crate per kind of test now
/// (`tests/controllers/<name>.rs`, `tests/webhooks/<kind>_<version>.rs`,
/// `tests/webhooks/<kind>_conversion.rs`).
fn moved_to(path: &Path) -> Option<PathBuf> {
    if path.parent() != Some(Path::new("tests")) {
        return None;
    }
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".rs")?;
    if let Some(module) = stem.strip_suffix("_controller") {
        return Some(PathBuf::from(format!("tests/controllers/{module}.rs")));
    }
    if let Some(module) = stem.strip_suffix("_webhook") {
        return Some(PathBuf::from(format!("tests/webhooks/{module}.rs")));
    }
    stem.ends_with("_conversion")
        .then(|| PathBuf::from(format!("tests/webhooks/{name}")))
}

/// The moves from the old scaffold (`before`) to the new one (`after`) the project can follow: the file
/// is at its old place only, in the old scaffold and in the project, and at its new place only in the
/// new scaffold.
fn moves(
    before: &BTreeSet<PathBuf>,
    after: &BTreeSet<PathBuf>,
    dir: &Path,
) -> Vec<(PathBuf, PathBuf)> {
    before
        .iter()
        .filter(|from| !after.contains(*from) && dir.join(from).is_file())
        .filter_map(|from| moved_to(from).map(|to| (from.clone(), to)))
        .filter(|(_, to)| after.contains(to) && !before.contains(to) && !dir.join(to).exists())
        .collect()
}

/// What becomes of one file.
#[derive(Debug, PartialEq)]
enum Step {
    /// The user's file stays as it is, nothing to say.
    Keep,
    Write(String, Written),
    Remove,
    /// The user's file stays as it is, although the new scaffold differs: say why.
    Report(&'static str),
}

#[derive(Debug, PartialEq)]
enum Written {
    Added,
    Updated,
    Merged,
    Conflict,
}

/// Decides one file from its three versions (`None`: the file is absent there).
fn decide(
    path: &Path,
    base: Option<Vec<u8>>,
    new: Option<Vec<u8>>,
    current: Option<Vec<u8>>,
    merger: &Merger<'_>,
) -> Result<Step> {
    // The scaffold did not change the file: whatever the user did stays.
    if base == new || current == new {
        return Ok(Step::Keep);
    }
    let Some(new) = new else {
        // The new scaffold no longer has the file.
        return Ok(match current {
            None => Step::Keep,
            Some(current) if Some(&current) == base.as_ref() => Step::Remove,
            Some(_) => Step::Report(
                "the new scaffold no longer has it, but you changed it: delete it if you do not need it",
            ),
        });
    };
    let Some(current) = current else {
        return Ok(match base {
            // New in the scaffold.
            None => match String::from_utf8(new) {
                Ok(text) => Step::Write(text, Written::Added),
                Err(_) => Step::Report("a binary file the new scaffold adds: it was not written"),
            },
            Some(_) => {
                Step::Report("you deleted it and the new scaffold changed it: it stays deleted")
            }
        });
    };
    if Some(&current) == base.as_ref() {
        return Ok(match String::from_utf8(new) {
            Ok(text) => Step::Write(text, Written::Updated),
            Err(_) => Step::Report("a binary file the new scaffold changed: yours is kept"),
        });
    }
    // Both sides changed the file (or both added it, differently): a three-way merge.
    let base = base.unwrap_or_default();
    let texts = (
        String::from_utf8(base),
        String::from_utf8(current),
        String::from_utf8(new),
    );
    let (Ok(base), Ok(current), Ok(new)) = texts else {
        return Ok(Step::Report(
            "a binary file both you and the new scaffold changed: yours is kept",
        ));
    };
    let (merged, clean) = merger.merge(path, &base, &current, &new)?;
    Ok(Step::Write(
        merged,
        if clean {
            Written::Merged
        } else {
            Written::Conflict
        },
    ))
}

/// Runs `git merge-file` on three texts in a scratch directory.
struct Merger<'a> {
    dir: &'a Path,
    from: &'a str,
}

impl Merger<'_> {
    /// Merges `base → new` into `current`: the merged text, and whether it is free of conflicts.
    fn merge(&self, path: &Path, base: &str, current: &str, new: &str) -> Result<(String, bool)> {
        let ours = self.dir.join("ours");
        let ancestor = self.dir.join("ancestor");
        let theirs = self.dir.join("theirs");
        std::fs::write(&ours, current)?;
        std::fs::write(&ancestor, base)?;
        std::fs::write(&theirs, new)?;
        let output = Command::new("git")
            .args(["merge-file", "-p", "--diff3", "-L", "ours", "-L"])
            .arg(format!("ancestor (rustbuilder {})", self.from))
            .arg("-L")
            .arg(format!("rustbuilder {VERSION}"))
            .args([&ours, &ancestor, &theirs])
            .output()
            .map_err(git_missing)?;
        match output.status.code() {
            Some(code @ 0..=127) => {
                let merged = String::from_utf8(output.stdout)
                    .with_context(|| format!("`git merge-file` garbled `{}`", path.display()))?;
                Ok((merged, code == 0))
            }
            _ => bail!(
                "`git merge-file` failed on `{}`: {}",
                path.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        }
    }
}

/// Every file under `root`, relative to it, sorted.
fn files(root: &Path) -> Result<BTreeSet<PathBuf>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<PathBuf>) -> Result<()> {
        for entry in
            std::fs::read_dir(dir).with_context(|| format!("failed to read `{}`", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                walk(root, &path, out)?;
            } else {
                out.insert(path.strip_prefix(root)?.to_path_buf());
            }
        }
        Ok(())
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out)?;
    Ok(out)
}

/// A file's bytes, or `None` when there is no file at `path`.
fn read(path: &Path) -> Result<Option<Vec<u8>>> {
    if !path.is_file() {
        return Ok(None);
    }
    std::fs::read(path)
        .map(Some)
        .with_context(|| format!("failed to read `{}`", path.display()))
}

fn git_missing(e: std::io::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "failed to run `git`: {e}\nhelp: install git: `alpha update` merges with `git merge-file` and relies on git to review and undo its changes"
    )
}

/// Runs git in `dir` without its optional locks, so a refused update leaves even `.git` as it was.
fn git(dir: &Path, args: &[&str]) -> Result<std::process::Output> {
    Command::new("git")
        .arg("--no-optional-locks")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(git_missing)
}

/// The project must be in a git work tree: git is how the update is reviewed and undone.
fn check_repository(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        bail!("`{}` is not a directory", dir.display());
    }
    let output = git(dir, &["rev-parse", "--is-inside-work-tree"])?;
    if !output.status.success() || output.stdout.trim_ascii() != b"true" {
        bail!(
            "`{}` is not in a git repository: `alpha update` writes into your files and leaves the review to git\n\
             help: put the project under git first: `git init && git add -A && git commit -m \"Initial commit\"`",
            dir.display()
        );
    }
    Ok(())
}

/// Nothing uncommitted in the project, so `git restore` can undo the update entirely.
fn check_clean(dir: &Path) -> Result<()> {
    let output = git(dir, &["status", "--porcelain", "--", "."])?;
    if !output.status.success() {
        bail!(
            "`git status` failed in `{}`: {}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let status = String::from_utf8_lossy(&output.stdout);
    if !status.trim().is_empty() {
        let lines: Vec<&str> = status.lines().collect();
        let shown = lines
            .iter()
            .take(10)
            .copied()
            .collect::<Vec<_>>()
            .join("\n");
        let more = if lines.len() > 10 {
            format!("\n... and {} more", lines.len() - 10)
        } else {
            String::new()
        };
        bail!(
            "the project has uncommitted changes:\n{shown}{more}\n\
             help: commit or stash them first: `alpha update` writes into the working tree, and `git restore` must be able to undo it"
        );
    }
    Ok(())
}

/// The version that scaffolded the project as `run` will take it, if known, without running anything
/// but `--from-binary`'s `--version`.
fn scaffolded_by(options: &Options) -> Result<Option<String>> {
    if let Some(binary) = &options.from_binary {
        return binary_version(binary).map(Some);
    }
    if options.from_version.is_some() {
        return Ok(options.from_version.clone());
    }
    Ok(Project::load(&options.dir)?.cli_version)
}

/// Takes back what a merge wrote into a tree that was clean before it (see [`check_clean`]).
fn undo(dir: &Path) -> Result<()> {
    for args in [&["checkout", "--", "."][..], &["clean", "-fdq", "--", "."]] {
        let output = git(dir, args)?;
        if !output.status.success() {
            bail!(
                "`git {}` failed while undoing the update: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
    }
    Ok(())
}

/// A version is used in file names: digits, letters, `.`, `-` and `+` only.
fn check_version(version: &str) -> Result<()> {
    let valid = !version.is_empty()
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'));
    if !valid {
        bail!(
            "`{version}` is not a rustbuilder version\nhelp: a version looks like `0.1.0`; check `cliVersion` in PROJECT or `--from-version`"
        );
    }
    Ok(())
}

/// Where the executable of rustbuilder `version` is looked for when `--from-binary` is not given.
pub fn cache_binary(version: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(
        release_root(&cache, version)
            .join("bin")
            .join("rustbuilder"),
    )
}

fn release_root(cache: &Path, version: &str) -> PathBuf {
    cache.join("rustbuilder").join("releases").join(version)
}

/// `rustbuilder-<version>` on PATH, then the release cache.
fn find_binary(version: &str) -> Result<PathBuf> {
    let name = format!("rustbuilder-{version}");
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(&name);
            if is_executable(&candidate) {
                return Ok(candidate);
            }
        }
    }
    let cached = cache_binary(version);
    if let Some(cached) = &cached
        && is_executable(cached)
    {
        return Ok(cached.clone());
    }
    let (looked, install) = match &cached {
        Some(cached) => {
            let root = cached
                .parent()
                .and_then(Path::parent)
                .expect("the cache path has a root");
            (
                format!("`{name}` on PATH and `{}`", cached.display()),
                format!(
                    "help: install it: `cargo install rustbuilder --version {version} --root {}`",
                    root.display()
                ),
            )
        }
        None => (
            format!("`{name}` on PATH"),
            format!(
                "help: install it as `{name}` on PATH: `cargo install rustbuilder --version {version} --root DIR`, then link DIR/bin/rustbuilder"
            ),
        ),
    };
    bail!(
        "rustbuilder {version}, which scaffolded this project, was not found (looked for {looked})\n\
         {install}\n\
         help: or pass its executable: `rustbuilder alpha update --from-binary PATH`"
    )
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

/// The version an executable reports with `--version` (`rustbuilder 0.1.0`).
fn binary_version(binary: &Path) -> Result<String> {
    let output = Command::new(binary).arg("--version").output().map_err(|e| {
        anyhow::anyhow!(
            "failed to run `{}`: {e}\nhelp: `--from-binary` takes the path of a rustbuilder executable",
            binary.display()
        )
    })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let version = stdout
        .trim()
        .strip_prefix("rustbuilder ")
        .filter(|_| output.status.success());
    match version {
        Some(version) => {
            check_version(version)?;
            Ok(version.to_string())
        }
        None => bail!(
            "`{} --version` did not answer `rustbuilder <version>`: {}\nhelp: `--from-binary` takes the path of a rustbuilder executable",
            binary.display(),
            stdout.trim()
        ),
    }
}

/// The ancestor: the project re-scaffolded by rustbuilder `version`, run as `binary`.
fn scaffold_with(binary: &Path, version: &str, dir: &Path, output: &Path) -> Result<()> {
    let input = std::path::absolute(dir)?;
    let result = Command::new(binary)
        .args(["alpha", "generate", "--skip-manifests", "--input-dir"])
        .arg(&input)
        .arg("--output-dir")
        .arg(output)
        .env("NO_COLOR", "1")
        .output()
        .with_context(|| format!("failed to run `{}`", binary.display()))?;
    if !result.status.success() || !output.join(project::FILE_NAME).is_file() {
        bail!(
            "rustbuilder {version} (`{}`) could not re-scaffold the project:\n{}\n\
             help: `alpha update` needs `alpha generate --skip-manifests` of the old rustbuilder (0.1.0 and later)",
            binary.display(),
            String::from_utf8_lossy(&result.stderr).trim_end()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide_texts(base: Option<&str>, new: Option<&str>, current: Option<&str>) -> Step {
        let dir = tempfile::tempdir().unwrap();
        let merger = Merger {
            dir: dir.path(),
            from: "0.0.1",
        };
        let bytes = |t: Option<&str>| t.map(|t| t.as_bytes().to_vec());
        decide(
            Path::new("f"),
            bytes(base),
            bytes(new),
            bytes(current),
            &merger,
        )
        .unwrap()
    }

    #[test]
    fn each_side_of_a_file_decides_what_happens_to_it() {
        // Unchanged by the scaffold, or already as the new scaffold has it: left alone.
        assert_eq!(decide_texts(Some("a"), Some("a"), Some("mine")), Step::Keep);
        assert_eq!(decide_texts(Some("a"), Some("b"), Some("b")), Step::Keep);
        assert_eq!(decide_texts(None, None, Some("mine")), Step::Keep);
        // New in the scaffold.
        assert_eq!(
            decide_texts(None, Some("new"), None),
            Step::Write("new".into(), Written::Added)
        );
        // Untouched by the user: the new scaffold's version, or removed.
        assert_eq!(
            decide_texts(Some("a"), Some("b"), Some("a")),
            Step::Write("b".into(), Written::Updated)
        );
        assert_eq!(decide_texts(Some("a"), None, Some("a")), Step::Remove);
        // Removed by the new scaffold but edited, or deleted by the user: the user's choice stays.
        assert!(matches!(
            decide_texts(Some("a"), None, Some("mine")),
            Step::Report(_)
        ));
        assert_eq!(decide_texts(Some("a"), None, None), Step::Keep);
        assert!(matches!(
            decide_texts(Some("a"), Some("b"), None),
            Step::Report(_)
        ));
    }

    #[test]
    fn both_sides_changed_is_a_three_way_merge() {
        let base = "one\ntwo\nthree\nfour\nfive\n";
        let new = "one\ntwo\nthree\nfour\nFIVE\n";
        let mine = "ONE\ntwo\nthree\nfour\nfive\n";
        assert_eq!(
            decide_texts(Some(base), Some(new), Some(mine)),
            Step::Write("ONE\ntwo\nthree\nfour\nFIVE\n".into(), Written::Merged)
        );
        let mine = "one\ntwo\nthree\nfour\nfive!\n";
        let Step::Write(text, Written::Conflict) = decide_texts(Some(base), Some(new), Some(mine))
        else {
            panic!("expected a conflict");
        };
        assert!(
            text.contains("<<<<<<< ours\nfive!\n||||||| ancestor (rustbuilder 0.0.1)\nfive\n=======\nFIVE\n>>>>>>> rustbuilder "),
            "{text}"
        );
    }

    #[test]
    fn binary_files_are_never_merged() {
        let dir = tempfile::tempdir().unwrap();
        let merger = Merger {
            dir: dir.path(),
            from: "0.0.1",
        };
        let step = decide(
            Path::new("logo.png"),
            Some(vec![0xff, 1]),
            Some(vec![0xff, 2]),
            Some(vec![0xff, 3]),
            &merger,
        )
        .unwrap();
        assert!(matches!(step, Step::Report(_)), "{step:?}");
    }

    #[test]
    fn the_tests_of_the_older_layout_move_into_their_crates() {
        let to = |path: &str| moved_to(Path::new(path)).map(|p| p.display().to_string());
        assert_eq!(
            to("tests/memcached_controller.rs").as_deref(),
            Some("tests/controllers/memcached.rs")
        );
        assert_eq!(
            to("tests/cache_memcached_v1alpha1_webhook.rs").as_deref(),
            Some("tests/webhooks/cache_memcached_v1alpha1.rs")
        );
        assert_eq!(
            to("tests/memcached_conversion.rs").as_deref(),
            Some("tests/webhooks/memcached_conversion.rs")
        );
        for stays in [
            "tests/e2e/memcached_controller.rs",
            "tests/mine.rs",
            "src/memcached_controller.rs",
        ] {
            assert_eq!(to(stays), None, "{stays}");
        }
        // Only where the new scaffold has the file at the new place, and the project at the old one.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tests")).unwrap();
        std::fs::write(dir.path().join("tests/a_controller.rs"), "").unwrap();
        let set = |paths: &[&str]| paths.iter().map(PathBuf::from).collect::<BTreeSet<_>>();
        let before = set(&["tests/a_controller.rs", "tests/b_controller.rs"]);
        let after = set(&["tests/controllers/a.rs", "tests/controllers/b.rs"]);
        assert_eq!(
            moves(&before, &after, dir.path()),
            vec![(
                PathBuf::from("tests/a_controller.rs"),
                PathBuf::from("tests/controllers/a.rs")
            )]
        );
    }

    #[test]
    fn versions_are_checked_before_they_name_files() {
        assert!(check_version("0.1.0").is_ok());
        assert!(check_version("0.2.0-rc.1+build").is_ok());
        assert!(check_version("../../etc").is_err());
        assert!(check_version("").is_err());
    }
}
