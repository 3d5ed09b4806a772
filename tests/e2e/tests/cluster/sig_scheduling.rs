//! The case "sig-scheduling specs": Kubernetes' own `[sig-scheduling]` e2e specs, each run
//! alone, with multiarch installed and its webhook routing every pod they create to
//! multiarch-scheduler, on two real nodes in two zones (`scripts/e2e` joins the second
//! node, builds the suite and pushes its images). It fails on any spec kube-scheduler
//! passed on the same cluster (the results kept in the checkout) that does not pass here,
//! and on any pod a spec created that was left to the default scheduler. With
//! `MULTIARCH_E2E_SIG_SCHEDULING_BLESS=1` the case "kube-scheduler's sig-scheduling
//! results" runs the specs first, before the install, and writes the kept results.

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::{Context, ensure};
use multiarch_e2e::{
    pod_watch::{PodWatch, Scope},
    sig_scheduling::{self, KEPT_RESULTS, SpecResult, Suite},
    tier::Tier,
};

const ZONE: &str = "topology.kubernetes.io/zone";

/// The suite `scripts/e2e` prepared, or why there is none (the case then says SKIPPED).
fn suite(tier: &Tier) -> Result<Suite, String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let binary = var("MULTIARCH_E2E_SIG_SCHEDULING_SUITE").ok_or(
        "MULTIARCH_E2E_SIG_SCHEDULING_SUITE is not set (scripts/e2e sets it once the kit's \
         conformance/build has built the suite)",
    )?;
    let repo_list = var("MULTIARCH_E2E_SIG_SCHEDULING_REPO_LIST")
        .ok_or("MULTIARCH_E2E_SIG_SCHEDULING_REPO_LIST is not set")?;
    Ok(Suite {
        binary: PathBuf::from(binary),
        repo_list: PathBuf::from(repo_list),
        kubectl: tier.kubectl.clone(),
        reports: tier.work.join("sig-scheduling"),
    })
}

/// The suite and its specs on two zones, or `None` (said SKIPPED) without a suite.
fn prepared(tier: &Tier) -> anyhow::Result<Option<(Suite, Vec<String>)>> {
    let suite = match suite(tier) {
        Ok(suite) => suite,
        Err(why) => {
            println!("SKIPPED: e2e sig-scheduling: {why}");
            return Ok(None);
        }
    };
    two_zones(tier)?;
    let specs = suite.specs()?;
    Ok(Some((suite, specs)))
}

/// Two ready nodes in two zones: what the specs that skip on one node or zone need.
fn two_zones(tier: &Tier) -> anyhow::Result<()> {
    let nodes = tier.kubectl.items(&["nodes"])?;
    let mut zones: Vec<&str> = nodes
        .iter()
        .filter(|n| {
            n["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .filter_map(|n| n["metadata"]["labels"][ZONE].as_str())
        .collect();
    zones.sort_unstable();
    zones.dedup();
    ensure!(
        zones.len() >= 2,
        "the specs need ready nodes in two zones ({ZONE}); found {zones:?}"
    );
    Ok(())
}

fn run_all(suite: &Suite, specs: &[String], who: &str) -> BTreeMap<String, SpecResult> {
    suite.run_all(specs, |name, result| {
        println!(
            "e2e: sig-scheduling with {who}: {} in {} s: {name}",
            result.summary(),
            result.seconds
        );
        if !result.passed() && !result.failure.is_empty() {
            println!(
                "e2e:   {}",
                result.failure.lines().next().unwrap_or_default()
            );
        }
    })
}

/// The API server's `gitVersion` (`v1.36.2`).
fn server_version(tier: &Tier) -> anyhow::Result<String> {
    let version = tier.kubectl.json(&["version"])?;
    version["serverVersion"]["gitVersion"]
        .as_str()
        .map(str::to_owned)
        .context("kubectl version: no serverVersion.gitVersion")
}

/// Says the specs start, in the file `MULTIARCH_E2E_SPECS_STARTED` names (`scripts/e2e`
/// sets it): `scripts/test` runs its own tests while the specs mostly wait on the cluster.
fn specs_started() -> anyhow::Result<()> {
    match std::env::var_os("MULTIARCH_E2E_SPECS_STARTED") {
        Some(path) if !path.is_empty() => std::fs::write(&path, b"")
            .with_context(|| format!("{}", std::path::Path::new(&path).display())),
        _ => Ok(()),
    }
}

/// Before the install: the specs with kube-scheduler placing every pod, written to the
/// kept results (run when the spec list or the cluster's version changes).
pub fn kube_scheduler_results(tier: &Tier) -> anyhow::Result<()> {
    let Some((suite, specs)) = prepared(tier)? else {
        return Ok(());
    };
    let results = run_all(&suite, &specs, "kube-scheduler");
    let version = server_version(tier)?;
    let header = format!(
        "Kubernetes' [sig-scheduling] e2e specs (test/e2e/scheduling, built by the kit's\n\
         conformance/build) with kube-scheduler placing the pods: Kubernetes {}, two nodes in\n\
         two zones of scripts/e2e's cluster. Written by MULTIARCH_E2E_SIG_SCHEDULING_BLESS=1\n\
         scripts/e2e; the e2e tier runs the same specs with multiarch-scheduler and fails on\n\
         any spec passed here that does not pass there (a failed spec runs once more, with\n\
         either scheduler). STATE<TAB>RUNS<TAB>SECONDS<TAB>SPEC.",
        version
    );
    let path = tier.repo.join(KEPT_RESULTS);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    }
    std::fs::write(&path, sig_scheduling::format_kept(&header, &results))
        .with_context(|| format!("{}", path.display()))?;
    let passed = results.values().filter(|r| r.passed()).count();
    println!(
        "e2e: kube-scheduler passed {passed} of {} specs; written to {KEPT_RESULTS}",
        results.len()
    );
    Ok(())
}

pub fn sig_scheduling_specs(tier: &Tier) -> anyhow::Result<()> {
    let Some((suite, specs)) = prepared(tier)? else {
        return Ok(());
    };
    let kept_path = tier.repo.join(KEPT_RESULTS);
    let kept_text =
        std::fs::read_to_string(&kept_path).with_context(|| format!("{}", kept_path.display()))?;
    let kept = sig_scheduling::parse_kept(&kept_text)?;
    let cluster = server_version(tier)?;
    let recorded = sig_scheduling::kept_version(&kept_text);
    ensure!(
        recorded.as_deref() == Some(cluster.as_str()),
        "{KEPT_RESULTS} was recorded on Kubernetes {} and this cluster runs {cluster}: \
         run MULTIARCH_E2E_SIG_SCHEDULING_BLESS=1 scripts/e2e to keep kube-scheduler's results again",
        recorded.as_deref().unwrap_or("(no version in its header)")
    );
    let (new, gone) = sig_scheduling::list_changes(&specs, &kept);
    ensure!(
        new.is_empty() && gone.is_empty(),
        "the suite's specs are not those of {KEPT_RESULTS} (new: {new:?}; gone: {gone:?}): \
         run MULTIARCH_E2E_SIG_SCHEDULING_BLESS=1 scripts/e2e to keep kube-scheduler's results again"
    );
    let watch = PodWatch::start(&tier.kubectl, Scope::AllNamespaces, "ADDED")?;
    specs_started()?;
    let ours = run_all(&suite, &specs, "multiarch-scheduler");
    let created = watch.stop();
    let (table, regressions) = sig_scheduling::compare(&kept, &ours);
    println!(
        "e2e: Kubernetes' [sig-scheduling] specs, kube-scheduler (kept) and multiarch:\n{table}"
    );
    let unrouted = sig_scheduling::left_to_the_default_scheduler(&created);
    let routed = created
        .iter()
        .filter(|pod| pod["spec"]["schedulerName"] == "multiarch-scheduler")
        .count();
    println!(
        "e2e: the specs created {} pods; {routed} routed to multiarch-scheduler",
        created.len()
    );
    ensure!(
        regressions.is_empty(),
        "specs kube-scheduler passes fail with multiarch-scheduler: {}",
        regressions
            .iter()
            .map(|name| format!("{name} ({}: {})", ours[name].state, ours[name].failure))
            .collect::<Vec<_>>()
            .join("; ")
    );
    ensure!(
        routed > 0,
        "no pod of the specs was routed to multiarch-scheduler"
    );
    ensure!(
        unrouted.is_empty(),
        "pods the specs created were left to the default scheduler: {unrouted:?}"
    );
    Ok(())
}
