//! One module per subcommand.

mod crds;
mod enoexec_daemon;
mod enoexec_handler;
mod gate_controller;
mod inspect;
mod inspector;
mod manifests;
mod scheduler;
mod simulate;
mod webhook;

use anyhow::Context;

use crate::cli::Command;

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Crds(args) => crds::run(&args),
        Command::Manifests(args) => manifests::run(&args),
        Command::Simulate(args) => simulate::run(&args),
        Command::Inspect(args) => runtime()?.block_on(inspect::run(&args)),
        Command::Inspector(args) => runtime()?.block_on(inspector::run(&args)),
        Command::Scheduler(args) => runtime()?.block_on(scheduler::run(&args)),
        Command::Webhook(args) => runtime()?.block_on(webhook::run(&args)),
        Command::GateController(args) => runtime()?.block_on(gate_controller::run(&args)),
        Command::EnoexecDaemon(args) => runtime()?.block_on(enoexec_daemon::run(&args)),
        Command::EnoexecHandler(args) => runtime()?.block_on(enoexec_handler::run(&args)),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
