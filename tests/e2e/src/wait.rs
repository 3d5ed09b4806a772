//! Waiting for the cluster to reach a state: a condition polled until it holds or its
//! deadline passes. Deadlines are generous (a busy 2-core machine runs the whole cluster);
//! a case never asserts on how fast something happened, only that it happens.

use std::time::{Duration, Instant};

use anyhow::bail;

/// How often a condition is checked.
const POLL: Duration = Duration::from_millis(500);

/// What a check saw: done with a value, or not yet and why (the last "why" is the error
/// when the deadline passes).
pub enum Check<T> {
    Done(T),
    NotYet(String),
}

/// Polls `check` until it is done; an error from `check` is a reason to keep waiting
/// (the API server may be restarting its watch), reported if it is the last one.
pub fn until<T>(
    what: &str,
    deadline: Duration,
    mut check: impl FnMut() -> anyhow::Result<Check<T>>,
) -> anyhow::Result<T> {
    let started = Instant::now();
    loop {
        let why = match check() {
            Ok(Check::Done(value)) => return Ok(value),
            Ok(Check::NotYet(why)) => why,
            Err(e) => format!("{e:#}"),
        };
        if started.elapsed() > deadline {
            bail!("{what}: not after {deadline:?}: {why}");
        }
        std::thread::sleep(POLL);
    }
}

/// [`until`] for a yes/no condition.
pub fn until_true(
    what: &str,
    deadline: Duration,
    mut check: impl FnMut() -> anyhow::Result<(bool, String)>,
) -> anyhow::Result<()> {
    until(what, deadline, || {
        let (done, why) = check()?;
        Ok(if done {
            Check::Done(())
        } else {
            Check::NotYet(why)
        })
    })
}
