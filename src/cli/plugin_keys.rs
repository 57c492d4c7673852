//! `--plugins` as Kubebuilder's users write it: a short key (`go/v4`) or a full one
//! (`go.kubebuilder.io/v4`), alone or in a comma-separated chain (`go/v4,deploy-image/v1-alpha`).
//!
//! The keys of Kubebuilder's project layout (`go/v4`, `base.go.kubebuilder.io/v4`, `kustomize/v2`)
//! name what rustbuilder always scaffolds: a Rust project with kustomize manifests. They are
//! accepted and change nothing. The keys of the optional plugins name the plugin of the same name
//! here, on the commands that run it.

use anyhow::{Result, bail};

use crate::plugins::{autoupdate, deploy_image, grafana, helm};
use crate::project::{AUTOUPDATE_PLUGIN, DEPLOY_IMAGE_PLUGIN, GRAFANA_PLUGIN, HELM_PLUGIN};

/// Keys of the layout every rustbuilder project has: Kubebuilder's, and rustbuilder's own.
const LAYOUT: &[&str] = &[
    "go/v4",
    "go.kubebuilder.io/v4",
    "base.go.kubebuilder.io/v4",
    "kustomize/v2",
    "kustomize.common.kubebuilder.io/v2",
    "rust/v1-alpha",
    "rust.rustbuilder.dev/v1-alpha",
];

/// An optional plugin named in a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugin {
    DeployImage,
    Helm,
    Grafana,
    Autoupdate,
}

impl Plugin {
    /// Our short name (the one `--help` shows).
    pub fn name(self) -> &'static str {
        match self {
            Plugin::DeployImage => deploy_image::NAME,
            Plugin::Helm => helm::NAME,
            Plugin::Grafana => grafana::NAME,
            Plugin::Autoupdate => autoupdate::NAME,
        }
    }

    /// Our short name, our PROJECT key, or Kubebuilder's key.
    fn parse(key: &str) -> Option<Plugin> {
        Some(match key {
            deploy_image::NAME
            | DEPLOY_IMAGE_PLUGIN
            | "deploy-image.go.kubebuilder.io/v1-alpha"
            | "deploy-image.kubebuilder.io/v1-alpha" => Plugin::DeployImage,
            helm::NAME | HELM_PLUGIN | "helm.kubebuilder.io/v2-alpha" => Plugin::Helm,
            grafana::NAME | GRAFANA_PLUGIN | "grafana.kubebuilder.io/v1-alpha" => Plugin::Grafana,
            autoupdate::NAME | AUTOUPDATE_PLUGIN | "autoupdate.kubebuilder.io/v1-alpha" => {
                Plugin::Autoupdate
            }
            _ => return None,
        })
    }
}

/// The optional plugins of `chain` (the value of `--plugins` on `command`), each one of `allowed`;
/// layout keys set aside. A key rustbuilder does not know, an older layout, or a plugin of another
/// command is refused by name, with what to write instead.
pub fn parse(chain: &str, command: &str, allowed: &[Plugin]) -> Result<Vec<Plugin>> {
    let mut plugins = Vec::new();
    for key in chain.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        if LAYOUT.contains(&key) {
            continue;
        }
        if let Some(plugin) = Plugin::parse(key) {
            if !allowed.contains(&plugin) {
                let runs_it = if plugin == Plugin::DeployImage {
                    "`create api`"
                } else {
                    "`init` and `edit`"
                };
                bail!(
                    "the plugin `{key}` does not run on `{command}`\nhelp: {runs_it} run it: e.g. `rustbuilder {} --plugins {}`",
                    if plugin == Plugin::DeployImage {
                        "create api"
                    } else {
                        "edit"
                    },
                    plugin.name()
                );
            }
            if !plugins.contains(&plugin) {
                plugins.push(plugin);
            }
            continue;
        }
        let older = [
            "go/v2",
            "go/v3",
            "go.kubebuilder.io/v2",
            "go.kubebuilder.io/v3",
        ];
        if older.contains(&key) || key.starts_with("kustomize.common.kubebuilder.io/v1") {
            bail!(
                "the plugin `{key}` is an older Kubebuilder layout\nhelp: rustbuilder scaffolds the layout of `go/v4` (with `kustomize/v2`); migrate with `rustbuilder alpha generate`, or pass `--plugins go/v4`"
            );
        }
        let names: Vec<&str> = allowed.iter().map(|p| p.name()).collect();
        let optional = if names.is_empty() {
            String::new()
        } else {
            format!(" and the plugins `{}`", names.join("`, `"))
        };
        bail!(
            "unknown plugin `{key}` for `{command}`\nhelp: `{command}` takes the layout keys `go/v4` (or `go.kubebuilder.io/v4`, `base.go.kubebuilder.io/v4`) and `kustomize/v2`{optional}, comma-separated"
        );
    }
    Ok(plugins)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_keys_in_any_form_change_nothing() {
        for chain in [
            "go/v4",
            "go.kubebuilder.io/v4",
            "base.go.kubebuilder.io/v4,kustomize.common.kubebuilder.io/v2",
            "go/v4,kustomize/v2",
        ] {
            assert_eq!(parse(chain, "init", &[]).unwrap(), []);
        }
    }

    #[test]
    fn optional_plugins_by_short_or_full_key() {
        let all = [Plugin::DeployImage];
        assert_eq!(
            parse(
                "go/v4,deploy-image.go.kubebuilder.io/v1-alpha",
                "create api",
                &all
            )
            .unwrap(),
            [Plugin::DeployImage]
        );
        let init = [Plugin::Helm, Plugin::Grafana, Plugin::Autoupdate];
        assert_eq!(
            parse(
                "go/v4,grafana.kubebuilder.io/v1-alpha,autoupdate/v1-alpha",
                "init",
                &init
            )
            .unwrap(),
            [Plugin::Grafana, Plugin::Autoupdate]
        );
    }

    #[test]
    fn other_keys_are_refused_by_name_with_a_fix() {
        let error = parse("go/v3", "init", &[]).unwrap_err().to_string();
        assert!(error.contains("older Kubebuilder layout"), "{error}");
        let error = parse("deploy-image/v1-alpha", "init", &[Plugin::Helm]).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("rustbuilder create api --plugins deploy-image/v1-alpha"),
            "{error}"
        );
        let error = parse("go/v4,declarative/v1", "create webhook", &[]).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("unknown plugin `declarative/v1`"),
            "{error}"
        );
    }
}
