//! How much a cycle that scores only a share of the nodes (`percentageOfNodesToScore`,
//! the rotating start) gives up: for one cycle in `every`, every feasible node is scored
//! as well, and the node the cycle chose is compared with the best of them.

use std::time::{Duration, Instant};

use multiarch_plugins::{framework::CycleContext, profile::Profile};

use super::cycle::every_feasible_score;
use super::quantile::quantile;

/// One audited placement: the chosen node's total and the best total among every
/// feasible node, both as a cycle scoring all of them weighs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QualitySample {
    pub chosen: i64,
    pub best: i64,
    /// The feasible nodes the totals were read from.
    pub feasible: usize,
}

impl QualitySample {
    /// From every feasible node's total (as `cycle::every_feasible_score` gives them) and
    /// the chosen node; `None` when the chosen node is not among them (it always is: both
    /// read the same state).
    pub fn of(scores: &[(usize, i64)], chosen_node: usize) -> Option<Self> {
        let chosen = scores
            .iter()
            .find(|(node, _)| *node == chosen_node)
            .map(|(_, total)| *total)?;
        let best = scores.iter().map(|(_, total)| *total).max()?;
        Some(QualitySample {
            chosen,
            best,
            feasible: scores.len(),
        })
    }

    pub fn is_best(&self) -> bool {
        self.chosen == self.best
    }

    /// The chosen node's total as a share of the best (1.0 when it is a best node).
    pub fn ratio(&self) -> f64 {
        if self.best <= 0 {
            return 1.0;
        }
        #[allow(clippy::cast_precision_loss)]
        let ratio = self.chosen as f64 / self.best as f64;
        ratio
    }
}

/// Which cycles are audited, what they found and what the audits cost (time the caller
/// takes out of its throughput).
#[derive(Clone, Debug)]
pub struct QualityAudit {
    every: u64,
    cycles: u64,
    pub samples: Vec<QualitySample>,
    pub time: Duration,
}

impl QualityAudit {
    /// Audits one cycle in `every` (at least 1: every cycle).
    pub fn every(every: u64) -> Self {
        QualityAudit {
            every: every.max(1),
            cycles: 0,
            samples: Vec::new(),
            time: Duration::ZERO,
        }
    }

    /// One cycle in this many is audited.
    pub fn interval(&self) -> u64 {
        self.every
    }

    /// Counts a cycle; whether this one is audited.
    pub fn next_is_sampled(&mut self) -> bool {
        self.cycles += 1;
        self.cycles.is_multiple_of(self.every)
    }

    /// Every feasible node's total for the cycle about to run on `ctx` (its time is
    /// counted in [`QualityAudit::time`]).
    pub fn score_every_node(
        &mut self,
        profile: &Profile,
        ctx: &CycleContext<'_>,
    ) -> Option<Vec<(usize, i64)>> {
        let began = Instant::now();
        let scores = every_feasible_score(profile, ctx);
        self.time += began.elapsed();
        scores
    }

    /// What the cycle chose, against `scores`.
    pub fn record(&mut self, scores: &[(usize, i64)], chosen_node: usize) {
        if let Some(sample) = QualitySample::of(scores, chosen_node) {
            self.samples.push(sample);
        }
    }

    /// Placements on a best-scoring node, as a share of the samples.
    pub fn best_share(&self) -> f64 {
        share(
            self.samples.iter().filter(|s| s.is_best()).count(),
            self.samples.len(),
        )
    }

    /// The chosen total over the best, at quantile `q` of the samples (0.5: median;
    /// 0.01: the worst 1 %).
    pub fn ratio_quantile(&self, q: f64) -> f64 {
        let mut ratios: Vec<f64> = self.samples.iter().map(QualitySample::ratio).collect();
        ratios.sort_by(f64::total_cmp);
        quantile(&ratios, q).unwrap_or(1.0)
    }
}

fn share(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        return 1.0;
    }
    #[allow(clippy::cast_precision_loss)]
    let share = part as f64 / whole as f64;
    share
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_compares_the_chosen_node_with_every_feasible_one() {
        let scores = [(3, 180), (7, 250), (9, 250), (12, 90)];
        let chosen = QualitySample::of(&scores, 3).unwrap();
        assert_eq!(
            chosen,
            QualitySample {
                chosen: 180,
                best: 250,
                feasible: 4
            }
        );
        assert!(!chosen.is_best());
        assert!((chosen.ratio() - 0.72).abs() < 1e-9);
        let best = QualitySample::of(&scores, 9).unwrap();
        assert!(best.is_best());
        assert_eq!(QualitySample::of(&scores, 4), None, "not a feasible node");
        assert_eq!(QualitySample::of(&[], 4), None);
        // All totals zero: every node is as good as the best.
        assert!((QualitySample::of(&[(1, 0), (2, 0)], 2).unwrap().ratio() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn one_cycle_in_every_n_is_sampled_and_the_quantiles_read_the_samples() {
        let mut audit = QualityAudit::every(3);
        let sampled: Vec<bool> = (0..7).map(|_| audit.next_is_sampled()).collect();
        assert_eq!(sampled, [false, false, true, false, false, true, false]);
        assert!(
            (audit.best_share() - 1.0).abs() < 1e-9,
            "no samples: nothing lost"
        );
        for (chosen, best) in [(100, 100), (50, 100), (90, 100), (100, 100)] {
            audit.samples.push(QualitySample {
                chosen,
                best,
                feasible: 10,
            });
        }
        assert!((audit.best_share() - 0.5).abs() < 1e-9);
        assert!((audit.ratio_quantile(0.0) - 0.5).abs() < 1e-9);
        assert!((audit.ratio_quantile(1.0) - 1.0).abs() < 1e-9);
        assert!((audit.ratio_quantile(0.5) - 1.0).abs() < 1e-9);
        let mut every = QualityAudit::every(0);
        assert!(every.next_is_sampled() && every.next_is_sampled());
    }
}
