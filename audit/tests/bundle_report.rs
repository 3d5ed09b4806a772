//! The bundle report's rules and renderings on bundles and answers built here (the
//! registry-backed runs are the binary's tests, `cli/tests/audit_bundle.rs`).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;

use multiarch_audit::bundle::{
    contents::{Bundle, BundleFile},
    findings::{FindingSeverity, ImageAnswer, ImageFacts, Rule},
    report::{BundleReport, Runs},
};
use multiarch_policy::platform::Platform;

fn bundle(labels: &str, affinity: &str) -> Bundle {
    let csv = format!(
        r#"kind: ClusterServiceVersion
metadata:
  name: op.v1
  labels: {{{labels}}}
spec:
  install:
    spec:
      deployments:
      - name: op
        spec:
          template:
            spec:
              {affinity}
              initContainers: [{{name: init, image: "reg/init@sha256:1"}}]
              containers: [{{name: manager, image: "reg/op@sha256:2"}}]
  relatedImages:
  - {{name: op, image: "reg/op@sha256:2"}}
  - {{name: init, image: "reg/init@sha256:1"}}
"#
    );
    Bundle::read(&[BundleFile {
        path: "manifests/op.clusterserviceversion.yaml".into(),
        text: csv,
    }])
    .unwrap()
}

fn facts(platforms: &[(&str, &str)]) -> ImageAnswer {
    Ok(ImageFacts {
        platforms: platforms
            .iter()
            .map(|(os, arch)| Platform::new(os, arch, None))
            .collect(),
        manifest_list: true,
        mislabelled_builds: Vec::new(),
    })
}

const AFFINITY: &str = "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}]}]}}}";

#[test]
fn an_init_containers_image_and_an_unlabelled_os_are_judged_too() {
    let bundle = bundle(
        "operatorframework.io/arch.amd64: supported, operatorframework.io/arch.arm64: supported",
        AFFINITY,
    );
    let answers = BTreeMap::from([
        (
            "reg/op@sha256:2".to_owned(),
            facts(&[("linux", "amd64"), ("linux", "arm64"), ("windows", "amd64")]),
        ),
        // The init container lacks arm64: the promise is false, arm64 cannot run.
        (
            "reg/init@sha256:1".to_owned(),
            facts(&[("linux", "amd64"), ("windows", "amd64")]),
        ),
    ]);
    let report = BundleReport::new(&bundle, "dir".into(), &answers, &[]);
    let codes: Vec<(Rule, FindingSeverity, &str)> = report
        .findings
        .iter()
        .map(|f| (f.code, f.severity, f.subject.as_str()))
        .collect();
    assert_eq!(
        codes,
        [
            (
                Rule::ImageLacksClaimedPlatform,
                FindingSeverity::Error,
                "reg/init@sha256:1"
            ),
            // Every image has a windows build no label claims.
            (Rule::UnclaimedPlatform, FindingSeverity::Warning, "op.v1"),
            (
                Rule::AffinityAllowsUnbuiltArch,
                FindingSeverity::Warning,
                "csv/Deployment/op"
            ),
        ]
    );
    assert!(report.findings[1].message.contains("OS windows"));
    assert_eq!(report.architectures[0].verdict, Runs::Runs);
    assert_eq!(report.architectures[1].verdict, Runs::CannotRun);
    assert!(report.cannot_run_on("arm64") && !report.cannot_run_on("amd64"));
    assert!(
        report.cannot_run_on("s390x"),
        "not judged is not shown to run"
    );

    // Every rendering carries the findings.
    let markdown = report.to_markdown();
    assert!(
        markdown.contains("| Error | `image-lacks-claimed-platform` | reg/init@sha256:1 |"),
        "{markdown}"
    );
    let table = report.to_table();
    assert!(
        table.contains("ERROR     image-lacks-claimed-platform"),
        "{table}"
    );
    assert!(
        table.contains(
            "arm64: cannot run: csv/Deployment/op: reg/init@sha256:1 has no linux/arm64 build"
        ),
        "{table}"
    );
    let yaml = serde_yaml_ng::to_string(&report).unwrap();
    assert!(
        yaml.contains("apiVersion: multiarch.openshift.io/audit-bundle/v1"),
        "{yaml}"
    );
    assert!(
        yaml.contains("code: image-lacks-claimed-platform"),
        "{yaml}"
    );
    // The suggestion is what every image has: amd64 on linux and windows.
    let suggested = report.suggestion_yaml().unwrap();
    assert!(
        suggested.contains("operatorframework.io/arch.amd64: supported"),
        "{suggested}"
    );
    assert!(!suggested.contains("arch.arm64"), "{suggested}");
    assert!(
        suggested.contains("operatorframework.io/os.windows: supported"),
        "{suggested}"
    );
}

#[test]
fn an_affinity_that_excludes_a_labelled_architecture_breaks_the_promise() {
    let bundle = bundle(
        "operatorframework.io/arch.amd64: supported, operatorframework.io/arch.arm64: supported, operatorframework.io/arch.s390x: supported",
        AFFINITY,
    );
    let every = facts(&[("linux", "amd64"), ("linux", "arm64"), ("linux", "s390x")]);
    let answers = BTreeMap::from([
        ("reg/op@sha256:2".to_owned(), every.clone()),
        ("reg/init@sha256:1".to_owned(), every),
    ]);
    let report = BundleReport::new(&bundle, "dir".into(), &answers, &[]);
    assert_eq!(report.findings.len(), 1, "{:?}", report.findings);
    assert_eq!(report.findings[0].code, Rule::AffinityExcludesClaimedArch);
    assert_eq!(report.findings[0].severity, FindingSeverity::Error);
    assert_eq!(report.counts.errors, 1);
    let s390x = report
        .architectures
        .iter()
        .find(|a| a.architecture == "s390x")
        .unwrap();
    assert_eq!(s390x.verdict, Runs::CannotRun);
}

#[test]
fn every_rule_has_a_code_a_severity_and_a_description() {
    let mut codes: Vec<&str> = Rule::ALL.iter().map(|r| r.code()).collect();
    codes.sort_unstable();
    codes.dedup();
    assert_eq!(codes.len(), Rule::ALL.len(), "codes are unique");
    for rule in Rule::ALL {
        // The serialised code is the one documented.
        assert_eq!(
            serde_json::to_value(rule).unwrap(),
            serde_json::json!(rule.code())
        );
        let (checks, matches) = rule.describe();
        assert!(!checks.is_empty() && !matches.is_empty());
    }
}

#[test]
fn the_docs_rule_table_matches_the_rules() {
    use multiarch_audit::bundle::findings::{RULE_TABLE_BEGIN, RULE_TABLE_END, rule_table};
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/audit.md")).unwrap();
    let start = readme
        .find(RULE_TABLE_BEGIN)
        .expect("docs/audit.md has no bundle rule table marker")
        + RULE_TABLE_BEGIN.len();
    let end = readme[start..]
        .find(RULE_TABLE_END)
        .expect("the bundle rule table has no end marker")
        + start;
    let expected = rule_table();
    assert!(
        readme[start..end].trim() == expected.trim(),
        "docs/audit.md's bundle rule table differs from the rules; put this between its markers:\n{expected}"
    );
}
