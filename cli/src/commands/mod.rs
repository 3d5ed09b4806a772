//! One module per subcommand; a subcommand exists when its role's feature is built in.

#[cfg(feature = "audit")]
mod audit;
#[cfg(feature = "scheduler")]
mod bench;
mod crds;
#[cfg(feature = "enoexec-daemon")]
mod enoexec_daemon;
#[cfg(feature = "enoexec-handler")]
mod enoexec_handler;
#[cfg(feature = "admission")]
mod gate_controller;
#[cfg(feature = "inspector")]
mod inspect;
#[cfg(feature = "inspector")]
mod inspector;
#[cfg(feature = "inspector-client")]
mod inspector_client;
#[cfg(any(feature = "inspector", feature = "audit"))]
mod local_inspector;
#[cfg(feature = "operator")]
mod manifests;
#[cfg(feature = "operator")]
mod operator;
#[cfg(feature = "cluster-role")]
mod role;
#[cfg(feature = "scheduler")]
mod scheduler;
#[cfg(feature = "scheduler")]
mod scheduler_images;
#[cfg(feature = "scheduler")]
mod simulate;
#[cfg(feature = "admission")]
mod webhook;

use crate::args::Command;

/// A command's outcome that is not an error but needs its own exit code (a CI gate).
#[derive(Debug)]
pub struct ExitWith {
    pub code: u8,
    pub message: String,
}

impl std::fmt::Display for ExitWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExitWith {}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Crds(args) => crds::run(&args),
        #[cfg(feature = "operator")]
        Command::Manifests(args) => manifests::run(&args),
        #[cfg(feature = "operator")]
        Command::Certificates(args) => manifests::certificates(&args),
        #[cfg(feature = "operator")]
        Command::Operator(args) => runtime()?.block_on(operator::run(&args)),
        #[cfg(feature = "scheduler")]
        Command::Simulate(args) => simulate::run(&args),
        #[cfg(feature = "scheduler")]
        Command::Bench(args) => runtime()?.block_on(bench::run(&args)),
        #[cfg(feature = "inspector")]
        Command::Inspect(args) => runtime()?.block_on(inspect::run(&args)),
        #[cfg(feature = "audit")]
        Command::Audit(args) => runtime()?.block_on(audit::run(&args)),
        #[cfg(feature = "inspector")]
        Command::Inspector(args) => runtime()?.block_on(inspector::run(&args)),
        #[cfg(feature = "scheduler")]
        Command::Scheduler(args) => runtime()?.block_on(scheduler::run(&args)),
        #[cfg(feature = "admission")]
        Command::Webhook(args) => runtime()?.block_on(webhook::run(&args)),
        #[cfg(feature = "admission")]
        Command::GateController(args) => runtime()?.block_on(gate_controller::run(&args)),
        #[cfg(feature = "enoexec-daemon")]
        Command::EnoexecDaemon(args) => runtime()?.block_on(enoexec_daemon::run(&args)),
        #[cfg(feature = "enoexec-handler")]
        Command::EnoexecHandler(args) => runtime()?.block_on(enoexec_handler::run(&args)),
    }
}

#[cfg(any(feature = "cluster-role", feature = "audit"))]
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
