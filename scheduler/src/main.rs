//! `multiarch`: one binary, one subcommand per role.

use std::process::ExitCode;

use clap::Parser;

mod cli;
mod commands;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
