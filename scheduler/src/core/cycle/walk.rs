//! Walks over the candidate nodes from where the last cycle stopped, until enough fit:
//! node by node, or in parallel chunks for large targets.

use std::sync::atomic::{AtomicUsize, Ordering};

use multiarch_plugins::framework::Status;
use rayon::prelude::*;

const FILTER_CHUNK: usize = 128;

pub(super) type Check<'a> = dyn Fn(usize) -> Option<Status> + Sync + 'a;

/// What a walk found: the feasible nodes, the failures with their status, and how many
/// nodes it evaluated.
pub(super) type Walked = (Vec<usize>, Vec<(usize, Status)>, usize);

/// The nodes a cycle filters: all of them, or those PreFilter narrowed it to.
#[derive(Clone, Copy)]
pub(super) enum Candidates<'a> {
    All(usize),
    Some(&'a [usize]),
}

impl Candidates<'_> {
    pub fn len(self) -> usize {
        match self {
            Candidates::All(n) => n,
            Candidates::Some(list) => list.len(),
        }
    }

    pub fn get(self, i: usize) -> usize {
        match self {
            Candidates::All(_) => i,
            Candidates::Some(list) => list[i],
        }
    }
}

pub(super) fn filter_sequential(
    candidates: Candidates<'_>,
    start: usize,
    target: usize,
    check: &Check<'_>,
) -> Walked {
    let n = candidates.len();
    let mut feasible = Vec::new();
    let mut failures = Vec::new();
    let mut evaluated = 0;
    for offset in 0..n {
        let i = candidates.get((start + offset) % n);
        evaluated += 1;
        match check(i) {
            None => {
                feasible.push(i);
                if feasible.len() >= target {
                    break;
                }
            }
            Some(status) => failures.push((i, status)),
        }
    }
    (feasible, failures, evaluated)
}

pub(super) fn filter_parallel(
    candidates: Candidates<'_>,
    start: usize,
    target: usize,
    check: &Check<'_>,
) -> Walked {
    let n = candidates.len();
    let found = AtomicUsize::new(0);
    let chunks: Vec<Walked> = (0..n.div_ceil(FILTER_CHUNK))
        .into_par_iter()
        .map(|chunk| {
            let mut feasible = Vec::new();
            let mut failures = Vec::new();
            let mut evaluated = 0;
            for offset in chunk * FILTER_CHUNK..((chunk + 1) * FILTER_CHUNK).min(n) {
                if found.load(Ordering::Relaxed) >= target {
                    break;
                }
                let i = candidates.get((start + offset) % n);
                evaluated += 1;
                match check(i) {
                    None => {
                        feasible.push(i);
                        found.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(status) => failures.push((i, status)),
                }
            }
            (feasible, failures, evaluated)
        })
        .collect();
    let mut feasible = Vec::with_capacity(target);
    let mut failures = Vec::new();
    let mut evaluated = 0;
    for (f, fail, e) in chunks {
        feasible.extend(f);
        failures.extend(fail);
        evaluated += e;
    }
    feasible.truncate(target);
    (feasible, failures, evaluated)
}
