//! The rules a bundle is judged by: does every image keep the promise of the CSV's
//! architecture and OS labels, does every operand's node affinity say the same, can the
//! related images be mirrored. Each finding has a stable code and the severity
//! `operator-sdk bundle validate --select-optional name=multiarch` gives the same rule.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::bundle::contents::Bundle;
use multiarch_policy::platform::Platform;

/// What the registry said of one image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageFacts {
    pub platforms: Vec<Platform>,
    /// An image index or manifest list (several platforms can hide behind one reference).
    pub manifest_list: bool,
    /// `--binaries`: its builds left out of `platforms` because their program is of
    /// another architecture than the index says, one sentence each.
    pub mislabelled_builds: Vec<String>,
}

/// An image's answer: its facts, or why it could not be inspected.
pub type ImageAnswer = Result<ImageFacts, String>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FindingSeverity {
    Error,
    Warning,
}

/// The rules, with their stable codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Rule {
    /// An image lacks a labelled architecture or OS: the CSV's promise is false.
    #[serde(rename = "image-lacks-claimed-platform")]
    ImageLacksClaimedPlatform,
    /// A single-platform image (not a manifest list) while several architectures are
    /// labelled.
    #[serde(rename = "single-platform-image")]
    SinglePlatformImage,
    /// A labelled architecture the operand's node affinity excludes.
    #[serde(rename = "affinity-excludes-claimed-arch")]
    AffinityExcludesClaimedArch,
    /// An architecture every image supports that no label claims.
    #[serde(rename = "unclaimed-platform")]
    UnclaimedPlatform,
    /// An operand without a required `kubernetes.io/arch` node affinity.
    #[serde(rename = "missing-arch-affinity")]
    MissingArchAffinity,
    /// An operand's node affinity allows an architecture one of its images lacks.
    #[serde(rename = "affinity-allows-unbuilt-arch")]
    AffinityAllowsUnbuiltArch,
    /// A `relatedImages` entry by tag: disconnected mirroring needs digests.
    #[serde(rename = "related-image-not-digest")]
    RelatedImageNotDigest,
    /// An image the operands run that `relatedImages` does not list.
    #[serde(rename = "related-image-missing")]
    RelatedImageMissing,
    /// The registry could not say; never counted as passing.
    #[serde(rename = "image-not-inspected")]
    ImageNotInspected,
}

impl Rule {
    pub const ALL: [Rule; 9] = [
        Rule::ImageLacksClaimedPlatform,
        Rule::SinglePlatformImage,
        Rule::AffinityExcludesClaimedArch,
        Rule::UnclaimedPlatform,
        Rule::MissingArchAffinity,
        Rule::AffinityAllowsUnbuiltArch,
        Rule::RelatedImageNotDigest,
        Rule::RelatedImageMissing,
        Rule::ImageNotInspected,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Rule::ImageLacksClaimedPlatform => "image-lacks-claimed-platform",
            Rule::SinglePlatformImage => "single-platform-image",
            Rule::AffinityExcludesClaimedArch => "affinity-excludes-claimed-arch",
            Rule::UnclaimedPlatform => "unclaimed-platform",
            Rule::MissingArchAffinity => "missing-arch-affinity",
            Rule::AffinityAllowsUnbuiltArch => "affinity-allows-unbuilt-arch",
            Rule::RelatedImageNotDigest => "related-image-not-digest",
            Rule::RelatedImageMissing => "related-image-missing",
            Rule::ImageNotInspected => "image-not-inspected",
        }
    }

    pub fn severity(self) -> FindingSeverity {
        match self {
            Rule::ImageLacksClaimedPlatform
            | Rule::SinglePlatformImage
            | Rule::AffinityExcludesClaimedArch => FindingSeverity::Error,
            _ => FindingSeverity::Warning,
        }
    }

    /// What it checks and the operator-sdk rule it matches (or what it adds), for the
    /// table of `docs/audit.md`.
    pub fn describe(self) -> (&'static str, &'static str) {
        match self {
            Rule::ImageLacksClaimedPlatform => (
                "every image (install deployments, other pod-running objects, relatedImages) has a build for every labelled os/arch",
                "operator-sdk multiarch: \"not all images specified are providing the support described via the CSV labels\" (error)",
            ),
            Rule::SinglePlatformImage => (
                "with several architectures labelled, every reference is a manifest list or image index",
                "adds: names the cause (a single-manifest tag or digest) beside the missing platforms",
            ),
            Rule::AffinityExcludesClaimedArch => (
                "no operand's required node affinity excludes a labelled architecture",
                "adds: operator-sdk compares affinity with image data only (warning); an excluded labelled architecture breaks the promise",
            ),
            Rule::UnclaimedPlatform => (
                "an architecture or OS every operand image supports is labelled",
                "operator-sdk multiarch: \"check if the CSV is missing the label\" (warning)",
            ),
            Rule::MissingArchAffinity => (
                "every operand has a required kubernetes.io/arch node affinity",
                "operator-sdk multiarch: \"missing or invalid node affinity configuration\" (warning)",
            ),
            Rule::AffinityAllowsUnbuiltArch => (
                "an operand's node affinity allows only architectures all its images have",
                "operator-sdk multiarch: \"the CSV includes ... in the node affinity configuration ... but the image data suggests\" (warning)",
            ),
            Rule::RelatedImageNotDigest => (
                "relatedImages name digests, so that mirroring copies what was audited",
                "adds (OLM's disconnected-install guidance)",
            ),
            Rule::RelatedImageMissing => (
                "relatedImages lists every image the operands run",
                "adds (OLM's disconnected-install guidance)",
            ),
            Rule::ImageNotInspected => (
                "every image could be inspected; one that could not is unknown, never passing",
                "operator-sdk multiarch: \"unable to inspect the image\" (warning)",
            ),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub code: Rule,
    pub severity: FindingSeverity,
    /// The image or operand it is about.
    pub subject: String,
    pub message: String,
}

fn finding(code: Rule, subject: &str, message: String) -> Finding {
    Finding {
        code,
        severity: code.severity(),
        subject: subject.to_owned(),
        message,
    }
}

fn has(facts: &ImageFacts, os: &str, arch: &str) -> bool {
    facts
        .platforms
        .iter()
        .any(|p| p.os == os && p.architecture == arch)
}

/// Whether a reference names a digest (`...@sha256:...`).
pub fn is_digest(image: &str) -> bool {
    image.contains('@')
}

/// What each image of the bundle lacks: a claimed platform, a manifest list, an answer.
fn images_findings(
    bundle: &Bundle,
    answers: &BTreeMap<String, ImageAnswer>,
    findings: &mut Vec<Finding>,
) {
    let several = bundle.architectures.len() > 1;
    for image in bundle.all_images() {
        match answers.get(&image) {
            Some(Ok(facts)) => {
                let missing: Vec<String> = bundle
                    .operating_systems
                    .iter()
                    .flat_map(|os| bundle.architectures.iter().map(move |a| (os, a)))
                    .filter(|(os, arch)| !has(facts, os, arch))
                    .map(|(os, arch)| format!("{os}/{arch}"))
                    .collect();
                if !missing.is_empty() {
                    findings.push(finding(
                        Rule::ImageLacksClaimedPlatform,
                        &image,
                        format!(
                            "the CSV's labels claim {} but the image has no build for it",
                            missing.join(", ")
                        ),
                    ));
                }
                if several && !facts.manifest_list {
                    findings.push(finding(
                        Rule::SinglePlatformImage,
                        &image,
                        format!(
                            "{} architectures are labelled but the reference is a single-platform manifest, not a manifest list",
                            bundle.architectures.len()
                        ),
                    ));
                }
            }
            Some(Err(reason)) => findings.push(finding(
                Rule::ImageNotInspected,
                &image,
                format!("cannot be inspected: {reason}"),
            )),
            None => findings.push(finding(
                Rule::ImageNotInspected,
                &image,
                "cannot be inspected: not resolved".into(),
            )),
        }
    }
}

/// What each operand's node affinity says against the labelled architectures and its
/// images' builds.
fn operand_findings(
    bundle: &Bundle,
    answers: &BTreeMap<String, ImageAnswer>,
    findings: &mut Vec<Finding>,
) {
    let known = |image: &str| answers.get(image).and_then(|a| a.as_ref().ok());
    for operand in &bundle.operands {
        let images: Vec<&str> = operand
            .containers
            .iter()
            .map(|c| c.image.as_str())
            .collect();
        match &operand.allowed_architectures {
            None => findings.push(finding(
                Rule::MissingArchAffinity,
                &operand.id,
                format!(
                    "no required kubernetes.io/arch node affinity: add one with {}",
                    bundle
                        .architectures
                        .iter()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
            Some(allowed) => {
                let excluded: Vec<&String> = bundle
                    .architectures
                    .iter()
                    .filter(|a| !allowed.contains(a))
                    .collect();
                if !excluded.is_empty() {
                    findings.push(finding(
                        Rule::AffinityExcludesClaimedArch,
                        &operand.id,
                        format!(
                            "the node affinity allows {} and excludes the labelled {}",
                            allowed.join(", "),
                            excluded
                                .iter()
                                .map(|a| a.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
                for arch in allowed {
                    let lacking: Vec<&str> = images
                        .iter()
                        .copied()
                        .filter(|i| known(i).is_some_and(|f| !has(f, "linux", arch)))
                        .collect();
                    if !lacking.is_empty() {
                        findings.push(finding(
                            Rule::AffinityAllowsUnbuiltArch,
                            &operand.id,
                            format!(
                                "the node affinity allows {arch} but {} has no linux/{arch} build",
                                lacking.join(", ")
                            ),
                        ));
                    }
                }
            }
        }
    }
}

/// Every finding for `bundle`, in rule order then subject order.
pub fn judge(bundle: &Bundle, answers: &BTreeMap<String, ImageAnswer>) -> Vec<Finding> {
    let mut findings = Vec::new();
    images_findings(bundle, answers, &mut findings);
    operand_findings(bundle, answers, &mut findings);
    findings.extend(unclaimed(bundle, answers));
    for related in &bundle.related_images {
        if !is_digest(&related.image) {
            findings.push(finding(
                Rule::RelatedImageNotDigest,
                &related.image,
                format!(
                    "relatedImages entry {:?} is a tag: mirroring for disconnected clusters needs a digest",
                    related.name
                ),
            ));
        }
    }
    let related: BTreeSet<&str> = bundle
        .related_images
        .iter()
        .map(|r| r.image.as_str())
        .collect();
    for image in bundle.operand_images() {
        if !related.contains(image.as_str()) {
            findings.push(finding(
                Rule::RelatedImageMissing,
                &image,
                "an operand runs it but relatedImages does not list it: a mirrored install would not copy it".into(),
            ));
        }
    }
    findings.sort_by(|a, b| (a.code, &a.subject).cmp(&(b.code, &b.subject)));
    findings
}

/// Platforms every operand image has that the labels do not claim (only when every
/// operand image is known: an unknown one could lack them).
fn unclaimed(bundle: &Bundle, answers: &BTreeMap<String, ImageAnswer>) -> Vec<Finding> {
    let Some(common) = common_platforms(bundle, answers) else {
        return Vec::new();
    };
    let mut findings = Vec::new();
    let archs: Vec<&str> = common
        .iter()
        .filter(|(os, _)| bundle.operating_systems.contains(os))
        .map(|(_, a)| a.as_str())
        .filter(|a| !bundle.architectures.contains(*a))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if !archs.is_empty() {
        findings.push(finding(
            Rule::UnclaimedPlatform,
            &bundle.name,
            format!(
                "every image supports {} but no operatorframework.io/arch label claims it{}",
                archs.join(", "),
                if bundle.architectures_labelled {
                    ""
                } else {
                    " (without arch labels OLM assumes amd64 only)"
                }
            ),
        ));
    }
    let oses: BTreeSet<&str> = common
        .iter()
        .map(|(os, _)| os.as_str())
        .filter(|os| !bundle.operating_systems.contains(*os))
        .collect();
    if !oses.is_empty() {
        findings.push(finding(
            Rule::UnclaimedPlatform,
            &bundle.name,
            format!(
                "every image supports the OS {} but no operatorframework.io/os label claims it",
                oses.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    findings
}

/// The (os, arch) pairs every operand image has; `None` when an image is not known.
pub fn common_platforms(
    bundle: &Bundle,
    answers: &BTreeMap<String, ImageAnswer>,
) -> Option<BTreeSet<(String, String)>> {
    let mut common: Option<BTreeSet<(String, String)>> = None;
    for image in bundle.operand_images() {
        let facts = answers.get(&image)?.as_ref().ok()?;
        let pairs: BTreeSet<(String, String)> = facts
            .platforms
            .iter()
            .map(|p| (p.os.clone(), p.architecture.clone()))
            .collect();
        common = Some(match common {
            None => pairs,
            Some(have) => have.intersection(&pairs).cloned().collect(),
        });
    }
    common
}

/// The rule table of `docs/audit.md` lies between these markers.
pub const RULE_TABLE_BEGIN: &str = "<!-- bundle-rules: generated from audit/src/bundle/findings.rs, checked by audit/tests/bundle_report.rs -->";
pub const RULE_TABLE_END: &str = "<!-- /bundle-rules -->";

/// The rules as `docs/audit.md`'s Markdown table.
pub fn rule_table() -> String {
    let mut out = String::from(
        "| Code | Severity | What it checks | operator-sdk rule it matches, or what it adds |\n|---|---|---|---|\n",
    );
    for rule in Rule::ALL {
        let (checks, matches) = rule.describe();
        let severity = match rule.severity() {
            FindingSeverity::Error => "error",
            FindingSeverity::Warning => "warning",
        };
        out.push_str(&format!(
            "| `{}` | {severity} | {checks} | {matches} |\n",
            rule.code()
        ));
    }
    out
}
