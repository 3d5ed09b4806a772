//! Walks over the candidate nodes from where the last cycle stopped, until enough fit:
//! node by node, or in parallel chunks for large targets.

use std::sync::atomic::{AtomicUsize, Ordering};

use multiarch_plugins::framework::Status;

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
    let mut feasible = Vec::with_capacity(target.min(n));
    let mut failures = Vec::new();
    let mut evaluated = 0;
    // The walk wraps around once: a subtraction, not a division per node.
    let start = start % n.max(1);
    for offset in 0..n {
        let at = start + offset;
        let i = candidates.get(if at >= n { at - n } else { at });
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
    // The sequential walk stops at its first feasible node when asked for none.
    let target = target.max(1);
    let n = candidates.len();
    let chunks = n.div_ceil(FILTER_CHUNK);
    let next = AtomicUsize::new(0);
    let found = AtomicUsize::new(0);
    // Chunks are claimed in walk order and each is walked whole, so the chunks walked are
    // always a prefix of the walk: cutting it at the target-th feasible node gives what
    // the sequential walk gives.
    let work = || {
        let mut walked: Vec<(usize, ChunkWalk)> = Vec::new();
        while found.load(Ordering::Relaxed) < target {
            let chunk = next.fetch_add(1, Ordering::Relaxed);
            if chunk >= chunks {
                break;
            }
            let mut result = ChunkWalk::default();
            for offset in chunk * FILTER_CHUNK..((chunk + 1) * FILTER_CHUNK).min(n) {
                match check(candidates.get((start + offset) % n)) {
                    None => result.feasible.push(offset),
                    Some(status) => result.failures.push((offset, status)),
                }
            }
            found.fetch_add(result.feasible.len(), Ordering::Relaxed);
            walked.push((chunk, result));
        }
        walked
    };
    let (mut walked, other) = rayon::join(work, work);
    walked.extend(other);
    walked.sort_unstable_by_key(|(chunk, _)| *chunk);

    let node = |offset: usize| candidates.get((start + offset) % n);
    let mut feasible = Vec::with_capacity(target);
    let mut failures = Vec::new();
    let mut evaluated = 0;
    for (chunk, result) in walked {
        let end = match result.feasible.get(target - feasible.len() - 1) {
            Some(&last) => last + 1,
            None => ((chunk + 1) * FILTER_CHUNK).min(n),
        };
        feasible.extend(result.feasible.into_iter().filter(|&o| o < end).map(node));
        failures.extend(
            result
                .failures
                .into_iter()
                .filter(|(o, _)| *o < end)
                .map(|(o, status)| (node(o), status)),
        );
        evaluated = end;
        if feasible.len() >= target {
            break;
        }
    }
    (feasible, failures, evaluated)
}

/// One chunk's nodes by their offset in the walk.
#[derive(Default)]
struct ChunkWalk {
    feasible: Vec<usize>,
    failures: Vec<(usize, Status)>,
}
