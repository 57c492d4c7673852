//! The deploy-image plugin: `create api --plugins deploy-image/v1-alpha --image IMG` scaffolds a controller
//! that runs IMG as a Deployment sized by `spec.size`, with status conditions, events and a finalizer.

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use serde::Serialize;

use super::rust::ApiOptions;
use crate::model::Domain;
use crate::project::PluginResource;

/// The name users pass to `--plugins`.
pub const NAME: &str = "deploy-image/v1-alpha";

/// The deploy-image flags of `create api`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ImageOptions {
    /// Container image the controller runs (deploy-image plugin).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Container command, comma-separated (deploy-image plugin).
    #[arg(long, value_name = "CMD,ARG,...")]
    pub image_container_command: Option<String>,
    /// Container port (deploy-image plugin).
    #[arg(long, value_name = "PORT")]
    pub image_container_port: Option<u16>,
    /// User ID the container runs as (deploy-image plugin).
    #[arg(long, value_name = "UID")]
    pub run_as_user: Option<u32>,
}

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
}
