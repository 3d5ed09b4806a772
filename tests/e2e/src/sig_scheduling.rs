//! Kubernetes' own `[sig-scheduling]` e2e specs (`test/e2e/scheduling` of the cluster's
//! version, built by the kit's `conformance/build`): which specs there are, running one
//! alone with a deadline, reading its result from ginkgo's JSON report, and the results
//! kube-scheduler had on the same cluster, kept in the checkout
//! (`tests/e2e/sig-scheduling/kube-scheduler.tsv`) so CI runs the specs once, with
//! multiarch routing every pod, and compares.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::{
    kubectl::{self, Kubectl},
    wait,
};

/// The specs selected, as the issue that asked for them measured: every `[sig-scheduling]`
/// spec but the disruptive, flaky and feature-gated ones and those needing hardware.
const FOCUS: &str = r"\[sig-scheduling\]";
const SKIP: &str = r"\[Disruptive\]|\[Flaky\]|\[Feature:|GPU|Windows";

/// One spec alone: the longest waits 10 minutes by design (the hostPort conflict spec's
/// pod must stay Pending for the framework's pod start timeout).
const SPEC_DEADLINE: Duration = Duration::from_secs(15 * 60);

/// How long an earlier spec's pods may take to go once deleted at once.
const EARLIER_PODS_GONE: Duration = Duration::from_secs(120);

/// Runs of a spec before it counts as failed.
const ATTEMPTS: u64 = 2;

/// The kept kube-scheduler results, relative to the checkout.
pub const KEPT_RESULTS: &str = "tests/e2e/sig-scheduling/kube-scheduler.tsv";

/// The suite as `scripts/e2e` built it.
#[derive(Debug)]
pub struct Suite {
    /// The ginkgo test binary (`e2e-scheduling.test`).
    pub binary: PathBuf,
    /// `KUBE_TEST_REPO_LIST`: every image the specs name, from the tier's registry.
    pub repo_list: PathBuf,
    pub kubectl: Kubectl,
    /// Where each spec's JSON report and output go.
    pub reports: PathBuf,
}

/// How one spec ended, in ginkgo's words (`passed`, `failed`, `skipped`, `timedout`, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecResult {
    pub state: String,
    /// Runs it took (2: it failed once, then passed; shown in the table).
    pub attempts: u64,
    pub seconds: u64,
    /// The failure's message, when the spec did not pass.
    pub failure: String,
}

impl SpecResult {
    /// A spec that did not get to report (killed at its deadline, not started).
    fn unreported(state: &str, seconds: u64, failure: String) -> Self {
        SpecResult {
            state: state.into(),
            attempts: 1,
            seconds,
            failure,
        }
    }

    pub fn passed(&self) -> bool {
        self.state == "passed"
    }

    /// The state, and the runs it took when it took more than one.
    pub fn summary(&self) -> String {
        if self.attempts > 1 {
            format!("{} ({} runs)", self.state, self.attempts)
        } else {
            self.state.clone()
        }
    }
}

impl Suite {
    fn command(&self, focus: &str, report: &Path) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .env("KUBE_TEST_REPO_LIST", &self.repo_list)
            .arg("--kubeconfig")
            .arg(&self.kubectl.kubeconfig)
            .arg("--provider=skeleton")
            .arg(format!("--ginkgo.focus={focus}"))
            .arg(format!("--ginkgo.skip={SKIP}"))
            .arg(format!("--ginkgo.json-report={}", report.display()))
            .arg("--ginkgo.no-color")
            // A spec that fails is run once more, with either scheduler (a spec on a busy
            // 2-core cluster can lose a race the scheduler is not part of); the table
            // says which specs needed the second run.
            .arg(format!("--ginkgo.flake-attempts={ATTEMPTS}"))
            .current_dir(&self.reports)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// The selected specs' full names, sorted (a dry run).
    pub fn specs(&self) -> anyhow::Result<Vec<String>> {
        std::fs::create_dir_all(&self.reports)?;
        let report = self.reports.join("dry-run.json");
        let mut command = self.command(FOCUS, &report);
        command.arg("--ginkgo.dry-run");
        let out = kubectl::finish(
            command.spawn().context("cannot run the e2e suite")?,
            "",
            kubectl::CALL_DEADLINE,
        )?;
        if !out.success {
            bail!("the suite's dry run failed: {}", tail(&out.stdout, 20));
        }
        let mut specs: Vec<String> = read_report(&report)?
            .into_iter()
            .filter(|(_, state)| state == "passed")
            .map(|(name, _)| name)
            .collect();
        specs.sort();
        Ok(specs)
    }

    /// Runs the spec `name` alone; its output is kept beside its report.
    pub fn run(&self, index: usize, name: &str) -> anyhow::Result<SpecResult> {
        let report = self.reports.join(format!("{index:02}.json"));
        let _ = std::fs::remove_file(&report);
        let started = Instant::now();
        let child = self
            .command(&format!("{}$", escape(name)), &report)
            .spawn()
            .context("cannot run the e2e suite")?;
        let out = kubectl::finish(child, "", SPEC_DEADLINE);
        let seconds = started.elapsed().as_secs();
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                return Ok(SpecResult::unreported("killed", seconds, format!("{e:#}")));
            }
        };
        std::fs::write(
            self.reports.join(format!("{index:02}.log")),
            format!("{}{}", out.stdout, out.stderr),
        )?;
        let text = std::fs::read_to_string(&report)
            .with_context(|| format!("{name}: no report ({})", tail(&out.stdout, 20)))?;
        spec_result(&text, name, seconds)
    }

    /// Removes what is left of earlier specs' pods before the next spec starts. Ginkgo's
    /// framework deletes a spec's namespace without waiting, and its pods keep their node's
    /// resources through their grace period (30 s for an agnhost pod): the next spec would
    /// meet them (seen: the critical-pod preemption spec's low-priority pod preempted by
    /// its own medium-priority one, because the basic preemption spec's pods still held the
    /// node's extended resource). One ginkgo run races the same way. The spec is over and
    /// its namespace going: its pods are deleted at once, with either scheduler.
    fn clear_earlier_specs(&self) -> anyhow::Result<()> {
        wait::until_true("earlier specs' pods gone", EARLIER_PODS_GONE, || {
            let namespaces = self.kubectl.items(&["namespaces", "-l", "e2e-framework"])?;
            let mut left = Vec::new();
            for namespace in namespaces
                .iter()
                .filter(|n| n["status"]["phase"] == "Terminating")
                .filter_map(|n| n["metadata"]["name"].as_str())
            {
                let pods = self
                    .kubectl
                    .run(&["get", "pods", "-n", namespace, "-o", "name"])?;
                if pods.trim().is_empty() {
                    continue;
                }
                left.push(format!("{namespace}: {}", pods.lines().count()));
                self.kubectl.run(&[
                    "delete",
                    "pods",
                    "--all",
                    "-n",
                    namespace,
                    "--grace-period=0",
                    "--force",
                    "--wait=false",
                ])?;
            }
            Ok((left.is_empty(), format!("pods left: {left:?}")))
        })
    }

    /// Runs every spec of `specs`, one at a time (they are `[Serial]`: several wait for
    /// every pod of the cluster to be scheduled first); `each` hears of each result.
    pub fn run_all(
        &self,
        specs: &[String],
        mut each: impl FnMut(&str, &SpecResult),
    ) -> BTreeMap<String, SpecResult> {
        let mut results = BTreeMap::new();
        for (index, name) in specs.iter().enumerate() {
            let result = self
                .clear_earlier_specs()
                .and_then(|()| self.run(index, name))
                .unwrap_or_else(|e| SpecResult::unreported("error", 0, format!("{e:#}")));
            each(name, &result);
            results.insert(name.clone(), result);
        }
        results
    }
}

/// The spec `name`'s result in a JSON report (the others in it were skipped by focus).
pub fn spec_result(report: &str, name: &str, seconds: u64) -> anyhow::Result<SpecResult> {
    let suites: Value = serde_json::from_str(report).context("the report is not JSON")?;
    let spec = its(&suites)
        .find(|spec| full_name(spec) == name)
        .with_context(|| format!("the report does not name {name}"))?;
    let state = spec["State"].as_str().unwrap_or("unknown").to_owned();
    let attempts = spec["NumAttempts"].as_u64().unwrap_or(1);
    let failure = spec["Failure"]["Message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Ok(SpecResult {
        state,
        attempts,
        seconds,
        failure,
    })
}

/// Every `It` of a report: its full name and state.
fn read_report(path: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let suites: Value = serde_json::from_str(&text).context("the report is not JSON")?;
    Ok(its(&suites)
        .map(|spec| {
            let state = spec["State"].as_str().unwrap_or_default().to_owned();
            (full_name(spec), state)
        })
        .collect())
}

fn its(suites: &Value) -> impl Iterator<Item = &Value> {
    suites
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|suite| suite["SpecReports"].as_array().into_iter().flatten())
        .filter(|spec| spec["LeafNodeType"] == "It")
}

/// The containers' texts and the spec's own, as ginkgo joins them for `--focus`.
fn full_name(spec: &Value) -> String {
    let mut parts: Vec<&str> = spec["ContainerHierarchyTexts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    parts.push(spec["LeafNodeText"].as_str().unwrap_or_default());
    parts.join(" ")
}

/// `name` as a regular expression matching itself (RE2 rejects escaped spaces, so only
/// the metacharacters are escaped). Ginkgo matches `--focus` against a text that does not
/// begin with the name, so the caller anchors only its end.
pub fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 16);
    for c in name.chars() {
        if r"\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The Kubernetes version the kept results were recorded on: the `Kubernetes vX.Y.Z` of
/// their header (`kube_scheduler_results` writes the server's `gitVersion` there).
pub fn kept_version(text: &str) -> Option<String> {
    text.lines()
        .take_while(|line| line.starts_with('#'))
        .find_map(|line| line.split_once("Kubernetes v"))
        .map(|(_, rest)| format!("v{}", rest.split([',', ' ']).next().unwrap_or_default()))
}

/// The kept results: one line per spec, `STATE<TAB>RUNS<TAB>SECONDS<TAB>NAME`; `#` lines
/// are comments.
pub fn parse_kept(text: &str) -> anyhow::Result<BTreeMap<String, SpecResult>> {
    let mut kept = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let at = || format!("{KEPT_RESULTS}:{}", n + 1);
        let fields: Vec<&str> = line.splitn(4, '\t').collect();
        let [state, attempts, seconds, name] = fields[..] else {
            bail!("{}: not STATE<TAB>RUNS<TAB>SECONDS<TAB>NAME", at());
        };
        let result = SpecResult {
            state: state.to_owned(),
            attempts: attempts
                .parse()
                .with_context(|| format!("{}: runs", at()))?,
            seconds: seconds
                .parse()
                .with_context(|| format!("{}: seconds", at()))?,
            failure: String::new(),
        };
        if kept.insert(name.to_owned(), result).is_some() {
            bail!("{}: {name} twice", at());
        }
    }
    Ok(kept)
}

/// The kept results' text, `header` first (as comment lines).
pub fn format_kept(header: &str, results: &BTreeMap<String, SpecResult>) -> String {
    let mut text = String::new();
    for line in header.lines() {
        let _ = writeln!(text, "# {line}");
    }
    for (name, r) in results {
        let _ = writeln!(text, "{}\t{}\t{}\t{name}", r.state, r.attempts, r.seconds);
    }
    text
}

/// The specs the kept results and this suite disagree on: (only in the suite, only kept).
pub fn list_changes(
    specs: &[String],
    kept: &BTreeMap<String, SpecResult>,
) -> (Vec<String>, Vec<String>) {
    let new = specs
        .iter()
        .filter(|s| !kept.contains_key(*s))
        .cloned()
        .collect();
    let gone = kept
        .keys()
        .filter(|k| !specs.contains(k))
        .cloned()
        .collect();
    (new, gone)
}

/// The side-by-side table: each spec's result with kube-scheduler (kept) and with
/// multiarch-scheduler, and the specs kube-scheduler passes that multiarch does not.
pub fn compare(
    kept: &BTreeMap<String, SpecResult>,
    multiarch: &BTreeMap<String, SpecResult>,
) -> (String, Vec<String>) {
    let mut table =
        String::from("| spec | kube-scheduler | multiarch-scheduler |\n|---|---|---|\n");
    let mut regressions = Vec::new();
    for (name, ours) in multiarch {
        let theirs = kept.get(name);
        let _ = writeln!(
            table,
            "| {name} | {} | {} ({} s) |",
            theirs.map_or_else(|| "-".to_owned(), SpecResult::summary),
            ours.summary(),
            ours.seconds
        );
        if theirs.is_some_and(SpecResult::passed) && !ours.passed() {
            regressions.push(name.clone());
        }
    }
    (table, regressions)
}

/// Every pod the specs created that a scheduler had to place (no `spec.nodeName`, not a
/// DaemonSet's, naming the default scheduler) and multiarch's webhook did not route.
pub fn left_to_the_default_scheduler(created: &[Value]) -> Vec<String> {
    created
        .iter()
        .filter(|pod| {
            let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
            let daemonset = pod["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["kind"] == "DaemonSet");
            !namespace.starts_with("kube-")
                && namespace != "multiarch"
                && pod["spec"]["nodeName"]
                    .as_str()
                    .unwrap_or_default()
                    .is_empty()
                && !daemonset
                && pod["spec"]["schedulerName"]
                    .as_str()
                    .is_none_or(|s| s == "default-scheduler")
        })
        .map(|pod| {
            format!(
                "{}/{}",
                pod["metadata"]["namespace"].as_str().unwrap_or_default(),
                pod["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn result(state: &str, seconds: u64) -> SpecResult {
        SpecResult {
            state: state.into(),
            attempts: 1,
            seconds,
            failure: String::new(),
        }
    }

    #[test]
    fn a_name_escapes_to_a_pattern_of_itself() {
        assert_eq!(
            escape("[sig-scheduling] X (a) [Serial] 0.0.0.0 $1"),
            r"\[sig-scheduling\] X \(a\) \[Serial\] 0\.0\.0\.0 \$1"
        );
    }

    #[test]
    fn the_report_gives_the_named_spec_among_the_skipped() {
        let report = json!([{"SpecReports": [
            {"LeafNodeType": "BeforeSuite", "State": "passed"},
            {"LeafNodeType": "It", "ContainerHierarchyTexts": ["[sig-scheduling] A [Serial]"],
             "LeafNodeText": "one", "State": "skipped"},
            {"LeafNodeType": "It", "ContainerHierarchyTexts": ["[sig-scheduling] A [Serial]", "inner"],
             "LeafNodeText": "two", "State": "failed", "NumAttempts": 2,
             "Failure": {"Message": "timed out"}},
        ]}]);
        let got = spec_result(
            &report.to_string(),
            "[sig-scheduling] A [Serial] inner two",
            7,
        )
        .unwrap();
        assert_eq!(got.state, "failed");
        assert_eq!(got.failure, "timed out");
        assert_eq!(got.summary(), "failed (2 runs)");
        assert_eq!(got.seconds, 7);
        assert!(spec_result(&report.to_string(), "[sig-scheduling] A [Serial] three", 1).is_err());
    }

    #[test]
    fn kept_results_read_back_what_was_written() {
        let mut results = BTreeMap::new();
        results.insert("[sig-scheduling] A one".to_owned(), result("passed", 3));
        results.insert(
            "[sig-scheduling] B two\tthree".to_owned(),
            result("failed", 600),
        );
        let text = format_kept("kube-scheduler 1.36.2\ntwo nodes", &results);
        assert!(text.starts_with("# kube-scheduler 1.36.2\n# two nodes\n"));
        assert_eq!(parse_kept(&text).unwrap(), results);
    }

    #[test]
    fn the_kept_version_is_read_from_the_header() {
        let header = "Kubernetes' [sig-scheduling] e2e specs\nplacing the pods: Kubernetes v1.36.2, two nodes";
        let text = format_kept(header, &BTreeMap::new());
        assert_eq!(kept_version(&text).as_deref(), Some("v1.36.2"));
        let kept = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("sig-scheduling/kube-scheduler.tsv"),
        )
        .unwrap();
        assert_eq!(kept_version(&kept).as_deref(), Some("v1.36.2"));
        // Only the header counts; none there: no version.
        assert_eq!(kept_version("passed\t1\t1\tKubernetes v9 spec\n"), None);
    }

    #[test]
    fn a_malformed_or_repeated_kept_line_is_refused() {
        assert!(parse_kept("passed\t1\t3\n").is_err());
        assert!(parse_kept("passed\t1\tthree\tA\n").is_err());
        assert!(parse_kept("passed\tone\t3\tA\n").is_err());
        assert!(parse_kept("passed\t1\t3\tA\nfailed\t1\t4\tA\n").is_err());
    }

    #[test]
    fn a_changed_spec_list_is_named_both_ways() {
        let kept = parse_kept("passed\t1\t1\tA\npassed\t1\t1\tB\n").unwrap();
        let (new, gone) = list_changes(&["B".into(), "C".into()], &kept);
        assert_eq!((new, gone), (vec!["C".to_owned()], vec!["A".to_owned()]));
    }

    #[test]
    fn only_a_spec_kube_scheduler_passes_and_multiarch_does_not_is_a_regression() {
        let kept = parse_kept("passed\t2\t1\tA\nfailed\t1\t1\tB\npassed\t1\t1\tC\n").unwrap();
        let mut ours = BTreeMap::new();
        ours.insert("A".to_owned(), result("passed", 2));
        ours.insert("B".to_owned(), result("failed", 2));
        ours.insert("C".to_owned(), result("timedout", 900));
        let (table, regressions) = compare(&kept, &ours);
        assert_eq!(regressions, vec!["C".to_owned()]);
        assert!(
            table.contains("| C | passed | timedout (900 s) |"),
            "{table}"
        );
        assert!(table.contains("| B | failed | failed (2 s) |"), "{table}");
        assert!(
            table.contains("| A | passed (2 runs) | passed (2 s) |"),
            "{table}"
        );
    }

    #[test]
    fn only_a_pod_a_scheduler_must_place_and_multiarch_did_not_route_is_named() {
        let pod = |ns: &str, name: &str, spec: Value, owner: &str| {
            json!({"metadata": {"namespace": ns, "name": name,
                                "ownerReferences": [{"kind": owner}]}, "spec": spec})
        };
        let created = [
            pod(
                "sched-pred-1",
                "routed",
                json!({"schedulerName": "multiarch-scheduler"}),
                "ReplicaSet",
            ),
            pod(
                "sched-pred-1",
                "left",
                json!({"schedulerName": "default-scheduler"}),
                "ReplicaSet",
            ),
            pod("sched-pred-1", "unnamed", json!({}), ""),
            pod(
                "sched-pred-1",
                "placed",
                json!({"nodeName": "n1", "schedulerName": "default-scheduler"}),
                "",
            ),
            pod(
                "sched-pred-1",
                "daemon",
                json!({"schedulerName": "default-scheduler"}),
                "DaemonSet",
            ),
            pod(
                "sched-pred-1",
                "other",
                json!({"schedulerName": "other"}),
                "",
            ),
            pod(
                "kube-system",
                "system",
                json!({"schedulerName": "default-scheduler"}),
                "",
            ),
            pod(
                "multiarch",
                "own",
                json!({"schedulerName": "default-scheduler"}),
                "",
            ),
        ];
        assert_eq!(
            left_to_the_default_scheduler(&created),
            vec![
                "sched-pred-1/left".to_owned(),
                "sched-pred-1/unnamed".to_owned()
            ]
        );
    }
}
