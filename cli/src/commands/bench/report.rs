//! A run's numbers, as JSON and as a table, computed from when each pod was schedulable
//! and when the watch saw it bound (seconds since the run started).

use std::collections::BTreeMap;

use serde::Serialize;

use super::process_stats::ProcessStats;

/// One pod's times, in seconds since the run's start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PodTimes {
    /// When the scheduler could first see it: created, or the scheduler started.
    pub schedulable: f64,
    pub bound: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Throughput {
    pub pods: usize,
    pub bound: usize,
    /// Bound pods ÷ (last binding − start).
    pub pods_per_second: f64,
    /// (Bound pods − 1) ÷ (last binding − first binding).
    pub pods_per_second_first_to_last: f64,
    /// Schedulable → bound.
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Throughput {
    pub fn of(pods: &[PodTimes]) -> Self {
        let mut bound: Vec<f64> = pods.iter().filter_map(|p| p.bound).collect();
        bound.sort_by(f64::total_cmp);
        let mut latencies: Vec<f64> = pods
            .iter()
            .filter_map(|p| Some((p.bound? - p.schedulable).max(0.0)))
            .collect();
        latencies.sort_by(f64::total_cmp);
        let (first, last) = match (bound.first(), bound.last()) {
            (Some(f), Some(l)) => (*f, *l),
            _ => {
                return Throughput {
                    pods: pods.len(),
                    ..Throughput::default()
                };
            }
        };
        let rate = |n: f64, span: f64| if span > 0.0 { n / span } else { 0.0 };
        Throughput {
            pods: pods.len(),
            bound: bound.len(),
            pods_per_second: rate(bound.len() as f64, last),
            pods_per_second_first_to_last: rate(bound.len().saturating_sub(1) as f64, last - first),
            latency_p50_ms: percentile(&latencies, 0.50) * 1e3,
            latency_p99_ms: percentile(&latencies, 0.99) * 1e3,
        }
    }
}

/// One placer's run: the scheduler's, or the bind-only baseline's.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacerRun {
    /// `scheduler` or `bind-only`.
    pub placer: String,
    #[serde(flatten)]
    pub throughput: Throughput,
    /// Pods bound to a node whose architecture their images lack.
    pub incompatible: usize,
    /// Pods created live: the rate reached between the first creation and the last (the
    /// API server may hold creation under the rate asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_per_second: Option<f64>,
    /// API requests per pod by `VERB resource`, from the API server's
    /// `apiserver_request_total` (the benchmark's own taken out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_per_pod: Option<BTreeMap<String, f64>>,
    /// Why `requestsPerPod` is missing (say `/metrics` is forbidden).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_unavailable: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessStats>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchReport {
    pub nodes: usize,
    pub pods: usize,
    /// Pods created live at this rate (pods/s), or pre-created (none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub create_rate: Option<f64>,
    pub runs: Vec<PlacerRun>,
    /// Scheduler pods/s ÷ bind-only pods/s, when both ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_bind_only: Option<f64>,
}

impl BenchReport {
    pub fn new(nodes: usize, pods: usize, create_rate: Option<f64>, runs: Vec<PlacerRun>) -> Self {
        let rate = |placer: &str| {
            runs.iter()
                .find(|r| r.placer == placer)
                .map(|r| r.throughput.pods_per_second)
        };
        let ratio_to_bind_only = match (rate("scheduler"), rate("bind-only")) {
            (Some(s), Some(b)) if b > 0.0 => Some(s / b),
            _ => None,
        };
        BenchReport {
            nodes,
            pods,
            create_rate,
            runs,
            ratio_to_bind_only,
        }
    }

    pub fn table(&self) -> String {
        let mut out = format!("{} nodes, {} pods", self.nodes, self.pods);
        match self.create_rate {
            Some(rate) if rate > 0.0 => {
                out.push_str(&format!(", created live at {rate} pods/s\n\n"));
            }
            Some(_) => out.push_str(", created live as fast as the client may\n\n"),
            None => out.push_str(", pre-created\n\n"),
        }
        out.push_str(&format!(
            "{:<10} {:>7} {:>10} {:>14} {:>9} {:>9} {:>12} {:>9} {:>8}\n",
            "PLACER",
            "BOUND",
            "PODS/S",
            "FIRST→LAST/S",
            "P50 MS",
            "P99 MS",
            "INCOMPATIBLE",
            "RSS MB",
            "CPU S"
        ));
        for run in &self.runs {
            let t = &run.throughput;
            let (rss, cpu) = match run.process {
                Some(p) => (
                    format!("{:.0}", p.peak_rss_bytes as f64 / 1e6),
                    format!("{:.1}", p.cpu_seconds),
                ),
                None => ("-".into(), "-".into()),
            };
            out.push_str(&format!(
                "{:<10} {:>7} {:>10.0} {:>14.0} {:>9.1} {:>9.1} {:>12} {:>9} {:>8}\n",
                run.placer,
                format!("{}/{}", t.bound, t.pods),
                t.pods_per_second,
                t.pods_per_second_first_to_last,
                t.latency_p50_ms,
                t.latency_p99_ms,
                run.incompatible,
                rss,
                cpu
            ));
        }
        for run in &self.runs {
            if let Some(rate) = run.created_per_second {
                out.push_str(&format!("\n{} pods created at {rate:.0}/s", run.placer));
            }
        }
        for run in &self.runs {
            match (&run.requests_per_pod, &run.requests_unavailable) {
                (Some(requests), _) => {
                    // Start-up lists and watches, a few per run, would be a long list of 0.00.
                    let (per_pod, startup): (Vec<_>, Vec<_>) =
                        requests.iter().partition(|(_, v)| **v >= 0.01);
                    let mut list: Vec<String> =
                        per_pod.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
                    if !startup.is_empty() {
                        let total: f64 = startup.iter().map(|(_, v)| **v).sum();
                        list.push(format!(
                            "{} other kinds of request {total:.3} (start-up lists and watches)",
                            startup.len()
                        ));
                    }
                    out.push_str(&format!(
                        "\n{} API requests per pod: {}",
                        run.placer,
                        list.join(", ")
                    ));
                }
                (None, Some(why)) => {
                    out.push_str(&format!(
                        "\n{} API requests per pod: unavailable ({why})",
                        run.placer
                    ));
                }
                (None, None) => {}
            }
        }
        out.push('\n');
        if let Some(ratio) = self.ratio_to_bind_only {
            out.push_str(&format!("ratio to bind-only = {ratio:.2}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(pairs: &[(f64, Option<f64>)]) -> Vec<PodTimes> {
        pairs
            .iter()
            .map(|(s, b)| PodTimes {
                schedulable: *s,
                bound: *b,
            })
            .collect()
    }

    #[test]
    fn throughput_from_start_and_first_to_last() {
        let t = Throughput::of(&times(&[
            (0.0, Some(1.0)),
            (0.0, Some(2.0)),
            (0.0, Some(3.0)),
            (0.0, Some(5.0)),
            (0.0, None),
        ]));
        assert_eq!(t.pods, 5);
        assert_eq!(t.bound, 4);
        assert!((t.pods_per_second - 0.8).abs() < 1e-9);
        assert!((t.pods_per_second_first_to_last - 0.75).abs() < 1e-9);
        assert!((t.latency_p50_ms - 2000.0).abs() < 1e-9);
        assert!((t.latency_p99_ms - 5000.0).abs() < 1e-9);
        assert_eq!(Throughput::of(&times(&[(0.0, None)])).bound, 0);
    }

    #[test]
    fn the_ratio_is_scheduler_over_bind_only() {
        let run = |placer: &str, end: f64| PlacerRun {
            placer: placer.into(),
            throughput: Throughput::of(&times(&[(0.0, Some(end / 2.0)), (0.0, Some(end))])),
            incompatible: 0,
            created_per_second: (placer == "scheduler").then_some(498.6),
            requests_per_pod: Some(BTreeMap::from([
                ("POST pods/binding".into(), 1.0),
                ("LIST pods".into(), 0.002),
                ("WATCH pods".into(), 0.002),
            ])),
            requests_unavailable: None,
            process: None,
        };
        let report = BenchReport::new(
            10,
            2,
            None,
            vec![run("scheduler", 2.0), run("bind-only", 1.0)],
        );
        assert_eq!(report.ratio_to_bind_only, Some(0.5));
        let table = report.table();
        assert!(table.contains("ratio to bind-only = 0.50"), "{table}");
        assert!(table.contains("scheduler pods created at 499/s"), "{table}");
        assert!(!table.contains("bind-only pods created"), "{table}");
        assert!(
            table.contains("scheduler API requests per pod: POST pods/binding 1.00, 2 other kinds of request 0.004 (start-up lists and watches)"),
            "{table}"
        );
    }
}
