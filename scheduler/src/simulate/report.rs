//! What `multiarch simulate` prints, as text or JSON.

use std::{collections::BTreeMap, fmt::Write};

use serde::Serialize;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SimulationReport {
    pub seed: u64,
    pub nodes: usize,
    pub nodes_by_arch: BTreeMap<String, usize>,
    pub pods: usize,
    pub bound: usize,
    pub bound_by_arch: BTreeMap<String, usize>,
    pub unschedulable: Vec<UnschedulableGroup>,
    pub cycles: usize,
    pub elapsed_seconds: f64,
    pub pods_per_second: f64,
    pub cycle_p50_micros: f64,
    pub cycle_p99_micros: f64,
    /// Peak resident memory of the process (VmHWM), when the platform reports it.
    pub peak_memory_bytes: Option<u64>,
    /// Of the memory at the run's end, what was on transparent huge pages (Linux
    /// `AnonHugePages`), and the glibc tunables the process started with (`scheduler` and
    /// `simulate` ask for huge pages with them: docs/performance.md).
    pub huge_pages_bytes: Option<u64>,
    pub glibc_tunables: Option<String>,
    /// Scheduling attempts that evicted lower-priority pods, and the pods evicted.
    pub preemptions: usize,
    pub evicted: usize,
    /// Claims bound to pre-created volumes, and provisioned on the chosen node.
    pub volumes_bound: usize,
    pub volumes_provisioned: usize,
    /// Scheduling attempts (a pod may take several).
    pub attempts: usize,
    /// Node status updates sent while scheduling.
    pub node_updates: u64,
    /// Waiting pods a cluster change sent back to the queue, and pods it left waiting.
    pub requeued: u64,
    pub left_waiting: u64,
    pub queueing_hints: bool,
    /// Digest of every pod→node placement: equal digests, equal placements.
    pub placement_digest: String,
    /// With `--quality-sample`: the sampled cycles' choices against every feasible node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_quality: Option<PlacementQuality>,
    pub architecture_blind: Counterfactual,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementQuality {
    /// One cycle in `every` was audited: `sampled` placements, each among
    /// `mean_feasible` feasible nodes on average.
    pub every: u64,
    pub sampled: usize,
    pub mean_feasible: f64,
    /// Share of the sampled pods placed on a node no feasible node outscores.
    pub best_share: f64,
    /// The chosen node's total over the best total: median, and the worst 1 %.
    pub ratio_median: f64,
    pub ratio_p1: f64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnschedulableGroup {
    pub pods: usize,
    pub reason: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counterfactual {
    pub bound: usize,
    /// Pods the blind scheduler put on nodes their images cannot run on.
    pub incompatible: usize,
    /// Of those, on a node of their architecture below the level their images need.
    pub below_level: usize,
}

impl Counterfactual {
    /// The architecture-blind scheduler's line.
    fn text(&self) -> String {
        #[allow(clippy::cast_precision_loss)]
        let share = if self.bound > 0 {
            100.0 * self.incompatible as f64 / self.bound as f64
        } else {
            0.0
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\nArchitecture-blind scheduler on the same cluster: {} of its {} placements ({share:.1}%) \
             put a pod on a node its images cannot run on (exec format error or ImagePullBackOff{}).",
            self.incompatible,
            self.bound,
            match self.below_level {
                0 => String::new(),
                n => format!(
                    "; {n} of them on a node below the x86-64 level their images need: \
                     the loader's \"CPU ISA level is lower than required\""
                ),
            }
        );
        out
    }
}

impl PlacementQuality {
    pub fn of(audit: &crate::engine::placement_quality::QualityAudit) -> Self {
        let feasible: usize = audit.samples.iter().map(|s| s.feasible).sum();
        #[allow(clippy::cast_precision_loss)]
        let mean_feasible = if audit.samples.is_empty() {
            0.0
        } else {
            feasible as f64 / audit.samples.len() as f64
        };
        PlacementQuality {
            every: audit.interval(),
            sampled: audit.samples.len(),
            mean_feasible,
            best_share: audit.best_share(),
            ratio_median: audit.ratio_quantile(0.5),
            ratio_p1: audit.ratio_quantile(0.01),
        }
    }

    fn text(&self) -> String {
        format!(
            "Placement quality (1 cycle in {} also scored every feasible node, {} samples, \
             {:.0} feasible nodes on average): {:.1}% of the pods on a best-scoring node; \
             chosen total / best total: median {:.3}, worst 1% {:.3}",
            self.every,
            self.sampled,
            self.mean_feasible,
            100.0 * self.best_share,
            self.ratio_median,
            self.ratio_p1
        )
    }
}

impl SimulationReport {
    pub fn text(&self) -> String {
        let mut out = String::new();
        let mix: Vec<String> = self
            .nodes_by_arch
            .iter()
            .map(|(a, n)| format!("{n} {a}"))
            .collect();
        let _ = writeln!(
            out,
            "multiarch simulate: {} nodes ({}), {} pods, seed {}\n",
            self.nodes,
            mix.join(", "),
            self.pods,
            self.seed
        );
        let _ = writeln!(
            out,
            "Bound pods by node architecture ({} of {}):",
            self.bound, self.pods
        );
        for (arch, count) in &self.bound_by_arch {
            let _ = writeln!(out, "  {arch:<10} {count:>7}");
        }
        let pending: usize = self.unschedulable.iter().map(|g| g.pods).sum();
        let _ = writeln!(out, "\nUnschedulable pods ({pending}), by reason:");
        if self.unschedulable.is_empty() {
            let _ = writeln!(out, "  none");
        }
        for group in &self.unschedulable {
            let _ = writeln!(out, "  {:>6}  {}", group.pods, group.reason);
        }
        let _ = writeln!(
            out,
            "\nPreemption: {} pods made room by evicting {} lower-priority pods",
            self.preemptions, self.evicted
        );
        let _ = writeln!(
            out,
            "Volumes: {} claims bound to existing volumes, {} provisioned on the chosen node",
            self.volumes_bound, self.volumes_provisioned
        );
        let _ = writeln!(
            out,
            "Queue: {} waiting pods retried after a cluster change, {} left waiting by the queueing hints{}{}",
            self.requeued,
            self.left_waiting,
            if self.queueing_hints {
                ""
            } else {
                " (hints off)"
            },
            if self.node_updates > 0 {
                format!("; {} node status updates", self.node_updates)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            out,
            "\nThroughput: {:.0} pods/s ({} scheduling cycles in {:.3} s)",
            self.pods_per_second, self.cycles, self.elapsed_seconds
        );
        let _ = writeln!(
            out,
            "Cycle time: p50 {:.1} µs, p99 {:.1} µs",
            self.cycle_p50_micros, self.cycle_p99_micros
        );
        match self.peak_memory_bytes {
            #[allow(clippy::cast_precision_loss)]
            Some(bytes) => {
                let _ = writeln!(
                    out,
                    "Peak memory: {:.1} MB{}",
                    bytes as f64 / 1_000_000.0,
                    self.huge_pages_text()
                );
            }
            None => {
                let _ = writeln!(out, "Peak memory: not reported by this platform");
            }
        }
        let _ = writeln!(
            out,
            "Placement digest: {} (equal for runs that put every pod on the same node)",
            self.placement_digest
        );
        if let Some(quality) = &self.placement_quality {
            let _ = writeln!(out, "{}", quality.text());
        }
        out.push_str(&self.architecture_blind.text());
        out
    }

    /// "; on transparent huge pages at the end: 412.0 MB (GLIBC_TUNABLES=...)", what is
    /// known of it.
    fn huge_pages_text(&self) -> String {
        let mut text = String::new();
        if let Some(bytes) = self.huge_pages_bytes {
            #[allow(clippy::cast_precision_loss)]
            let mb = bytes as f64 / 1_000_000.0;
            let _ = write!(text, "; on transparent huge pages at the end: {mb:.1} MB");
        }
        if let Some(tunables) = &self.glibc_tunables {
            let _ = write!(text, " (GLIBC_TUNABLES={tunables})");
        }
        text
    }
}

/// The process's peak resident set (Linux `VmHWM`).
pub fn peak_memory_bytes() -> Option<u64> {
    proc_kib("/proc/self/status", "VmHWM:")
}

/// The process's memory on transparent huge pages now (Linux `AnonHugePages`).
pub fn huge_pages_bytes() -> Option<u64> {
    proc_kib("/proc/self/smaps_rollup", "AnonHugePages:")
}

/// The value of the `field` line of a `/proc` file that counts in kB, in bytes.
fn proc_kib(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
