//! `multiarch`: one binary, one subcommand per role, composed from the role crates (see
//! the features in Cargo.toml for images with only some roles).

use std::process::ExitCode;

use clap::Parser;

mod args;
mod commands;
mod huge_pages;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    if cli.command.walks_many_nodes() {
        // Before any thread or allocation of the role's: the process is replaced.
        huge_pages::execute_again_with_huge_pages();
    }
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
