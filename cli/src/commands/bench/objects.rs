//! The objects a benchmark run creates: fake Nodes with the mixed-architecture share
//! (60/30/5/5 % amd64/arm64/ppc64le/s390x) and Pods whose images come from the platforms
//! file, every one labelled with the run so that cleanup finds them all.

use serde_json::{Value, json};

/// Label on every object of a run (its value: the run's id).
pub const RUN_LABEL: &str = "multiarch.openshift.io/bench-run";
/// Architecture shares, in percent.
const MIX: [(&str, usize); 4] = [("amd64", 60), ("arm64", 30), ("ppc64le", 5), ("s390x", 5)];

/// The architecture of node `index` of `count`: the mix, in contiguous blocks.
pub fn node_arch(index: usize, count: usize) -> &'static str {
    let percent = index * 100 / count.max(1);
    let mut upto = 0;
    for (arch, share) in MIX {
        upto += share;
        if percent < upto {
            return arch;
        }
    }
    MIX[0].0
}

pub fn node_name(index: usize) -> String {
    format!("bench-node-{index}")
}

/// A Ready node with room for 110 pods, as scheduler_perf's node template.
pub fn node(run: &str, index: usize, count: usize) -> Value {
    let name = node_name(index);
    let arch = node_arch(index, count);
    let resources = json!({"cpu": "32", "memory": "128Gi", "pods": "110"});
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            RUN_LABEL: run,
            "kubernetes.io/arch": arch,
            "kubernetes.io/os": "linux",
            "kubernetes.io/hostname": name,
        }},
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
            "nodeInfo": {"architecture": arch, "operatingSystem": "linux"},
        },
    })
}

pub fn pod_name(index: usize) -> String {
    format!("bench-pod-{index}")
}

/// Pod `index`, with image `index mod images` (small requests: capacity is not what is
/// measured; no grace period, so that cleanup is immediate).
pub fn pod(run: &str, namespace: &str, scheduler: &str, index: usize, images: &[String]) -> Value {
    let image = &images[index % images.len().max(1)];
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name(index), "namespace": namespace, "labels": {RUN_LABEL: run}},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "app",
                "image": image,
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            }],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_follow_the_mix() {
        let mut counts = std::collections::BTreeMap::new();
        for i in 0..200 {
            *counts.entry(node_arch(i, 200)).or_insert(0) += 1;
        }
        assert_eq!(
            counts.into_iter().collect::<Vec<_>>(),
            [
                ("amd64", 120),
                ("arm64", 60),
                ("ppc64le", 10),
                ("s390x", 10)
            ]
        );
        let n = node("r1", 199, 200);
        assert_eq!(n["metadata"]["labels"]["kubernetes.io/arch"], "s390x");
        assert_eq!(n["metadata"]["labels"][RUN_LABEL], "r1");
    }

    #[test]
    fn pods_cycle_through_the_images() {
        let images = vec!["a:1".to_owned(), "b:1".to_owned()];
        let p = pod("r1", "bench", "multiarch-scheduler", 3, &images);
        assert_eq!(p["spec"]["containers"][0]["image"], "b:1");
        assert_eq!(p["spec"]["schedulerName"], "multiarch-scheduler");
        assert_eq!(p["metadata"]["name"], "bench-pod-3");
    }
}
