//! `multiarch simulate`.

use anyhow::Context;
use multiarch_scheduler::simulate::{self, default_cluster, scenario::Scenario};

use crate::args::{OutputFormat, SimulateArgs};

pub fn run(args: &SimulateArgs) -> anyhow::Result<()> {
    let mut scenario = match &args.scenario {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read scenario {}", path.display()))?;
            Scenario::from_yaml(&text).with_context(|| format!("scenario {}", path.display()))?
        }
        None => default_cluster::scenario(args.nodes, args.pods, args.seed)?,
    };
    if let Some(percentage) = args.percentage_of_nodes_to_score {
        scenario.set_percentage_of_nodes_to_score(percentage);
    }
    let options = simulate::RunOptions {
        node_updates_per_minute: args.node_updates_per_minute,
        no_queueing_hints: args.no_queueing_hints,
        quality_sample: args.quality_sample.unwrap_or(0),
    };
    let report = simulate::simulate_with(&scenario, args.seed, options)?;
    match args.output {
        OutputFormat::Text => print!("{}", report.text()),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(())
}
