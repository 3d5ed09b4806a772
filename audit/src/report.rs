//! The audit report: every workload's audit, the summary (per verdict, per architecture,
//! the images that block each architecture, ranked), and its renderings. The JSON/YAML
//! schema is versioned by `apiVersion`; fields are only ever added within a version.

use std::collections::BTreeMap;

use serde::Serialize;

use multiarch_crd::{ClusterPodPlacementConfig, UnknownNodeLevel};

pub use crate::summary::{ArchitectureSummary, BlockingImage};
use crate::{
    suggestion::suggest,
    table::four_columns,
    verdict::{Verdict, WorkloadAudit},
};

pub const REPORT_API_VERSION: &str = "multiarch.openshift.io/audit/v1";

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerdictCounts {
    pub runs_on_all: usize,
    pub restricted: usize,
    pub blocked: usize,
    pub unknown: usize,
    /// Workloads whose own architecture pin allows none of their images' builds.
    pub pin_contradicts_images: usize,
    /// Live cluster: workloads with pods running now on nodes their images cannot run on.
    pub misplaced_now: usize,
    /// Workloads whose architectures a `celArchitecturePlacement` rule decides.
    pub decided_by_rules: usize,
    /// Of those, the ones the rule sends where their images have no build.
    pub rules_override_images: usize,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditReport {
    pub api_version: &'static str,
    pub targets: Vec<String>,
    /// Live cluster: its nodes per `kubernetes.io/arch`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_nodes: Option<BTreeMap<String, usize>>,
    /// Live cluster: what an amd64 node that does not say its x86-64 level was read to
    /// run when judging the pods running now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_node_level: Option<UnknownNodeLevel>,
    pub workloads: Vec<WorkloadAudit>,
    pub verdicts: VerdictCounts,
    pub architectures: Vec<ArchitectureSummary>,
    /// Objects in the input that are not workloads, by kind.
    pub ignored: BTreeMap<String, usize>,
    /// A configuration that prefers the architectures most workloads run on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggested_cluster_pod_placement_config: Option<ClusterPodPlacementConfig>,
    /// `--binaries`: the builds not counted because their program is of another
    /// architecture than their index entry says, one sentence each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mislabelled_builds: Vec<String>,
}

impl AuditReport {
    pub fn new(
        targets: Vec<String>,
        workloads: Vec<WorkloadAudit>,
        ignored: BTreeMap<String, usize>,
    ) -> Self {
        let mut verdicts = VerdictCounts::default();
        for w in &workloads {
            match w.verdict {
                Verdict::RunsOnAll => verdicts.runs_on_all += 1,
                Verdict::Restricted { .. } => verdicts.restricted += 1,
                Verdict::Blocked { .. } => verdicts.blocked += 1,
                Verdict::Unknown { .. } => verdicts.unknown += 1,
            }
            verdicts.pin_contradicts_images += usize::from(w.pin_contradicts_images);
            verdicts.misplaced_now += usize::from(!w.misplaced_pods.is_empty());
            if let Some(rule) = &w.architecture_rule {
                verdicts.decided_by_rules += 1;
                verdicts.rules_override_images += usize::from(rule.overrides_images);
            }
        }
        let architectures: Vec<ArchitectureSummary> = targets
            .iter()
            .map(|arch| {
                let mut blocking: BTreeMap<&str, usize> = BTreeMap::new();
                for w in workloads
                    .iter()
                    .filter(|w| w.images.iter().all(|i| i.error.is_none()))
                {
                    for image in w
                        .images
                        .iter()
                        .filter(|i| !i.platforms.iter().any(|p| runs(p, arch)))
                    {
                        *blocking.entry(image.image.as_str()).or_default() += 1;
                    }
                }
                let mut blocked_by: Vec<BlockingImage> = blocking
                    .into_iter()
                    .map(|(image, workloads)| BlockingImage {
                        image: image.to_owned(),
                        workloads,
                    })
                    .collect();
                blocked_by
                    .sort_by(|a, b| b.workloads.cmp(&a.workloads).then(a.image.cmp(&b.image)));
                ArchitectureSummary {
                    architecture: arch.clone(),
                    workloads: workloads
                        .iter()
                        .filter(|w| w.architectures.contains(arch))
                        .count(),
                    blocked_by,
                }
            })
            .collect();
        let suggested_cluster_pod_placement_config =
            suggest(&architectures, workloads.len(), verdicts.unknown);
        AuditReport {
            api_version: REPORT_API_VERSION,
            targets,
            cluster_nodes: None,
            unknown_node_level: None,
            workloads,
            verdicts,
            architectures,
            ignored,
            suggested_cluster_pod_placement_config,
            mislabelled_builds: Vec::new(),
        }
    }

    /// The report naming these mislabelled builds (`--binaries`).
    #[must_use]
    pub fn with_mislabelled_builds(mut self, builds: Vec<String>) -> Self {
        self.mislabelled_builds = builds;
        self
    }

    /// The report of a live cluster with these nodes per architecture.
    #[must_use]
    pub fn with_cluster_nodes(mut self, nodes: BTreeMap<String, usize>) -> Self {
        self.cluster_nodes = Some(nodes);
        self
    }

    /// The report of a live cluster whose silent amd64 nodes were read as `unknown` says.
    #[must_use]
    pub fn with_unknown_node_level(mut self, unknown: UnknownNodeLevel) -> Self {
        self.unknown_node_level = Some(unknown);
        self
    }

    /// The workloads that cannot run on `arch` (unknown ones included: not proven).
    pub fn cannot_run_on(&self, arch: &str) -> Vec<String> {
        self.workloads
            .iter()
            .filter(|w| !w.architectures.iter().any(|a| a == arch))
            .map(WorkloadAudit::id)
            .collect()
    }

    fn note(w: &WorkloadAudit) -> String {
        let mut note = match &w.verdict {
            Verdict::RunsOnAll => String::new(),
            Verdict::Restricted { cannot } => format!("cannot run on {}", cannot.join(", ")),
            Verdict::Blocked { reason } | Verdict::Unknown { reason } => reason.clone(),
        };
        if let Some(rule) = &w.architecture_rule {
            let decided = format!(
                "architectures {} decided by {}{}",
                rule.architectures.join(", "),
                rule.decided_by,
                if rule.overrides_images {
                    " (OVERRIDES ITS IMAGES)"
                } else {
                    ""
                }
            );
            note = if note.is_empty() {
                decided
            } else {
                format!("{decided}; {note}")
            };
        }
        if w.pin_contradicts_images {
            let pin = w.pinned.clone().unwrap_or_default().join(", ");
            if !note.is_empty() {
                note.push_str("; ");
            }
            note.push_str(&format!(
                "pinned to {pin}, which its images do not support: its pods fail today"
            ));
        }
        if !w.misplaced_pods.is_empty() {
            let pods: Vec<String> = w
                .misplaced_pods
                .iter()
                .take(3)
                .map(|p| format!("{} on {} ({})", p.pod, p.node, p.architecture))
                .collect();
            let more = w.misplaced_pods.len().saturating_sub(pods.len());
            if !note.is_empty() {
                note.push_str("; ");
            }
            note.push_str(&format!(
                "misplaced now: {}{}",
                pods.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        note
    }

    fn summary_lines(&self) -> Vec<String> {
        let v = &self.verdicts;
        let mut lines = vec![format!(
            "{} workloads: {} run on all of {}, {} restricted, {} blocked, {} unknown; {} pinned against their images",
            self.workloads.len(),
            v.runs_on_all,
            self.targets.join(", "),
            v.restricted,
            v.blocked,
            v.unknown,
            v.pin_contradicts_images
        )];
        if v.decided_by_rules > 0 {
            lines.push(format!(
                "{} workloads have their architectures decided by celArchitecturePlacement rules; {} of them are sent where their images have no build",
                v.decided_by_rules, v.rules_override_images
            ));
        }
        if let Some(nodes) = &self.cluster_nodes {
            let per_arch: Vec<String> = nodes.iter().map(|(a, n)| format!("{a} {n}")).collect();
            lines.push(format!(
                "cluster nodes: {}; {} workloads have pods running now on nodes their images cannot run on",
                per_arch.join(", "),
                v.misplaced_now
            ));
            if self.unknown_node_level == Some(UnknownNodeLevel::Baseline) {
                lines.push(
                    "amd64 nodes that do not say their x86-64 level are read as x86-64-v1 (unknownNodeLevel: Baseline)"
                        .into(),
                );
            }
        }
        for a in &self.architectures {
            let mut line = format!(
                "{}: {} of {} workloads can run there",
                a.architecture,
                a.workloads,
                self.workloads.len()
            );
            if !a.blocked_by.is_empty() {
                let top: Vec<String> = a
                    .blocked_by
                    .iter()
                    .take(5)
                    .map(|b| format!("{} ({})", b.image, b.workloads))
                    .collect();
                line.push_str(&format!("; blocked by {}", top.join(", ")));
            }
            lines.push(line);
        }
        if !self.ignored.is_empty() {
            let kinds: Vec<String> = self
                .ignored
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            lines.push(format!("not workloads (ignored): {}", kinds.join(", ")));
        }
        for build in &self.mislabelled_builds {
            lines.push(format!("MISLABELLED: {build}"));
        }
        lines
    }

    /// The suggested configuration as YAML, ready for `kubectl apply -f`.
    pub fn suggestion_yaml(&self) -> Option<String> {
        let config = self.suggested_cluster_pod_placement_config.as_ref()?;
        serde_yaml_ng::to_string(config).ok()
    }

    fn rows(&self) -> Vec<[String; 4]> {
        self.workloads
            .iter()
            .map(|w| {
                [
                    w.id(),
                    w.verdict.label().to_owned(),
                    if w.architectures.is_empty() {
                        "-".into()
                    } else {
                        w.architectures.join(",")
                    },
                    Self::note(w),
                ]
            })
            .collect()
    }

    /// A table for a terminal.
    pub fn to_table(&self) -> String {
        let mut out = four_columns(
            ["WORKLOAD", "VERDICT", "ARCHITECTURES", "NOTE"],
            &self.rows(),
        );
        out.push('\n');
        for line in self.summary_lines() {
            out.push_str(&line);
            out.push('\n');
        }
        if let Some(yaml) = self.suggestion_yaml() {
            out.push_str("\nSuggested ClusterPodPlacementConfig:\n---\n");
            out.push_str(&yaml);
        }
        out
    }

    /// GitHub-flavoured Markdown, for a CI job summary.
    pub fn to_markdown(&self) -> String {
        let escape = |s: &str| s.replace('|', "\\|");
        let mut out = String::from(
            "## multiarch audit\n\n| Workload | Verdict | Architectures | Note |\n|---|---|---|---|\n",
        );
        for row in self.rows() {
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                escape(&row[0]),
                row[1],
                row[2],
                escape(&row[3])
            ));
        }
        out.push('\n');
        for line in self.summary_lines() {
            out.push_str(&format!("- {}\n", escape(&line)));
        }
        if let Some(yaml) = self.suggestion_yaml() {
            out.push_str("\nSuggested ClusterPodPlacementConfig:\n\n```yaml\n");
            out.push_str(&yaml);
            out.push_str("```\n");
        }
        out
    }
}

/// Whether a build listed as `arch` or `arch/variant` runs on `target`.
fn runs(platform: &str, target: &str) -> bool {
    platform.split('/').next() == Some(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{verdict::judge, workloads::Manifests};
    use multiarch_policy::platform::Platform;

    const MANIFESTS: &str = "
kind: Deployment
metadata: {name: web, namespace: shop}
spec: {template: {spec: {containers: [{name: app, image: 'multi:1'}]}}}
---
kind: Deployment
metadata: {name: legacy, namespace: shop}
spec: {template: {spec: {containers: [{name: app, image: 'amd-only:1'}, {name: side, image: 'multi:1'}]}}}
---
kind: StatefulSet
metadata: {name: db, namespace: data}
spec: {template: {spec: {nodeSelector: {kubernetes.io/arch: arm64}, containers: [{name: db, image: 'amd-only:1'}]}}}
---
kind: Job
metadata: {name: private, namespace: ci}
spec: {template: {spec: {containers: [{name: x, image: 'private:1'}]}}}
---
kind: ConfigMap
metadata: {name: c}
";

    fn report() -> AuditReport {
        let manifests = Manifests::read(MANIFESTS, "default").unwrap();
        let lookup = |image: &str| -> Result<Vec<Platform>, String> {
            match image {
                "multi:1" => Ok(vec![Platform::linux("amd64"), Platform::linux("arm64")]),
                "amd-only:1" => Ok(vec![Platform::linux("amd64")]),
                _ => Err("unauthorized at quay.io".into()),
            }
        };
        let targets: Vec<String> = vec!["amd64".into(), "arm64".into()];
        let audits = manifests
            .workloads
            .iter()
            .map(|w| {
                let resolved: Vec<_> = w.containers.iter().map(|c| lookup(&c.image)).collect();
                judge(w, &resolved, &targets, None)
            })
            .collect();
        AuditReport::new(targets, audits, manifests.ignored)
    }

    #[test]
    fn the_summary_counts_verdicts_and_ranks_blocking_images() {
        let report = report();
        assert_eq!(report.verdicts.runs_on_all, 1);
        assert_eq!(report.verdicts.restricted, 2);
        assert_eq!(report.verdicts.unknown, 1);
        assert_eq!(report.verdicts.pin_contradicts_images, 1);
        let arm = &report.architectures[1];
        assert_eq!(arm.workloads, 1);
        assert_eq!(arm.blocked_by[0].image, "amd-only:1");
        assert_eq!(arm.blocked_by[0].workloads, 2);
        assert_eq!(
            report.cannot_run_on("arm64"),
            [
                "shop/Deployment/legacy",
                "data/StatefulSet/db",
                "ci/Job/private"
            ]
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["apiVersion"], REPORT_API_VERSION);
        assert_eq!(json["workloads"][1]["verdict"], "restricted");
        assert_eq!(json["workloads"][1]["cannot"], serde_json::json!(["arm64"]));
        assert_eq!(json["ignored"]["ConfigMap"], 1);
    }

    #[test]
    fn the_suggestion_prefers_where_most_workloads_run_and_the_api_accepts_it() {
        let report = report();
        let config = report
            .suggested_cluster_pod_placement_config
            .clone()
            .unwrap();
        let json = serde_json::to_value(&config).unwrap();
        // amd64: 3 of 4 workloads, arm64: 1 of 4; one unknown: a fallback.
        assert_eq!(
            json["spec"]["plugins"]["nodeAffinityScoring"]["platforms"],
            serde_json::json!([{"architecture": "amd64", "weight": 75}, {"architecture": "arm64", "weight": 25}])
        );
        assert_eq!(json["spec"]["fallbackArchitecture"], "amd64");
        let crd = multiarch_crd::render::crds()
            .unwrap()
            .into_iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .find(|c| c["spec"]["names"]["kind"] == "ClusterPodPlacementConfig")
            .unwrap();
        let admitted =
            multiarch_fake_apiserver::apiextensions::custom_resource::admit(&crd, json, None);
        assert!(admitted.is_ok(), "{admitted:?}");
        assert!(report.to_table().contains(
            "Suggested ClusterPodPlacementConfig:\n---\napiVersion: multiarch.openshift.io/v1beta1"
        ));
    }

    #[test]
    fn a_cluster_read_under_baseline_says_so() {
        let nodes = BTreeMap::from([("amd64".to_owned(), 2)]);
        let any = report()
            .with_cluster_nodes(nodes.clone())
            .with_unknown_node_level(UnknownNodeLevel::AnyLevel);
        let baseline = report()
            .with_cluster_nodes(nodes)
            .with_unknown_node_level(UnknownNodeLevel::Baseline);
        let line = "amd64 nodes that do not say their x86-64 level are read as x86-64-v1 (unknownNodeLevel: Baseline)";
        assert!(!any.to_table().contains(line), "{}", any.to_table());
        assert!(
            baseline.to_table().contains(line),
            "{}",
            baseline.to_table()
        );
        assert!(baseline.to_markdown().contains(&format!("- {line}")));
        assert_eq!(
            serde_json::to_value(&any).unwrap()["unknownNodeLevel"],
            "AnyLevel"
        );
        assert_eq!(
            serde_json::to_value(&baseline).unwrap()["unknownNodeLevel"],
            "Baseline"
        );
        // Manifests only: nothing was read from nodes, nothing said.
        assert!(
            serde_json::to_value(report())
                .unwrap()
                .get("unknownNodeLevel")
                .is_none()
        );
    }

    #[test]
    fn table_and_markdown_say_the_same() {
        let report = report();
        let table = report.to_table();
        assert!(table.starts_with("WORKLOAD"), "{table}");
        assert!(table.contains("data/StatefulSet/db"), "{table}");
        assert!(
            table.contains("pinned to arm64, which its images do not support: its pods fail today"),
            "{table}"
        );
        assert!(
            table.contains("arm64: 1 of 4 workloads can run there; blocked by amd-only:1 (2)"),
            "{table}"
        );
        assert!(
            table.contains("not workloads (ignored): ConfigMap 1"),
            "{table}"
        );
        let markdown = report.to_markdown();
        assert!(
            markdown
                .contains("| ci/Job/private | unknown | - | private:1: unauthorized at quay.io |"),
            "{markdown}"
        );
        assert!(
            markdown.contains("- arm64: 1 of 4 workloads can run there; blocked by amd-only:1 (2)"),
            "{markdown}"
        );
    }
}
