//! Every workload's audit from resolved images: the verdicts, then the pods running now
//! on nodes their images cannot run on, attached to their workloads.

use std::collections::HashMap;

use multiarch_plugins::model::platform::Platform;

use crate::{
    cluster::RunningPod,
    verdict::{WorkloadAudit, judge, misplaced},
    workloads::{ImageQuery, Workload},
};

/// An image's platforms, or why they are unknown.
pub type Resolved = Result<Vec<Platform>, String>;

/// Audits `workloads` against `targets`; `lookup` answers every query of the workloads
/// (`with_credentials` as they were made) and of the `running` pods.
pub fn audit_workloads(
    workloads: &[Workload],
    running: &[RunningPod],
    targets: &[String],
    with_credentials: bool,
    lookup: &dyn Fn(&ImageQuery) -> Resolved,
) -> Vec<WorkloadAudit> {
    let mut audits: Vec<WorkloadAudit> = workloads
        .iter()
        .map(|w| {
            let resolved: Vec<Resolved> = w.queries(with_credentials).iter().map(lookup).collect();
            judge(w, &resolved, targets)
        })
        .collect();
    let index: HashMap<String, usize> = audits
        .iter()
        .enumerate()
        .map(|(i, a)| (a.id(), i))
        .collect();
    for pod in running {
        let Some(&i) = index.get(&pod.workload) else {
            continue;
        };
        let resolved: Vec<Resolved> = pod.queries.iter().map(lookup).collect();
        if let Some(found) = misplaced(pod, &resolved) {
            audits[i].misplaced_pods.push(found);
        }
    }
    audits
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;

    use super::*;
    use crate::cluster::ClusterWorkloads;

    #[test]
    fn pods_on_nodes_their_images_lack_are_misplaced_now() {
        let template = json!({"spec": {"containers": [{"name": "app", "image": "amd-only:1"}]}});
        let pod = |name: &str, node: &str, image: &str| {
            json!({"kind": "Pod",
                   "metadata": {"name": name, "namespace": "shop", "uid": name,
                                "ownerReferences": [{"kind": "Deployment", "name": "web", "uid": "web", "controller": true}]},
                   "spec": {"nodeName": node, "containers": [{"name": "app", "image": image}]},
                   "status": {"phase": "Running"}})
        };
        let objects = vec![
            json!({"kind": "Deployment", "metadata": {"name": "web", "namespace": "shop", "uid": "web"},
                   "spec": {"template": template}}),
            pod("on-amd", "amd-1", "amd-only:1"),
            pod("on-arm", "arm-1", "amd-only:1"),
            pod("unknown", "arm-1", "private:1"),
        ];
        let node = |name: &str, arch: &str| -> Node {
            serde_json::from_value(
                json!({"metadata": {"name": name, "labels": {"kubernetes.io/arch": arch}}}),
            )
            .unwrap()
        };
        let cluster =
            ClusterWorkloads::read(objects, &[node("amd-1", "amd64"), node("arm-1", "arm64")])
                .unwrap();
        let known = BTreeMap::from([("amd-only:1", vec![Platform::linux("amd64")])]);
        let lookup = |q: &ImageQuery| -> Resolved {
            known
                .get(q.image.as_str())
                .cloned()
                .ok_or_else(|| "unauthorized".to_owned())
        };
        let targets = vec!["amd64".to_owned(), "arm64".to_owned()];
        let audits = audit_workloads(
            &cluster.manifests.workloads,
            &cluster.running,
            &targets,
            true,
            &lookup,
        );
        assert_eq!(audits.len(), 1);
        let pods: Vec<(&str, &str)> = audits[0]
            .misplaced_pods
            .iter()
            .map(|p| (p.pod.as_str(), p.architecture.as_str()))
            .collect();
        assert_eq!(pods, [("on-arm", "arm64")]);
    }
}
