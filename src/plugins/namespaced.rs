//! `edit --namespaced`: turning a project's manager from cluster-wide into one that watches its own
//! namespace (and back).
//!
//! Four scaffolded files say which the manager is, and each is edited in place, leaving the rest of the
//! file as the user has it: `manager-role` (a Role or a ClusterRole; `make manifests` writes its rules),
//! its RoleBinding (or ClusterRoleBinding), the `WATCH_NAMESPACE` variable of the manager's container,
//! and the same variable where the e2e tests start the manager. All or nothing: a file that no longer
//! reads as rustbuilder wrote it stops the edit, with the directory unchanged.

use std::path::Path;

use anyhow::{Context as _, Result, bail};

use crate::core_types;
use crate::project::{self, Project};
use crate::scaffold::{IfExists, Plan};

/// What `edit --namespaced` found to do.
pub enum Edit {
    /// The manager already has the scope asked for.
    Fresh,
    /// The plan that changes it.
    Change(Plan),
}

const BINDING: &str = "config/rbac/role_binding.yaml";
const ROLE: &str = "config/rbac/role.yaml";
const MANAGER: &str = "config/manager/manager.yaml";
const E2E: &str = "tests/e2e/main.rs";

/// The lines each scope has; everything else in those files stays as it is. They must match what the
/// templates render (a CLI test compares `init --namespaced` with `init` + `edit --namespaced`).
const BINDING_COMMENT: &str =
    "# The manager watches its own namespace only: its role is a Role there.\n";
const CLUSTER_BINDING: (&str, &str) = (
    "kind: ClusterRoleBinding\n",
    "  kind: ClusterRole\n  name: manager-role\n",
);
const NAMESPACE_BINDING: (&str, &str) = (
    "kind: RoleBinding\n",
    "  kind: Role\n  name: manager-role\n",
);
const CLUSTER_ROLE: &str = "kind: ClusterRole\nmetadata:\n  name: manager-role\n";
const NAMESPACE_ROLE: &str = "kind: Role\nmetadata:\n  name: manager-role\n  namespace: system\n";
const WATCH_ENV: &str = "        # The manager watches the namespace it runs in, and nothing else.
        - name: WATCH_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
";
/// The manager's first variable, which `init` writes: `WATCH_NAMESPACE` follows it.
const ENV_ANCHOR: &str = "        - name: LOG_FORMAT\n          value: json\n";
/// Where the e2e tests say whether the manager they start watches its own namespace only.
const E2E_CLUSTER_WIDE: &str = "    watch_namespace: false,\n";
const E2E_WATCH: &str = "    watch_namespace: true,\n";

/// Plans `edit --namespaced=<namespaced>` for the project at `dir`.
pub fn edit(dir: &Path, namespaced: bool) -> Result<Edit> {
    let mut project = Project::load(dir)?;
    if project.namespaced == namespaced {
        return Ok(Edit::Fresh);
    }
    if namespaced {
        check_no_cluster_scoped_controller(&project)?;
    }
    let role = read(dir, ROLE)?;
    let binding = read(dir, BINDING)?;
    let manager = read(dir, MANAGER)?;
    let e2e = read(dir, E2E)?;
    let (role, binding, manager, e2e) = if namespaced {
        (
            replace_once(&role, ROLE, CLUSTER_ROLE, NAMESPACE_ROLE)?,
            rebind(&binding, CLUSTER_BINDING, NAMESPACE_BINDING, true)?,
            replace_once(
                &manager,
                MANAGER,
                ENV_ANCHOR,
                &format!("{ENV_ANCHOR}{WATCH_ENV}"),
            )?,
            replace_once(&e2e, E2E, E2E_CLUSTER_WIDE, E2E_WATCH)?,
        )
    } else {
        (
            replace_once(&role, ROLE, NAMESPACE_ROLE, CLUSTER_ROLE)?,
            rebind(&binding, NAMESPACE_BINDING, CLUSTER_BINDING, false)?,
            replace_once(&manager, MANAGER, WATCH_ENV, "")?,
            replace_once(&e2e, E2E, E2E_WATCH, E2E_CLUSTER_WIDE)?,
        )
    };
    project.namespaced = namespaced;
    let mut plan = Plan::new(dir);
    plan.add(ROLE, role, IfExists::Overwrite);
    plan.add(BINDING, binding, IfExists::Overwrite);
    plan.add(MANAGER, manager, IfExists::Overwrite);
    plan.add(E2E, e2e, IfExists::Overwrite);
    plan.add(project::FILE_NAME, project.render(), IfExists::Overwrite);
    Ok(Edit::Change(plan))
}

/// A namespaced manager's Role grants nothing outside its namespace: no controller of a cluster-scoped
/// kind can run under it.
fn check_no_cluster_scoped_controller(project: &Project) -> Result<()> {
    for resource in &project.resources {
        let has_controller =
            resource.has_default_controller() || !resource.named_controllers().is_empty();
        let cluster_scoped = match &resource.api {
            Some(api) => !api.namespaced,
            None => core_types::find(&resource.group, &resource.version, &resource.kind)
                .is_some_and(|core| !core.namespaced),
        };
        if has_controller && cluster_scoped {
            bail!(
                "the controller of `{}` watches a cluster-scoped kind, which a manager confined to its namespace cannot\nhelp: keep the cluster-wide manager, or remove that controller first",
                resource.kind
            );
        }
    }
    Ok(())
}

fn read(dir: &Path, path: &str) -> Result<String> {
    std::fs::read_to_string(dir.join(path)).with_context(|| {
        format!("cannot read `{path}`\nhelp: restore it from version control, or re-create the project with `rustbuilder alpha generate`")
    })
}

/// Swaps the binding's kinds; `comment` adds the namespaced explanation (or removes it).
fn rebind(text: &str, from: (&str, &str), to: (&str, &str), comment: bool) -> Result<String> {
    let text = replace_once(text, BINDING, from.0, to.0)?;
    let text = replace_once(&text, BINDING, from.1, to.1)?;
    Ok(if comment {
        format!("{BINDING_COMMENT}{text}")
    } else {
        text.replacen(BINDING_COMMENT, "", 1)
    })
}

/// Replaces the one occurrence of `from` in the file `path`; none, or several, is an error.
fn replace_once(text: &str, path: &str, from: &str, to: &str) -> Result<String> {
    match text.matches(from).count() {
        1 => Ok(text.replacen(from, to, 1)),
        found => bail!(
            "`{path}` does not read as rustbuilder wrote it: expected these lines once, found them {found} times:\n{}help: restore the lines (see `rustbuilder init --help`), or make the change by hand",
            from.lines()
                .map(|l| format!("  | {l}\n"))
                .collect::<String>()
        ),
    }
}
