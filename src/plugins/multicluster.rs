//! `edit --multicluster`: a single-cluster project made into the one `init --multicluster` would
//! have scaffolded, with the same APIs, controllers and webhooks.
//!
//! The project is scaffolded twice from its PROJECT file, as `alpha generate` would, once as it is and
//! once multi-cluster. Each file the two differ in (`src/main.rs`, each controller and its test, the
//! sample member Secret) is written as the multi-cluster scaffold has it, but only where the project
//! still holds it as the single-cluster scaffold does: a file the user has changed stops the edit,
//! naming it, with the directory unchanged. Files the two scaffolds agree on are left as they are.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use super::rust;
use crate::project::{self, Project};
use crate::scaffold::{IfExists, Plan};

/// What `edit --multicluster` found to do.
pub enum Edit {
    /// The project is multi-cluster already.
    Fresh,
    /// The plan that makes it so.
    Change(Plan),
}

/// Plans `edit --multicluster` for the project at `dir`.
pub fn edit(dir: &Path) -> Result<Edit> {
    let project = Project::load(dir)?;
    if rust::is_multicluster(&project) {
        return Ok(Edit::Fresh);
    }
    refuse_what_is_not_scaffolded(&project)?;
    let mut multicluster = project.clone();
    let plugin = multicluster
        .plugins
        .entry(project::RUST_PLUGIN.to_string())
        .or_default();
    plugin.multicluster = Some(true);

    let single = scaffold(&project, dir).context("failed to scaffold the project as it is")?;
    let multi = scaffold(&multicluster, dir).context("failed to scaffold it multi-cluster")?;
    let mut plan = Plan::new(dir);
    let mut edited = Vec::new();
    for (path, text) in &multi {
        let before = single.get(path);
        if path.as_path() == Path::new(project::FILE_NAME) || before == Some(text) {
            continue;
        }
        let on_disk = std::fs::read(dir.join(path)).ok();
        if on_disk.as_ref() == Some(text) {
            continue;
        }
        if on_disk.as_ref() != before {
            edited.push(path.display().to_string());
            continue;
        }
        let text = String::from_utf8(text.clone())
            .with_context(|| format!("`{}` is not UTF-8", path.display()))?;
        plan.add(path, text, IfExists::Overwrite);
    }
    for (path, text) in &single {
        if multi.contains_key(path) {
            continue;
        }
        match std::fs::read(dir.join(path)).ok() {
            Some(on_disk) if on_disk == *text => plan.remove(path),
            Some(_) => edited.push(path.display().to_string()),
            None => {}
        }
    }
    if !edited.is_empty() {
        bail!(
            "the project cannot be made multi-cluster as it is: {} differ{} from what rustbuilder scaffolded, and the multi-cluster project has {} otherwise\nhelp: `edit --multicluster` rewrites only files as rustbuilder wrote them; set your changes aside (e.g. `git stash`), run it again and bring them back, or make its changes by hand (docs/multicluster.md, Scaffolding, lists them)",
            edited
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", "),
            if edited.len() == 1 { "s" } else { "" },
            if edited.len() == 1 { "it" } else { "them" },
        );
    }
    plan.add(
        project::FILE_NAME,
        multicluster.render(),
        IfExists::Overwrite,
    );
    Ok(Edit::Change(plan))
}

/// Refuses the projects `create api` would refuse as multi-cluster: controllers of built-in or other
/// operators' kinds, and the deploy-image plugin's.
fn refuse_what_is_not_scaffolded(project: &Project) -> Result<()> {
    for resource in &project.resources {
        let gvk = format!("{}/{} {}", resource.group, resource.version, resource.kind);
        let controlled = resource.has_default_controller() || !resource.controllers.is_empty();
        if controlled && (resource.core || resource.external) {
            bail!(
                "the project has a controller of {gvk}, not one of its own kinds, and controllers of built-in and other operators' kinds are not scaffolded for a multi-cluster project yet\nhelp: keep the project single-cluster, or run a fleet in `src/main.rs` by hand (docs/multicluster.md)"
            );
        }
        if project
            .plugin_resource(project::DEPLOY_IMAGE_PLUGIN, resource)
            .is_some()
        {
            bail!(
                "the project has a deploy-image controller of {gvk}, and the deploy-image plugin does not scaffold controllers for a multi-cluster project yet\nhelp: keep the project single-cluster, or run a fleet in `src/main.rs` by hand (docs/multicluster.md)"
            );
        }
    }
    Ok(())
}

/// The files of `project` scaffolded from scratch, as `alpha generate` makes them, by path.
fn scaffold(project: &Project, dir: &Path) -> Result<BTreeMap<PathBuf, Vec<u8>>> {
    let staging = tempfile::tempdir().context("failed to create a staging directory")?;
    crate::shell::set_quiet_scoped(|| super::generate(project, dir, staging.path()))?;
    let mut files = BTreeMap::new();
    read_tree(staging.path(), Path::new(""), &mut files)?;
    Ok(files)
}

fn read_tree(root: &Path, under: &Path, files: &mut BTreeMap<PathBuf, Vec<u8>>) -> Result<()> {
    let dir = root.join(under);
    for entry in
        std::fs::read_dir(&dir).with_context(|| format!("failed to read `{}`", dir.display()))?
    {
        let entry = entry?;
        let path = under.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            read_tree(root, &path, files)?;
        } else {
            let text = std::fs::read(entry.path())
                .with_context(|| format!("failed to read `{}`", entry.path().display()))?;
            files.insert(path, text);
        }
    }
    Ok(())
}
