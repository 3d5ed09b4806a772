//! The case "x86-64 levels placed": on the real cluster, a pod is never bound to a node
//! below its image's x86-64 level, in either mode. The image: an index whose one entry is
//! the amd64 test image labelled `amd64/v3` (as RHEL 10's are); the nodes: the real one,
//! which the daemon labels with its CPU's level, and two Node objects without a kubelet,
//! with room for the pods, whose taints the pods tolerate, so only their level keeps the
//! pods off them: one labelled `v2` by multiarch's label, one whose only word on its level
//! is node-feature-discovery's CPUID labels of a v2 CPU (NFD's default configuration).
//! In scheduler mode multiarch-scheduler refuses them and says why in `FailedScheduling`;
//! in gate mode kube-scheduler refuses them by the level terms the gate path wrote, and
//! binds a pod of an image without a level there (so nothing else keeps pods off them).

use std::{process::Command, time::Duration};

use anyhow::{Context, ensure};
use multiarch_e2e::{
    pods::{self, events, gates, wait_event},
    tier::{MANIFEST_ACCEPT, Tier},
    wait::{self, Check},
};
use serde_json::{Value, json};

use crate::{ROLLOUT, node_level::glibc_level, set_mode};

pub const NS_LEVELS: &str = "e2e-levels";
const V2_NODE: &str = "e2e-v2-node";
const NFD_V2_NODE: &str = "e2e-nfd-v2-node";
const WAIT: Duration = Duration::from_secs(120);

/// Pushes `PREFIX:amd64-v3`, an index naming the amd64 test image as `linux/amd64/v3`.
fn push_v3_index(tier: &Tier) -> anyhow::Result<String> {
    let prefix = &tier.test_images.prefix;
    let (registry, repository) = tier.test_images.registry_and_repository()?;
    let base = format!("http://{registry}/v2/{repository}");
    let accept = MANIFEST_ACCEPT;
    let head = Command::new("curl")
        .args(["-sfI", "--max-time", "30", "-H"])
        .arg(format!("Accept: {accept}"))
        .arg(format!("{base}/manifests/amd64"))
        .output()?;
    ensure!(head.status.success(), "cannot read {base}/manifests/amd64");
    let headers = String::from_utf8_lossy(&head.stdout).to_lowercase();
    let header = |name: &str| -> anyhow::Result<String> {
        headers
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_owned())
            .with_context(|| format!("{base}/manifests/amd64 has no {name} header"))
    };
    let digest = header("docker-content-digest")?;
    let size: u64 = header("content-length")?.parse()?;
    let media_type = header("content-type")?;
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": media_type, "digest": digest, "size": size,
                       "platform": {"architecture": "amd64", "os": "linux", "variant": "v3"}}],
    });
    let put = Command::new("curl")
        .args(["-sf", "--max-time", "30", "-X", "PUT", "-H"])
        .arg("Content-Type: application/vnd.oci.image.index.v1+json")
        .arg("--data-binary")
        .arg(index.to_string())
        .arg(format!("{base}/manifests/amd64-v3"))
        .output()?;
    ensure!(
        put.status.success(),
        "the registry refused the index: {}",
        String::from_utf8_lossy(&put.stderr)
    );
    Ok(format!("{prefix}:amd64-v3"))
}

/// A sleeper of `image` tolerating every taint (the Node objects turn NotReady).
fn pod(name: &str, image: &str, pinned_to: Option<&str>) -> Value {
    let mut pod = pods::sleeper(NS_LEVELS, name, image);
    pod["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    if let Some(node) = pinned_to {
        pod["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    }
    pod
}

/// The CPUID labels node-feature-discovery's default configuration puts on a v2 CPU's
/// node: the flag every x86-64 CPU has, and of v2's flags the one it does not hide.
fn nfd_v2_labels() -> Value {
    json!({
        "kubernetes.io/arch": "amd64",
        "feature.node.kubernetes.io/cpu-cpuid.CMPXCHG8": "true",
        "feature.node.kubernetes.io/cpu-cpuid.LAHF": "true",
    })
}

pub fn x86_64_levels_placed(tier: &Tier) -> anyhow::Result<()> {
    let (node, arch) = tier.a_node()?;
    let level = glibc_level()?;
    if arch != "amd64" || level.as_str() < "v3" {
        println!(
            "SKIPPED: e2e x86-64 levels placed: the node is {arch} at {level}, not amd64 at v3 or above"
        );
        return Ok(());
    }
    let image = push_v3_index(tier)?;
    tier.namespace(NS_LEVELS, json!({}))?;
    tier.add_node_object(
        V2_NODE,
        json!({"kubernetes.io/arch": "amd64", "multiarch.openshift.io/arch-variant": "v2"}),
    )?;
    tier.add_node_object(NFD_V2_NODE, nfd_v2_labels())?;
    let result = placed_by_multiarch_scheduler(tier, &node, &image)
        .and_then(|()| placed_by_kube_scheduler(tier, &node, &image));
    let cleaned = remove_levels(tier);
    result?;
    cleaned
}

/// The case's pods (forced: one is bound to a Node object, with no kubelet to confirm),
/// namespace and Node objects.
pub fn remove_levels(tier: &Tier) -> anyhow::Result<()> {
    if tier.kubectl.get_opt(&["namespace", NS_LEVELS])?.is_some() {
        tier.kubectl.run(&[
            "delete",
            "pods",
            "--all",
            "-n",
            NS_LEVELS,
            "--force",
            "--grace-period=0",
            "--ignore-not-found",
        ])?;
    }
    tier.delete_namespace(NS_LEVELS)?;
    for node in [V2_NODE, NFD_V2_NODE] {
        tier.kubectl
            .run(&["delete", "node", node, "--ignore-not-found"])?;
    }
    Ok(())
}

/// Waits until `pod` is bound; the node.
fn bound(tier: &Tier, pod: &str) -> anyhow::Result<String> {
    wait::until(&format!("{pod} bound"), WAIT, || {
        let found = pods::get(&tier.kubectl, NS_LEVELS, pod)?;
        Ok(match found["spec"]["nodeName"].as_str() {
            Some(node) => Check::Done(node.to_owned()),
            None => Check::NotYet("not bound".into()),
        })
    })
}

/// Waits for a `FailedScheduling` event on `pod` from `scheduler` whose message has
/// `words`; the message.
fn failed_scheduling(
    tier: &Tier,
    pod: &str,
    scheduler: &str,
    words: &str,
) -> anyhow::Result<String> {
    wait::until(&format!("FailedScheduling on {pod}"), WAIT, || {
        let all = events(&tier.kubectl, NS_LEVELS, pod)?;
        Ok(
            match all.iter().find(|(r, from, m)| {
                r == "FailedScheduling" && from == scheduler && m.contains(words)
            }) {
                Some((_, _, message)) => Check::Done(message.clone()),
                None => Check::NotYet(format!("events so far: {all:?}")),
            },
        )
    })
}

fn never_bound(tier: &Tier, pods: &[&str]) -> anyhow::Result<()> {
    for name in pods {
        let pod = pods::get(&tier.kubectl, NS_LEVELS, name)?;
        ensure!(
            pod["spec"]["nodeName"].is_null(),
            "{name} was bound to {}",
            pod["spec"]["nodeName"]
        );
    }
    Ok(())
}

/// Scheduler mode: multiarch-scheduler refuses both Node objects by level, names the
/// level in `FailedScheduling`, and binds a free pod to the real node.
fn placed_by_multiarch_scheduler(tier: &Tier, node: &str, image: &str) -> anyhow::Result<()> {
    tier.kubectl
        .apply(&pod("pinned", image, Some(V2_NODE)).to_string())?;
    tier.kubectl
        .apply(&pod("pinned-nfd", image, Some(NFD_V2_NODE)).to_string())?;
    // Free to go anywhere: only the real node runs v3.
    tier.kubectl.apply(&pod("free", image, None).to_string())?;
    // Both Node objects, whichever pod's: the level is judged before the node selector.
    let words = format!("2 node(s) are below x86-64-v3 needed by image {image}");
    let message = failed_scheduling(tier, "pinned", "multiarch-scheduler", &words)?;
    failed_scheduling(tier, "pinned-nfd", "multiarch-scheduler", &words)?;
    let bound_to = bound(tier, "free")?;
    ensure!(bound_to == node, "free was bound to {bound_to}, not {node}");
    never_bound(tier, &["pinned", "pinned-nfd"])?;
    println!("e2e: {image} bound to {node} only; on {V2_NODE}: {message}");
    // Gone before the switch, which would hand them to kube-scheduler.
    tier.kubectl.run(&[
        "delete",
        "pods",
        "-n",
        NS_LEVELS,
        "pinned",
        "pinned-nfd",
        "free",
        "--wait",
    ])?;
    Ok(())
}

/// Gate mode: kube-scheduler places the pods by the affinity the gate path wrote. Back
/// to scheduler mode after, whatever happened.
fn placed_by_kube_scheduler(tier: &Tier, node: &str, image: &str) -> anyhow::Result<()> {
    set_mode(tier, "SchedulingGate")?;
    let placed = tier
        .wait_routing("SchedulingGate", ROLLOUT)
        .and_then(|()| gated_pods_placed(tier, node, image));
    let back = set_mode(tier, "Scheduler").and_then(|()| tier.wait_routing("Scheduler", ROLLOUT));
    placed?;
    back
}

/// Creates `pod` and reads it back once the gate path released it (its gate removed);
/// a pod admitted under the scheduler mode's webhook configuration (the API server
/// follows a switch through a watch) is deleted and created again.
fn create_gated(tier: &Tier, pod: &Value) -> anyhow::Result<Value> {
    let name = pods::name(pod).to_owned();
    wait::until(&format!("{name} released by the gate path"), WAIT, || {
        let found = match tier.kubectl.get_opt(&["pod", "-n", NS_LEVELS, &name])? {
            Some(found) => found,
            None => {
                tier.kubectl.apply(&pod.to_string())?;
                return Ok(Check::NotYet("created".into()));
            }
        };
        if found["spec"]["schedulerName"] != "default-scheduler" {
            tier.kubectl.run(&[
                "delete",
                "pod",
                "-n",
                NS_LEVELS,
                &name,
                "--force",
                "--grace-period=0",
            ])?;
            return Ok(Check::NotYet(format!(
                "admitted for {}: created again",
                found["spec"]["schedulerName"]
            )));
        }
        Ok(
            if found["metadata"]["labels"]["multiarch.openshift.io/scheduling-gate"] == "removed"
                && gates(&found).is_empty()
            {
                Check::Done(found)
            } else {
                Check::NotYet(format!(
                    "gates {:?}, labels {}",
                    gates(&found),
                    found["metadata"]["labels"]
                ))
            },
        )
    })
}

/// Whether some required node selector term of `pod` names the node's level.
fn requires_a_level(pod: &Value) -> bool {
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        .as_array()
        .is_some_and(|terms| {
            terms.iter().any(|term| {
                term["matchExpressions"].as_array().is_some_and(|es| {
                    es.iter()
                        .any(|e| e["key"] == "multiarch.openshift.io/arch-variant")
                })
            })
        })
}

fn gated_pods_placed(tier: &Tier, node: &str, image: &str) -> anyhow::Result<()> {
    // An image without a level, pinned to the v2 node: kube-scheduler binds it there, so
    // only the level terms keep the others off the Node objects.
    let plain = tier.test_images.single("amd64");
    let control = create_gated(tier, &pod("gate-control", &plain, Some(V2_NODE)))?;
    ensure!(
        !requires_a_level(&control),
        "gate-control: a level required for {plain}: {}",
        control["spec"]["affinity"]
    );
    let control_node = bound(tier, "gate-control")?;
    ensure!(
        control_node == V2_NODE,
        "gate-control was bound to {control_node}, not {V2_NODE}"
    );
    for (name, pinned_to) in [
        ("gate-pinned", Some(V2_NODE)),
        ("gate-pinned-nfd", Some(NFD_V2_NODE)),
        ("gate-free", None),
    ] {
        let released = create_gated(tier, &pod(name, image, pinned_to))?;
        ensure!(
            requires_a_level(&released),
            "{name}: no level required for {image}: {}",
            released["spec"]["affinity"]
        );
    }
    let words = "didn't match Pod's node affinity/selector";
    let message = failed_scheduling(tier, "gate-pinned", "default-scheduler", words)?;
    failed_scheduling(tier, "gate-pinned-nfd", "default-scheduler", words)?;
    let bound_to = bound(tier, "gate-free")?;
    ensure!(
        bound_to == node,
        "gate-free was bound to {bound_to}, not {node}"
    );
    let (from, _) = wait_event(&tier.kubectl, NS_LEVELS, "gate-free", "Scheduled", WAIT)?;
    ensure!(from == "default-scheduler", "gate-free scheduled by {from}");
    never_bound(tier, &["gate-pinned", "gate-pinned-nfd"])?;
    println!(
        "e2e: gate mode: {image} bound to {node} by kube-scheduler; {plain} to {V2_NODE}; on the v2 nodes: {message}"
    );
    Ok(())
}
