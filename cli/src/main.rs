//! `multiarch`: one binary, one subcommand per role, composed from the role crates (see
//! the features in Cargo.toml for images with only some roles).

use std::process::ExitCode;

use clap::Parser;

mod args;
mod commands;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    match commands::run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            if let Some(exit) = err.downcast_ref::<commands::ExitWith>() {
                eprintln!("{exit}");
                return ExitCode::from(exit.code);
            }
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
