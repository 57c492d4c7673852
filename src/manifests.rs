//! Manifests derived from the code: CRDs from the Rust types (through the project's `crdgen` binary) and the
//! manager's ClusterRole from `// +rustbuilder:rbac:` markers.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, anyhow, bail};

use crate::scaffold::{IfExists, Plan};

/// The marker prefix controllers use to declare the permissions they need.
pub const RBAC_MARKER: &str = "+rustbuilder:rbac:";

/// Plans every generated manifest of the project at `dir`.
pub fn plan(dir: &Path) -> Result<Plan> {
    crate::project::Project::load(dir)?;
    let mut plan = Plan::new(dir);
    for (name, yaml) in crds(dir)? {
        plan.add(
            format!("config/crd/bases/{name}"),
            yaml,
            IfExists::Overwrite,
        );
    }
    plan.add(
        "config/rbac/role.yaml",
        render_role(&rbac_rules(dir)?),
        IfExists::Overwrite,
    );
    Ok(plan)
}

/// Runs `cargo run --bin crdgen` and returns each CRD as (`<group>_<plural>.yaml`, YAML).
fn crds(dir: &Path) -> Result<Vec<(String, String)>> {
    crate::shell::status("Running", "cargo run --bin crdgen");
    let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["run", "--quiet", "--bin", "crdgen"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| anyhow!("failed to run `cargo`: {e}\nhelp: install Rust with rustup (https://rustup.rs) so `cargo` is on PATH"))?;
    if !output.status.success() {
        bail!(
            "`cargo run --bin crdgen` failed ({})\nhelp: fix the errors printed above, then run this again",
            output.status
        );
    }
    crds_from_json(&output.stdout)
}

/// Splits crdgen's JSON `List` into one YAML document per CRD, named as Kubebuilder names them.
pub fn crds_from_json(json: &[u8]) -> Result<Vec<(String, String)>> {
    let list: serde_json::Value =
        serde_json::from_slice(json).context("crdgen did not print a JSON list of CRDs")?;
    let items = list["items"]
        .as_array()
        .ok_or_else(|| anyhow!("crdgen printed JSON without an `items` list"))?;
    let mut out = Vec::new();
    for crd in items {
        let group = crd["spec"]["group"]
            .as_str()
            .ok_or_else(|| anyhow!("a CRD printed by crdgen has no spec.group"))?;
        let plural = crd["spec"]["names"]["plural"]
            .as_str()
            .ok_or_else(|| anyhow!("a CRD printed by crdgen has no spec.names.plural"))?;
        out.push((
            format!("{group}_{plural}.yaml"),
            format!("---\n{}", serde_yaml::to_string(crd)?),
        ));
    }
    out.sort();
    Ok(out)
}

/// One RBAC rule: API groups, resources and verbs, each sorted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
}

/// Collects the markers of every `.rs` file under `src/` into merged, sorted rules.
pub fn rbac_rules(dir: &Path) -> Result<Vec<Rule>> {
    let mut files = Vec::new();
    rust_files(&dir.join("src"), &mut files)?;
    files.sort();
    let mut markers = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("failed to read `{}`", file.display()))?;
        for (n, line) in text.lines().enumerate() {
            if let Some(rest) = line.trim_start().strip_prefix("//").map(str::trim_start)
                && let Some(body) = rest.strip_prefix(RBAC_MARKER)
            {
                let relative = file.strip_prefix(dir).unwrap_or(file);
                markers.push(
                    parse_marker(body)
                        .with_context(|| format!("{}:{}", relative.display(), n + 1))?,
                );
            }
        }
    }
    Ok(merge(markers))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("failed to read `{}`", dir.display())),
    };
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Parses `groups=apps,resources=deployments;deployments/status,verbs=get;list`.
fn parse_marker(body: &str) -> Result<Rule> {
    let mut rule = Rule {
        api_groups: Vec::new(),
        resources: Vec::new(),
        verbs: Vec::new(),
    };
    for pair in body.split(',') {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| anyhow!("invalid RBAC marker: `{pair}` is not `key=value`\nhelp: write e.g. `// {RBAC_MARKER}groups=apps,resources=deployments,verbs=get;list;watch`"))?;
        let values = value
            .split(';')
            .map(|v| v.trim().trim_matches('"').to_string());
        match key.trim() {
            "groups" => rule
                .api_groups
                .extend(values.map(|g| if g == "core" { String::new() } else { g })),
            "resources" => rule.resources.extend(values),
            "verbs" => rule.verbs.extend(values),
            other => bail!(
                "unknown key `{other}` in RBAC marker\nhelp: the keys are `groups`, `resources` and `verbs`"
            ),
        }
    }
    if rule.resources.is_empty()
        || rule.verbs.is_empty()
        || rule
            .resources
            .iter()
            .chain(&rule.verbs)
            .any(String::is_empty)
    {
        bail!(
            "RBAC marker needs `resources=` and `verbs=` with values\nhelp: write e.g. `// {RBAC_MARKER}groups=apps,resources=deployments,verbs=get;list;watch`"
        );
    }
    if rule.api_groups.is_empty() {
        rule.api_groups.push(String::new());
    }
    Ok(rule)
}

/// Unions the verbs of each (group, resource), then puts resources with identical verbs in one rule.
fn merge(markers: Vec<Rule>) -> Vec<Rule> {
    let mut verbs: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for rule in markers {
        for group in &rule.api_groups {
            for resource in &rule.resources {
                verbs
                    .entry((group.clone(), resource.clone()))
                    .or_default()
                    .extend(rule.verbs.iter().cloned());
            }
        }
    }
    let mut by_verbs: BTreeMap<(String, Vec<String>), Vec<String>> = BTreeMap::new();
    for ((group, resource), set) in verbs {
        let set = if set.contains("*") {
            vec!["*".to_string()]
        } else {
            set.into_iter().collect()
        };
        by_verbs.entry((group, set)).or_default().push(resource);
    }
    let mut rules: Vec<Rule> = by_verbs
        .into_iter()
        .map(|((group, verbs), resources)| Rule {
            api_groups: vec![group],
            resources,
            verbs,
        })
        .collect();
    rules.sort();
    rules
}

/// The manager's ClusterRole, `manager-role`, as YAML.
pub fn render_role(rules: &[Rule]) -> String {
    let mut out = String::from(
        "# Generated by `rustbuilder manifests` from the `// +rustbuilder:rbac:` markers in src/. Do not edit.\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: manager-role\n",
    );
    if rules.is_empty() {
        out.push_str("rules: []\n");
        return out;
    }
    out.push_str("rules:\n");
    for rule in rules {
        let mut first = true;
        for (key, values) in [
            ("apiGroups", &rule.api_groups),
            ("resources", &rule.resources),
            ("verbs", &rule.verbs),
        ] {
            let _ = writeln!(out, "{}{key}:", if first { "- " } else { "  " });
            first = false;
            for value in values {
                let quoted = if value.is_empty() || value == "*" {
                    format!("\"{value}\"")
                } else {
                    value.clone()
                };
                let _ = writeln!(out, "  - {quoted}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_markers_deterministically() {
        let rules = merge(vec![
            parse_marker("groups=apps,resources=deployments,verbs=get;list;watch").unwrap(),
            parse_marker("groups=apps,resources=deployments,verbs=create;patch").unwrap(),
            parse_marker("groups=\"\",resources=pods,verbs=get;list;watch").unwrap(),
            parse_marker("groups=core,resources=configmaps,verbs=get;list;watch").unwrap(),
        ]);
        assert_eq!(
            rules,
            vec![
                Rule {
                    api_groups: vec!["".into()],
                    resources: vec!["configmaps".into(), "pods".into()],
                    verbs: vec!["get".into(), "list".into(), "watch".into()],
                },
                Rule {
                    api_groups: vec!["apps".into()],
                    resources: vec!["deployments".into()],
                    verbs: ["create", "get", "list", "patch", "watch"]
                        .map(String::from)
                        .to_vec(),
                },
            ]
        );
        let yaml = render_role(&rules);
        assert!(
            yaml.contains("- apiGroups:\n  - \"\"\n  resources:\n  - configmaps\n  - pods\n"),
            "{yaml}"
        );
    }

    #[test]
    fn bad_markers_are_errors() {
        assert!(parse_marker("groups=apps,resources=deployments").is_err());
        assert!(parse_marker("groups=apps,resource=deployments,verbs=get").is_err());
        assert!(parse_marker("groups=apps resources=deployments").is_err());
    }

    #[test]
    fn crd_files_are_named_group_plural() {
        let json = br#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","spec":{"group":"cache.example.com","names":{"plural":"memcacheds"}}}]}"#;
        let crds = crds_from_json(json).unwrap();
        assert_eq!(crds[0].0, "cache.example.com_memcacheds.yaml");
        assert!(crds[0].1.starts_with(
            "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        ));
    }
}
