//! The end-to-end cases, in order, on one real cluster: install (the README's commands,
//! word for word), scheduler mode, exec format errors from real containers, component
//! restarts under load, a mode switch each way under load, uninstall. Run by
//! `scripts/e2e` once on a cluster without prometheus-operator's ServiceMonitor CRD, then
//! (install, scheduler mode, Kubernetes' sig-scheduling specs, mode switches, uninstall)
//! with it, on two nodes. Without a cluster (`MULTIARCH_E2E_KUBECONFIG` unset) it says SKIPPED.
//!
//! Every wait has a deadline and polls the cluster's state; nothing asserts how fast a
//! component reacted, only that the state it must reach is reached.

use std::{
    path::Path,
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use multiarch_e2e::{
    churn::Churn,
    creator::Creator,
    diagnostics,
    pod_watch::{PodWatch, Scope},
    pods::{
        self, events, gates, required_architectures, running_and_ready, wait_all_running,
        wait_event,
    },
    readme,
    tier::{Tier, condition},
    wait::{self, Check},
};
use serde_json::{Value, json};

const ROLLOUT: Duration = Duration::from_secs(300);
const PODS_RUNNING: Duration = Duration::from_secs(240);
const EVENT: Duration = Duration::from_secs(120);

/// The namespaces the cases create (deleted at the end, whatever happened).
const NS_PPC: &str = "e2e-ppc";
const NS_SCHEDULER: &str = "e2e-scheduler";
const NS_ENOEXEC: &str = "e2e-enoexec";
const NS_RESTARTS: &str = "e2e-restarts";
const NS_GATE: &str = "e2e-gate";
const NS_ROTATION: &str = "e2e-rotation";
const NS_MISPLACED: &str = "e2e-misplaced";
const NS_CHURN: &str = "e2e-churn";
const TEST_NAMESPACES: [&str; 13] = [
    NS_PPC,
    NS_RULES,
    NS_HOSTILE,
    NS_VICTIM,
    NS_SCHEDULER,
    NS_ENOEXEC,
    NS_LOADER,
    NS_LEVELS,
    NS_RESTARTS,
    NS_GATE,
    NS_ROTATION,
    NS_MISPLACED,
    NS_CHURN,
];
/// A Node object without a kubelet, of the foreign architecture (the misplaced-pod case).
const FAKE_NODE: &str = "e2e-foreign-node";
/// A Node object without a kubelet, tainted, that only the churn's pods tolerate: they
/// are placed there and never run.
const CHURN_NODE: &str = "e2e-churn-node";
/// Pods a second while routes are removed and switched (the issue's load).
const CHURN_RATE: usize = 20;

const SERVICE_MONITOR_CRD: &str = "servicemonitors.monitoring.coreos.com";
const PROMETHEUS_RULE_CRD: &str = "prometheusrules.monitoring.coreos.com";

#[path = "cluster/architecture_rules.rs"]
mod architecture_rules;
use architecture_rules::{NS_RULES, architecture_rules};
#[path = "cluster/hostile_tenant.rs"]
mod hostile_tenant;
#[path = "cluster/level_placement.rs"]
mod level_placement;
#[path = "cluster/loader_refusal.rs"]
mod loader_refusal;
#[path = "cluster/node_level.rs"]
mod node_level;
#[path = "cluster/prometheus.rs"]
mod prometheus;
#[path = "cluster/sig_scheduling.rs"]
mod sig_scheduling;
use hostile_tenant::{NS_HOSTILE, NS_VICTIM, hostile_tenant};
use level_placement::{NS_LEVELS, remove_levels, x86_64_levels_placed};
use loader_refusal::{NS_LOADER, loader_refusals};
use node_level::x86_64_level_label;
use sig_scheduling::{kube_scheduler_results, sig_scheduling_specs};

type Case = fn(&Tier) -> anyhow::Result<()>;

fn main() -> ExitCode {
    let passes: Vec<bool> = match std::env::var("MULTIARCH_E2E_PASSES").as_deref() {
        Ok("vanilla") => vec![false],
        Ok("service-monitors") => vec![true],
        _ => vec![false, true],
    };
    let (mut passed, mut failed) = (0, 0);
    let started = Instant::now();
    for service_monitors in passes {
        let tier = match Tier::from_env(service_monitors) {
            Ok(Some(tier)) => tier,
            Ok(None) => {
                println!(
                    "SKIPPED: e2e: no cluster given (MULTIARCH_E2E_KUBECONFIG); scripts/e2e starts one from the kit"
                );
                return ExitCode::SUCCESS;
            }
            Err(e) => {
                println!("e2e: cannot start: {e:#}");
                return ExitCode::FAILURE;
            }
        };
        let (p, f) = run_pass(&tier);
        passed += p;
        failed += f;
    }
    println!(
        "e2e: {passed} passed, {failed} failed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn run_pass(tier: &Tier) -> (usize, usize) {
    let pass = if tier.service_monitors {
        "with the ServiceMonitor CRD"
    } else {
        "vanilla"
    };
    println!("e2e pass: {pass}, image {}", tier.image);
    // The second pass checks what the ServiceMonitor CRD changes: the install (its
    // ServiceMonitors and PrometheusRule), the operator's mode switches (which add and
    // remove the scheduler's monitor) and the uninstall (which removes them). The cases
    // the CRD does not touch run once, in the first pass.
    // Kubernetes' own sig-scheduling specs run in this pass, on the two nodes scripts/e2e
    // gives it (the first pass's cases count on one real node).
    let cases: Vec<(&str, Case)> = if tier.service_monitors {
        let bless = std::env::var("MULTIARCH_E2E_SIG_SCHEDULING_BLESS").is_ok_and(|v| v == "1");
        let mut cases: Vec<(&str, Case)> = Vec::new();
        if bless {
            cases.push((
                "kube-scheduler's sig-scheduling results",
                kube_scheduler_results,
            ));
        }
        cases.extend([
            ("install", install as Case),
            ("scheduler mode", scheduler_mode),
            // Before the specs: scripts/test runs its own tests beside those (they
            // mostly wait), never beside this timing-sensitive case.
            ("mode switches under load", mode_switches),
            ("sig-scheduling specs", sig_scheduling_specs),
            ("uninstall", uninstall),
        ]);
        cases
    } else {
        vec![
            ("install", install),
            ("scheduler mode", scheduler_mode),
            ("architecture rules", architecture_rules),
            ("hostile tenant", hostile_tenant),
            ("exec format errors", exec_format_errors),
            ("x86-64 level label", x86_64_level_label),
            ("loader refusals", loader_refusals),
            ("x86-64 levels placed", x86_64_levels_placed),
            ("misplaced pods", misplaced_pods),
            ("restarts under load", restarts),
            ("certificate rotation", certificate_rotation),
            ("mode switches under load", mode_switches),
            ("releases at 20 pods/s", releases_under_load),
            ("uninstall", uninstall),
        ]
    };
    // MULTIARCH_E2E_CASES (names, comma-separated) runs those alone, between the install
    // and the uninstall: for working on a case, never in CI.
    let only = std::env::var("MULTIARCH_E2E_CASES").ok();
    let chosen = |name: &str| {
        only.as_deref().is_none_or(|only| {
            // The kept results are written when asked for, whatever else runs.
            name == "install"
                || name == "uninstall"
                || name == "kube-scheduler's sig-scheduling results"
                || only.split(',').any(|c| c.trim() == name)
        })
    };
    let (mut passed, mut failed) = (0, 0);
    for (name, case) in cases.into_iter().filter(|(name, _)| chosen(name)) {
        // After a failure only the uninstall runs: later cases need what failed.
        if failed > 0 && name != "uninstall" {
            println!("e2e [{pass}] {name} ... skipped (an earlier case failed)");
            continue;
        }
        let started = Instant::now();
        match case(tier) {
            Ok(()) => {
                passed += 1;
                println!(
                    "e2e [{pass}] {name} ... ok ({:.1} s)",
                    started.elapsed().as_secs_f64()
                );
            }
            Err(e) => {
                failed += 1;
                println!(
                    "e2e [{pass}] {name} ... FAILED ({:.1} s): {e:#}",
                    started.elapsed().as_secs_f64()
                );
                let mut namespaces = vec!["multiarch"];
                namespaces.extend(TEST_NAMESPACES);
                diagnostics::dump(&tier.kubectl, &namespaces);
            }
        }
    }
    if let Err(e) = clean_up(tier) {
        failed += 1;
        println!("e2e [{pass}] clean-up ... FAILED: {e:#}");
    }
    (passed, failed)
}

// ---- install -------------------------------------------------------------------------

/// Where this pass runs the README's commands: `manifests` there is the checkout's.
fn work_dir(tier: &Tier) -> anyhow::Result<std::path::PathBuf> {
    let dir = tier.work.join(if tier.service_monitors {
        "service-monitors"
    } else {
        "vanilla"
    });
    std::fs::create_dir_all(dir.join("bin"))?;
    let link = |target: &Path, at: &Path| -> anyhow::Result<()> {
        let _ = std::fs::remove_file(at);
        std::os::unix::fs::symlink(target, at).with_context(|| format!("link {}", at.display()))
    };
    link(&tier.repo.join("manifests"), &dir.join("manifests"))?;
    link(&tier.kubectl.bin, &dir.join("bin/kubectl"))?;
    Ok(dir)
}

/// Runs the README's block `name` in the work directory, as a user's shell would (with
/// the cluster's kubectl first on PATH and its kubeconfig).
fn run_readme(tier: &Tier, name: &str, env: &[(&str, &str)]) -> anyhow::Result<()> {
    let dir = work_dir(tier)?;
    let script = readme::find_block(&tier.repo, name)?;
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubeconfig = tier.kubectl.kubeconfig.display().to_string();
    let mut all = vec![("PATH", path.as_str()), ("KUBECONFIG", kubeconfig.as_str())];
    all.extend_from_slice(env);
    println!("e2e: running the documented <!-- e2e: {name} --> block");
    readme::run(&script, &dir, &all)
}

/// Every operand runs and is ready.
fn every_operand_is_ready(tier: &Tier) -> anyhow::Result<()> {
    let expected = [
        "multiarch-operator",
        "multiarch-inspector",
        "multiarch-webhook",
        "multiarch-gate-controller",
        "multiarch-scheduler",
        "multiarch-enoexec-handler",
    ];
    wait::until_true("every operand rolled out", ROLLOUT, || {
        let deployments = tier.kubectl.items(&["deployments", "-n", "multiarch"])?;
        let mut missing = Vec::new();
        for name in expected {
            let ready = deployments.iter().any(|d| {
                d["metadata"]["name"] == name
                    && d["status"]["readyReplicas"] == d["spec"]["replicas"]
                    && d["status"]["updatedReplicas"] == d["spec"]["replicas"]
            });
            if !ready {
                missing.push(name);
            }
        }
        let daemon = tier.kubectl.json(&[
            "get",
            "daemonset",
            "-n",
            "multiarch",
            "multiarch-enoexec-daemon",
        ])?;
        let daemon_ready = daemon["status"]["numberReady"].as_i64() >= Some(1)
            && daemon["status"]["numberReady"] == daemon["status"]["desiredNumberScheduled"];
        if !daemon_ready {
            missing.push("multiarch-enoexec-daemon");
        }
        let pods = tier.kubectl.items(&["pods", "-n", "multiarch"])?;
        let not_ready: Vec<String> = pods
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null() && !running_and_ready(p))
            .map(|p| format!("{} {}", pods::name(p), pods::waiting_reason(p)))
            .collect();
        Ok((
            missing.is_empty() && not_ready.is_empty(),
            format!("not rolled out: {missing:?}; pods not ready: {not_ready:?}"),
        ))
    })?;
    Ok(())
}

/// The configuration says where pods go and what the nodes are, in v1beta1 and, through
/// the operator's conversion webhook, in v1alpha1.
fn configuration_says_where_pods_go(tier: &Tier) -> anyhow::Result<()> {
    // The configuration says where pods go and what the nodes are.
    let cppc = tier.cppc()?;
    let status = &cppc["status"];
    ensure!(
        status["routing"] == "Scheduler",
        "routing: {}",
        status["routing"]
    );
    ensure!(condition(status, "Available") == "True", "status: {status}");
    let archs = tier.node_architectures()?;
    ensure!(
        status["architectures"] == json!(archs),
        "architectures {} for nodes of {archs:?}",
        status["architectures"]
    );
    let table = tier.kubectl.run(&["get", "cppc"])?;
    let row = table.lines().nth(1).unwrap_or_default();
    ensure!(
        row.contains("Scheduler")
            && row.contains(&json!(archs).to_string())
            && row.contains("True"),
        "kubectl get cppc:\n{table}"
    );

    // v1alpha1 is served through the operator's conversion webhook, behind its Service;
    // what v1alpha1 has no field for rides in annotations.
    let old = tier.kubectl.json(&[
        "get",
        "clusterpodplacementconfigs.v1alpha1.multiarch.openshift.io",
        "cluster",
    ])?;
    ensure!(
        old["apiVersion"] == "multiarch.openshift.io/v1alpha1",
        "{}",
        old["apiVersion"]
    );
    ensure!(
        old["metadata"]["annotations"]["multiarch.openshift.io/v1beta1-placement"].is_string()
            && old["metadata"]["annotations"]["multiarch.openshift.io/v1beta1-plugins"].is_string(),
        "v1alpha1 without the v1beta1 fields in its annotations: {}",
        old["metadata"]
    );
    ensure!(
        !old["spec"]["namespaceSelector"].is_null(),
        "v1alpha1 spec: {}",
        old["spec"]
    );
    Ok(())
}

/// The operator's validating webhook refuses a second PodPlacementConfig of one priority
/// in a namespace, and deleting the configuration while one exists.
fn validating_webhook_refuses(tier: &Tier) -> anyhow::Result<()> {
    // The operator's validating webhook refuses a second PodPlacementConfig of one
    // priority in a namespace, and deleting the configuration while one exists.
    tier.kubectl.apply(&ppc("first", 10).to_string())?;
    let second = tier.kubectl.output(
        &["create", "-f", "-"],
        &ppc("second", 10).to_string(),
        multiarch_e2e::kubectl::CALL_DEADLINE,
    )?;
    ensure!(
        !second.success && second.stderr.contains("first"),
        "a second PodPlacementConfig of priority 10: {} {}",
        second.stdout,
        second.stderr
    );
    let delete = tier.kubectl.output(
        &["delete", "cppc", "cluster", "--dry-run=server"],
        "",
        multiarch_e2e::kubectl::CALL_DEADLINE,
    )?;
    ensure!(
        !delete.success && delete.stderr.contains(&format!("{NS_PPC}/first")),
        "deleting the ClusterPodPlacementConfig while a PodPlacementConfig exists: {} {}",
        delete.stdout,
        delete.stderr
    );
    tier.delete_namespace(NS_PPC)?;
    Ok(())
}

fn install(tier: &Tier) -> anyhow::Result<()> {
    if tier.service_monitors {
        for (fixture, crd) in [
            ("servicemonitor-crd.yaml", SERVICE_MONITOR_CRD),
            ("prometheusrule-crd.yaml", PROMETHEUS_RULE_CRD),
        ] {
            let yaml = std::fs::read_to_string(tier.repo.join("tests/e2e/fixtures").join(fixture))?;
            tier.kubectl.apply(&yaml)?;
            tier.kubectl.run(&[
                "wait",
                &format!("crd/{crd}"),
                "--for=condition=Established",
                "--timeout=60s",
            ])?;
        }
    }
    run_readme(tier, "install", &[("IMAGE", &tier.image)])?;
    if let Some(config) = &tier.registries_config {
        std::fs::copy(config, work_dir(tier)?.join("registries.yaml"))?;
        run_readme(tier, "registries", &[])?;
    }
    if let Some(socket) = &tier.runtime_socket {
        run_readme(tier, "runtime-socket", &[("RUNTIME_SOCKET", socket)])?;
    }
    if let Some(dir) = &tier.pod_logs_dir {
        run_readme(tier, "pod-logs-dir", &[("POD_LOGS_DIR", dir)])?;
    }

    // Before the ClusterPodPlacementConfig exists, the operator's admission policy refuses
    // a PodPlacementConfig.
    tier.namespace(NS_PPC, json!({}))?;
    let refused = tier.kubectl.output(
        &["create", "--dry-run=server", "-f", "-"],
        &ppc("early", 1).to_string(),
        multiarch_e2e::kubectl::CALL_DEADLINE,
    )?;
    ensure!(
        !refused.success
            && refused
                .stderr
                .contains("create-the-clusterpodplacementconfig-cluster-first"),
        "a PodPlacementConfig before the ClusterPodPlacementConfig: {} {}",
        refused.stdout,
        refused.stderr
    );

    run_readme(tier, "configure", &[])?;

    // The inspector reads the pull secrets a pod names, one by one, and can list none.
    let inspector = "system:serviceaccount:multiarch:multiarch-inspector";
    for (verb, allowed) in [("list", false), ("watch", false), ("get", true)] {
        let answer = tier.kubectl.output(
            &["auth", "can-i", verb, "secrets", "-A", "--as", inspector],
            "",
            multiarch_e2e::kubectl::CALL_DEADLINE,
        )?;
        ensure!(
            answer.stdout.trim() == if allowed { "yes" } else { "no" },
            "kubectl auth can-i {verb} secrets -A --as {inspector}: {} {}",
            answer.stdout,
            answer.stderr
        );
    }

    every_operand_is_ready(tier)?;
    configuration_says_where_pods_go(tier)?;

    validating_webhook_refuses(tier)?;

    // ServiceMonitors exactly when the cluster serves them.
    if tier.service_monitors {
        let monitors = tier
            .kubectl
            .items(&["servicemonitors", "-n", "multiarch"])?;
        let mut names: Vec<&str> = monitors.iter().map(pods::name).collect();
        names.sort_unstable();
        ensure!(
            names
                == [
                    "multiarch-enoexec-daemon",
                    "multiarch-enoexec-handler",
                    "multiarch-gate-controller",
                    "multiarch-inspector",
                    "multiarch-operator",
                    "multiarch-scheduler",
                    "multiarch-webhook"
                ],
            "ServiceMonitors: {names:?}"
        );
        // The alerts, with the CRD: every one of the generated rule group's.
        let rule = tier
            .kubectl
            .json(&["get", "prometheusrule", "multiarch", "-n", "multiarch"])?;
        let alerts: Vec<&str> = rule["spec"]["groups"][0]["rules"]
            .as_array()
            .map(|rules| rules.iter().filter_map(|r| r["alert"].as_str()).collect())
            .unwrap_or_default();
        ensure!(
            alerts.len() >= 12 && alerts.contains(&"MultiarchExecFormatError"),
            "the PrometheusRule's alerts: {alerts:?}"
        );
    }
    Ok(())
}

fn ppc(name: &str, priority: i64) -> Value {
    json!({
        "apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig",
        "metadata": {"name": name, "namespace": NS_PPC},
        "spec": {"priority": priority, "plugins": {"nodeAffinityScoring": {"enabled": true,
                 "platforms": [{"architecture": "arm64", "weight": 10}]}}},
    })
}

// ---- scheduler mode -------------------------------------------------------------------

fn scheduler_mode(tier: &Tier) -> anyhow::Result<()> {
    tier.namespace(NS_SCHEDULER, json!({}))?;
    let images = &tier.test_images;
    // One pod first, so the inspector knows the image: replicas admitted after that carry
    // the architecture constraint (a first replica may be admitted before its answer).
    let first = pods::sleeper(NS_SCHEDULER, "first", &images.multi());
    tier.kubectl.apply(&first.to_string())?;
    wait_all_running(&tier.kubectl, NS_SCHEDULER, "e2e=sleeper", 1, PODS_RUNNING)?;

    tier.kubectl
        .apply(&pods::deployment(NS_SCHEDULER, "web", &images.multi(), 2).to_string())?;
    let web = wait_all_running(&tier.kubectl, NS_SCHEDULER, "app=web", 2, PODS_RUNNING)?;
    for pod in &web {
        let name = pods::name(pod);
        ensure!(
            pod["spec"]["schedulerName"] == "multiarch-scheduler",
            "{name}: schedulerName {}",
            pod["spec"]["schedulerName"]
        );
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        let (from, message) = wait_event(&tier.kubectl, NS_SCHEDULER, name, "Scheduled", EVENT)?;
        ensure!(
            from == "multiarch-scheduler",
            "{name} was scheduled by {from}"
        );
        ensure!(
            message.contains(&format!("to {node} ("))
                && message.contains("images support amd64, arm64"),
            "{name}: Scheduled says {message:?}"
        );
        ensure!(
            required_architectures(pod) == ["amd64", "arm64"],
            "{name}: the admission-time constraint for autoscalers: {}",
            pod["spec"]["affinity"]
        );
    }

    declared_features(tier)?;
    heap_on_huge_pages(tier)?;

    // An image no node can run stays Pending, and says why.
    let foreign = tier.foreign_architecture()?;
    let stuck = pods::sleeper(NS_SCHEDULER, "foreign-only", &images.only(&foreign));
    tier.kubectl.apply(&stuck.to_string())?;
    let (from, message) = wait_event(
        &tier.kubectl,
        NS_SCHEDULER,
        "foreign-only",
        "FailedScheduling",
        EVENT,
    )?;
    ensure!(
        from == "multiarch-scheduler",
        "FailedScheduling from {from}"
    );
    ensure!(
        message.contains(&format!(
            "didn't match the pod's image architectures (images support {foreign})"
        )),
        "FailedScheduling says {message:?}"
    );
    let pod = pods::get(&tier.kubectl, NS_SCHEDULER, "foreign-only")?;
    ensure!(
        pods::phase(&pod) == "Pending" && pod["spec"]["nodeName"].is_null(),
        "foreign-only: {} on {}",
        pods::phase(&pod),
        pod["spec"]["nodeName"]
    );
    // Nothing can place it: it must not hold the uninstall's drain.
    tier.kubectl.run(&[
        "delete",
        "pod",
        "-n",
        NS_SCHEDULER,
        "foreign-only",
        "--wait=true",
        "--timeout=60s",
    ])?;
    Ok(())
}

/// The scheduler executed itself again with glibc's huge-page tunable where the node's
/// kernel gives huge pages only to memory that asks (the kit's node is this machine, so
/// its mode is the node's), and left it alone elsewhere.
fn heap_on_huge_pages(tier: &Tier) -> anyhow::Result<()> {
    let mode =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let scheduler = lease_holder(tier, "multiarch-scheduler")?;
    let logs = tier.kubectl.run(&["logs", "-n", "multiarch", &scheduler])?;
    let started = logs
        .lines()
        .find(|l| l.contains("scheduler started"))
        .context("the scheduler's log has no \"scheduler started\"")?;
    let asked = started.contains("glibc.malloc.hugetlb=1");
    ensure!(
        asked == mode.contains("[madvise]"),
        "transparent huge pages {:?}, the scheduler started with: {started}",
        mode.trim()
    );
    Ok(())
}

/// A pod that needs a node feature (a restart rule `RestartAllContainers`) is placed by
/// multiarch-scheduler on a node whose kubelet declares it in `status.declaredFeatures`
/// (a 1.36 kubelet does): the field and the rule as the real API server serves them.
fn declared_features(tier: &Tier) -> anyhow::Result<()> {
    const FEATURE: &str = "RestartAllContainersOnContainerExits";
    let declaring: Vec<String> = tier
        .kubectl
        .items(&["nodes"])?
        .iter()
        .filter(|n| {
            n["status"]["declaredFeatures"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f == FEATURE))
        })
        .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    if declaring.is_empty() {
        println!(
            "e2e: no node declares {FEATURE} (a kubelet older than 1.36?): its placement is not checked"
        );
        return Ok(());
    }
    let mut restarter = pods::sleeper(NS_SCHEDULER, "restarter", &tier.test_images.multi());
    restarter["metadata"]["labels"] = json!({"e2e": "restarter"});
    restarter["spec"]["containers"][0]["restartPolicy"] = json!("Never");
    restarter["spec"]["containers"][0]["restartPolicyRules"] = json!([
        {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}
    ]);
    tier.kubectl.apply(&restarter.to_string())?;
    let running = wait_all_running(
        &tier.kubectl,
        NS_SCHEDULER,
        "e2e=restarter",
        1,
        PODS_RUNNING,
    )?;
    let node = running[0]["spec"]["nodeName"].as_str().unwrap_or_default();
    ensure!(
        declaring.iter().any(|d| d == node),
        "restarter on {node}, which does not declare {FEATURE} (those that do: {declaring:?})"
    );
    let (from, _) = wait_event(&tier.kubectl, NS_SCHEDULER, "restarter", "Scheduled", EVENT)?;
    ensure!(
        from == "multiarch-scheduler",
        "restarter was scheduled by {from}"
    );
    Ok(())
}

// ---- exec format errors ---------------------------------------------------------------

/// The node image carries the daemon alone: its `--help` runs, the scheduler's does not.
fn node_image_carries_the_daemon_alone(tier: &Tier, node: &str) -> anyhow::Result<()> {
    if let Some(node_image) = &tier.node_image {
        for (name, args, phase) in [
            (
                "node-image-daemon",
                json!(["enoexec-daemon", "--help"]),
                "Succeeded",
            ),
            (
                "node-image-scheduler",
                json!(["scheduler", "--help"]),
                "Failed",
            ),
        ] {
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": NS_ENOEXEC},
                "spec": {"nodeName": node, "restartPolicy": "Never",
                         "containers": [{"name": "node", "image": node_image, "args": args}]},
            });
            tier.kubectl.apply(&pod.to_string())?;
            wait::until_true(&format!("{name} {phase}"), PODS_RUNNING, || {
                let pod = pods::get(&tier.kubectl, NS_ENOEXEC, name)?;
                Ok((
                    pods::phase(&pod) == phase,
                    format!("phase {}", pods::phase(&pod)),
                ))
            })?;
        }
    }
    Ok(())
}

fn exec_format_errors(tier: &Tier) -> anyhow::Result<()> {
    // Placement is bypassed twice over: an excluded namespace, and a pod pinned to a node
    // with nodeName. The container then really runs a binary of another architecture.
    tier.namespace(
        NS_ENOEXEC,
        json!({"multiarch.openshift.io/exclude-pod-placement": "true"}),
    )?;
    let (node, node_arch) = tier.a_node()?;
    let foreign = tier.foreign_architecture()?;
    let image = tier.test_images.single(&foreign);
    // A real Prometheus with the alert rules, scraping every component before the error
    // (once: the vanilla pass).
    let prometheus = match (tier.service_monitors, prometheus::available()) {
        (true, _) => None,
        (false, true) => {
            let prometheus = prometheus::Prometheus::start(tier)?;
            let targets = prometheus.targets_up(EVENT)?;
            println!("e2e: Prometheus scrapes {targets} multiarch targets");
            Some(prometheus)
        }
        (false, false) => {
            println!(
                "SKIPPED: e2e alerts: prometheus is not installed (Debian package prometheus; scripts/test installs it)"
            );
            None
        }
    };
    let mut pod = pods::sleeper(NS_ENOEXEC, "wrong-arch", &image);
    pod["spec"]["nodeName"] = json!(node);
    tier.kubectl.apply(&pod.to_string())?;

    let (from, message) = wait_event(
        &tier.kubectl,
        NS_ENOEXEC,
        "wrong-arch",
        "ExecFormatError",
        EVENT,
    )?;
    ensure!(
        from == "multiarch-enoexec-handler",
        "ExecFormatError from {from}"
    );
    let expected = format!(
        "container app (image {image}) cannot run /bin/sleep on this {node_arch} node: exec format error; the image has no {node_arch} build"
    );
    ensure!(
        message == expected,
        "ExecFormatError says {message:?}, not {expected:?}"
    );
    if let Some(prometheus) = &prometheus {
        let scraped = prometheus.metric_names()?;
        let named = prometheus.names_in_rules()?;
        let missing: Vec<&String> = named.iter().filter(|n| !scraped.contains(n)).collect();
        ensure!(
            missing.is_empty(),
            "metrics the alert rules query that no component's endpoint serves: {missing:?}"
        );
        let labels = prometheus.firing("MultiarchExecFormatError", EVENT)?;
        println!(
            "e2e: every one of the {} metrics the alert rules query is scraped; MultiarchExecFormatError fired for {}",
            named.len(),
            labels["pod"]
        );
    }
    wait::until_true("the exec-format-error label", EVENT, || {
        let pod = pods::get(&tier.kubectl, NS_ENOEXEC, "wrong-arch")?;
        let label = &pod["metadata"]["labels"]["multiarch.openshift.io/exec-format-error"];
        Ok((label == "true", format!("label {label}")))
    })?;

    // The reports are handled and deleted; once the pod goes, none is left for it.
    tier.kubectl.run(&[
        "delete",
        "pod",
        "-n",
        NS_ENOEXEC,
        "wrong-arch",
        "--wait=true",
        "--timeout=60s",
    ])?;
    wait::until_true("no ENoExecEvent left", EVENT, || {
        let left = tier.kubectl.items(&["enoexecevents", "-n", "multiarch"])?;
        Ok((left.is_empty(), format!("{} left", left.len())))
    })?;

    node_image_carries_the_daemon_alone(tier, &node)?;
    tier.delete_namespace(NS_ENOEXEC)
}

// ---- misplaced pods ------------------------------------------------------------------

/// Waits for an event `reason` on `pod` whose message contains `words`; the message.
fn wait_note(tier: &Tier, pod: &str, reason: &str, words: &str) -> anyhow::Result<String> {
    wait::until(
        &format!("{reason} on {pod} saying {words:?}"),
        Duration::from_secs(300),
        || {
            let all = pods::events(&tier.kubectl, NS_MISPLACED, pod)?;
            Ok(
                match all
                    .iter()
                    .find(|(r, _, m)| r == reason && m.contains(words))
                {
                    Some((_, _, message)) => Check::Done(message.clone()),
                    None => Check::NotYet(format!("events so far: {all:?}")),
                },
            )
        },
    )
}

/// A Deployment's pod really runs a foreign binary (placed by the default scheduler in a
/// namespace routing excludes); `misplacedPodCorrection` reports it (not routed), then,
/// once the namespace is routed, leaves it (no node of its architecture), then, with a
/// node of its architecture, evicts it: the ReplicaSet's replacement is routed and bound
/// there. Each step is driven by the container's own exec format errors.
fn misplaced_pods(tier: &Tier) -> anyhow::Result<()> {
    let patch = |plugin: Value| {
        tier.kubectl.run(&[
            "patch",
            "cppc",
            "cluster",
            "--type=merge",
            "-p",
            &json!({"spec": {"plugins": {"misplacedPodCorrection": plugin}}}).to_string(),
        ])
    };
    patch(json!({"enabled": true}))?;
    tier.namespace(
        NS_MISPLACED,
        json!({"multiarch.openshift.io/exclude-pod-placement": "true"}),
    )?;
    let foreign = tier.foreign_architecture()?;
    let mut deployment =
        pods::deployment(NS_MISPLACED, "wrong", &tier.test_images.single(&foreign), 1);
    // Its replacement may land on a node without a kubelet (tainted unreachable).
    deployment["spec"]["template"]["spec"]["tolerations"] = json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists"},
    ]);
    tier.kubectl.apply(&deployment.to_string())?;
    let first = wait::until("the wrong pod", PODS_RUNNING, || {
        let pods = tier
            .kubectl
            .items(&["pods", "-n", NS_MISPLACED, "-l", "app=wrong"])?;
        Ok(match pods.first() {
            Some(pod) if !pod["spec"]["nodeName"].is_null() => {
                Check::Done(pods::name(pod).to_owned())
            }
            _ => Check::NotYet(format!("{} pods", pods.len())),
        })
    })?;
    let mut shown = Vec::new();
    shown.push(wait_note(
        tier,
        &first,
        "ExecFormatError",
        "exec format error",
    )?);
    shown.push(wait_note(
        tier,
        &first,
        "MisplacedPodNotCorrected",
        "namespaceSelector does not select namespace e2e-misplaced",
    )?);
    // Routed now: its replacement would be placed; no node runs its architecture.
    tier.kubectl.run(&[
        "label",
        "namespace",
        NS_MISPLACED,
        "multiarch.openshift.io/exclude-pod-placement-",
    ])?;
    shown.push(wait_note(
        tier,
        &first,
        "MisplacedPodNotCorrected",
        &format!("no node runs an architecture its images support ({foreign})"),
    )?);
    wait::until_true("status.misplacedPods", EVENT, || {
        let count = &tier.cppc()?["status"]["misplacedPods"];
        Ok((
            count.as_i64().unwrap_or(0) >= 1,
            format!("misplacedPods {count}"),
        ))
    })?;
    // A node of its architecture: the next exec format error moves the pod there.
    tier.add_node_object(FAKE_NODE, json!({"kubernetes.io/arch": foreign}))?;
    shown.push(wait_note(
        tier,
        &first,
        "MisplacedPodEvicted",
        "ReplicaSet",
    )?);
    let replacement = wait::until("the replacement bound", PODS_RUNNING, || {
        let pods = tier
            .kubectl
            .items(&["pods", "-n", NS_MISPLACED, "-l", "app=wrong"])?;
        Ok(match pods.iter().find(|p| pods::name(p) != first) {
            Some(pod) if pod["spec"]["nodeName"] == FAKE_NODE => Check::Done(pod.clone()),
            Some(pod) => Check::NotYet(format!(
                "{} on {:?} by {}",
                pods::name(pod),
                pod["spec"]["nodeName"],
                pod["spec"]["schedulerName"]
            )),
            None => Check::NotYet("no replacement yet".into()),
        })
    })?;
    ensure!(
        replacement["spec"]["schedulerName"] == "multiarch-scheduler",
        "the replacement was not routed: {}",
        replacement["spec"]["schedulerName"]
    );
    for note in &shown {
        println!("    event on {NS_MISPLACED}/{first}: {note}");
    }
    remove_misplaced(tier)?;
    patch(Value::Null)?;
    Ok(())
}

/// The case's objects gone: no kubelet confirms the deletion of a pod on the fake node,
/// so its pods are deleted at once (nothing runs them) before the namespace.
fn remove_misplaced(tier: &Tier) -> anyhow::Result<()> {
    tier.kubectl.run(&[
        "delete",
        "deployment",
        "wrong",
        "-n",
        NS_MISPLACED,
        "--ignore-not-found",
    ])?;
    tier.kubectl.run(&[
        "delete",
        "pods",
        "--all",
        "-n",
        NS_MISPLACED,
        "--force",
        "--grace-period=0",
        "--ignore-not-found",
    ])?;
    tier.kubectl
        .run(&["delete", "node", FAKE_NODE, "--ignore-not-found"])?;
    tier.delete_namespace(NS_MISPLACED)
}

// ---- restarts -------------------------------------------------------------------------

/// The pod holding `lease` in multiarch's namespace (an identity is the pod's name, or
/// `<pod>_<uuid>` as kube-scheduler's).
fn lease_holder(tier: &Tier, lease: &str) -> anyhow::Result<String> {
    let lease = tier
        .kubectl
        .json(&["get", "lease", "-n", "multiarch", lease])?;
    let identity = lease["spec"]["holderIdentity"]
        .as_str()
        .context("the lease has no holder")?;
    Ok(identity.split('_').next().unwrap_or(identity).to_owned())
}

/// Deletes `pod` of `deployment` and waits until the Deployment has every replica
/// ready again, none of them `pod`.
fn replace_pod(tier: &Tier, deployment: &str, pod: &str) -> anyhow::Result<()> {
    println!("e2e: deleting {pod} ({deployment})");
    tier.kubectl
        .run(&["delete", "pod", "-n", "multiarch", pod, "--wait=false"])?;
    wait::until_true(&format!("{deployment} whole again"), ROLLOUT, || {
        let selector = format!(
            "app.kubernetes.io/name=multiarch,app.kubernetes.io/component={}",
            deployment.trim_start_matches("multiarch-")
        );
        let pods = tier
            .kubectl
            .items(&["pods", "-n", "multiarch", "-l", &selector])?;
        let ready: Vec<&str> = pods
            .iter()
            .filter(|p| running_and_ready(p) && p["metadata"]["deletionTimestamp"].is_null())
            .map(pods::name)
            .collect();
        let want = tier
            .kubectl
            .json(&["get", "deployment", "-n", "multiarch", deployment])?["spec"]["replicas"]
            .as_u64()
            .unwrap_or(1) as usize;
        Ok((
            ready.len() == want && !ready.contains(&pod),
            format!("ready: {ready:?}"),
        ))
    })
}

fn restarts(tier: &Tier) -> anyhow::Result<()> {
    tier.namespace(NS_RESTARTS, json!({}))?;
    let creator = Creator::start(
        tier.kubectl.clone(),
        NS_RESTARTS,
        "load",
        &tier.test_images.multi(),
        Duration::from_secs(1),
    );
    let outcome = (|| {
        // The leaders, so that each restart is a handover.
        let operator = lease_holder(tier, "multiarch-operator")?;
        replace_pod(tier, "multiarch-operator", &operator)?;
        let scheduler = lease_holder(tier, "multiarch-scheduler")?;
        replace_pod(tier, "multiarch-scheduler", &scheduler)?;
        let webhooks = tier.kubectl.items(&[
            "pods",
            "-n",
            "multiarch",
            "-l",
            "app.kubernetes.io/name=multiarch,app.kubernetes.io/component=webhook",
        ])?;
        let webhook = webhooks
            .first()
            .map(pods::name)
            .context("no webhook pod")?
            .to_owned();
        replace_pod(tier, "multiarch-webhook", &webhook)?;
        // A few more after the last replacement, and ten at least in all.
        let so_far = creator.created_so_far();
        creator.wait_for((so_far + 3).max(10), ROLLOUT)?;
        Ok::<(), anyhow::Error>(())
    })();
    let created = creator.stop();
    outcome?;
    ensure!(
        created.refused.is_empty(),
        "pod creations refused: {:?}",
        created.refused
    );

    let all = wait_all_running(
        &tier.kubectl,
        NS_RESTARTS,
        "e2e=sleeper",
        created.names.len(),
        PODS_RUNNING,
    )?;
    let mut routed = 0;
    for pod in &all {
        let name = pods::name(pod);
        if pod["spec"]["schedulerName"] == "multiarch-scheduler" {
            routed += 1;
            let (from, _) = wait_event(&tier.kubectl, NS_RESTARTS, name, "Scheduled", EVENT)?;
            ensure!(
                from == "multiarch-scheduler",
                "{name}: routed, but scheduled by {from}"
            );
        }
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        let arch =
            tier.kubectl.json(&["get", "node", node])?["metadata"]["labels"]["kubernetes.io/arch"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
        ensure!(
            ["amd64", "arm64"].contains(&arch.as_str()),
            "{name} on {node} ({arch}): misplaced"
        );
    }
    println!(
        "e2e: {} pods created while the operator, the scheduler and a webhook were replaced: {routed} routed to multiarch-scheduler, all running",
        all.len()
    );
    // Pods the webhook could not route (one replica going away) are admitted unchanged
    // (failurePolicy Ignore): most must still have been routed.
    ensure!(
        routed * 2 > all.len(),
        "only {routed} of {} pods routed",
        all.len()
    );
    tier.delete_namespace(NS_RESTARTS)
}

// ---- certificate rotation --------------------------------------------------------------

const WEBHOOK_TLS: &str = "multiarch-webhook-tls";
const WEBHOOK_PODS: &str = "app.kubernetes.io/name=multiarch,app.kubernetes.io/component=webhook";

/// The webhook's serving certificate replaced: the operator issues a new one into its
/// Secret, the kubelet updates the files mounted from it, each webhook replica reloads
/// them, and the API server keeps calling the webhook (it trusts the CA, not the leaf).
fn certificate_rotation(tier: &Tier) -> anyhow::Result<()> {
    tier.namespace(NS_ROTATION, json!({}))?;
    let certificate = |secret: &Value| {
        secret["data"]["tls.crt"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let before =
        certificate(
            &tier
                .kubectl
                .json(&["get", "secret", "-n", "multiarch", WEBHOOK_TLS])?,
        );
    let replicas: Vec<String> = tier
        .kubectl
        .items(&["pods", "-n", "multiarch", "-l", WEBHOOK_PODS])?
        .iter()
        .filter(|p| running_and_ready(p))
        .map(|p| pods::name(p).to_owned())
        .collect();
    ensure!(!replicas.is_empty(), "no webhook replica");

    // Deleting the Secret makes the operator issue a new certificate now, as it does
    // when a third of the old one's life is left.
    tier.kubectl
        .run(&["delete", "secret", "-n", "multiarch", WEBHOOK_TLS])?;
    wait::until_true("a new webhook certificate", ROLLOUT, || {
        let Some(secret) = tier
            .kubectl
            .get_opt(&["secret", "-n", "multiarch", WEBHOOK_TLS])?
        else {
            return Ok((false, "not issued yet".into()));
        };
        let now = certificate(&secret);
        Ok((
            !now.is_empty() && now != before,
            "the old certificate".into(),
        ))
    })?;
    for replica in &replicas {
        wait::until_true(
            &format!("{replica} serving the new certificate"),
            ROLLOUT,
            || {
                let logs = tier.kubectl.run(&["logs", "-n", "multiarch", replica])?;
                Ok((
                    logs.contains("serving certificate reloaded"),
                    "the kubelet has not updated its files yet".into(),
                ))
            },
        )?;
    }
    // Pods are still routed: the API server's TLS handshake with the new certificate works
    // (a failed call would admit the pod unchanged, failurePolicy Ignore).
    for n in 0..3 {
        let name = format!("after-{n}");
        tier.kubectl
            .apply(&pods::sleeper(NS_ROTATION, &name, &tier.test_images.multi()).to_string())?;
        let pod = pods::get(&tier.kubectl, NS_ROTATION, &name)?;
        ensure!(
            pod["spec"]["schedulerName"] == "multiarch-scheduler",
            "{name} not routed after the rotation: {}",
            pod["spec"]["schedulerName"]
        );
    }
    wait_all_running(&tier.kubectl, NS_ROTATION, "e2e=sleeper", 3, PODS_RUNNING)?;
    tier.delete_namespace(NS_ROTATION)
}

// ---- mode switches ---------------------------------------------------------------------

fn set_mode(tier: &Tier, mode: &str) -> anyhow::Result<()> {
    tier.kubectl.run(&[
        "patch",
        "cppc",
        "cluster",
        "--type=merge",
        "-p",
        &json!({"spec": {"placement": {"mode": mode}}}).to_string(),
    ])?;
    Ok(())
}

/// Switches to `mode` while pods are created; every pod ends running and none is gated.
/// The pods created once the switch was done (at least one).
fn switch_under_load(tier: &Tier, mode: &str, prefix: &str) -> anyhow::Result<Vec<Value>> {
    let creator = Creator::start(
        tier.kubectl.clone(),
        NS_GATE,
        prefix,
        &tier.test_images.multi(),
        Duration::from_secs(1),
    );
    let switched = (|| {
        // Pods created before the switch, then the switch while more are created.
        creator.wait_for(2, ROLLOUT)?;
        set_mode(tier, mode)?;
        tier.wait_routing(mode, ROLLOUT)?;
        // The API server follows the webhook configuration through a watch: give it a
        // moment, and count the pod that may be on its way as created before.
        std::thread::sleep(Duration::from_secs(2));
        let before = creator.created_so_far() + 1;
        creator.wait_for(before + 4, ROLLOUT)?;
        Ok::<usize, anyhow::Error>(before)
    })();
    let created = creator.stop();
    let before = switched?;
    ensure!(
        created.refused.is_empty(),
        "pod creations refused: {:?}",
        created.refused
    );
    let after: Vec<String> = created.names.iter().skip(before).cloned().collect();
    let total = tier
        .kubectl
        .items(&["pods", "-n", NS_GATE, "-l", "e2e=sleeper"])?
        .len();
    let all = wait_all_running(&tier.kubectl, NS_GATE, "e2e=sleeper", total, PODS_RUNNING)?;
    for pod in &all {
        ensure!(gates(pod).is_empty(), "{} still gated", pods::name(pod));
    }
    println!(
        "e2e: switched to {mode} while creating {} pods ({} after the switch), all running",
        created.names.len(),
        after.len()
    );
    let after: Vec<Value> = all
        .into_iter()
        .filter(|p| after.iter().any(|a| a == pods::name(p)))
        .collect();
    ensure!(
        !after.is_empty(),
        "no pod was created after the switch to {mode}"
    );
    Ok(after)
}

fn mode_switches(tier: &Tier) -> anyhow::Result<()> {
    tier.namespace(NS_GATE, json!({}))?;

    // To gate mode: multiarch-scheduler's pods are placed before it goes; new pods are
    // gated, get the architecture affinity, and kube-scheduler places them.
    for pod in &switch_under_load(tier, "SchedulingGate", "to-gate")? {
        let name = pods::name(pod);
        ensure!(
            pod["spec"]["schedulerName"] == "default-scheduler",
            "{name}: created in gate mode, schedulerName {}",
            pod["spec"]["schedulerName"]
        );
        ensure!(
            pod["metadata"]["labels"]["multiarch.openshift.io/scheduling-gate"] == "removed",
            "{name}: labels {}",
            pod["metadata"]["labels"]
        );
        ensure!(
            required_architectures(pod) == ["amd64", "arm64"],
            "{name}: affinity {}",
            pod["spec"]["affinity"]
        );
        let all_events = events(&tier.kubectl, NS_GATE, name)?;
        ensure!(
            all_events
                .iter()
                .any(|(r, _, _)| r == "ArchAwareSchedGateRemovalSuccess"),
            "{name}: events {all_events:?}"
        );
        let (from, _) = wait_event(&tier.kubectl, NS_GATE, name, "Scheduled", EVENT)?;
        ensure!(from == "default-scheduler", "{name}: scheduled by {from}");
    }
    // The scheduler is removed once nothing waits for it.
    wait::until_true("multiarch-scheduler removed in gate mode", ROLLOUT, || {
        let installed =
            tier.kubectl
                .get_opt(&["deployment", "-n", "multiarch", "multiarch-scheduler"])?;
        Ok((installed.is_none(), "still installed".into()))
    })?;
    scheduler_monitor_follows(tier, false)?;
    no_pod_left_waiting(tier)?;

    // And back: new pods go to multiarch-scheduler again.
    for pod in &switch_under_load(tier, "Scheduler", "to-scheduler")? {
        let name = pods::name(pod);
        ensure!(
            pod["spec"]["schedulerName"] == "multiarch-scheduler",
            "{name}: created in scheduler mode, schedulerName {}",
            pod["spec"]["schedulerName"]
        );
        ensure!(gates(pod).is_empty(), "{name} gated in scheduler mode");
    }
    scheduler_monitor_follows(tier, true)?;
    no_pod_left_waiting(tier)?;
    tier.delete_namespace(NS_GATE)
}

/// With the ServiceMonitor CRD, the scheduler's monitor goes and comes back with the
/// scheduler (Prometheus would otherwise scrape, and alert on, a target that is gone).
fn scheduler_monitor_follows(tier: &Tier, installed: bool) -> anyhow::Result<()> {
    if !tier.service_monitors {
        return Ok(());
    }
    wait::until_true(
        &format!(
            "the scheduler's ServiceMonitor {}",
            if installed { "back" } else { "removed" }
        ),
        ROLLOUT,
        || {
            let monitor = tier.kubectl.get_opt(&[
                "servicemonitor",
                "-n",
                "multiarch",
                "multiarch-scheduler",
            ])?;
            Ok((
                monitor.is_some() == installed,
                format!("present: {}", monitor.is_some()),
            ))
        },
    )
}

/// No pod anywhere carries multiarch's gate or waits unbound for multiarch-scheduler.
fn no_pod_left_waiting(tier: &Tier) -> anyhow::Result<()> {
    let pods = tier.kubectl.items(&["pods", "-A"])?;
    let waiting: Vec<String> = pods
        .iter()
        .filter(|p| {
            gates(p)
                .iter()
                .any(|g| g == "multiarch.openshift.io/scheduling-gate")
                || (p["spec"]["schedulerName"] == "multiarch-scheduler"
                    && p["spec"]["nodeName"].is_null()
                    && p["metadata"]["deletionTimestamp"].is_null())
        })
        .map(|p| {
            format!(
                "{}/{}",
                p["metadata"]["namespace"].as_str().unwrap_or(""),
                pods::name(p)
            )
        })
        .collect();
    ensure!(
        waiting.is_empty(),
        "pods gated or waiting for multiarch-scheduler: {waiting:?}"
    );
    Ok(())
}

// ---- releases under load ----------------------------------------------------------------

/// The churn's node: no kubelet, room for thousands of pods, a taint only they tolerate.
fn churn_node(tier: &Tier) -> anyhow::Result<()> {
    let arch = tier
        .node_architectures()?
        .into_iter()
        .next()
        .context("the cluster has no node")?;
    tier.add_node_object_with(
        CHURN_NODE,
        json!({"kubernetes.io/arch": arch}),
        json!({"taints": [{"key": "e2e/churn", "effect": "NoSchedule"}]}),
        json!({"cpu": "64", "memory": "256Gi", "pods": "10000"}),
    )
}

/// Every churn pod ends bound to a node (none gated, none pending for a scheduler that
/// is gone), and no pod the API server deleted meanwhile had a node: nothing running was
/// force-killed by a release.
fn churn_settled(tier: &Tier, deleted: &[Value], what: &str) -> anyhow::Result<()> {
    wait::until_true(&format!("every churn pod bound ({what})"), ROLLOUT, || {
        let pods = tier.kubectl.items(&["pods", "-n", NS_CHURN])?;
        let unbound: Vec<String> = pods
            .iter()
            .filter(|p| p["spec"]["nodeName"].is_null())
            .map(|p| {
                format!(
                    "{} ({}, gates {:?})",
                    pods::name(p),
                    p["spec"]["schedulerName"],
                    gates(p)
                )
            })
            .take(10)
            .collect();
        Ok((unbound.is_empty(), format!("unbound: {unbound:?}")))
    })?;
    no_pod_left_waiting(tier)?;
    let bound: Vec<String> = deleted
        .iter()
        .filter(|p| !p["spec"]["nodeName"].is_null())
        .map(|p| pods::name(p).to_owned())
        .collect();
    ensure!(
        bound.is_empty(),
        "pods deleted while bound to a node: {bound:?}"
    );
    let released = deleted.len();
    let total = tier.kubectl.items(&["pods", "-n", NS_CHURN])?.len();
    println!(
        "e2e: {what}: {total} churn pods, all bound; {released} deleted unbound to be recreated, none deleted on a node"
    );
    Ok(())
}

/// Pods at 20/s while the route switches to gate mode and back: the scheduler serves
/// what was routed to it until its route settles, the gate controller what was gated.
fn releases_under_load(tier: &Tier) -> anyhow::Result<()> {
    tier.namespace(NS_CHURN, json!({}))?;
    churn_node(tier)?;
    let deletions = PodWatch::start(&tier.kubectl, Scope::Namespace(NS_CHURN), "DELETED")?;
    let churn = Churn::start(
        tier.kubectl.clone(),
        NS_CHURN,
        "switch",
        &tier.test_images.multi(),
        CHURN_NODE,
        CHURN_RATE,
    );
    let switched = (|| {
        churn.wait_for(2 * CHURN_RATE, ROLLOUT)?;
        set_mode(tier, "SchedulingGate")?;
        tier.wait_routing("SchedulingGate", ROLLOUT)?;
        // Still under load until the scheduler's route has settled and it is gone.
        wait::until_true("multiarch-scheduler removed under load", ROLLOUT, || {
            let installed =
                tier.kubectl
                    .get_opt(&["deployment", "-n", "multiarch", "multiarch-scheduler"])?;
            Ok((installed.is_none(), "still installed".into()))
        })?;
        let now = churn.created_so_far();
        churn.wait_for(now + 2 * CHURN_RATE, ROLLOUT)?;
        set_mode(tier, "Scheduler")?;
        tier.wait_routing("Scheduler", ROLLOUT)?;
        let now = churn.created_so_far();
        churn.wait_for(now + 3 * CHURN_RATE, ROLLOUT)?;
        Ok::<(), anyhow::Error>(())
    })();
    let created = churn.stop();
    let outcome = switched.and_then(|()| {
        ensure!(
            created.refused.is_empty(),
            "pod creations refused: {:?}",
            created.refused.iter().take(5).collect::<Vec<_>>()
        );
        wait::until_true("every churn pod bound", ROLLOUT, || {
            let pods = tier.kubectl.items(&["pods", "-n", NS_CHURN])?;
            let unbound = pods
                .iter()
                .filter(|p| p["spec"]["nodeName"].is_null())
                .count();
            Ok((unbound == 0, format!("{unbound} unbound")))
        })
    });
    let deleted = deletions.stop();
    outcome?;
    churn_settled(tier, &deleted, "switched to gate mode and back")
}

/// The uninstall's churn, when the churn case ran: pods at 20/s while the
/// ClusterPodPlacementConfig is deleted.
struct UninstallChurn {
    churn: Churn,
    deletions: PodWatch,
    reaper: Reaper,
}

/// The node daemon's pod on the churn node (its DaemonSet tolerates every taint) ends
/// only when forced, no kubelet being there to confirm it: while the uninstall runs, the
/// test forces it, as it would remove any pod it stranded on a node it invented.
struct Reaper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Reaper {
    fn start(tier: &Tier) -> Reaper {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (stopping, kubectl) = (stop.clone(), tier.kubectl.clone());
        let thread = std::thread::spawn(move || {
            let selector = format!("spec.nodeName={CHURN_NODE}");
            while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
                let _ = kubectl.run(&[
                    "delete",
                    "pods",
                    "-n",
                    "multiarch",
                    "--field-selector",
                    &selector,
                    "--force",
                    "--grace-period=0",
                    "--ignore-not-found",
                    "--wait=false",
                ]);
                std::thread::sleep(Duration::from_secs(2));
            }
        });
        Reaper { stop, thread }
    }

    fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.thread.join();
    }
}

fn start_uninstall_churn(tier: &Tier) -> anyhow::Result<Option<UninstallChurn>> {
    if tier.kubectl.get_opt(&["namespace", NS_CHURN])?.is_none()
        || tier.kubectl.get_opt(&["node", CHURN_NODE])?.is_none()
    {
        return Ok(None);
    }
    let deletions = PodWatch::start(&tier.kubectl, Scope::Namespace(NS_CHURN), "DELETED")?;
    let churn = Churn::start(
        tier.kubectl.clone(),
        NS_CHURN,
        "uninstall",
        &tier.test_images.multi(),
        CHURN_NODE,
        CHURN_RATE,
    );
    churn.wait_for(2 * CHURN_RATE, ROLLOUT)?;
    let reaper = Reaper::start(tier);
    Ok(Some(UninstallChurn {
        churn,
        deletions,
        reaper,
    }))
}

fn finish_uninstall_churn(tier: &Tier, running: UninstallChurn) -> anyhow::Result<()> {
    let created = running.churn.stop();
    let settled = wait::until_true("every churn pod bound after the uninstall", ROLLOUT, || {
        let pods = tier.kubectl.items(&["pods", "-n", NS_CHURN])?;
        let unbound = pods
            .iter()
            .filter(|p| p["spec"]["nodeName"].is_null())
            .count();
        Ok((unbound == 0, format!("{unbound} unbound")))
    });
    let deleted = running.deletions.stop();
    running.reaper.stop();
    settled?;
    ensure!(
        created.refused.is_empty(),
        "pod creations refused: {:?}",
        created.refused.iter().take(5).collect::<Vec<_>>()
    );
    println!(
        "e2e: created {} pods at {CHURN_RATE}/s while multiarch was uninstalled",
        created.names.len()
    );
    churn_settled(tier, &deleted, "uninstalled under load")
}

/// The churn's pods (no kubelet confirms their deletion: at once) and node. A thousand
/// pods take well over kubectl's usual minute to delete.
fn remove_churn(tier: &Tier) -> anyhow::Result<()> {
    if tier.kubectl.get_opt(&["namespace", NS_CHURN])?.is_some() {
        // One deletecollection: kubectl's `delete --all` deletes them one by one.
        tier.kubectl.run_with(
            &[
                "delete",
                "--raw",
                &format!("/api/v1/namespaces/{NS_CHURN}/pods?gracePeriodSeconds=0"),
            ],
            "",
            CHURN_CLEAN_UP,
        )?;
    }
    tier.kubectl
        .run(&["delete", "node", CHURN_NODE, "--ignore-not-found"])?;
    Ok(())
}

/// How long removing the churn's pods may take.
const CHURN_CLEAN_UP: Duration = Duration::from_secs(600);

// ---- uninstall ------------------------------------------------------------------------

fn uninstall(tier: &Tier) -> anyhow::Result<()> {
    let churn = start_uninstall_churn(tier)?;
    run_readme(tier, "uninstall", &[])?;
    // The churn judged first: then its node goes, and with it the node daemon's pod
    // there (no kubelet ends it), which would hold multiarch's namespace.
    if let Some(churn) = churn {
        finish_uninstall_churn(tier, churn)?;
    }
    remove_churn(tier)?;
    wait::until_true("nothing of multiarch left", ROLLOUT, || {
        let mut left = Vec::new();
        for (kind, namespaced) in [
            ("namespaces", false),
            ("customresourcedefinitions", false),
            ("clusterroles", false),
            ("clusterrolebindings", false),
            ("mutatingwebhookconfigurations", false),
            ("validatingwebhookconfigurations", false),
            ("validatingadmissionpolicies", false),
            ("validatingadmissionpolicybindings", false),
            ("leases", true),
        ] {
            let mut args = vec!["get", kind, "-o", "name"];
            if namespaced {
                args.push("-A");
            }
            let names = tier.kubectl.run(&args)?;
            left.extend(
                names
                    .lines()
                    .filter(|n| n.contains("multiarch") || n.contains("podplacementconfig"))
                    .map(str::to_owned),
            );
        }
        Ok((left.is_empty(), format!("left: {left:?}")))
    })?;
    no_pod_left_waiting(tier)?;
    if tier.service_monitors {
        let monitors = tier.kubectl.items(&["servicemonitors", "-A"])?;
        ensure!(
            monitors.is_empty(),
            "ServiceMonitors left: {}",
            monitors.len()
        );
        let rules = tier.kubectl.items(&["prometheusrules", "-A"])?;
        ensure!(rules.is_empty(), "PrometheusRules left: {}", rules.len());
    }
    Ok(())
}

/// Whatever happened: the test namespaces go, and multiarch is uninstalled (releasing a
/// stuck finalizer only as the last resort), so the cluster is as it was.
fn clean_up(tier: &Tier) -> anyhow::Result<()> {
    for namespace in TEST_NAMESPACES {
        tier.kubectl.run(&[
            "delete",
            "namespace",
            namespace,
            "--ignore-not-found",
            "--wait=false",
        ])?;
    }
    let installed = tier
        .kubectl
        .get_opt(&["crd", "clusterpodplacementconfigs.multiarch.openshift.io"])?
        .is_some();
    if installed {
        println!("e2e: multiarch is still installed: uninstalling");
        let _ = tier.kubectl.output(
            &[
                "delete",
                "cppc",
                "cluster",
                "--ignore-not-found",
                "--timeout=120s",
            ],
            "",
            Duration::from_secs(150),
        );
        if tier.kubectl.get_opt(&["cppc", "cluster"])?.is_some() {
            println!("e2e: the ClusterPodPlacementConfig is stuck: releasing its finalizer");
            tier.kubectl.run(&[
                "patch",
                "cppc",
                "cluster",
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ])?;
        }
        let overlay = work_dir(tier)?.join("multiarch-install");
        if overlay.exists() {
            let _ = tier.kubectl.output(
                &[
                    "delete",
                    "-k",
                    &overlay.display().to_string(),
                    "--ignore-not-found",
                    "--timeout=120s",
                ],
                "",
                Duration::from_secs(150),
            );
        }
    }
    if tier.service_monitors {
        for crd in [SERVICE_MONITOR_CRD, PROMETHEUS_RULE_CRD] {
            tier.kubectl
                .run(&["delete", "crd", crd, "--ignore-not-found"])?;
        }
    }
    // Its pods need forcing (no kubelet for the fake node): before the namespaces.
    if tier
        .kubectl
        .get_opt(&["namespace", NS_MISPLACED])?
        .is_some()
    {
        remove_misplaced(tier)?;
    }
    tier.kubectl
        .run(&["delete", "node", FAKE_NODE, "--ignore-not-found"])?;
    remove_levels(tier)?;
    remove_churn(tier)?;
    for namespace in TEST_NAMESPACES {
        tier.delete_namespace(namespace)?;
    }
    wait::until("clean-up", ROLLOUT, || {
        Ok(match tier.kubectl.get_opt(&["namespace", "multiarch"])? {
            Some(_) => Check::NotYet("namespace multiarch is still there".into()),
            None => Check::Done(()),
        })
    })?;
    if installed {
        bail!("an earlier case left multiarch installed (removed now)");
    }
    Ok(())
}
