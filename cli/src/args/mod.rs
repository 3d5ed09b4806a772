//! Command-line interface: the command tree here, the local commands' flags (simulate,
//! bench, inspect, audit, generators) in `local`, each cluster role's in
//! `multiarch_flags`, where the operator writes them from.

#[cfg(all(
    test,
    feature = "scheduler",
    feature = "admission",
    feature = "inspector",
    feature = "enoexec-daemon",
    feature = "enoexec-handler",
    feature = "operator",
    feature = "audit"
))]
mod generated_workloads;
mod local;

use clap::{Parser, Subcommand};

pub use self::local::*;
// A build with only some roles reads only their flags.
#[cfg(feature = "cluster-role")]
use multiarch_flags::*;

/// Architecture-aware scheduling for Kubernetes clusters with mixed CPU architectures.
#[derive(Debug, Parser)]
#[command(name = "multiarch", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once, at start: a role's flags outweighing `crds`'s costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the real scheduler on an in-memory mixed-architecture cluster and report
    /// placements, reasons, throughput and what an architecture-blind scheduler would do.
    #[cfg(feature = "scheduler")]
    Simulate(SimulateArgs),
    /// Run the secondary scheduler in a cluster (pods with schedulerName multiarch-scheduler).
    #[cfg(feature = "scheduler")]
    Scheduler(SchedulerArgs),
    /// Gate mode: set the architecture affinity of gated pods and remove the gate.
    #[cfg(feature = "admission")]
    GateController(GateControllerArgs),
    /// On a node: report containers that fail with `exec format error` as ENoExecEvents
    /// (eBPF on the exec tracepoints; needs root or CAP_BPF + CAP_PERFMON, and hostPID).
    #[cfg(feature = "enoexec-daemon")]
    EnoexecDaemon(EnoexecDaemonArgs),
    /// Turn ENoExecEvents into ExecFormatError events and a label on the pods.
    #[cfg(feature = "enoexec-handler")]
    EnoexecHandler(EnoexecHandlerArgs),
    /// Serve the mutating admission webhook that routes (or gates) new pods.
    #[cfg(feature = "admission")]
    Webhook(WebhookArgs),
    /// Print the platforms (os/architecture/variant) an image has builds for.
    #[cfg(feature = "inspector")]
    Inspect(InspectArgs),
    /// Which workloads of a set of manifests can run on which architectures, and what
    /// routing would do with them.
    #[cfg(feature = "audit")]
    Audit(AuditArgs),
    /// Measure a scheduler end to end against an API server (KUBECONFIG): fake nodes,
    /// pods, bindings observed; optionally against the bind-only baseline.
    #[cfg(feature = "scheduler")]
    Bench(BenchArgs),
    /// Serve image inspection over gRPC (reads pull secrets from the cluster).
    #[cfg(feature = "inspector")]
    Inspector(InspectorArgs),
    /// Install, route, upgrade and uninstall every role from the ClusterPodPlacementConfig
    /// named `cluster`, and serve the CRD conversion and validation webhooks.
    #[cfg(feature = "operator")]
    Operator(OperatorArgs),
    /// Write the generated install manifests under DIR (the operator's, and each role's
    /// for installs without it).
    #[cfg(feature = "operator")]
    Manifests(ManifestsArgs),
    /// Print new certificates for an install without the operator (the webhook's, the
    /// image inspector's and its callers', from one new CA) as Secrets to apply.
    #[cfg(feature = "operator")]
    Certificates(CertificatesArgs),
    /// Print the CustomResourceDefinitions generated from the API types.
    Crds(CrdsArgs),
}

impl Command {
    /// Whether the command schedules, reading a few cache lines of each of many nodes a
    /// cycle: its heap goes on huge pages (see `huge_pages`).
    pub fn walks_many_nodes(&self) -> bool {
        match self {
            #[cfg(feature = "scheduler")]
            Command::Simulate(_) | Command::Scheduler(_) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
