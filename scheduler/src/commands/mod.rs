//! One module per subcommand.

mod crds;
mod simulate;

use crate::cli::Command;

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Crds(args) => crds::run(&args),
        Command::Simulate(args) => simulate::run(&args),
    }
}
