//! Rendering and writing: templates become a [`Plan`] in memory, the plan is checked, then written at once.
//!
//! Templates live in `templates/<set>/`, mirroring the generated tree: `templates/init/src/main.rs.tera`
//! renders to `src/main.rs`. Paths may hold placeholders of the same engine (`{{kind_snake}}.rs.tera`).
//! Existing files are only edited at scaffold markers (`// +rustbuilder:scaffold:<name>`), never overwritten
//! unless the user asked for it with `--force`.

use std::collections::BTreeMap;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context as _, Result, anyhow, bail};
use include_dir::{Dir, DirEntry, include_dir};
use tera::Tera;

static TEMPLATES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/templates");

/// The suffix that marks a file as a template; other files are copied as they are.
const TEMPLATE_SUFFIX: &str = ".tera";

/// The one engine, built once from every embedded template.
fn engine() -> &'static Tera {
    static ENGINE: OnceLock<Tera> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut tera = Tera::default();
        tera.autoescape_on(vec![]);
        let mut files = Vec::new();
        collect(&TEMPLATES, &mut files);
        let sources = files.iter().filter_map(|(name, body)| {
            name.strip_suffix(TEMPLATE_SUFFIX).map(|_| {
                (
                    name.as_str(),
                    std::str::from_utf8(body).expect("templates are UTF-8"),
                )
            })
        });
        tera.add_raw_templates(sources)
            .unwrap_or_else(|e| panic!("embedded templates do not parse: {e:?}"));
        tera
    })
}

fn collect(dir: &'static Dir<'static>, out: &mut Vec<(String, &'static [u8])>) {
    for entry in dir.entries() {
        match entry {
            DirEntry::Dir(d) => collect(d, out),
            DirEntry::File(f) => {
                out.push((f.path().to_string_lossy().replace('\\', "/"), f.contents()))
            }
        }
    }
}

/// Every embedded file of a template set (e.g. `init`), as paths relative to the set, sorted.
pub fn template_set(set: &str) -> Vec<String> {
    let mut files = Vec::new();
    collect(&TEMPLATES, &mut files);
    let prefix = format!("{set}/");
    let mut names: Vec<String> = files
        .into_iter()
        .filter_map(|(name, _)| name.strip_prefix(&prefix).map(str::to_string))
        .collect();
    names.sort();
    names
}

/// Renders one embedded template (path relative to `templates/`) with `context`.
pub fn render(name: &str, context: &tera::Context) -> Result<String> {
    let text = if name.ends_with(TEMPLATE_SUFFIX) {
        engine()
            .render(name, context)
            .map_err(|e| anyhow!("failed to render template `{name}`: {}", error_chain(&e)))?
    } else {
        let file = TEMPLATES
            .get_file(name)
            .ok_or_else(|| anyhow!("no embedded template `{name}`"))?;
        file.contents_utf8()
            .ok_or_else(|| anyhow!("template `{name}` is not UTF-8"))?
            .to_string()
    };
    Ok(normalize(&text))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Renders a template path: placeholders filled in, `.tera` dropped.
fn render_path(path: &str, context: &tera::Context) -> Result<String> {
    let path = path.strip_suffix(TEMPLATE_SUFFIX).unwrap_or(path);
    if !path.contains("{{") {
        return Ok(path.to_string());
    }
    Tera::one_off(path, context, false)
        .map_err(|e| anyhow!("failed to render path `{path}`: {}", error_chain(&e)))
}

/// Unix newlines, no trailing blanks on lines, exactly one final newline.
fn normalize(text: &str) -> String {
    let mut out: String = text
        .replace("\r\n", "\n")
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_string();
    out.push('\n');
    out
}

/// What to do when a planned file already exists on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfExists {
    /// Refuse, naming the file (the default for files the user owns once written).
    Error,
    /// Keep the file on disk (shared files created by the first command that needs them).
    Skip,
    /// Replace it (files rustbuilder owns, and any file under `--force`).
    Overwrite,
}

#[derive(Debug, Clone)]
struct Planned {
    contents: String,
    if_exists: IfExists,
}

/// Files to write, keyed by path relative to the project root, in a deterministic order.
#[derive(Debug)]
pub struct Plan {
    root: PathBuf,
    files: BTreeMap<PathBuf, Planned>,
}

/// Where a fragment goes: before the marker line `<comment> +rustbuilder:scaffold:<name>` in `path`.
pub struct Insertion<'a> {
    pub path: &'a str,
    pub marker: &'a str,
    pub fragment: String,
}

pub const MARKER_PREFIX: &str = "+rustbuilder:scaffold:";

impl Plan {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            files: BTreeMap::new(),
        }
    }

    /// Adds a file with literal contents.
    pub fn add(&mut self, path: impl Into<PathBuf>, contents: String, if_exists: IfExists) {
        self.files.insert(
            path.into(),
            Planned {
                contents,
                if_exists,
            },
        );
    }

    /// Renders every template of `set` into the plan.
    pub fn add_set(
        &mut self,
        set: &str,
        context: &tera::Context,
        if_exists: impl Fn(&str) -> IfExists,
    ) -> Result<()> {
        for name in template_set(set) {
            let path = render_path(&name, context)?;
            let contents = render(&format!("{set}/{name}"), context)?;
            let policy = if_exists(&path);
            self.add(path, contents, policy);
        }
        Ok(())
    }

    /// The current text of a file: as planned, else as on disk.
    fn current(&self, path: &Path) -> Result<Option<String>> {
        if let Some(planned) = self.files.get(path) {
            return Ok(Some(planned.contents.clone()));
        }
        let full = self.root.join(path);
        match fs::read_to_string(&full) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("failed to read `{}`", full.display())),
        }
    }

    /// Inserts a fragment before its marker, in the planned or on-disk version of the file.
    pub fn insert(&mut self, insertion: Insertion<'_>) -> Result<()> {
        let path = PathBuf::from(insertion.path);
        let text = self.current(&path)?.ok_or_else(|| {
            anyhow!(
                "cannot add to `{}`: the file does not exist\nhelp: restore it from version control, or re-create the project with `rustbuilder alpha generate`",
                path.display()
            )
        })?;
        let updated = insert_at_marker(&text, insertion.marker, &insertion.fragment)
            .with_context(|| format!("cannot add to `{}`", path.display()))?;
        self.replace(path, updated);
        Ok(())
    }

    /// Plans new contents for a file, keeping what an earlier plan said about an existing one.
    fn replace(&mut self, path: PathBuf, contents: String) {
        let if_exists = self
            .files
            .get(&path)
            .map_or(IfExists::Overwrite, |p| p.if_exists);
        self.files.insert(
            path,
            Planned {
                contents,
                if_exists,
            },
        );
    }

    /// Rewrites a file (as planned, else as on disk) with `edit`; a missing file is left alone.
    pub fn edit(&mut self, path: &str, edit: impl FnOnce(&str) -> String) -> Result<()> {
        let path = PathBuf::from(path);
        let Some(text) = self.current(&path)? else {
            return Ok(());
        };
        self.replace(path, edit(&text));
        Ok(())
    }

    /// Files whose policy is `Error` and that already exist on disk.
    pub fn conflicts(&self) -> Vec<&Path> {
        self.files
            .iter()
            .filter(|(path, planned)| {
                planned.if_exists == IfExists::Error && self.root.join(path).exists()
            })
            .map(|(path, _)| path.as_path())
            .collect()
    }

    /// Makes every `Error` file an `Overwrite` one (the `--force` flag).
    pub fn force(&mut self) {
        for planned in self.files.values_mut() {
            if planned.if_exists == IfExists::Error {
                planned.if_exists = IfExists::Overwrite;
            }
        }
    }

    /// Files whose contents on disk differ from the plan (or are missing).
    pub fn stale(&self) -> Result<Vec<PathBuf>> {
        let mut stale = Vec::new();
        for (path, planned) in &self.files {
            let full = self.root.join(path);
            match fs::read_to_string(&full) {
                Ok(text) if text == planned.contents => {}
                Ok(_) => stale.push(path.clone()),
                Err(e) if e.kind() == ErrorKind::NotFound => stale.push(path.clone()),
                Err(e) => {
                    return Err(e).with_context(|| format!("failed to read `{}`", full.display()));
                }
            }
        }
        Ok(stale)
    }

    /// Writes the plan all or nothing: every file is first written next to its target under a temporary
    /// name, and only when all of them succeeded are they renamed into place. On failure the temporary
    /// files and any directory this call created are removed, leaving the tree as it was.
    /// Returns each written path and whether it was created (`true`) or updated.
    pub fn apply(self) -> Result<Vec<(PathBuf, bool)>> {
        if let Some(first) = self.conflicts().first() {
            bail!(
                "`{}` already exists\nhelp: pass `--force` to overwrite the generated files",
                first.display()
            );
        }
        let mut staged: Vec<(PathBuf, PathBuf, PathBuf, bool)> = Vec::new();
        let mut created_dirs: Vec<PathBuf> = Vec::new();
        let result = (|| -> Result<()> {
            for (path, planned) in &self.files {
                let target = self.root.join(path);
                let exists = target.exists();
                if exists && planned.if_exists == IfExists::Skip {
                    continue;
                }
                if exists && fs::read_to_string(&target).is_ok_and(|t| t == planned.contents) {
                    continue;
                }
                if let Some(parent) = target.parent() {
                    create_dirs(parent, &mut created_dirs)?;
                }
                let temp = target.with_file_name(format!(
                    ".{}.rustbuilder-tmp",
                    target
                        .file_name()
                        .and_then(|n| n.to_str())
                        .unwrap_or("file")
                ));
                fs::write(&temp, &planned.contents)
                    .with_context(|| format!("failed to write `{}`", target.display()))?;
                copy_permissions(&target, &temp, path)?;
                staged.push((path.clone(), temp, target, !exists));
            }
            Ok(())
        })();
        if let Err(e) = result {
            for (_, temp, _, _) in &staged {
                let _ = fs::remove_file(temp);
            }
            for dir in created_dirs.iter().rev() {
                let _ = fs::remove_dir(dir);
            }
            return Err(e);
        }
        let mut written = Vec::new();
        for (path, temp, target, created) in staged {
            fs::rename(&temp, &target)
                .with_context(|| format!("failed to write `{}`", target.display()))?;
            written.push((path, created));
        }
        Ok(written)
    }
}

/// Creates `dir` and its missing parents, remembering which ones it made.
fn create_dirs(dir: &Path, created: &mut Vec<PathBuf>) -> Result<()> {
    let mut missing = Vec::new();
    let mut cursor = Some(dir);
    while let Some(d) = cursor {
        if d.exists() {
            break;
        }
        missing.push(d.to_path_buf());
        cursor = d.parent();
    }
    for d in missing.into_iter().rev() {
        fs::create_dir(&d)
            .with_context(|| format!("failed to create directory `{}`", d.display()))?;
        created.push(d);
    }
    Ok(())
}

/// Keeps an existing file's mode; scripts under `hack/` and `.ci/` are made executable.
fn copy_permissions(target: &Path, temp: &Path, relative: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = match fs::metadata(target) {
            Ok(meta) => Some(meta.permissions().mode()),
            Err(_) if relative.extension().is_some_and(|e| e == "sh") => Some(0o755),
            Err(_) => None,
        };
        if let Some(mode) = mode {
            fs::set_permissions(temp, fs::Permissions::from_mode(mode))
                .with_context(|| format!("failed to set permissions of `{}`", target.display()))?;
        }
    }
    #[cfg(not(unix))]
    let _ = (target, temp, relative);
    Ok(())
}

/// Inserts `fragment` before the line holding the marker `+rustbuilder:scaffold:<marker>`.
///
/// A fragment already present is not added twice, so re-running a command is harmless. A missing or
/// duplicated marker is an error: silently skipping it would leave the project half-wired.
pub fn insert_at_marker(text: &str, marker: &str, fragment: &str) -> Result<String> {
    let needle = format!("{MARKER_PREFIX}{marker}");
    let hits: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| line.trim_end().ends_with(&needle))
        .map(|(i, _)| i)
        .collect();
    let line_no = match hits.as_slice() {
        [one] => *one,
        [] => bail!(
            "the scaffold marker `{needle}` is missing\nhelp: put the line `{needle}` back (as a comment) where new entries should go"
        ),
        _ => bail!(
            "the scaffold marker `{needle}` appears {} times; keep exactly one",
            hits.len()
        ),
    };
    if text.contains(fragment.trim_end()) {
        return Ok(text.to_string());
    }
    let mut lines: Vec<&str> = text.lines().collect();
    let fragment = fragment.trim_end_matches('\n');
    lines.insert(line_no, fragment);
    let mut out = lines.join("\n");
    out.push('\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_before_marker_once() {
        let text = "mod a;\n// +rustbuilder:scaffold:modules\n";
        let once = insert_at_marker(text, "modules", "mod b;").unwrap();
        assert_eq!(once, "mod a;\nmod b;\n// +rustbuilder:scaffold:modules\n");
        assert_eq!(insert_at_marker(&once, "modules", "mod b;").unwrap(), once);
    }

    #[test]
    fn missing_or_duplicated_marker_is_an_error() {
        let err = insert_at_marker("mod a;\n", "modules", "mod b;").unwrap_err();
        assert!(
            err.to_string()
                .contains("+rustbuilder:scaffold:modules` is missing"),
            "{err}"
        );
        let twice = "# +rustbuilder:scaffold:x\n# +rustbuilder:scaffold:x\n";
        assert!(
            insert_at_marker(twice, "x", "- y")
                .unwrap_err()
                .to_string()
                .contains("2 times")
        );
    }

    #[test]
    fn normalizes_newlines() {
        assert_eq!(normalize("a  \r\nb\n\n\n"), "a\nb\n");
    }

    #[test]
    fn apply_is_all_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // A file where a directory must go makes the second write fail.
        fs::write(dir.path().join("blocked"), "user data").unwrap();
        let mut plan = Plan::new(dir.path());
        plan.add("a/first.txt", "1\n".into(), IfExists::Error);
        plan.add("blocked/second.txt", "2\n".into(), IfExists::Error);
        assert!(plan.apply().is_err());
        let mut left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, vec![std::ffi::OsString::from("blocked")]);
        assert_eq!(
            fs::read_to_string(dir.path().join("blocked")).unwrap(),
            "user data"
        );
    }
}
