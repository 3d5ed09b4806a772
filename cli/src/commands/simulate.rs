//! `multiarch simulate`.

use anyhow::Context;
use multiarch_scheduler::simulate::{self, default_cluster, scenario::Scenario};

use crate::args::{OutputFormat, SimulateArgs};

pub fn run(args: &SimulateArgs) -> anyhow::Result<()> {
    let scenario = match &args.scenario {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read scenario {}", path.display()))?;
            Scenario::from_yaml(&text).with_context(|| format!("scenario {}", path.display()))?
        }
        None => default_cluster::scenario(args.nodes, args.pods, args.seed)?,
    };
    let options = simulate::RunOptions {
        node_updates_per_minute: args.node_updates_per_minute,
        no_queueing_hints: args.no_queueing_hints,
    };
    let report = simulate::simulate_with(&scenario, args.seed, options)?;
    match args.output {
        OutputFormat::Text => print!("{}", report.text()),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(())
}
