//! Formatting generated Rust with rustfmt, as Kubebuilder runs gofmt on what it generates.
//!
//! All files of a command go through one rustfmt process: each is staged in a directory of its own under a
//! temporary directory (with an empty stand-in for every out-of-line `mod name;`, which rustfmt would
//! otherwise look for and fail on), formatted in place, and read back.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The edition generated projects use, and so the one rustfmt parses them with.
pub const EDITION: &str = "2024";

/// What became of a batch of files.
#[derive(Debug)]
pub enum Outcome {
    /// The texts, formatted; a text rustfmt could not parse is returned unchanged.
    Formatted(Vec<String>),
    /// rustfmt is not installed: the texts are returned unchanged.
    Missing,
}

/// The warning printed once when rustfmt is missing.
pub const MISSING: &str = "rustfmt not found: the generated Rust is unformatted; install it with `rustup component add rustfmt`";

/// Formats `texts` (each the contents of one `.rs` file named `names[i]`, for messages) with rustfmt.
///
/// `config` is the project's `rustfmt.toml`, if it has one. Errors that rustfmt prints (a file that does
/// not parse) come back in the second value, with the staged paths replaced by `names`.
pub fn format(names: &[PathBuf], texts: &[String], config: Option<&Path>) -> (Outcome, String) {
    if texts.is_empty() {
        return (Outcome::Formatted(Vec::new()), String::new());
    }
    match run(names, texts, config) {
        Ok(result) => result,
        Err(e) => (
            Outcome::Formatted(texts.to_vec()),
            format!("rustfmt could not run: {e}"),
        ),
    }
}

fn run(
    names: &[PathBuf],
    texts: &[String],
    config: Option<&Path>,
) -> std::io::Result<(Outcome, String)> {
    let staging = tempfile::Builder::new()
        .prefix("rustbuilder-rustfmt-")
        .tempdir()?;
    let mut staged = Vec::with_capacity(texts.len());
    for (i, text) in texts.iter().enumerate() {
        let dir = staging.path().join(i.to_string());
        std::fs::create_dir(&dir)?;
        for module in out_of_line_modules(text) {
            std::fs::write(dir.join(format!("{module}.rs")), "")?;
        }
        let file = dir.join("file.rs");
        std::fs::write(&file, text)?;
        staged.push(file);
    }
    let program = std::env::var_os("RUSTFMT").unwrap_or_else(|| "rustfmt".into());
    let mut command = Command::new(program);
    command.args(["--edition", EDITION]);
    if let Some(config) = config {
        command.arg("--config-path").arg(config);
    }
    let output = match command
        .args(&staged)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((Outcome::Missing, String::new()));
        }
        Err(e) => return Err(e),
    };
    let mut stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    // rustup's proxy exists even when the component does not.
    if !output.status.success() && stderr.contains("is not installed") {
        return Ok((Outcome::Missing, String::new()));
    }
    let mut formatted = Vec::with_capacity(texts.len());
    for (file, text) in staged.iter().zip(texts) {
        formatted.push(std::fs::read_to_string(file).unwrap_or_else(|_| text.clone()));
    }
    if output.status.success() {
        stderr.clear();
    } else {
        for (file, name) in staged.iter().zip(names) {
            stderr = stderr.replace(&file.display().to_string(), &name.display().to_string());
        }
    }
    Ok((Outcome::Formatted(formatted), stderr))
}

/// The names of `mod name;` declarations (modules in files of their own).
fn out_of_line_modules(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut line = line.trim();
        // Attributes on the same line: `#[cfg(test)] mod tests;`.
        while line.starts_with("#[") {
            match line.find(']') {
                Some(end) => line = line[end + 1..].trim_start(),
                None => break,
            }
        }
        if let Some(rest) = line.strip_prefix("pub") {
            line = match rest.trim_start().strip_prefix('(') {
                Some(rest) => rest.split_once(')').map_or("", |(_, r)| r).trim_start(),
                None => rest.trim_start(),
            };
        }
        let Some(rest) = line.strip_prefix("mod ") else {
            continue;
        };
        let Some(name) = rest.trim().strip_suffix(';') else {
            continue;
        };
        let name = name.trim().trim_start_matches("r#");
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.push(name.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_out_of_line_modules() {
        let text = "mod a;\npub mod b;\npub(crate) mod c;\n#[cfg(test)] mod d;\nmod inline {\n}\n// mod e;\nmod r#type;\n";
        assert_eq!(out_of_line_modules(text), ["a", "b", "c", "d", "type"]);
    }

    #[test]
    fn formats_files_that_declare_modules() {
        if Command::new("rustfmt").arg("--version").output().is_err() {
            panic!("rustfmt is missing: install it with `rustup component add rustfmt`");
        }
        let texts = vec![
            "mod api;\npub mod controller;\nfn  main( ) {let x=1;}\n".to_string(),
            "fn ok() {}\n".to_string(),
        ];
        let names = vec![PathBuf::from("src/main.rs"), PathBuf::from("src/lib.rs")];
        let (outcome, errors) = format(&names, &texts, None);
        let Outcome::Formatted(out) = outcome else {
            panic!("rustfmt is missing")
        };
        assert_eq!(errors, "");
        assert_eq!(
            out[0],
            "mod api;\npub mod controller;\nfn main() {\n    let x = 1;\n}\n"
        );
        assert_eq!(out[1], texts[1]);
    }

    #[test]
    fn a_file_that_does_not_parse_is_named_and_kept() {
        let texts = vec!["fn broken( {\n".to_string(), "fn  a(){}\n".to_string()];
        let names = vec![PathBuf::from("src/broken.rs"), PathBuf::from("src/a.rs")];
        let (outcome, errors) = format(&names, &texts, None);
        let Outcome::Formatted(out) = outcome else {
            panic!("rustfmt is missing")
        };
        assert_eq!(out, ["fn broken( {\n", "fn a() {}\n"]);
        assert!(errors.contains("src/broken.rs"), "{errors}");
    }
}
