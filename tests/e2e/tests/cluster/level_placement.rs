//! The case "x86-64 levels placed": on the real cluster, multiarch-scheduler never binds a
//! pod to a node below its image's x86-64 level, and says why in `FailedScheduling`. The
//! image: an index whose one entry is the amd64 test image labelled `amd64/v3` (as RHEL
//! 10's are); the nodes: the real one, which the daemon labels with its CPU's level, and
//! a Node object without a kubelet labelled `v2`, with room for the pods, whose taints the
//! pods tolerate, so only its level keeps them off it.

use std::{process::Command, time::Duration};

use anyhow::{Context, ensure};
use multiarch_e2e::{
    pods::{self, events},
    tier::{MANIFEST_ACCEPT, Tier},
    wait::{self, Check},
};
use serde_json::{Value, json};

use crate::node_level::glibc_level;

pub const NS_LEVELS: &str = "e2e-levels";
pub const V2_NODE: &str = "e2e-v2-node";
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

/// A sleeper of `image` tolerating every taint (the Node object turns NotReady).
fn pod(name: &str, image: &str, pinned_to: Option<&str>) -> Value {
    let mut pod = pods::sleeper(NS_LEVELS, name, image);
    pod["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    if let Some(node) = pinned_to {
        pod["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    }
    pod
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
    let result = placed(tier, &node, &image);
    let cleaned = tier.delete_namespace(NS_LEVELS).and_then(|()| {
        tier.kubectl
            .run(&["delete", "node", V2_NODE, "--ignore-not-found"])
    });
    result?;
    cleaned.map(drop)
}

fn placed(tier: &Tier, node: &str, image: &str) -> anyhow::Result<()> {
    // Pinned to the v2 node: refused there by level, never bound.
    tier.kubectl
        .apply(&pod("pinned", image, Some(V2_NODE)).to_string())?;
    // Free to go anywhere: only the real node runs v3.
    tier.kubectl.apply(&pod("free", image, None).to_string())?;
    let words = format!("1 node(s) are below x86-64-v3 needed by image {image}");
    let message = wait::until("FailedScheduling on pinned naming the level", WAIT, || {
        let all = events(&tier.kubectl, NS_LEVELS, "pinned")?;
        Ok(
            match all
                .iter()
                .find(|(r, _, m)| r == "FailedScheduling" && m.contains(&words))
            {
                Some((_, _, message)) => Check::Done(message.clone()),
                None => Check::NotYet(format!("events so far: {all:?}")),
            },
        )
    })?;
    let bound_to = wait::until("free bound", WAIT, || {
        let free = pods::get(&tier.kubectl, NS_LEVELS, "free")?;
        Ok(match free["spec"]["nodeName"].as_str() {
            Some(node) => Check::Done(node.to_owned()),
            None => Check::NotYet("not bound".into()),
        })
    })?;
    ensure!(bound_to == node, "free was bound to {bound_to}, not {node}");
    let pinned = pods::get(&tier.kubectl, NS_LEVELS, "pinned")?;
    ensure!(
        pinned["spec"]["nodeName"].is_null(),
        "pinned was bound to {}",
        pinned["spec"]["nodeName"]
    );
    println!("e2e: {image} bound to {node} only; on {V2_NODE}: {message}");
    Ok(())
}
