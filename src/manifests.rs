//! Manifests derived from the code. A project writes its own (`src/bin/crdgen.rs`, on the runtime's
//! manifest writer: CRDs from the Rust types, the manager's ClusterRole from `// +rustbuilder:rbac:`
//! markers); the CLI only runs it, as `make manifests` does.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Result, anyhow, bail};

/// What the project's manifest writer is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Write the manifests that are out of date.
    Write,
    /// Write nothing; fail listing the files that are out of date.
    Check,
}

impl Mode {
    fn flag(self) -> &'static str {
        match self {
            Mode::Write => "--write",
            Mode::Check => "--check",
        }
    }
}

/// The command line that runs the project's manifest writer.
pub fn command_line(mode: Mode) -> String {
    format!("cargo run --quiet --bin crdgen -- {}", mode.flag())
}

/// Runs `cargo run --quiet --bin crdgen -- --write` (or `--check`) in the project at `dir`; its output
/// goes to the terminal.
pub fn run(dir: &Path, mode: Mode) -> Result<()> {
    crate::project::Project::load(dir)?;
    let line = command_line(mode);
    crate::shell::status("Running", &line);
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["run", "--quiet", "--bin", "crdgen", "--", mode.flag()])
        .current_dir(dir)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| {
            anyhow!(
                "failed to run `cargo`: {e}\nhelp: install Rust with rustup (https://rustup.rs) so `cargo` is on PATH"
            )
        })?;
    if status.success() {
        return Ok(());
    }
    match mode {
        Mode::Check => bail!(
            "`{line}` failed ({status}): the manifests are out of date, or the project does not build (see above)\nhelp: run `make manifests` and commit the result"
        ),
        Mode::Write => bail!(
            "`{line}` failed ({status})\nhelp: fix the errors printed above, then run `make manifests`"
        ),
    }
}
