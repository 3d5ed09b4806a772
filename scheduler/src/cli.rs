//! Command-line interface.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Architecture-aware scheduling for Kubernetes clusters with mixed CPU architectures.
#[derive(Debug, Parser)]
#[command(name = "multiarch", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the real scheduler on an in-memory mixed-architecture cluster and report
    /// placements, reasons, throughput and what an architecture-blind scheduler would do.
    Simulate(SimulateArgs),
    /// Print the CustomResourceDefinitions generated from the API types.
    Crds(CrdsArgs),
}

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Nodes of the embedded default cluster (60% amd64, 30% arm64, 5% ppc64le, 5% s390x).
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,

    /// Pods drawn from the embedded workload catalog.
    #[arg(long, default_value_t = 10_000)]
    pub pods: usize,

    /// A scenario file (YAML: images, nodes, pods, ClusterPodPlacementConfig spec,
    /// PodPlacementConfigs) instead of the embedded default.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,

    /// Seed of the generated cluster and of tie-breaking.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,

    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// Write one file per CRD into this directory (as checked in under manifests/crds)
    /// instead of printing them.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
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
