//! The deploy-image plugin: `create api --plugins deploy-image/v1-alpha --image IMG` scaffolds a controller
//! that runs IMG as a Deployment sized by `spec.size`, with status conditions and events.
//!
//! It builds on the base plugin: [`create_api`] takes the base plan of [`rust::plan_api`] and adds the
//! `deploy-image` template set, whose controller, type, tests and sample replace the base ones (they
//! declare `overwrite`), plus the image setting of the manager and the end-to-end test.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, bail};
use serde::Serialize;

use super::rust::{self, ApiOptions};
use crate::model::Domain;
use crate::project::{self, PluginResource};
use crate::scaffold::{Insertion, Plan};

/// The name users pass to `--plugins`.
pub const NAME: &str = "deploy-image/v1-alpha";

/// The deploy-image flags of `create api`, as given.
#[derive(Debug, Clone, Default)]
pub struct ImageOptions {
    /// Container image the controller runs.
    pub image: Option<String>,
    /// Container command, comma-separated.
    pub image_container_command: Option<String>,
    /// Container port.
    pub image_container_port: Option<u16>,
    /// User ID the container runs as.
    pub run_as_user: Option<u32>,
}

/// Names the generated controller, type and tests import or define: a kind of the same name would clash
/// with them and give code that does not build.
pub const RESERVED_KINDS: &[&str] = &[
    "Action",
    "Api",
    "Arc",
    "BTreeMap",
    "Box",
    "Capabilities",
    "Client",
    "ClusterRole",
    "ClusterRoleBinding",
    "Condition",
    "ConfigMap",
    "Container",
    "ContainerPort",
    "Context",
    "Controller",
    "Default",
    "DeleteParams",
    "Deployment",
    "DeploymentChange",
    "DeploymentCondition",
    "DeploymentSpec",
    "DeploymentStatus",
    "Duration",
    "Error",
    "ErrorBackoff",
    "Event",
    "EventType",
    "FinalizerEvent",
    "Future",
    "LabelSelector",
    "ListParams",
    "Namespace",
    "ObjectMeta",
    "ObjectRef",
    "Option",
    "Patch",
    "PatchParams",
    "Pod",
    "PodSecurityContext",
    "PodSpec",
    "PodTemplate",
    "PodTemplateSpec",
    "PolicyRule",
    "PostParams",
    "Recorder",
    "Resource",
    "ResourceExt",
    "Result",
    "SeccompProfile",
    "SecurityContext",
    "Store",
    "String",
    "TestEnv",
    "Time",
    "Timestamp",
    "Value",
    "Vec",
    "WatchStreamExt",
];

/// Crates and modules the generated code uses: a kind whose module (`kind_snake`) has the same name
/// would shadow them.
pub const RESERVED_MODULES: &[&str] = &[
    "envtest",
    "futures",
    "k8s_openapi",
    "kube",
    "libc",
    "oneshot",
    "serde",
    "serde_json",
    "tokio",
    "tracing",
    "tracing_subscriber",
];

/// Validated deploy-image options, as the templates see them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeployImage {
    pub image: String,
    pub command: Vec<String>,
    pub port: Option<u16>,
    pub run_as_user: Option<u32>,
    /// `memcached` for `memcached:1.6.26-alpine3.19`: the container and port name.
    pub container_name: String,
    /// `1.6.26-alpine3.19`: the `app.kubernetes.io/version` label.
    pub image_tag: String,
}

/// Checks the `--plugins` value and the image flags that go with it.
pub fn select(plugins: Option<&str>, options: ImageOptions) -> Result<Option<DeployImage>> {
    let image_flags = options.image.is_some()
        || options.image_container_command.is_some()
        || options.image_container_port.is_some()
        || options.run_as_user.is_some();
    match plugins {
        None if image_flags => bail!(
            "`--image` and the other image flags belong to the deploy-image plugin\nhelp: add `--plugins {NAME}`"
        ),
        None => Ok(None),
        Some(NAME) => {
            let Some(image) = options.image else {
                bail!(
                    "the {NAME} plugin needs `--image`\nhelp: e.g. `--image memcached:1.6.26-alpine3.19`"
                );
            };
            let command = match options.image_container_command.as_deref() {
                None => Vec::new(),
                Some(list) => list.split(',').map(str::to_string).collect(),
            };
            DeployImage::new(
                image,
                command,
                options.image_container_port,
                options.run_as_user,
            )
            .map(Some)
        }
        Some(other) => bail!("unknown plugin `{other}`\nhelp: the available plugin is `{NAME}`"),
    }
}

impl DeployImage {
    pub fn new(
        image: String,
        command: Vec<String>,
        port: Option<u16>,
        run_as_user: Option<u32>,
    ) -> Result<Self> {
        if image.is_empty() || image.starts_with('-') || image.contains(char::is_whitespace) {
            bail!(
                "invalid image `{image}`: an image reference has no spaces and does not start with `-`\nhelp: e.g. `--image memcached:1.6.26-alpine3.19`"
            );
        }
        if command.iter().any(String::is_empty) {
            bail!(
                "invalid container command `{}`: it has an empty element\nhelp: separate the command and its arguments with single commas",
                command.join(",")
            );
        }
        if run_as_user == Some(0) {
            bail!(
                "invalid `--run-as-user 0`: user 0 is root, which `runAsNonRoot` and the restricted Pod Security Standard forbid\nhelp: choose a non-zero user ID, e.g. `--run-as-user 1001`"
            );
        }
        if port == Some(0) {
            bail!(
                "invalid container port `0`: a port is 1 to 65535\nhelp: e.g. `--image-container-port 11211`"
            );
        }
        let (repository, tag) = split_image(&image);
        let container_name = repository
            .rsplit('/')
            .next()
            .unwrap_or(repository)
            .replace(['.', '_'], "-");
        if crate::model::dns1123_label_error(&container_name).is_some() {
            bail!(
                "cannot derive a container name from image `{image}`\nhelp: use an image whose last path element is a lowercase name"
            );
        }
        Ok(Self {
            image: image.clone(),
            command,
            port,
            run_as_user,
            container_name,
            image_tag: tag.to_string(),
        })
    }

    /// The PROJECT entry: Kubebuilder's option names, values as strings.
    pub fn record(&self, domain: &Domain, api: &ApiOptions) -> PluginResource {
        let mut options = BTreeMap::from([("image".to_string(), self.image.clone())]);
        if !self.command.is_empty() {
            options.insert("containerCommand".into(), self.command.join(","));
        }
        if let Some(port) = self.port {
            options.insert("containerPort".into(), port.to_string());
        }
        if let Some(uid) = self.run_as_user {
            options.insert("runAsUser".into(), uid.to_string());
        }
        PluginResource {
            domain: domain.to_string(),
            group: api.group.to_string(),
            kind: api.kind.to_string(),
            options,
            version: api.version.to_string(),
        }
    }

    pub fn from_record(record: &PluginResource) -> Result<Self> {
        let Some(image) = record.options.get("image") else {
            bail!(
                "the deploy-image entry for `{}` in PROJECT has no `image` option",
                record.kind
            );
        };
        let command = record
            .options
            .get("containerCommand")
            .map(|c| c.split(',').map(str::to_string).collect());
        let port = record
            .options
            .get("containerPort")
            .map(|p| p.parse())
            .transpose()?;
        let uid = record
            .options
            .get("runAsUser")
            .map(|u| u.parse())
            .transpose()?;
        Self::new(image.clone(), command.unwrap_or_default(), port, uid)
    }
}

/// Checks that the deploy-image controller can be generated for the API in `options`.
pub fn validate(options: &ApiOptions) -> Result<()> {
    if options.controller_name.is_some() {
        bail!(
            "the {NAME} plugin scaffolds the kind's own controller, not a named one\nhelp: add the deploy-image controller first, then another controller with `--controller-name` and no `--plugins`"
        );
    }
    if !(options.resource && options.controller) {
        bail!(
            "the {NAME} plugin scaffolds both the type and its controller\nhelp: drop `--resource=false` and `--controller=false`"
        );
    }
    if !options.namespaced {
        bail!(
            "the {NAME} plugin needs a namespaced kind: its Deployment lives in the namespace of the object\nhelp: drop `--namespaced=false`"
        );
    }
    let kind = options.kind.as_str();
    let module = options.kind.snake();
    if RESERVED_KINDS.contains(&kind) || RESERVED_MODULES.contains(&module.as_str()) {
        bail!(
            "the {NAME} plugin cannot scaffold kind `{kind}`: its generated code already uses the name `{kind}` (or `{module}`)\nhelp: choose another kind, e.g. `--kind My{kind}`"
        );
    }
    Ok(())
}

/// Plans `create api` with the deploy-image controller for `image`.
pub fn create_api(dir: &Path, options: &ApiOptions, image: &DeployImage) -> Result<Plan> {
    validate(options)?;
    let mut scaffold = rust::plan_api(dir, options)?;
    if rust::is_multicluster(&scaffold.project) {
        bail!(
            "the {NAME} plugin does not scaffold controllers for a multi-cluster project yet: its controller runs in one cluster\nhelp: scaffold the kind without `--plugins {NAME}`, and run its image from the controller's reconcile"
        );
    }
    // The image is the manager's `<KIND>_IMAGE` variable: one per kind name.
    if let Some(other) = scaffold
        .project
        .plugins
        .get(project::DEPLOY_IMAGE_PLUGIN)
        .into_iter()
        .flat_map(|p| &p.resources)
        .find(|r| r.kind == options.kind.as_str() && r.group != options.group.as_str())
    {
        bail!(
            "kind `{}` of group `{}` already runs an image with the {NAME} plugin: both would read the manager's `{}_IMAGE` variable\nhelp: choose another kind, or scaffold this one without `--plugins {NAME}`",
            options.kind,
            other.group,
            options.kind.as_str().to_uppercase()
        );
    }
    scaffold.context.insert("image", image);
    scaffold.plan.add_set("deploy-image", &scaffold.context)?;
    let api = &scaffold.api;
    scaffold.plan.insert(Insertion {
        path: "tests/e2e/main.rs",
        marker: "e2e",
        fragment: format!("mod {};", api.kind_file),
    })?;
    // The image the controller runs, overridable per deployment. Quoted as a JSON string (valid YAML), so
    // a value such as `123` stays a string.
    let name_line = format!("        - name: {}_IMAGE", api.kind_upper);
    // `--force` with another image replaces the entry instead of adding a second one.
    scaffold.plan.edit("config/manager/manager.yaml", |text| {
        let mut lines: Vec<&str> = text.lines().collect();
        if let Some(at) = lines.iter().position(|line| *line == name_line) {
            lines.drain(at..(at + 2).min(lines.len()));
        }
        lines.join("\n") + "\n"
    })?;
    scaffold.plan.insert(Insertion {
        path: "config/manager/manager.yaml",
        marker: "env",
        fragment: format!(
            "{name_line}\n          value: {}",
            serde_json::Value::from(image.image.as_str())
        ),
    })?;
    let record = image.record(&scaffold.domain, options);
    scaffold
        .project
        .upsert_plugin_resource(project::DEPLOY_IMAGE_PLUGIN, record);
    Ok(scaffold.finish())
}

/// `registry:5000/memcached:1.6@sha256:…` → (`registry:5000/memcached`, `1.6`); no tag means `latest`.
fn split_image(image: &str) -> (&str, &str) {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last_slash = without_digest.rfind('/').map_or(0, |i| i + 1);
    match without_digest[last_slash..].rfind(':') {
        Some(colon) => (
            &without_digest[..last_slash + colon],
            &without_digest[last_slash + colon + 1..],
        ),
        None => (without_digest, "latest"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_image_references() {
        assert_eq!(
            split_image("memcached:1.6.26-alpine3.19"),
            ("memcached", "1.6.26-alpine3.19")
        );
        assert_eq!(
            split_image("registry:5000/team/memcached"),
            ("registry:5000/team/memcached", "latest")
        );
        assert_eq!(
            split_image("docker.io/library/memcached:1.6@sha256:abc"),
            ("docker.io/library/memcached", "1.6")
        );
    }

    #[test]
    fn image_flags_need_the_plugin() {
        let options = ImageOptions {
            image: Some("memcached:1.6".into()),
            ..Default::default()
        };
        assert!(
            select(None, options.clone())
                .unwrap_err()
                .to_string()
                .contains("--plugins deploy-image/v1-alpha")
        );
        let image = select(Some(NAME), options).unwrap().unwrap();
        assert_eq!(
            (image.container_name.as_str(), image.image_tag.as_str()),
            ("memcached", "1.6")
        );
        assert!(
            select(Some(NAME), ImageOptions::default())
                .unwrap_err()
                .to_string()
                .contains("needs `--image`")
        );
        assert!(select(Some("helm/v1"), ImageOptions::default()).is_err());
    }

    fn api(kind: &str) -> ApiOptions {
        ApiOptions {
            group: "cache".parse().unwrap(),
            version: "v1alpha1".parse().unwrap(),
            kind: kind.parse().unwrap(),
            plural: None,
            resource: true,
            controller: true,
            namespaced: true,
            force: false,
            controller_name: None,
            external: None,
        }
    }

    fn message(result: Result<impl std::fmt::Debug>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn a_cluster_scoped_kind_is_refused() {
        validate(&api("Memcached")).unwrap();
        let options = ApiOptions {
            namespaced: false,
            ..api("Memcached")
        };
        let err = message(validate(&options));
        assert!(err.contains("needs a namespaced kind"), "{err}");
        assert!(err.contains("\nhelp: drop `--namespaced=false`"), "{err}");
    }

    #[test]
    fn reserved_names_are_refused() {
        for kind in ["Deployment", "Context", "Event"] {
            let err = message(validate(&api(kind)));
            assert!(
                err.contains(&format!("cannot scaffold kind `{kind}`")),
                "{err}"
            );
            assert!(err.contains("\nhelp: choose another kind"), "{err}");
        }
        // `Tokio` is free as a type, but its module `tokio` would shadow the crate.
        let err = message(validate(&api("Tokio")));
        assert!(err.contains("(or `tokio`)"), "{err}");
        validate(&api("Deployer")).unwrap();
        assert_eq!(RESERVED_KINDS.len(), 58);
    }

    #[test]
    fn both_the_type_and_the_controller_are_needed() {
        let options = ApiOptions {
            resource: false,
            ..api("Memcached")
        };
        assert!(message(validate(&options)).contains("\nhelp: drop `--resource=false`"));
    }

    #[test]
    fn root_is_refused() {
        let err = message(DeployImage::new(
            "memcached:1.6".into(),
            vec![],
            None,
            Some(0),
        ));
        assert!(err.contains("`--run-as-user 0`"), "{err}");
        assert!(err.contains("\nhelp: choose a non-zero user ID"), "{err}");
        DeployImage::new("memcached:1.6".into(), vec![], None, Some(1001)).unwrap();
    }
}
