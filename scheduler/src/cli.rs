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
    /// Print the CustomResourceDefinitions generated from the API types.
    Crds(CrdsArgs),
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
