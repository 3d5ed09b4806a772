//! The bundle audit's report: the claims, every image's platforms, the findings, which
//! architectures the operands can run on (and, with `--cluster`, the cluster's nodes),
//! and the labels and node affinity to paste into the CSV. Versioned by `apiVersion`.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Value, json};

use crate::{
    bundle::{
        contents::{ARCH_LABEL_PREFIX, Bundle, OS_LABEL_PREFIX},
        findings::{Finding, FindingSeverity, ImageAnswer, common_platforms, judge},
    },
    table::four_columns,
};

pub const BUNDLE_REPORT_API_VERSION: &str = "multiarch.openshift.io/audit-bundle/v1";

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Claims {
    pub architectures: Vec<String>,
    /// false: no `operatorframework.io/arch.*` label, OLM's default (amd64) applies.
    pub architectures_labelled: bool,
    pub operating_systems: Vec<String>,
    pub operating_systems_labelled: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageReport {
    pub image: String,
    /// `os/arch[/variant]` of each build.
    pub platforms: Vec<String>,
    pub manifest_list: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The operands that run it, and `relatedImages` when listed there.
    pub used_by: Vec<String>,
    /// `--binaries`: builds not counted, their program being of another architecture.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mislabelled_builds: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Runs {
    Runs,
    CannotRun,
    Unknown,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchitectureVerdict {
    pub architecture: String,
    pub verdict: Runs,
    /// Why not (each operand that cannot, or whose images are unknown).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FindingCounts {
    pub errors: usize,
    pub warnings: usize,
}

/// Labels and a node affinity that say what the images support.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Suggestion {
    pub labels: BTreeMap<String, String>,
    pub affinity: Value,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleReport {
    pub api_version: &'static str,
    /// The CSV's name.
    pub bundle: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    /// The directory or image read.
    pub source: String,
    pub claims: Claims,
    pub images: Vec<ImageReport>,
    pub findings: Vec<Finding>,
    pub counts: FindingCounts,
    /// Whether the operands can run on each architecture judged (the labelled ones and
    /// `--arch`'s, or the cluster's nodes').
    pub architectures: Vec<ArchitectureVerdict>,
    /// `--cluster`: its nodes per `kubernetes.io/arch`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_nodes: Option<BTreeMap<String, usize>>,
    /// What to paste into the CSV; absent when an operand image is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<Suggestion>,
}

fn platform_text(p: &multiarch_policy::platform::Platform) -> String {
    match &p.variant {
        Some(v) => format!("{}/{}/{v}", p.os, p.architecture),
        None => format!("{}/{}", p.os, p.architecture),
    }
}

/// Whether every operand can run on `arch`: each image has a linux build for it and the
/// operand's affinity allows it.
fn verdict(
    bundle: &Bundle,
    answers: &BTreeMap<String, ImageAnswer>,
    arch: &str,
) -> ArchitectureVerdict {
    let mut cannot = Vec::new();
    let mut unknown = Vec::new();
    for operand in &bundle.operands {
        if let Some(allowed) = &operand.allowed_architectures
            && !allowed.iter().any(|a| a == arch)
        {
            cannot.push(format!("{}: its node affinity excludes {arch}", operand.id));
            continue;
        }
        for container in &operand.containers {
            match answers.get(&container.image) {
                Some(Ok(facts)) => {
                    if !facts
                        .platforms
                        .iter()
                        .any(|p| p.os == "linux" && p.architecture == arch)
                    {
                        cannot.push(format!(
                            "{}: {} has no linux/{arch} build",
                            operand.id, container.image
                        ));
                    }
                }
                Some(Err(_)) | None => unknown.push(format!(
                    "{}: {} could not be inspected",
                    operand.id, container.image
                )),
            }
        }
    }
    let (verdict, reasons) = if !cannot.is_empty() {
        (Runs::CannotRun, cannot)
    } else if !unknown.is_empty() {
        (Runs::Unknown, unknown)
    } else {
        (Runs::Runs, Vec::new())
    };
    ArchitectureVerdict {
        architecture: arch.to_owned(),
        verdict,
        reasons,
    }
}

fn suggestion(bundle: &Bundle, answers: &BTreeMap<String, ImageAnswer>) -> Option<Suggestion> {
    let common = common_platforms(bundle, answers)?;
    let archs: BTreeSet<&str> = common
        .iter()
        .filter(|(os, _)| os == "linux")
        .map(|(_, a)| a.as_str())
        .collect();
    let oses: BTreeSet<&str> = common.iter().map(|(os, _)| os.as_str()).collect();
    if archs.is_empty() {
        return None;
    }
    let mut labels = BTreeMap::new();
    for arch in &archs {
        labels.insert(format!("{ARCH_LABEL_PREFIX}{arch}"), "supported".to_owned());
    }
    for os in &oses {
        labels.insert(format!("{OS_LABEL_PREFIX}{os}"), "supported".to_owned());
    }
    let affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/arch", "operator": "In", "values": archs},
        {"key": "kubernetes.io/os", "operator": "In", "values": oses},
    ]}]}}});
    Some(Suggestion { labels, affinity })
}

impl BundleReport {
    /// Judges `bundle` with its images' answers, on the labelled architectures and
    /// `targets`.
    pub fn new(
        bundle: &Bundle,
        source: String,
        answers: &BTreeMap<String, ImageAnswer>,
        targets: &[String],
    ) -> Self {
        let findings = judge(bundle, answers);
        let mut counts = FindingCounts::default();
        for f in &findings {
            match f.severity {
                FindingSeverity::Error => counts.errors += 1,
                FindingSeverity::Warning => counts.warnings += 1,
            }
        }
        let images = bundle
            .all_images()
            .into_iter()
            .map(|image| {
                let mut used_by: Vec<String> = bundle
                    .operands
                    .iter()
                    .filter(|o| o.containers.iter().any(|c| c.image == image))
                    .map(|o| o.id.clone())
                    .collect();
                if bundle.related_images.iter().any(|r| r.image == image) {
                    used_by.push("relatedImages".into());
                }
                let answer = answers
                    .get(&image)
                    .cloned()
                    .unwrap_or_else(|| Err("not resolved".into()));
                ImageReport {
                    platforms: answer
                        .as_ref()
                        .map(|f| f.platforms.iter().map(platform_text).collect())
                        .unwrap_or_default(),
                    manifest_list: answer.as_ref().is_ok_and(|f| f.manifest_list),
                    mislabelled_builds: answer
                        .as_ref()
                        .map(|f| f.mislabelled_builds.clone())
                        .unwrap_or_default(),
                    error: answer.err(),
                    image,
                    used_by,
                }
            })
            .collect();
        let judged: BTreeSet<&str> = bundle
            .architectures
            .iter()
            .map(String::as_str)
            .chain(targets.iter().map(String::as_str))
            .collect();
        BundleReport {
            api_version: BUNDLE_REPORT_API_VERSION,
            bundle: bundle.name.clone(),
            package: bundle.package.clone(),
            source,
            claims: Claims {
                architectures: bundle.architectures.iter().cloned().collect(),
                architectures_labelled: bundle.architectures_labelled,
                operating_systems: bundle.operating_systems.iter().cloned().collect(),
                operating_systems_labelled: bundle.operating_systems_labelled,
            },
            images,
            findings,
            counts,
            architectures: judged
                .into_iter()
                .map(|arch| verdict(bundle, answers, arch))
                .collect(),
            cluster_nodes: None,
            suggestion: suggestion(bundle, answers),
        }
    }

    /// The report against a live cluster with these nodes per architecture.
    #[must_use]
    pub fn with_cluster_nodes(mut self, nodes: BTreeMap<String, usize>) -> Self {
        self.cluster_nodes = Some(nodes);
        self
    }

    /// Whether the operands cannot be shown to run on `arch` (cannot, or unknown).
    pub fn cannot_run_on(&self, arch: &str) -> bool {
        !self
            .architectures
            .iter()
            .any(|a| a.architecture == arch && a.verdict == Runs::Runs)
    }

    /// The labels and the affinity as YAML to paste into the CSV.
    pub fn suggestion_yaml(&self) -> Option<String> {
        let s = self.suggestion.as_ref()?;
        let labels = serde_yaml_ng::to_string(&json!({"metadata": {"labels": s.labels}})).ok()?;
        let affinity = serde_yaml_ng::to_string(&json!({"affinity": s.affinity})).ok()?;
        Some(format!(
            "# the ClusterServiceVersion's labels:\n{labels}# each spec.install.spec.deployments[*].spec.template.spec:\n{affinity}"
        ))
    }

    fn verdict_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for a in &self.architectures {
            let label = match a.verdict {
                Runs::Runs => "runs",
                Runs::CannotRun => "cannot run",
                Runs::Unknown => "unknown",
            };
            let nodes = self
                .cluster_nodes
                .as_ref()
                .map(|n| format!(" ({} node(s))", n.get(&a.architecture).unwrap_or(&0)))
                .unwrap_or_default();
            let why = if a.reasons.is_empty() {
                String::new()
            } else {
                format!(": {}", a.reasons.join("; "))
            };
            lines.push(format!("{}{nodes}: {label}{why}", a.architecture));
        }
        lines.push(format!(
            "{} error(s), {} warning(s)",
            self.counts.errors, self.counts.warnings
        ));
        for build in self.images.iter().flat_map(|i| &i.mislabelled_builds) {
            lines.push(format!("MISLABELLED: {build}"));
        }
        lines
    }

    fn claims_line(&self) -> String {
        let default = |labelled: bool| if labelled { "" } else { " (OLM's default)" };
        format!(
            "bundle {} from {}: claims {}{} on {}{}",
            self.bundle,
            self.source,
            self.claims.architectures.join(", "),
            default(self.claims.architectures_labelled),
            self.claims.operating_systems.join(", "),
            default(self.claims.operating_systems_labelled),
        )
    }

    /// A table for a terminal.
    pub fn to_table(&self) -> String {
        let mut out = format!("{}\n\n", self.claims_line());
        let rows: Vec<[String; 4]> = self
            .findings
            .iter()
            .map(|f| {
                [
                    format!("{:?}", f.severity).to_uppercase(),
                    f.code.code().to_owned(),
                    f.subject.clone(),
                    f.message.clone(),
                ]
            })
            .collect();
        if rows.is_empty() {
            out.push_str("no findings\n");
        } else {
            out.push_str(&four_columns(
                ["SEVERITY", "CODE", "SUBJECT", "MESSAGE"],
                &rows,
            ));
        }
        out.push('\n');
        for line in self.verdict_lines() {
            out.push_str(&line);
            out.push('\n');
        }
        if let Some(yaml) = self.suggestion_yaml() {
            out.push_str("\nSuggested for the ClusterServiceVersion:\n---\n");
            out.push_str(&yaml);
        }
        out
    }

    /// GitHub-flavoured Markdown, for a CI job summary.
    pub fn to_markdown(&self) -> String {
        let escape = |s: &str| s.replace('|', "\\|");
        let mut out = format!(
            "## multiarch audit --bundle\n\n{}\n\n| Severity | Code | Subject | Message |\n|---|---|---|---|\n",
            escape(&self.claims_line())
        );
        for f in &self.findings {
            out.push_str(&format!(
                "| {:?} | `{}` | {} | {} |\n",
                f.severity,
                f.code.code(),
                escape(&f.subject),
                escape(&f.message)
            ));
        }
        out.push('\n');
        for line in self.verdict_lines() {
            out.push_str(&format!("- {}\n", escape(&line)));
        }
        if let Some(yaml) = self.suggestion_yaml() {
            out.push_str("\nSuggested for the ClusterServiceVersion:\n\n```yaml\n");
            out.push_str(&yaml);
            out.push_str("```\n");
        }
        out
    }
}
