//! `multiarch simulate`.

use anyhow::Context;
use multiarch_scheduler::simulate::{self, default_cluster, scenario::Scenario};

use crate::args::{OutputFormat, SimulateArgs};

pub fn run(args: &SimulateArgs) -> anyhow::Result<()> {
    let text = match &args.scenario {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read scenario {}", path.display()))?,
        ),
        None => None,
    };
    // Built once per run (the blind one too) rather than held through both.
    let scenario = || {
        let mut scenario = match &text {
            Some(text) => Scenario::from_yaml(text)?,
            None => default_cluster::scenario(args.nodes, args.pods, args.seed)?,
        };
        if let Some(percentage) = args.percentage_of_nodes_to_score {
            scenario.set_percentage_of_nodes_to_score(percentage);
        }
        Ok(scenario)
    };
    let options = simulate::RunOptions {
        node_updates_per_minute: args.node_updates_per_minute,
        no_queueing_hints: args.no_queueing_hints,
        quality_sample: args.quality_sample.unwrap_or(0),
        keep_placements: false,
    };
    let report =
        simulate::simulate_with(&scenario, args.seed, options).with_context(|| {
            match &args.scenario {
                Some(path) => format!("scenario {}", path.display()),
                None => "the default cluster".to_owned(),
            }
        })?;
    match args.output {
        OutputFormat::Text => print!("{}", report.text()),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(())
}
