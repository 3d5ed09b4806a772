//! The command line of every role multiarch runs in a cluster, as one typed definition:
//! the role parses it (`multiarch <role>`), and the operator fills it and writes it into
//! the role's workload with [`to_argv`]. A flag renamed, added or removed therefore
//! changes both sides at once; the flags every role shares (client, Lease, operations
//! endpoint, logging) are `multiarch_runtime`'s groups, flattened in.

/// `impl RoleFlags` for a role's flags (a struct with a `log: LogArgs` field) run by
/// `multiarch <subcommand>`.
macro_rules! role_flags {
    ($flags:ty, $subcommand:literal) => {
        impl $crate::RoleFlags for $flags {
            const SUBCOMMAND: &'static str = $subcommand;

            fn log_mut(&mut self) -> &mut multiarch_runtime::logging::LogArgs {
                &mut self.log
            }
        }
    };
    // A role that calls the inspector, from its `inspector` and `ops` fields.
    ($flags:ty, $subcommand:literal, inspector_caller) => {
        role_flags!($flags, $subcommand);

        impl $crate::InspectorCallerFlags for $flags {
            fn inspector_and_ops(
                &mut self,
            ) -> (
                &mut $crate::InspectorServiceArgs,
                &mut multiarch_runtime::role_args::OpsArgs,
            ) {
                (&mut self.inspector, &mut self.ops)
            }
        }
    };
}

mod argv;
mod enoexec_daemon;
mod enoexec_handler;
mod gate_controller;
mod inspector;
mod inspector_client;
mod operator;
#[cfg(test)]
mod round_trip_tests;
mod scheduler;
mod webhook;

pub use self::{
    argv::{FlagsError, RoleFlags, defaults, parse_argv, parse_known_argv, to_argv},
    enoexec_daemon::EnoexecDaemonArgs,
    enoexec_handler::EnoexecHandlerArgs,
    gate_controller::GateControllerArgs,
    inspector::InspectorArgs,
    inspector_client::{InspectorCallerFlags, InspectorServiceArgs, InspectorTlsArgs},
    operator::OperatorArgs,
    scheduler::SchedulerArgs,
    webhook::WebhookArgs,
};
