//! The licence flags `init` and `edit` share: `--license`, `--owner`'s header, `--license-file`.

use std::path::Path;

use anyhow::{Result, bail};

use crate::plugins::rust;

/// The `--license` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum License {
    /// Apache License 2.0: an SPDX header in every Rust file and `license` in Cargo.toml.
    Apache2,
    /// A copyright line alone (`// Copyright <owner>`), no license text.
    Copyright,
    /// No license header.
    None,
}

/// The license and header `--license`, `--license-file` and `--owner` ask for: a file's header
/// overrides the license, as in Kubebuilder.
pub fn header_of(
    license: Option<License>,
    license_file: Option<&Path>,
) -> Result<(Option<rust::License>, Option<String>)> {
    let Some(file) = license_file else {
        return Ok((license.map(Into::into), None));
    };
    let text = std::fs::read_to_string(file).map_err(|error| {
        anyhow::anyhow!(
            "cannot read the license file `{}`: {error}\nhelp: give the path of a text file holding the header",
            file.display()
        )
    })?;
    let header = rust::header_from_text(&text);
    if header.is_empty() {
        bail!(
            "the license file `{}` is empty\nhelp: write the header in it, or use `--license none`",
            file.display()
        );
    }
    Ok((Some(rust::License::Custom), Some(header)))
}

impl From<License> for rust::License {
    fn from(license: License) -> Self {
        match license {
            License::Apache2 => rust::License::Apache2,
            License::Copyright => rust::License::Copyright,
            License::None => rust::License::None,
        }
    }
}
