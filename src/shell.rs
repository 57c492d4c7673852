//! Human output on stderr, cargo style: a right-aligned green verb, then what it acted on.
//!
//! Colour follows the terminal (`console` honours `NO_COLOR`, `CLICOLOR` and non-TTY output); `--quiet`
//! silences status lines but never errors.

use std::sync::atomic::{AtomicBool, Ordering};

use console::{Style, Term};

static QUIET: AtomicBool = AtomicBool::new(false);
/// `--quiet` as the user gave it.
static USER_QUIET: AtomicBool = AtomicBool::new(false);

pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
    USER_QUIET.store(quiet, Ordering::Relaxed);
}

/// Runs `f` with status lines silenced, restoring the previous setting afterwards.
pub fn set_quiet_scoped<T>(f: impl FnOnce() -> T) -> T {
    let before = QUIET.swap(true, Ordering::Relaxed);
    let result = f();
    QUIET.store(before, Ordering::Relaxed);
    result
}

fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// `   Creating src/main.rs`
pub fn status(verb: &str, message: impl std::fmt::Display) {
    if !quiet() {
        let verb = Style::new()
            .for_stderr()
            .green()
            .bold()
            .apply_to(format!("{verb:>12}"));
        let _ = Term::stderr().write_line(&format!("{verb} {message}"));
    }
}

/// One status line per changed file, its change as the verb (`Creating`, `Updating`, `Removing`).
pub fn written(files: impl IntoIterator<Item = (std::path::PathBuf, impl std::fmt::Display)>) {
    for (path, change) in files {
        status(&change.to_string(), path.display());
    }
}

/// `warning: …` on stderr, unless the user passed `--quiet` (commands run quietly inside another
/// command still warn).
pub fn warning(message: impl std::fmt::Display) {
    if !USER_QUIET.load(Ordering::Relaxed) {
        let label = Style::new()
            .for_stderr()
            .yellow()
            .bold()
            .apply_to("warning:");
        let _ = Term::stderr().write_line(&format!("{label} {message}"));
    }
}

/// A closing hint, e.g. what to run next.
pub fn note(label: &str, message: impl std::fmt::Display) {
    if !quiet() {
        let label = Style::new()
            .for_stderr()
            .cyan()
            .bold()
            .apply_to(format!("{label}:"));
        let _ = Term::stderr().write_line(&format!("{label} {message}"));
    }
}

/// `error: …`, then a `Caused by:` block per underlying cause, then every `help:` line last.
pub fn error(err: &anyhow::Error) {
    let term = Term::stderr();
    let red = Style::new().for_stderr().red().bold();
    let cyan = Style::new().for_stderr().cyan().bold();
    let mut help = Vec::new();
    for (depth, cause) in err.chain().enumerate() {
        let text = cause.to_string();
        let (body, hints): (Vec<&str>, Vec<&str>) =
            text.lines().partition(|l| !l.starts_with("help: "));
        help.extend(
            hints
                .iter()
                .map(|h| h.trim_start_matches("help: ").to_string()),
        );
        if depth == 1 {
            let _ = term.write_line("\nCaused by:");
        }
        for (n, line) in body.iter().enumerate() {
            let line = match (depth, n) {
                (0, 0) => format!("{} {line}", red.apply_to("error:")),
                (0, _) => format!("       {line}"),
                _ => format!("    {line}"),
            };
            let _ = term.write_line(&line);
        }
    }
    for line in help {
        let _ = term.write_line(&format!("{} {line}", cyan.apply_to("help:")));
    }
}
