//! `rustbuilder`: parses the command line, runs the command, maps the outcome to an exit code
//! (0 done, 1 failed, 2 usage error).

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = rustbuilder::cli::Cli::parse();
    match rustbuilder::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            rustbuilder::shell::error(&err);
            ExitCode::FAILURE
        }
    }
}
