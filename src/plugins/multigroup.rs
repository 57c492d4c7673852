//! `edit --multigroup`: moving a project between the single-group layout (`src/api/<version>/`,
//! `src/controller/<kind>.rs`) and the multigroup one (`src/api/<group>/<version>/`,
//! `src/controller/<group>/<kind>.rs`).
//!
//! A single-group project is moved as a whole: everything under `src/api/`, `src/controller/` and
//! `src/webhook/` except their `mod.rs` goes one directory down, into the group's, and the paths that
//! named it are requalified (`crate::api::v1alpha1` → `crate::api::cache::v1alpha1`) in every Rust file
//! of `src/`, `tests/`, `examples/` and `benches/`. It is refused, with the directory unchanged, when
//! the code was changed in a way the move cannot follow: a module list (`src/api/mod.rs`,
//! `src/controller/mod.rs`, `src/webhook/mod.rs`) holding more than its modules (and `MANAGER_NAME`),
//! or a moved file reaching above its new depth with `super::super`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::model::{Domain, Group, ProjectName};
use crate::project::{self, Project};
use crate::scaffold::{IfExists, Insertion, MARKER_PREFIX, Plan};

/// What `edit --multigroup` found to do.
pub enum Edit {
    /// The project already has the layout asked for.
    Fresh,
    /// The plan that moves it.
    Move(Plan),
}

/// Directories whose Rust files may name the API and controller modules.
const CODE_DIRS: &[&str] = &["src", "tests", "examples", "benches"];

/// Plans `edit --multigroup=<multigroup>` for the project at `dir`.
pub fn edit(dir: &Path, multigroup: bool) -> Result<Edit> {
    let mut project = Project::load(dir)?;
    if project.multigroup == multigroup {
        return Ok(Edit::Fresh);
    }
    let groups: BTreeSet<&str> = project.groups().collect();
    if !multigroup {
        if !project.resources.is_empty() {
            bail!(
                "cannot move a multigroup project that has APIs back to the single-group layout yet\nhelp: keep `multigroup: true`; only a project without APIs can go back with `rustbuilder edit --multigroup=false`"
            );
        }
        let mut plan = Plan::new(dir);
        plan.edit("src/api/mod.rs", |text| {
            swap_marker(text, "groups", "versions")
                .replace(MULTI_API_DOC, SINGLE_API_DOC)
                .to_string()
        })?;
        plan.edit("src/controller/mod.rs", |text| {
            text.replace(MULTI_CONTROLLER_DOC, SINGLE_CONTROLLER_DOC)
        })?;
        project.multigroup = false;
        plan.add(project::FILE_NAME, project.render(), IfExists::Overwrite);
        return Ok(Edit::Move(plan));
    }
    if let Some(resource) = project.resources.iter().find(|r| r.external) {
        bail!(
            "cannot move a project with external kinds to the multigroup layout yet: the controller of `{}` would go to the directory of the project's group, not to that of `{}`\nhelp: run `rustbuilder edit --multigroup` before `create api --external-api-path`, or move `src/controller/{}.rs` to `src/controller/{}/` by hand",
            resource.kind,
            resource.group,
            resource.kind.to_lowercase(),
            resource.group.replace(['-', '.'], "_")
        );
    }
    if let Some(resource) = project.resources.iter().find(|r| {
        r.core
            && r.webhooks
                .as_ref()
                .is_some_and(|w| w.defaulting || w.validation)
    }) {
        bail!(
            "cannot move a project with webhooks for built-in kinds to the multigroup layout yet: the webhooks of `{}` would go to the directory of the project's group, not to that of `{}`\nhelp: run `rustbuilder edit --multigroup` before `create webhook` for built-in kinds",
            resource.kind,
            resource.group
        );
    }
    let group = match groups.iter().collect::<Vec<_>>().as_slice() {
        [] => None,
        [one] => Some(one.parse::<Group>()?),
        many => bail!(
            "PROJECT lists several groups ({}) in a single-group project: rustbuilder cannot tell which files belong to which\nhelp: set `multigroup: true` in PROJECT and move the files by hand, or remove the extra groups",
            many.iter()
                .map(|g| format!("`{g}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut plan = Plan::new(dir);
    let Some(group) = group else {
        // No API yet: only the list of groups changes.
        check_module_list(dir, "src/api/mod.rs", false)?;
        plan.edit("src/api/mod.rs", |text| {
            swap_marker(text, "versions", "groups").replace(SINGLE_API_DOC, MULTI_API_DOC)
        })?;
        plan.edit("src/controller/mod.rs", |text| {
            text.replace(SINGLE_CONTROLLER_DOC, MULTI_CONTROLLER_DOC)
        })?;
        project.multigroup = true;
        plan.add(project::FILE_NAME, project.render(), IfExists::Overwrite);
        return Ok(Edit::Move(plan));
    };
    let domain: Domain = project.domain.parse()?;
    let crate_name = project.project_name.parse::<ProjectName>()?.crate_name();
    let group_snake = group.snake();

    // The two module lists must hold nothing but modules (and `MANAGER_NAME`).
    let api_modules = check_module_list(dir, "src/api/mod.rs", false)?;
    let controller_modules = check_module_list(dir, "src/controller/mod.rs", true)?;
    // Webhooks, once `create webhook` made `src/webhook/`: one module per version, like `src/api/`.
    let has_webhooks = dir.join("src/webhook").exists();
    let webhook_modules = match has_webhooks {
        true => check_module_list(dir, "src/webhook/mod.rs", false)?,
        false => Vec::new(),
    };
    for sub in ["src/api", "src/controller", "src/webhook"] {
        let target = dir.join(sub).join(&group_snake);
        if target.exists() {
            bail!(
                "cannot move the project to the multigroup layout: `{}` already exists, where the group's files would go\nhelp: move or remove it, then run `rustbuilder edit --multigroup` again",
                target.strip_prefix(dir).unwrap_or(&target).display()
            );
        }
    }
    let api_children = children(&dir.join("src/api"))?;
    let controller_children = children(&dir.join("src/controller"))?;
    let webhook_children = children(&dir.join("src/webhook"))?;
    let rewrite = Requalify {
        group: &group_snake,
        crate_name: &crate_name,
        api: &api_children,
        controller: &controller_children,
        webhook: &webhook_children,
    };

    // Everything under src/api/, src/controller/ and src/webhook/ but mod.rs moves into the group's
    // directory.
    let mut moved = BTreeSet::new();
    for (sub, depth_limit) in [
        ("src/api", "super::super::super"),
        ("src/controller", "super::super"),
        ("src/webhook", "super::super::super"),
    ] {
        for file in files_under(&dir.join(sub))? {
            let relative = file
                .strip_prefix(dir.join(sub))
                .expect("under the directory");
            if relative == Path::new("mod.rs") {
                continue;
            }
            let from = PathBuf::from(sub).join(relative);
            let to = PathBuf::from(sub).join(&group_snake).join(relative);
            let bytes =
                fs::read(&file).with_context(|| format!("failed to read `{}`", file.display()))?;
            let is_rust = from.extension().is_some_and(|e| e == "rs");
            match (is_rust, String::from_utf8(bytes)) {
                (true, Ok(text)) => {
                    if let Some(line) = text.lines().find(|l| l.contains(depth_limit)) {
                        bail!(
                            "cannot move `{}` one directory down: it reaches up with `{depth_limit}` (`{}`), which would then point elsewhere\nhelp: use a `crate::` path there, then run `rustbuilder edit --multigroup` again",
                            from.display(),
                            line.trim()
                        );
                    }
                    let mut after = rewrite.apply(&text);
                    if sub == "src/controller" {
                        after =
                            after.replace("super::MANAGER_NAME", "crate::controller::MANAGER_NAME");
                    }
                    plan.add_edited(&to, text, after);
                }
                (_, Ok(text)) => plan.add(&to, text, IfExists::Error),
                (_, Err(_)) => bail!(
                    "cannot move `{}`: it is not UTF-8 text\nhelp: move it out of `{sub}/`, then run `rustbuilder edit --multigroup` again",
                    from.display()
                ),
            }
            plan.remove(&from);
            moved.insert(from);
        }
    }

    // Files named after a kind alone take its group too, as in a project made multigroup: one kind
    // may then be in two groups.
    let renames = kind_file_renames(dir, &project)?;
    let renamed = |path: &Path| {
        renames
            .iter()
            .find(|(from, _)| from == path)
            .map(|(_, to)| to.clone())
    };

    // The other Rust files: requalified in place. File paths in strings follow the moves
    // (`include_str!("../src/controller/memcached.rs")`).
    for top in CODE_DIRS {
        for file in files_under(&dir.join(top))? {
            let relative = file
                .strip_prefix(dir)
                .expect("under the project")
                .to_path_buf();
            if moved.contains(&relative) || relative.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = fs::read_to_string(&file)
                .with_context(|| format!("failed to read `{}`", file.display()))?;
            let mut after = rewrite.apply(&text);
            for from in &moved {
                let from_str = from.to_string_lossy();
                for sub in ["src/api/", "src/controller/", "src/webhook/"] {
                    if let Some(rest) = from_str.strip_prefix(sub) {
                        after = after.replace(
                            &format!("\"{from_str}\""),
                            &format!("\"{sub}{group_snake}/{rest}\""),
                        );
                        after = after.replace(
                            &format!("/{from_str}\""),
                            &format!("/{sub}{group_snake}/{rest}\""),
                        );
                    }
                }
            }
            if relative.starts_with("tests") && relative.ends_with("main.rs") {
                after = rename_modules(&after, &relative, &renames);
            }
            if let Some(to) = renamed(&relative) {
                plan.add_edited(&to, text, after);
                plan.remove(&relative);
            } else if after != text {
                let path = relative.to_string_lossy().into_owned();
                plan.edit(&path, |_| after)?;
            }
        }
    }
    // The RBAC roles of each kind: file, name, and their line in the kustomization.
    for (from, to) in renames.iter().filter(|(f, _)| f.starts_with("config/rbac")) {
        let text = fs::read_to_string(dir.join(from))
            .with_context(|| format!("failed to read `{}`", from.display()))?;
        let stem = |p: &Path| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.strip_suffix(".yaml")
                .unwrap_or(&name)
                .replace('_', "-")
        };
        let after = text.replace(
            &format!("name: {}", stem(from)),
            &format!("name: {}", stem(to)),
        );
        plan.add(to, after, IfExists::Error);
        plan.remove(from);
        let (from_name, to_name) = (file_name(from), file_name(to));
        plan.edit("config/rbac/kustomization.yaml", |text| {
            text.replace(&format!("- {from_name}\n"), &format!("- {to_name}\n"))
        })?;
    }

    // The group's module lists, and the top-level lists that now name the group.
    let context = group_context(dir, &project, &group.qualified(&domain)?, &group_snake)?;
    plan.add_generated(
        format!("src/api/{group_snake}/mod.rs"),
        group_module(
            "api-group/src/api/{{group_snake}}/mod.rs.tera",
            &context,
            "versions",
            &api_modules,
        )?,
    );
    plan.edit("src/api/mod.rs", |text| {
        let text = swap_marker(&drop_modules(text, &api_modules), "versions", "groups");
        text.replace(SINGLE_API_DOC, MULTI_API_DOC)
    })?;
    plan.insert(Insertion {
        path: "src/api/mod.rs",
        marker: "groups",
        fragment: format!("pub mod {group_snake};"),
    })?;
    if !controller_modules.is_empty() {
        plan.add_generated(
            format!("src/controller/{group_snake}/mod.rs"),
            group_module(
                "controller-group/src/controller/{{group_snake}}/mod.rs.tera",
                &context,
                "controllers",
                &controller_modules,
            )?,
        );
        plan.edit("src/controller/mod.rs", |text| {
            drop_modules(text, &controller_modules)
        })?;
        plan.insert(Insertion {
            path: "src/controller/mod.rs",
            marker: "controllers",
            fragment: format!("pub mod {group_snake};"),
        })?;
    }
    plan.edit("src/controller/mod.rs", |text| {
        text.replace(SINGLE_CONTROLLER_DOC, MULTI_CONTROLLER_DOC)
    })?;
    if has_webhooks {
        plan.add_generated(
            format!("src/webhook/{group_snake}/mod.rs"),
            group_module(
                "webhook-group/src/webhook/{{group_snake}}/mod.rs.tera",
                &context,
                "versions",
                &webhook_modules,
            )?,
        );
        plan.edit("src/webhook/mod.rs", |text| {
            let text = swap_marker(&drop_modules(text, &webhook_modules), "versions", "groups");
            text.replace(SINGLE_WEBHOOK_DOC, MULTI_WEBHOOK_DOC)
        })?;
        plan.insert(Insertion {
            path: "src/webhook/mod.rs",
            marker: "groups",
            fragment: format!("pub mod {group_snake};"),
        })?;
    }

    project.multigroup = true;
    // Built-in and external kinds keep their paths: k8s-openapi's type, the CRD's copy.
    for resource in project
        .resources
        .iter_mut()
        .filter(|r| !r.core && !r.external)
    {
        resource.path = Some(format!(
            "{crate_name}::api::{group_snake}::{}::{}",
            resource.version, resource.kind
        ));
    }
    plan.add(project::FILE_NAME, project.render(), IfExists::Overwrite);
    Ok(Edit::Move(plan))
}

/// The files of the project named after a kind alone, and their names in the multigroup layout,
/// after the kind's group: controller tests, e2e checks, conversion and webhook tests, RBAC roles.
fn kind_file_renames(dir: &Path, project: &Project) -> Result<Vec<(PathBuf, PathBuf)>> {
    let mut renames = Vec::new();
    for resource in &project.resources {
        let group = resource.group.replace(['-', '.'], "_");
        let kind = resource.kind.parse::<crate::model::Kind>()?.snake();
        let mut stems: Vec<(String, String)> = resource
            .has_default_controller()
            .then(|| kind.clone())
            .into_iter()
            .chain(
                resource
                    .named_controllers()
                    .iter()
                    .map(|n| n.replace('-', "_")),
            )
            .flat_map(|module| {
                [
                    (
                        format!("tests/controllers/{module}.rs"),
                        format!("tests/controllers/{group}_{module}.rs"),
                    ),
                    // The layout before the controllers' test crate: a crate per controller.
                    (
                        format!("tests/{module}_controller.rs"),
                        format!("tests/{group}_{module}_controller.rs"),
                    ),
                ]
            })
            .collect();
        let version = &resource.version;
        for pattern in [
            "tests/e2e/{}.rs",
            "tests/webhooks/{}_conversion.rs",
            "tests/{}_conversion.rs",
            "tests/e2e/{}_conversion.rs",
            "config/rbac/{}_admin_role.yaml",
            "config/rbac/{}_editor_role.yaml",
            "config/rbac/{}_viewer_role.yaml",
        ]
        .into_iter()
        .map(str::to_string)
        .chain([
            format!("tests/webhooks/{{}}_{version}.rs"),
            format!("tests/{{}}_{version}_webhook.rs"),
            format!("tests/e2e/{{}}_{version}_webhook.rs"),
        ]) {
            stems.push((
                pattern.replace("{}", &kind),
                pattern.replace("{}", &format!("{group}_{kind}")),
            ));
        }
        for (from, to) in stems {
            let (from, to) = (PathBuf::from(from), PathBuf::from(to));
            if dir.join(&from).is_file() && !renames.iter().any(|(f, _)| *f == from) {
                renames.push((from, to));
            }
        }
    }
    Ok(renames)
}

/// `mod memcached;` → `mod cache_memcached;` in a test crate's `main.rs` (`tests/e2e/main.rs`,
/// `tests/controllers/main.rs`, ...), for each renamed file of that crate; each line once, so a module
/// renamed to the old name of another is not renamed twice.
fn rename_modules(text: &str, main: &Path, renames: &[(PathBuf, PathBuf)]) -> String {
    let module = |p: &Path| {
        p.file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    };
    let crate_dir = main.parent().unwrap_or(Path::new(""));
    let modules: Vec<(String, String)> = renames
        .iter()
        .filter(|(from, _)| from.parent() == Some(crate_dir))
        .map(|(from, to)| {
            (
                format!("mod {};", module(from)),
                format!("mod {};", module(to)),
            )
        })
        .collect();
    let mut out: Vec<String> = text
        .lines()
        .map(|line| {
            let trimmed = line.trim();
            match modules.iter().find(|(from, _)| trimmed == from) {
                Some((from, to)) => line.replacen(from.as_str(), to, 1),
                None => line.to_string(),
            }
        })
        .collect();
    if text.ends_with('\n') {
        out.push(String::new());
    }
    out.join("\n")
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

const SINGLE_API_DOC: &str = "//! The project's Kubernetes APIs, one module per version.";
const MULTI_API_DOC: &str = "//! The project's Kubernetes APIs, one module per API group.";
const SINGLE_WEBHOOK_DOC: &str = "of the project's APIs, one module per version.";
const MULTI_WEBHOOK_DOC: &str = "of the project's APIs, one module per API group.";
const SINGLE_CONTROLLER_DOC: &str = "//! Controllers, one module per kind.";
const MULTI_CONTROLLER_DOC: &str = "//! Controllers, one module per API group.";

/// What the group's module templates see: the project's licence header and the group.
fn group_context(
    dir: &Path,
    project: &Project,
    qualified: &str,
    group_snake: &str,
) -> Result<tera::Context> {
    let mut context = tera::Context::new();
    context.insert("boilerplate", &super::rust::read_header(dir, project)?);
    context.insert("qualified_group", qualified);
    context.insert("group_snake", group_snake);
    Ok(context)
}

/// A group's module list as `create api` starts it, listing `modules`.
fn group_module(
    template: &str,
    context: &tera::Context,
    marker: &str,
    modules: &[String],
) -> Result<String> {
    let text = crate::scaffold::render(template, context)?;
    let lines: Vec<String> = modules.iter().map(|m| format!("pub mod {m};")).collect();
    if lines.is_empty() {
        return Ok(text);
    }
    crate::scaffold::insert_at_marker(&text, marker, &lines.join("\n"))
}

/// The `pub mod x;` names of a module list, refusing any other code in it (comments and blank lines
/// aside; `MANAGER_NAME` too in `src/controller/mod.rs`).
fn check_module_list(dir: &Path, path: &str, manager_name: bool) -> Result<Vec<String>> {
    let full = dir.join(path);
    let text = match fs::read_to_string(&full) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "cannot move the project to the multigroup layout: `{path}` does not exist\nhelp: restore it from version control"
        ),
        Err(e) => return Err(e).with_context(|| format!("failed to read `{}`", full.display())),
    };
    let mut modules = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with("//") {
            continue;
        }
        if let Some(name) = line
            .strip_prefix("pub mod ")
            .and_then(|l| l.strip_suffix(';'))
            .filter(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        {
            modules.push(name.to_string());
            continue;
        }
        if manager_name && line.starts_with("pub const MANAGER_NAME: &str = ") {
            continue;
        }
        bail!(
            "cannot move the project to the multigroup layout: `{path}` holds code rustbuilder does not know how to move (`{line}`)\nhelp: keep only the `pub mod` lines{} there (move the rest to a module of its own under `src/`), then run `rustbuilder edit --multigroup` again",
            if manager_name {
                " and `MANAGER_NAME`"
            } else {
                ""
            }
        );
    }
    Ok(modules)
}

/// Removes the `pub mod x;` lines of `modules`.
fn drop_modules(text: &str, modules: &[String]) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| {
            let line = line.trim();
            !modules.iter().any(|m| line == format!("pub mod {m};"))
        })
        .collect();
    lines.join("\n") + "\n"
}

fn swap_marker(text: &str, from: &str, to: &str) -> String {
    text.replace(
        &format!("{MARKER_PREFIX}{from}"),
        &format!("{MARKER_PREFIX}{to}"),
    )
}

/// Module names directly under a directory: `.rs` file stems (`mod.rs` aside) and subdirectories.
fn children(dir: &Path) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(out);
    };
    for entry in entries {
        let path = entry?.path();
        let name = match path.file_stem().and_then(|n| n.to_str()) {
            Some(name) => name.to_string(),
            None => continue,
        };
        if path.is_dir() || (path.extension().is_some_and(|e| e == "rs") && name != "mod") {
            out.insert(name);
        }
    }
    Ok(out)
}

/// Every file under `dir`, sorted; `target` directories are skipped.
fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(out);
    };
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            out.extend(files_under(&path)?);
        } else {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// Puts the group into the paths that name the API and controller modules.
struct Requalify<'a> {
    group: &'a str,
    crate_name: &'a str,
    /// Modules directly under `src/api/` (the versions).
    api: &'a BTreeSet<String>,
    /// Modules directly under `src/controller/`.
    controller: &'a BTreeSet<String>,
    /// Modules directly under `src/webhook/` (the versions).
    webhook: &'a BTreeSet<String>,
}

impl Requalify<'_> {
    fn apply(&self, text: &str) -> String {
        let text = self.requalify(text, "api", self.api);
        let text = self.requalify(&text, "controller", self.controller);
        self.requalify(&text, "webhook", self.webhook)
    }

    /// `api::v1alpha1` → `api::cache::v1alpha1` where `api` is the crate's module: after `crate::`,
    /// after `<crate>::`, or on its own (imported with `use <crate>::api;`). Lists are followed too:
    /// `controller::{MANAGER_NAME, memcached}` → `controller::{MANAGER_NAME, cache::memcached}`.
    fn requalify(&self, text: &str, module: &str, children: &BTreeSet<String>) -> String {
        let needle = format!("{module}::");
        let bytes = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        while let Some(found) = text[at..].find(&needle) {
            let start = at + found;
            let after = start + needle.len();
            out.push_str(&text[at..after]);
            at = after;
            let boundary = start == 0 || !is_ident(bytes[start - 1]);
            if !boundary || !self.is_ours(&text[..start]) {
                continue;
            }
            let rest = &text[after..];
            if rest.starts_with('{') {
                let Some(close) = matching_brace(rest) else {
                    continue;
                };
                let inner = &rest[1..close];
                out.push('{');
                out.push_str(&self.prefix_items(inner, children));
                out.push('}');
                at = after + close + 1;
            } else {
                let ident: String = rest
                    .bytes()
                    .take_while(|b| is_ident(*b))
                    .map(char::from)
                    .collect();
                if children.contains(&ident) {
                    out.push_str(self.group);
                    out.push_str("::");
                }
            }
        }
        out.push_str(&text[at..]);
        out
    }

    /// Whether the `api`/`controller` ending `before` is the crate's own module.
    fn is_ours(&self, before: &str) -> bool {
        match before.strip_suffix("::") {
            None => true,
            Some(prefix) => {
                let segment: String = prefix
                    .bytes()
                    .rev()
                    .take_while(|b| is_ident(*b))
                    .map(char::from)
                    .collect::<String>()
                    .chars()
                    .rev()
                    .collect();
                let ours = segment == "crate" || segment == self.crate_name;
                let start = prefix.len() - segment.len();
                ours && !prefix[..start].ends_with("::")
            }
        }
    }

    fn prefix_items(&self, inner: &str, children: &BTreeSet<String>) -> String {
        let mut items = Vec::new();
        let mut depth = 0;
        let mut last = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&inner[last..i]);
                    last = i + 1;
                }
                _ => {}
            }
        }
        items.push(&inner[last..]);
        items
            .iter()
            .map(|item| {
                let lead = item.len() - item.trim_start().len();
                let ident: String = item[lead..]
                    .bytes()
                    .take_while(|b| is_ident(*b))
                    .map(char::from)
                    .collect();
                if children.contains(&ident) {
                    format!("{}{}::{}", &item[..lead], self.group, &item[lead..])
                } else {
                    item.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The index of the `}` closing the `{` that `text` starts with.
fn matching_brace(text: &str) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_lines_follow_the_renames_of_their_crate_once() {
        let renames = [
            (
                "tests/controllers/memcached.rs",
                "tests/controllers/cache_memcached.rs",
            ),
            (
                "tests/controllers/cache_memcached.rs",
                "tests/controllers/cache_cache_memcached.rs",
            ),
            ("tests/e2e/memcached.rs", "tests/e2e/cache_memcached.rs"),
        ]
        .map(|(from, to)| (PathBuf::from(from), PathBuf::from(to)));
        let main = "//! Tests.\n\nmod cache_memcached;\nmod memcached;\n// +rustbuilder:scaffold:modules\n";
        assert_eq!(
            rename_modules(main, Path::new("tests/controllers/main.rs"), &renames),
            "//! Tests.\n\nmod cache_cache_memcached;\nmod cache_memcached;\n// +rustbuilder:scaffold:modules\n"
        );
        // Another crate's renames leave the file alone.
        assert_eq!(
            rename_modules(main, Path::new("tests/webhooks/main.rs"), &renames),
            main
        );
    }

    #[test]
    fn paths_of_the_crate_get_the_group() {
        let api = BTreeSet::from(["v1alpha1".to_string()]);
        let controller = BTreeSet::from(["memcached".to_string()]);
        let webhook = BTreeSet::from(["v1alpha1".to_string()]);
        let r = Requalify {
            group: "cache",
            crate_name: "project",
            api: &api,
            controller: &controller,
            webhook: &webhook,
        };
        let cases = [
            (
                "manager.webhooks().defaulter(webhook::v1alpha1::memcached::MemcachedWebhook);",
                "manager.webhooks().defaulter(webhook::cache::v1alpha1::memcached::MemcachedWebhook);",
            ),
            (
                "use crate::api::v1alpha1::{Memcached};",
                "use crate::api::cache::v1alpha1::{Memcached};",
            ),
            (
                "use project::api::v1alpha1::Memcached;",
                "use project::api::cache::v1alpha1::Memcached;",
            ),
            (
                "        api::v1alpha1::Memcached::crd(),",
                "        api::cache::v1alpha1::Memcached::crd(),",
            ),
            (
                "        crd::<api::v1alpha1::Memcached>(),",
                "        crd::<api::cache::v1alpha1::Memcached>(),",
            ),
            (
                "use project::controller::{MANAGER_NAME, memcached};",
                "use project::controller::{MANAGER_NAME, cache::memcached};",
            ),
            (
                "controllers.add(controller::memcached::run(m));",
                "controllers.add(controller::cache::memcached::run(m));",
            ),
            (
                "use kube::runtime::controller::Action;",
                "use kube::runtime::controller::Action;",
            ),
            ("k8s_openapi::api::v1alpha1", "k8s_openapi::api::v1alpha1"),
            (
                "use controller::MANAGER_NAME;",
                "use controller::MANAGER_NAME;",
            ),
            ("my_api::v1alpha1", "my_api::v1alpha1"),
            (
                "use project::api::{self, v1alpha1::{A, B}};",
                "use project::api::{self, cache::v1alpha1::{A, B}};",
            ),
        ];
        for (before, after) in cases {
            assert_eq!(r.apply(before), after, "{before}");
        }
    }

    #[test]
    fn module_lists_with_other_code_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("src/controller")).unwrap();
        let path = dir.path().join("src/controller/mod.rs");
        fs::write(
            &path,
            "//! x\npub mod memcached;\n// +rustbuilder:scaffold:controllers\npub const MANAGER_NAME: &str = \"p\";\n",
        )
        .unwrap();
        assert_eq!(
            check_module_list(dir.path(), "src/controller/mod.rs", true).unwrap(),
            vec!["memcached".to_string()]
        );
        fs::write(&path, "pub mod memcached;\nfn helper() {}\n").unwrap();
        let err = check_module_list(dir.path(), "src/controller/mod.rs", true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("(`fn helper() {}`)"), "{err}");
        assert!(
            err.contains("\nhelp: keep only the `pub mod` lines"),
            "{err}"
        );
    }
}
