//! Whether a caller reaches its image inspector, from its probes: reached as soon as a
//! probe is answered, unreachable once `threshold` probes in a row were not. One failed
//! probe is a blip, not an outage (the kubelet counts its readiness probes the same way).
//! No I/O.

use std::time::Duration;

/// What the probes say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InspectorReach {
    /// No probe answered yet; `why` the last one was not, if one was asked.
    Unproven {
        why: Option<String>,
    },
    Reachable,
    /// The last `threshold` probes were not answered; `why` the last one was not.
    Unreachable {
        why: String,
    },
}

impl InspectorReach {
    pub fn is_reachable(&self) -> bool {
        matches!(self, InspectorReach::Reachable)
    }
}

/// The probes' outcomes so far.
#[derive(Clone, Debug)]
pub struct Reachability {
    threshold: u32,
    failures_in_a_row: u32,
    reach: InspectorReach,
}

impl Reachability {
    /// `threshold` failed probes in a row make it unreachable (at least one).
    pub fn new(threshold: u32) -> Self {
        Reachability {
            threshold: threshold.max(1),
            failures_in_a_row: 0,
            reach: InspectorReach::Unproven { why: None },
        }
    }

    pub fn reach(&self) -> &InspectorReach {
        &self.reach
    }

    /// Takes one probe's outcome in.
    pub fn record(&mut self, probe: Result<(), String>) -> &InspectorReach {
        match probe {
            Ok(()) => {
                self.failures_in_a_row = 0;
                self.reach = InspectorReach::Reachable;
            }
            Err(why) => {
                self.failures_in_a_row = self.failures_in_a_row.saturating_add(1);
                if self.failures_in_a_row >= self.threshold {
                    self.reach = InspectorReach::Unreachable { why };
                } else if !self.reach.is_reachable() {
                    self.reach = InspectorReach::Unproven { why: Some(why) };
                }
            }
        }
        &self.reach
    }

    /// When to probe next: `steady` while every probe is answered, `quick` while one was
    /// not (so an outage is told, and its end seen, soon).
    pub fn next_probe_in(&self, steady: Duration, quick: Duration) -> Duration {
        if self.reach.is_reachable() && self.failures_in_a_row == 0 {
            steady
        } else {
            quick
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Probe = Result<(), String>;

    fn failed(why: &str) -> Probe {
        Err(why.to_owned())
    }

    #[test]
    fn probes_in_a_row_decide() {
        let unproven = |why: Option<&str>| InspectorReach::Unproven {
            why: why.map(str::to_owned),
        };
        let unreachable = |why: &str| InspectorReach::Unreachable { why: why.into() };
        let cases: [(&str, Vec<Probe>, InspectorReach); 7] = [
            ("nothing asked", vec![], unproven(None)),
            ("answered", vec![Ok(())], InspectorReach::Reachable),
            (
                "one failure from the start",
                vec![failed("a")],
                unproven(Some("a")),
            ),
            (
                "three failures from the start",
                vec![failed("a"), failed("b"), failed("c")],
                unreachable("c"),
            ),
            (
                "a blip after an answer",
                vec![Ok(()), failed("a"), failed("b")],
                InspectorReach::Reachable,
            ),
            (
                "an outage after an answer",
                vec![Ok(()), failed("a"), failed("b"), failed("c"), failed("d")],
                unreachable("d"),
            ),
            (
                "answered again",
                vec![failed("a"), failed("b"), failed("c"), Ok(())],
                InspectorReach::Reachable,
            ),
        ];
        for (name, probes, want) in cases {
            let mut reachability = Reachability::new(3);
            for probe in probes {
                reachability.record(probe);
            }
            assert_eq!(reachability.reach(), &want, "{name}");
        }
    }

    #[test]
    fn a_failure_counts_again_from_zero_after_an_answer() {
        let mut reachability = Reachability::new(2);
        reachability.record(failed("a"));
        reachability.record(Ok(()));
        assert!(reachability.record(failed("b")).is_reachable());
        assert_eq!(
            reachability.record(failed("c")),
            &InspectorReach::Unreachable { why: "c".into() }
        );
    }

    #[test]
    fn probes_come_quicker_while_one_fails() {
        let (steady, quick) = (Duration::from_secs(10), Duration::from_secs(2));
        let mut reachability = Reachability::new(3);
        assert_eq!(reachability.next_probe_in(steady, quick), quick);
        reachability.record(Ok(()));
        assert_eq!(reachability.next_probe_in(steady, quick), steady);
        reachability.record(failed("a"));
        assert_eq!(reachability.next_probe_in(steady, quick), quick);
        reachability.record(Ok(()));
        assert_eq!(reachability.next_probe_in(steady, quick), steady);
    }

    #[test]
    fn a_threshold_of_zero_is_one() {
        let mut reachability = Reachability::new(0);
        assert!(!reachability.record(failed("a")).is_reachable());
        assert_eq!(
            reachability.reach(),
            &InspectorReach::Unreachable { why: "a".into() }
        );
    }
}
