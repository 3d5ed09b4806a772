//! The case "hostile tenant": what one namespace's tenant can send multiarch, all at once,
//! while another namespace's pods are created: twenty PodPlacementConfigs of 1,000 rules
//! of 1 KiB each (one fits the namespace's rule budget, the others are refused by the
//! operator's webhook, naming the limit) and a loop rewriting the one admitted;
//! AdmissionReviews of 8 MiB, of 4 MiB and of a million empty volumes posted at the
//! webhook's port from this host's address, which the kit's API server shares; a pod
//! naming 10,000 pull secrets (refused by the inspector, naming the limit, told in its
//! FailedScheduling); and an image whose manifest is 4 MiB of layers in the cluster's
//! registry (inspected and placed). Meanwhile every pod of the other namespace is routed
//! to multiarch-scheduler and bound, no component restarts, and each component's peak
//! RSS (read on this host, where the kit's containers run) stays under its limit.

use std::{
    io::Write,
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::{bail, ensure};
use multiarch_e2e::{
    creator::Creator,
    pods,
    tier::{MANIFEST_ACCEPT, Tier},
    wait::{self, Check},
};
use serde_json::{Value, json};

pub const NS_HOSTILE: &str = "e2e-hostile";
pub const NS_VICTIM: &str = "e2e-victim";
const WAIT: Duration = Duration::from_secs(240);
/// The other namespace's pods (the kit's one node runs at most 110 pods).
const VICTIMS: usize = 40;
/// The operands' memory limit (the operator's default `--operand-memory-limit`).
const MEMORY_LIMIT: u64 = 512 * 1024 * 1024;
/// The components whose peak RSS is read, by subcommand.
const ROLES: [&str; 5] = [
    "webhook",
    "scheduler",
    "inspector",
    "gate-controller",
    "operator",
];

/// A PodPlacementConfig at the schema's limits: 1,000 rules of 1,024 characters.
fn maximal_config(name: &str, priority: u8, generation: usize) -> Value {
    let rules: Vec<Value> = (0..1000)
        .map(|i| {
            json!({"name": format!("r{i}"), "architectures": ["arm64"],
                "expression": format!("self.metadata.name == '{:01000}'", i + generation * 1000)})
        })
        .collect();
    json!({
        "apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig",
        "metadata": {"name": name, "namespace": NS_HOSTILE},
        // Only pods labelled for it: the tenant's other pods are placed by their images.
        "spec": {"priority": priority, "labelSelector": {"matchLabels": {"ruled": "yes"}},
            "plugins": {"celArchitecturePlacement": {
            "enabled": true, "fallbackArchitectures": ["amd64", "arm64"], "rules": rules}}},
    })
}

/// A pod CREATE review of a pod in `NS_HOSTILE` carrying `padding` bytes in an annotation.
fn review(padding: usize) -> String {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "hostile", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": NS_HOSTILE, "operation": "CREATE", "userInfo": {"username": "tenant"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "x", "namespace": NS_HOSTILE, "annotations": {"padding": "x".repeat(padding)}},
                "spec": {"containers": [{"name": "app", "image": "example.com/app:1"}]}},
            "oldObject": null, "dryRun": false}
    })
    .to_string()
}

/// A review of a pod of a million empty volumes: 3 MB of JSON, 3 GB of structs.
fn volume_bomb() -> String {
    let volumes = vec!["{}"; 1_000_000].join(",");
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"bomb","kind":{{"group":"","version":"v1","kind":"Pod"}},"resource":{{"group":"","version":"v1","resource":"pods"}},"namespace":"{NS_HOSTILE}","operation":"CREATE","userInfo":{{"username":"tenant"}},"object":{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"x","namespace":"{NS_HOSTILE}"}},"spec":{{"containers":[{{"name":"app","image":"example.com/app:1"}}],"volumes":[{volumes}]}}}}}}}}"#
    )
}

/// The webhook's pods' `IP:port`.
fn webhook_endpoints(tier: &Tier) -> anyhow::Result<Vec<String>> {
    let pods = tier.kubectl.items(&[
        "pods",
        "-n",
        "multiarch",
        "-l",
        "app.kubernetes.io/component=webhook",
    ])?;
    let endpoints: Vec<String> = pods
        .iter()
        .filter_map(|pod| {
            let ip = pod["status"]["podIP"].as_str()?;
            let port = pod["spec"]["containers"][0]["ports"]
                .as_array()?
                .iter()
                .find(|p| p["name"] == "https")?["containerPort"]
                .as_u64()?;
            Some(format!("{ip}:{port}"))
        })
        .collect();
    ensure!(!endpoints.is_empty(), "no webhook pod with an IP");
    Ok(endpoints)
}

/// Posts `file` to `https://ENDPOINT/mutate-pods` with curl (no certificate check: a
/// tenant needs none); the HTTP status, 0 when the exchange failed.
fn post(endpoint: &str, file: &std::path::Path) -> u32 {
    let out = Command::new("curl")
        .args([
            "-sk",
            "--max-time",
            "30",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .args(["-X", "POST", "-H", "Content-Type: application/json"])
        .arg("--data-binary")
        .arg(format!("@{}", file.display()))
        .arg(format!("https://{endpoint}/mutate-pods"))
        .stdin(Stdio::null())
        .output();
    out.ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(0)
}

/// The restarts of multiarch's pods, in all.
fn restarts(tier: &Tier) -> anyhow::Result<u64> {
    Ok(tier
        .kubectl
        .items(&["pods", "-n", "multiarch"])?
        .iter()
        .flat_map(|p| {
            p["status"]["containerStatuses"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|c| c["restartCount"].as_u64().unwrap_or(0))
        .sum())
}

/// Each component's highest peak RSS among its processes on this host (`VmHWM`), by
/// role; empty where the cluster's containers do not run here.
fn peak_rss() -> Vec<(String, u64)> {
    let mut peaks: Vec<(String, u64)> = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return peaks;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let Ok(cmdline) = std::fs::read(dir.join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args.first().is_some_and(|a| a.ends_with("/multiarch")) {
            continue;
        }
        let Some(role) = args.get(1).filter(|r| ROLES.contains(&r.as_str())) else {
            continue;
        };
        let hwm = std::fs::read_to_string(dir.join("status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmHWM:"))?
                    .split_whitespace()
                    .nth(1)?
                    .parse::<u64>()
                    .ok()
            })
            .map_or(0, |kib| kib * 1024);
        match peaks.iter_mut().find(|(r, _)| r == role) {
            Some((_, peak)) => *peak = (*peak).max(hwm),
            None => peaks.push((role.clone(), hwm)),
        }
    }
    peaks.sort();
    peaks
}

/// Pushes to the test images' registry an image whose manifest lists the amd64 test
/// image's layer again and again, up to 4 MiB; its reference, or why it could not be.
fn push_layers_image(tier: &Tier) -> anyhow::Result<String> {
    let prefix = &tier.test_images.prefix;
    let (registry, repository) = tier.test_images.registry_and_repository()?;
    let base = format!("http://{registry}/v2/{repository}");
    let accept = MANIFEST_ACCEPT;
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "30", "-H"])
        .arg(format!("Accept: {accept}"))
        .arg(format!("{base}/manifests/amd64"))
        .output()?;
    ensure!(out.status.success(), "cannot read {base}/manifests/amd64");
    let manifest: Value = serde_json::from_slice(&out.stdout)?;
    let layer = manifest["layers"][0].clone();
    ensure!(layer.is_object(), "the amd64 test image has no layer");
    let media_type = manifest["mediaType"]
        .as_str()
        .unwrap_or("application/vnd.oci.image.manifest.v1+json")
        .to_owned();
    let one = layer.to_string().len() + 1;
    let count = (4 * 1024 * 1024 - 4096) / one;
    let mut hostile = manifest.clone();
    hostile["layers"] = Value::Array(vec![layer; count]);
    hostile["mediaType"] = json!(media_type);
    let body = hostile.to_string();
    let file = std::env::temp_dir().join("multiarch-e2e-layers-manifest.json");
    std::fs::write(&file, &body)?;
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "120", "-X", "PUT", "-H"])
        .arg(format!("Content-Type: {media_type}"))
        .arg("--data-binary")
        .arg(format!("@{}", file.display()))
        .arg(format!("{base}/manifests/hostile-layers"))
        .output()?;
    let _ = std::fs::remove_file(&file);
    ensure!(
        out.status.success(),
        "the registry refused a manifest of {count} layers ({} bytes): {}",
        body.len(),
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "e2e: pushed {prefix}:hostile-layers, a manifest of {count} layers ({} bytes)",
        body.len()
    );
    Ok(format!("{prefix}:hostile-layers"))
}

pub fn hostile_tenant(tier: &Tier) -> anyhow::Result<()> {
    tier.namespace(NS_HOSTILE, json!({}))?;
    tier.namespace(NS_VICTIM, json!({}))?;
    let restarts_before = restarts(tier)?;
    let result = attack(tier);
    let cleaned = tier
        .delete_namespace(NS_HOSTILE)
        .and_then(|()| tier.delete_namespace(NS_VICTIM));
    result?;
    cleaned?;
    let restarts_after = restarts(tier)?;
    ensure!(
        restarts_after == restarts_before,
        "multiarch's pods restarted during the attack ({restarts_before} restarts before, {restarts_after} after)"
    );
    let peaks = peak_rss();
    if peaks.is_empty() {
        println!(
            "e2e: the components' processes do not run on this host: their peak RSS is not read (no restart means none reached its limit)"
        );
    }
    for (role, peak) in &peaks {
        println!("e2e: {role}: peak RSS {} MiB", peak / 1024 / 1024);
        ensure!(
            *peak < MEMORY_LIMIT,
            "the {role}'s peak RSS, {} MiB, reached its limit",
            peak / 1024 / 1024
        );
    }
    Ok(())
}

/// A pod naming 10,000 pull secrets: refused by the inspector, naming the limit.
fn pull_secret_limit_is_told(tier: &Tier) -> anyhow::Result<()> {
    // A pod naming 10,000 pull secrets: refused by the inspector, naming the limit.
    let mut greedy = pods::sleeper(NS_HOSTILE, "greedy", &tier.test_images.multi());
    greedy["spec"]["imagePullSecrets"] = Value::Array(
        (0..10_000)
            .map(|i| json!({"name": format!("s{i}")}))
            .collect(),
    );
    tier.kubectl.run_with(
        &["create", "-f", "-"],
        &greedy.to_string(),
        Duration::from_secs(60),
    )?;
    let said = wait::until("the pull-secret limit told on the pod", WAIT, || {
        let all = pods::events(&tier.kubectl, NS_HOSTILE, "greedy")?;
        Ok(
            match all.iter().find(|(reason, _, message)| {
                reason == "FailedScheduling"
                    && message.contains("more than 100 distinct imagePullSecrets")
            }) {
                Some((_, _, message)) => Check::Done(message.clone()),
                None => Check::NotYet(format!("events so far: {all:?}")),
            },
        )
    })?;
    println!("e2e: the pod naming 10,000 pull secrets: {said}");
    Ok(())
}

/// An image whose manifest is 4 MiB of layers: inspected and placed.
fn huge_manifest_is_placed(tier: &Tier) -> anyhow::Result<()> {
    // An image whose manifest is 4 MiB of layers: inspected and placed.
    match push_layers_image(tier) {
        Ok(image) => {
            let pod = pods::sleeper(NS_HOSTILE, "layers", &image);
            tier.kubectl.run_with(
                &["create", "-f", "-"],
                &pod.to_string(),
                Duration::from_secs(60),
            )?;
            wait::until("the pod of the 4 MiB manifest bound", WAIT, || {
                let pod = pods::get(&tier.kubectl, NS_HOSTILE, "layers")?;
                Ok(match pod["spec"]["nodeName"].as_str() {
                    Some(node) if pod["spec"]["schedulerName"] == "multiarch-scheduler" => {
                        Check::Done(node.to_owned())
                    }
                    _ => Check::NotYet(format!("not bound: {}", pod["status"])),
                })
            })?;
            // Not left for the kubelet to pull thousands of layers.
            let _ = tier.kubectl.run(&[
                "delete",
                "pod",
                "-n",
                NS_HOSTILE,
                "layers",
                "--grace-period=0",
                "--force",
            ]);
        }
        Err(e) => println!("e2e: the 4 MiB manifest is not tried: {e:#}"),
    }
    Ok(())
}

/// Twenty maximal configs: the first fits the namespace's budget, no other does.
fn maximal_configs_meet_the_budget(tier: &Tier) -> anyhow::Result<()> {
    tier.kubectl.run_with(
        &["create", "-f", "-"],
        &maximal_config("rules-0", 0, 0).to_string(),
        Duration::from_secs(120),
    )?;
    let mut refused = 0;
    for i in 1..20u8 {
        let config = maximal_config(&format!("rules-{i}"), i, 0).to_string();
        let out = tier
            .kubectl
            .output(&["create", "-f", "-"], &config, Duration::from_secs(120))?;
        ensure!(
            !out.success,
            "PodPlacementConfig rules-{i} was admitted beyond the namespace's budget"
        );
        ensure!(
            out.stderr.contains(
                "more than the 1000 rules with 1048576 bytes of expressions a namespace may have"
            ),
            "rules-{i} refused for another reason: {}",
            out.stderr.trim()
        );
        refused += 1;
    }
    println!(
        "e2e: 1 maximal PodPlacementConfig admitted, {refused} refused naming the namespace's budget"
    );
    Ok(())
}

/// Every one of the other namespace's pods routed to multiarch-scheduler and bound.
fn every_pod_routed_and_bound(tier: &Tier, names: &[String]) -> anyhow::Result<()> {
    wait::until(
        &format!(
            "the other namespace's {} pods routed and bound",
            names.len()
        ),
        WAIT,
        || {
            let pods = tier.kubectl.items(&["pods", "-n", NS_VICTIM])?;
            let unrouted: Vec<&str> = pods
                .iter()
                .filter(|p| p["spec"]["schedulerName"] != "multiarch-scheduler")
                .map(pods::name)
                .collect();
            if !unrouted.is_empty() {
                bail!("admitted unrouted: {unrouted:?}");
            }
            let unbound = pods
                .iter()
                .filter(|p| p["spec"]["nodeName"].is_null())
                .count();
            Ok(if pods.len() >= names.len() && unbound == 0 {
                Check::Done(())
            } else {
                Check::NotYet(format!("{unbound} of {} not bound yet", pods.len()))
            })
        },
    )?;
    Ok(())
}

/// Whether kubectl's error says a call ran out of time (the API server unreachable within
/// kubectl's deadline, or a webhook call past its `timeoutSeconds`), not that anything
/// refused it. On this 2-core host the tenant's flood of reviews takes the CPU the API
/// server and the operator's webhook share with it (a real tenant floods from elsewhere).
fn timed_out(stderr: &str) -> bool {
    stderr.contains("context deadline exceeded")
        || stderr.contains("Client.Timeout exceeded")
        || stderr.contains("the server was unable to return a response in the time allotted")
}

/// What the editor saw besides the rewrites it counted.
#[derive(Default)]
struct EditorErrors {
    /// Calls that ran out of time (said, not failed: see `timed_out`).
    timed_out: Vec<String>,
    /// Everything else: a refusal for a reason other than the pace is a failure.
    other: Vec<String>,
}

/// Rewrites the admitted config once a second until `stop`, counting the rewrites that
/// were checked and those the pace refused; what else was said.
fn start_editor(
    tier: &Tier,
    stop: &Arc<AtomicBool>,
    rewrites: &Arc<AtomicUsize>,
    paced: &Arc<AtomicUsize>,
) -> std::thread::JoinHandle<EditorErrors> {
    let (kubectl, stop) = (tier.kubectl.clone(), stop.clone());
    let (rewrites, paced) = (rewrites.clone(), paced.clone());
    std::thread::spawn(move || {
        let mut generation = 1;
        let mut errors = EditorErrors::default();
        while !stop.load(Ordering::SeqCst) {
            let config = maximal_config("rules-0", 0, generation).to_string();
            // Server-side: a custom resource's update needs the resourceVersion a
            // replace would have to read first; an apply does not.
            let apply = ["apply", "--server-side", "--force-conflicts", "-f", "-"];
            match kubectl.output(&apply, &config, Duration::from_secs(120)) {
                Ok(out) if out.success => {
                    rewrites.fetch_add(1, Ordering::SeqCst);
                }
                Ok(out) if out.stderr.contains("may have checked now") => {
                    paced.fetch_add(1, Ordering::SeqCst);
                }
                Ok(out) if timed_out(&out.stderr) => errors.timed_out.push(out.stderr),
                Ok(out) => errors.other.push(out.stderr),
                Err(e) => errors.other.push(format!("{e:#}")),
            }
            generation += 1;
            std::thread::sleep(Duration::from_secs(1));
        }
        errors
    })
}

fn attack(tier: &Tier) -> anyhow::Result<()> {
    // The other namespace's pods, created throughout.
    let victims = Creator::start_at_most(
        tier.kubectl.clone(),
        NS_VICTIM,
        "victim",
        &tier.test_images.multi(),
        Duration::from_secs(2),
        VICTIMS,
    );

    maximal_configs_meet_the_budget(tier)?;
    // The admitted one rewritten again and again while the rest goes on: the first
    // rewrite is checked, the next ones refused by the namespace's pace of rule checks.
    let stop = Arc::new(AtomicBool::new(false));
    let rewrites = Arc::new(AtomicUsize::new(0));
    let paced = Arc::new(AtomicUsize::new(0));
    let editor = start_editor(tier, &stop, &rewrites, &paced);

    // Reviews posted at the webhook's pods from this host, 8 at a time.
    let dir = tier.work.join("hostile");
    std::fs::create_dir_all(&dir)?;
    let files = [
        ("8 MiB", review(8 * 1024 * 1024)),
        ("4 MiB", review(4 * 1024 * 1024 - 4096)),
        ("a million volumes", volume_bomb()),
    ];
    let mut paths = Vec::new();
    for (i, (_, body)) in files.iter().enumerate() {
        let path = dir.join(format!("review-{i}.json"));
        std::fs::File::create(&path)?.write_all(body.as_bytes())?;
        paths.push(path);
    }
    let endpoints = webhook_endpoints(tier)?;
    let answers = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let flood: Vec<_> = (0..8)
        .map(|n| {
            let (stop, answers) = (stop.clone(), answers.clone());
            let endpoint = endpoints[n % endpoints.len()].clone();
            let path = paths[n % paths.len()].clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let status = post(&endpoint, &path);
                    *answers
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .entry(status)
                        .or_insert(0usize) += 1;
                }
            })
        })
        .collect();

    pull_secret_limit_is_told(tier)?;

    huge_manifest_is_placed(tier)?;

    // The other namespace's pods, all created during all this.
    victims.wait_for(VICTIMS, WAIT)?;
    stop.store(true, Ordering::SeqCst);
    let created = victims.stop();
    let edit_errors = editor.join().unwrap_or_default();
    for thread in flood {
        let _ = thread.join();
    }
    let answers = answers
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let (rewritten, refused_by_pace) = (
        rewrites.load(Ordering::SeqCst),
        paced.load(Ordering::SeqCst),
    );
    println!(
        "e2e: the tenant's reviews were answered {answers:?}; the admitted config was rewritten {rewritten} times, {refused_by_pace} rewrites refused by the pace of rule checks, {} ran out of time",
        edit_errors.timed_out.len()
    );
    for stderr in &edit_errors.timed_out {
        println!("e2e:   a rewrite ran out of time: {}", stderr.trim());
    }
    ensure!(
        edit_errors.other.is_empty(),
        "rewrites refused for another reason: {:?}",
        edit_errors.other
    );
    ensure!(
        rewritten >= 1 && refused_by_pace >= 1,
        "the rewrites were neither checked nor paced ({rewritten} rewritten, {refused_by_pace} paced)"
    );
    ensure!(
        created.refused.is_empty(),
        "pods of the other namespace were refused: {:?}",
        created.refused
    );
    ensure!(
        answers.get(&413).is_some_and(|n| *n > 0),
        "no review was refused as too large: {answers:?}"
    );
    every_pod_routed_and_bound(tier, &created.names)
}
