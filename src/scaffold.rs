//! Rendering and writing: templates become a [`Plan`] in memory, the plan is checked, then written at once.
//!
//! Templates live in `templates/<set>/`, mirroring the generated tree: `templates/init/src/main.rs.tera`
//! renders to `src/main.rs`. Paths may hold placeholders of the same engine (`{{kind_snake}}.rs.tera`).
//! A template's first line may declare what happens when its file exists, as a comment of the engine:
//! `{# if-exists: skip #}` (keep the file), `{# if-exists: overwrite #}` (replace it, and replace a file
//! another set planned in the same command), or nothing: refuse unless `--force`.
//! Existing files are otherwise only edited at scaffold markers (`// +rustbuilder:scaffold:<name>`).
//! Planned Rust goes through rustfmt before it is written.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context as _, Result, anyhow, bail};
use include_dir::{Dir, DirEntry, include_dir};
use tera::Tera;

static TEMPLATES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/templates");

/// The suffix that marks a file as a template; other files are copied as they are.
const TEMPLATE_SUFFIX: &str = ".tera";

/// The one engine, built once from every embedded template (policy headers removed).
fn engine() -> &'static Tera {
    static ENGINE: OnceLock<Tera> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut tera = Tera::default();
        tera.autoescape_on(vec![]);
        let mut files = Vec::new();
        collect(&TEMPLATES, &mut files);
        let sources: Vec<(&str, &str)> = files
            .iter()
            .filter(|(name, _)| name.ends_with(TEMPLATE_SUFFIX))
            .map(|(name, body)| {
                let text = std::str::from_utf8(body).expect("templates are UTF-8");
                (name.as_str(), split_header(text).1)
            })
            .collect();
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

/// The first line of a template that declares what happens when its file exists:
/// `{# if-exists: skip #}`, `{# if-exists: overwrite #}` or `{# if-exists: error #}` (the default).
/// The CLI reads and removes the line; the engine never sees it.
pub const POLICY_KEY: &str = "if-exists:";

/// Splits a template into its policy header (the value after `if-exists:`) and the rest.
fn split_header(text: &str) -> (Option<&str>, &str) {
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    let inner = first
        .trim()
        .strip_prefix("{#")
        .and_then(|l| l.strip_suffix("#}"))
        .map(|l| l.trim_matches('-').trim());
    match inner.and_then(|l| l.strip_prefix(POLICY_KEY)) {
        Some(value) => (Some(value.trim()), rest),
        None => (None, text),
    }
}

/// The policy a template declares on its first line, if any.
pub fn declared_policy(name: &str) -> Result<Option<IfExists>> {
    let file = TEMPLATES
        .get_file(name)
        .ok_or_else(|| anyhow!("no embedded template `{name}`"))?;
    let text = file
        .contents_utf8()
        .ok_or_else(|| anyhow!("template `{name}` is not UTF-8"))?;
    parse_policy(split_header(text).0)
        .with_context(|| format!("template `{name}` has an invalid policy header"))
}

fn parse_policy(value: Option<&str>) -> Result<Option<IfExists>> {
    Ok(match value {
        None => None,
        Some("error") => Some(IfExists::Error),
        Some("skip") => Some(IfExists::Skip),
        Some("overwrite") => Some(IfExists::Overwrite),
        Some(other) => bail!(
            "unknown policy `{other}`: write `{{# {POLICY_KEY} skip #}}`, `overwrite` or `error`"
        ),
    })
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
        let text = file
            .contents_utf8()
            .ok_or_else(|| anyhow!("template `{name}` is not UTF-8"))?;
        split_header(text).1.to_string()
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum IfExists {
    /// Replace it (files rustbuilder owns, and any file under `--force`).
    Overwrite,
    /// Keep the file on disk (shared files created by the first command that needs them).
    Skip,
    /// Refuse, naming the file (the default for files the user owns once written).
    Error,
}

/// Whether a planned file goes through rustfmt before it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Format {
    /// Written as planned.
    No,
    /// Formatted: Rust rendered from a template.
    Yes,
    /// Formatted only if this text, the file before an edit at a marker, was already rustfmt-clean: a
    /// user's own formatting is never rewritten.
    IfClean(String),
}

#[derive(Debug, Clone)]
struct Planned {
    contents: String,
    if_exists: IfExists,
    format: Format,
    /// The template the file was rendered from, for messages about two templates planning one file.
    template: Option<String>,
}

/// What [`Plan::apply`] did to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Created,
    Updated,
    Removed,
}

impl std::fmt::Display for Change {
    /// The verb of the status line the file gets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Change::Created => "Creating",
            Change::Updated => "Updating",
            Change::Removed => "Removing",
        })
    }
}

/// Files to write, keyed by path relative to the project root, in a deterministic order.
#[derive(Debug)]
pub struct Plan {
    root: PathBuf,
    files: BTreeMap<PathBuf, Planned>,
    removals: BTreeSet<PathBuf>,
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
            removals: BTreeSet::new(),
        }
    }

    /// Adds a file with literal contents, written as they are.
    pub fn add(&mut self, path: impl Into<PathBuf>, contents: String, if_exists: IfExists) {
        let path = path.into();
        self.removals.remove(&path);
        self.files.insert(
            path,
            Planned {
                contents,
                if_exists,
                format: Format::No,
                template: None,
            },
        );
    }

    /// Adds a file of the user's at a new place with edited contents: refused when the place is taken,
    /// formatted only if `before` (the file as it was) was rustfmt-clean.
    pub fn add_edited(&mut self, path: impl Into<PathBuf>, before: String, contents: String) {
        let path = path.into();
        self.removals.remove(&path);
        self.files.insert(
            path,
            Planned {
                contents,
                if_exists: IfExists::Error,
                format: Format::IfClean(before),
                template: None,
            },
        );
    }

    /// Adds generated Rust, formatted like rendered templates; refused when the file exists.
    pub fn add_generated(&mut self, path: impl Into<PathBuf>, contents: String) {
        let path = path.into();
        self.removals.remove(&path);
        self.files.insert(
            path,
            Planned {
                contents,
                if_exists: IfExists::Error,
                format: Format::Yes,
                template: None,
            },
        );
    }

    /// Plans the removal of a file (when it exists); a file planned for writing is not removed.
    pub fn remove(&mut self, path: impl Into<PathBuf>) {
        let path = path.into();
        if !self.files.contains_key(&path) {
            self.removals.insert(path);
        }
    }

    /// Renders every template of `set` into the plan, each with the policy it declares.
    pub fn add_set(&mut self, set: &str, context: &tera::Context) -> Result<()> {
        for name in template_set(set) {
            let template = format!("{set}/{name}");
            let declared = declared_policy(&template)?;
            let path = PathBuf::from(render_path(&name, context)?);
            let contents = render(&template, context)?;
            self.add_rendered(&template, path, contents, declared)?;
        }
        Ok(())
    }

    /// Adds a rendered template. A path another template already planned may be replaced only by a
    /// template that declares `overwrite`; the file on disk is then checked with the stricter policy.
    fn add_rendered(
        &mut self,
        template: &str,
        path: PathBuf,
        contents: String,
        declared: Option<IfExists>,
    ) -> Result<()> {
        let if_exists = match self.files.get(&path) {
            Some(earlier) => {
                let replaces = declared == Some(IfExists::Overwrite);
                if !replaces {
                    bail!(
                        "internal error: templates `{}` and `{template}` both plan `{}`\nhelp: a template replaces another's file only when its first line is `{{# {POLICY_KEY} overwrite #}}`",
                        earlier.template.as_deref().unwrap_or("(a literal file)"),
                        path.display()
                    );
                }
                earlier
                    .if_exists
                    .max(declared.unwrap_or(IfExists::Overwrite))
            }
            None => declared.unwrap_or(IfExists::Error),
        };
        let format = if path.extension().is_some_and(|e| e == "rs") {
            Format::Yes
        } else {
            Format::No
        };
        self.removals.remove(&path);
        self.files.insert(
            path,
            Planned {
                contents,
                if_exists,
                format,
                template: Some(template.to_string()),
            },
        );
        Ok(())
    }

    /// The text an edit starts from, with what the edited file inherits: the planned file, unless the
    /// plan keeps the one on disk; else the file on disk, formatted after the edit only if it was clean.
    fn base(&self, path: &Path) -> Result<Option<Planned>> {
        let full = self.root.join(path);
        if let Some(planned) = self.files.get(path)
            && !(planned.if_exists == IfExists::Skip && full.exists())
        {
            return Ok(Some(planned.clone()));
        }
        match fs::read_to_string(&full) {
            Ok(text) => Ok(Some(Planned {
                format: if path.extension().is_some_and(|e| e == "rs") {
                    Format::IfClean(text.clone())
                } else {
                    Format::No
                },
                contents: text,
                if_exists: IfExists::Overwrite,
                template: None,
            })),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("failed to read `{}`", full.display())),
        }
    }

    /// The text of a file as the plan would write it, else as it is on disk (`None`: neither).
    pub fn contents(&self, path: &str) -> Result<Option<String>> {
        Ok(self.base(Path::new(path))?.map(|planned| planned.contents))
    }

    /// Inserts a fragment before its marker, in the planned or on-disk version of the file.
    pub fn insert(&mut self, insertion: Insertion<'_>) -> Result<()> {
        let path = PathBuf::from(insertion.path);
        let mut planned = self.base(&path)?.ok_or_else(|| {
            anyhow!(
                "cannot add to `{}`: the file does not exist\nhelp: restore it from version control, or re-create the project with `rustbuilder alpha generate`",
                path.display()
            )
        })?;
        planned.contents =
            insert_at_marker(&planned.contents, insertion.marker, &insertion.fragment)
                .with_context(|| format!("cannot add to `{}`", path.display()))?;
        self.files.insert(path, planned);
        Ok(())
    }

    /// Rewrites a file (as planned, else as on disk) with `edit`; a missing file is left alone.
    pub fn edit(&mut self, path: &str, edit: impl FnOnce(&str) -> String) -> Result<()> {
        let path = PathBuf::from(path);
        let Some(mut planned) = self.base(&path)? else {
            return Ok(());
        };
        planned.contents = edit(&planned.contents);
        self.files.insert(path, planned);
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

    /// Whether the plan writes `path` over a file on disk (it is planned and not kept as it is).
    fn writes(&self, path: &Path, planned: &Planned) -> bool {
        !(planned.if_exists == IfExists::Skip && self.root.join(path).exists())
    }

    /// Puts the planned Rust through one rustfmt process (see [`crate::rustfmt`]). A file generated
    /// whole that rustfmt cannot parse fails the command, before anything is written: the project
    /// would not compile. One that edits a user's file is written as generated, with a warning (the
    /// user's own text may not parse yet).
    fn format(&mut self) -> Result<()> {
        let mut names = Vec::new();
        let mut texts = Vec::new();
        // (path, index of the planned text, index of the text before the edit)
        let mut jobs: Vec<(PathBuf, usize, Option<usize>)> = Vec::new();
        for (path, planned) in &self.files {
            if !self.writes(path, planned) {
                continue;
            }
            let before = match &planned.format {
                Format::No => continue,
                Format::Yes => None,
                Format::IfClean(before) => Some(before),
            };
            names.push(path.clone());
            texts.push(planned.contents.clone());
            let at = texts.len() - 1;
            let before_at = before.map(|text| {
                names.push(path.with_extension("rs (before the edit)"));
                texts.push(text.clone());
                texts.len() - 1
            });
            jobs.push((path.clone(), at, before_at));
        }
        if jobs.is_empty() {
            return Ok(());
        }
        let config = ["rustfmt.toml", ".rustfmt.toml"]
            .iter()
            .map(|name| self.root.join(name))
            .find(|path| path.is_file());
        let (outcome, errors) = crate::rustfmt::format(&names, &texts, config.as_deref());
        let formatted = match outcome {
            crate::rustfmt::Outcome::Formatted(formatted) => formatted,
            crate::rustfmt::Outcome::Missing => {
                static WARNED: AtomicBool = AtomicBool::new(false);
                if !WARNED.swap(true, Ordering::Relaxed) {
                    crate::shell::warning(crate::rustfmt::MISSING);
                }
                return Ok(());
            }
        };
        let broken = jobs.iter().find(|(path, _, before_at)| {
            before_at.is_none() && errors.contains(&*path.display().to_string())
        });
        if let Some((path, _, _)) = broken {
            bail!(
                "the generated `{}` is not valid Rust, so nothing was written:\n{}\nhelp: this is a bug of rustbuilder; please report it with the input that made it",
                path.display(),
                errors.trim_end()
            );
        }
        if !errors.trim().is_empty() {
            crate::shell::warning(format!(
                "rustfmt could not format every file; those it names are written as generated:\n{}",
                errors.trim_end()
            ));
        }
        for (path, at, before_at) in jobs {
            let clean_before = before_at.is_none_or(|b| formatted[b] == texts[b]);
            if clean_before && let Some(planned) = self.files.get_mut(&path) {
                planned.contents = formatted[at].clone();
            }
        }
        Ok(())
    }

    /// Writes the plan all or nothing: every file is first written next to its target under a temporary
    /// name, and only when all of them succeeded are they renamed into place. On failure the temporary
    /// files and any directory this call created are removed, leaving the tree as it was. Rust goes
    /// through rustfmt first. Returns each changed path and how it changed, in path order.
    pub fn apply(mut self) -> Result<Vec<(PathBuf, Change)>> {
        if let Some(first) = self.conflicts().first() {
            bail!(
                "`{}` already exists\nhelp: pass `--force` to overwrite the generated files",
                first.display()
            );
        }
        self.format()?;
        let mut staged: Vec<(PathBuf, PathBuf, PathBuf, bool)> = Vec::new();
        let mut created_dirs: Vec<PathBuf> = Vec::new();
        let result = (|| -> Result<()> {
            for (path, planned) in &self.files {
                let target = self.root.join(path);
                let exists = target.exists();
                if !self.writes(path, planned) {
                    continue;
                }
                if exists && fs::read_to_string(&target).is_ok_and(|t| t == planned.contents) {
                    continue;
                }
                if let Some(parent) = target.parent() {
                    create_dirs(parent, &mut created_dirs)?;
                }
                let temp = temp_name(&target, "tmp");
                fs::write(&temp, &planned.contents)
                    .with_context(|| format!("failed to write `{}`", target.display()))?;
                copy_permissions(&target, &temp, path)?;
                staged.push((path.clone(), temp, target, !exists));
            }
            Ok(())
        })();
        // Files to remove are first moved aside, so a failure can put them back.
        let mut moved: Vec<(PathBuf, PathBuf, PathBuf)> = Vec::new();
        let result = result.and_then(|()| {
            for path in &self.removals {
                let target = self.root.join(path);
                if !target.is_file() {
                    continue;
                }
                let aside = temp_name(&target, "removed");
                fs::rename(&target, &aside)
                    .with_context(|| format!("failed to remove `{}`", target.display()))?;
                moved.push((path.clone(), target, aside));
            }
            Ok(())
        });
        if let Err(e) = result {
            for (_, target, aside) in moved.iter().rev() {
                let _ = fs::rename(aside, target);
            }
            for (_, temp, _, _) in &staged {
                let _ = fs::remove_file(temp);
            }
            for dir in created_dirs.iter().rev() {
                let _ = fs::remove_dir(dir);
            }
            return Err(e);
        }
        let mut changed = Vec::new();
        for (path, temp, target, created) in staged {
            fs::rename(&temp, &target)
                .with_context(|| format!("failed to write `{}`", target.display()))?;
            let change = if created {
                Change::Created
            } else {
                Change::Updated
            };
            changed.push((path, change));
        }
        for (path, target, aside) in moved {
            fs::remove_file(&aside)
                .with_context(|| format!("failed to remove `{}`", target.display()))?;
            // Directories the removal emptied go too, up to the project root.
            let mut dir = target.parent();
            while let Some(d) = dir {
                if d == self.root || fs::remove_dir(d).is_err() {
                    break;
                }
                dir = d.parent();
            }
            changed.push((path, Change::Removed));
        }
        changed.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(changed)
    }
}

/// A hidden name next to `target`, for a file on its way in or out.
fn temp_name(target: &Path, purpose: &str) -> PathBuf {
    target.with_file_name(format!(
        ".{}.rustbuilder-{purpose}",
        target
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("file")
    ))
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
    // Compared without whitespace: rustfmt may have wrapped the fragment since it was inserted.
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    if squash(text).contains(&squash(fragment)) {
        return Ok(text.to_string());
    }
    let mut lines: Vec<&str> = text.lines().collect();
    let fragment = fragment.trim_end_matches('\n');
    lines.insert(line_no, fragment);
    let mut out = lines.join("\n");
    out.push('\n');
    Ok(out)
}

/// Copies the directory `from` to `to` (which must not exist), files and subdirectories.
pub fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("failed to create `{}`", to.display()))?;
    let mut entries: Vec<PathBuf> = std::fs::read_dir(from)
        .with_context(|| format!("failed to read `{}`", from.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    entries.sort();
    for path in entries {
        let target = to.join(path.file_name().expect("a directory entry has a name"));
        if path.is_dir() {
            copy_dir(&path, &target)?;
        } else {
            std::fs::copy(&path, &target)
                .with_context(|| format!("failed to copy `{}`", path.display()))?;
        }
    }
    Ok(())
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

    #[test]
    fn generated_rust_that_does_not_parse_fails_the_command_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut plan = Plan::new(dir.path());
        plan.add("README.md", "read me\n".into(), IfExists::Error);
        plan.add_generated("src/api/kind.rs", "pub enum Match {\n    Self,\n}\n".into());
        let err = plan.apply().unwrap_err().to_string();
        assert!(
            err.contains("the generated `src/api/kind.rs` is not valid Rust"),
            "{err}"
        );
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "written: {left:?}");
    }

    #[test]
    fn policy_headers_are_read_and_removed() {
        assert_eq!(
            split_header("{# if-exists: skip #}\nbody\n"),
            (Some("skip"), "body\n")
        );
        assert_eq!(
            split_header("{#- if-exists: overwrite -#}\nbody"),
            (Some("overwrite"), "body")
        );
        assert_eq!(
            split_header("{# a comment #}\nbody"),
            (None, "{# a comment #}\nbody")
        );
        assert_eq!(split_header("body"), (None, "body"));
        assert_eq!(parse_policy(Some("skip")).unwrap(), Some(IfExists::Skip));
        assert_eq!(parse_policy(None).unwrap(), None);
        let err = parse_policy(Some("keep")).unwrap_err().to_string();
        assert!(err.contains("unknown policy `keep`"), "{err}");
    }

    #[test]
    fn every_embedded_template_has_a_valid_policy() {
        let mut files = Vec::new();
        collect(&TEMPLATES, &mut files);
        for (name, _) in files {
            declared_policy(&name).unwrap();
        }
    }

    #[test]
    fn only_a_declared_overwrite_replaces_another_sets_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut plan = Plan::new(dir.path());
        let path = PathBuf::from("src/controller/memcached.rs");
        plan.add_rendered("controller/c.rs.tera", path.clone(), "base\n".into(), None)
            .unwrap();
        let err = plan
            .add_rendered(
                "other/c.rs.tera",
                path.clone(),
                "other\n".into(),
                Some(IfExists::Error),
            )
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("internal error: templates `controller/c.rs.tera` and `other/c.rs.tera` both plan `src/controller/memcached.rs`"),
            "{err}"
        );
        plan.add_rendered(
            "other/c.rs.tera",
            path.clone(),
            "replaced\n".into(),
            Some(IfExists::Overwrite),
        )
        .unwrap();
        let planned = &plan.files[&path];
        assert_eq!(planned.contents, "replaced\n");
        // The stricter policy of the two: the base refuses an existing file, so the replacement does.
        assert_eq!(planned.if_exists, IfExists::Error);
        fs::create_dir_all(dir.path().join("src/controller")).unwrap();
        fs::write(dir.path().join(&path), "mine\n").unwrap();
        assert_eq!(plan.conflicts(), vec![path.as_path()]);
    }

    #[test]
    fn an_edit_of_a_kept_file_starts_from_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("mod.rs"),
            "mod a;\n// +rustbuilder:scaffold:kinds\n",
        )
        .unwrap();
        let mut plan = Plan::new(dir.path());
        plan.add_rendered(
            "api/mod.rs.tera",
            "mod.rs".into(),
            "// +rustbuilder:scaffold:kinds\n".into(),
            Some(IfExists::Skip),
        )
        .unwrap();
        plan.insert(Insertion {
            path: "mod.rs",
            marker: "kinds",
            fragment: "mod b;".into(),
        })
        .unwrap();
        plan.apply().unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join("mod.rs")).unwrap(),
            "mod a;\nmod b;\n// +rustbuilder:scaffold:kinds\n"
        );
    }

    #[test]
    fn removals_are_part_of_the_all_or_nothing_write() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("old/deep")).unwrap();
        fs::write(dir.path().join("old/deep/gone.rs"), "").unwrap();
        fs::write(dir.path().join("blocked"), "user data").unwrap();
        let mut plan = Plan::new(dir.path());
        plan.remove("old/deep/gone.rs");
        plan.add("blocked/x.txt", "x\n".into(), IfExists::Error);
        assert!(plan.apply().is_err());
        assert!(dir.path().join("old/deep/gone.rs").exists());

        let mut plan = Plan::new(dir.path());
        plan.remove("old/deep/gone.rs");
        let changed = plan.apply().unwrap();
        assert_eq!(
            changed,
            vec![(PathBuf::from("old/deep/gone.rs"), Change::Removed)]
        );
        assert!(!dir.path().join("old").exists());
    }
}
