//! Why an uninstall waits, in words: what the decision waits for, and what this pass's
//! releases left.

use std::time::Duration;

use crate::{
    decide::{Release, Wait},
    status::Inputs,
};

fn released_in(left: Duration) -> String {
    format!("released by the operator in {} s", left.as_secs())
}

/// `waits` in words, as one sentence.
pub fn why_uninstall_waits(waits: &[Wait], pass: &Inputs<'_>) -> String {
    let words: Vec<String> = waits.iter().flat_map(|w| wait_words(w, pass)).collect();
    format!("waiting for {}", words.join("; "))
}

fn wait_words(wait: &Wait, pass: &Inputs<'_>) -> Vec<String> {
    match wait {
        Wait::PodPlacementConfigs(configs) => vec![format!(
            "the PodPlacementConfigs to be deleted first: {} (pods stay routed meanwhile)",
            configs.join(", ")
        )],
        Wait::Settle { left } => vec![format!(
            "admission reviews already under way to finish ({} s) before the last look for pods still gated or routed",
            left.as_secs()
        )],
        Wait::Journal(n) => vec![format!(
            "{n} journaled pods to be created again (their copies are kept in ConfigMaps until then)"
        )],
        Wait::Gated { pods, left } => vec![format!(
            "{pods} gated pods to be processed by the gate controller ({})",
            released_in(*left)
        )],
        Wait::Pending {
            pods,
            scheduler,
            left,
        } => vec![format!(
            "{pods} pending pods to be placed by {scheduler} ({})",
            released_in(*left)
        )],
        Wait::Released { how, pods } => released_words(*how, *pods, pass),
        Wait::Reports { count, left } => vec![format!(
            "{count} exec-format-error reports to be handled ({})",
            released_in(*left)
        )],
        Wait::Daemon => {
            vec!["the exec-format-error daemon to stop (no new reports meanwhile)".into()]
        }
    }
}

/// What a release of `pods` left: refused, failed, or a last look to come.
fn released_words(how: Release, pods: usize, pass: &Inputs<'_>) -> Vec<String> {
    let mut words = Vec::new();
    match how {
        Release::Ungate => {
            let left = pass.ungated_left.total();
            if left > 0 {
                words.push(format!("{left} gated pods to be ungated"));
            }
        }
        Release::Recreate => {
            let left = pass.recreated_left;
            if left.refused > 0 {
                words.push(format!(
                    "{} pending pods the API server refuses to create again (see their events: delete them, or allow their creation)",
                    left.refused
                ));
            }
            if left.failed > 0 {
                words.push(format!("{} pending pods to be recreated", left.failed));
            }
        }
    }
    if words.is_empty() {
        let what = match how {
            Release::Ungate => "gated pods ungated",
            Release::Recreate => "pending pods recreated for the default scheduler",
        };
        words.push(format!("a last look after {pods} {what}"));
    }
    words
}
